"""``results.json``: what a finished ``biosig fit`` leaves in its run directory, and its table.

The keys other tools rely on (docs/architecture.md, "Contracts"): ``model``, ``dataset``, ``seed``,
``metrics`` (``test/*``), ``subjects``, ``num_params``, ``fit_seconds``, ``best_checkpoint`` and the
full resolved ``config``; plus the experiment and variant names ``biosig report`` groups rows by,
and, where the task saved test predictions, the confusion matrix and reliability bins.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer

import biosig_lightning
from biosig_lightning.metrics import reliability_bins
from biosig_lightning.runs.naming import variant_of
from biosig_lightning.yaml_io import parse_yaml

METRIC_ORDER = ("acc", "precision", "recall", "f1", "auroc", "auprc", "ece", "kappa")


def build_results(trainer: Trainer, model: LightningModule, dm: LightningDataModule, cfg: Any,
                  config: dict[str, Any],
                  run_dir: Path, test_metrics: dict[str, float],
                  best: str, fit_seconds: float) -> dict[str, Any]:
    """The ``results.json`` of a fit (``config``: the resolved config, :func:`config_dict`)."""
    backbone = getattr(model, "backbone", model)
    described = dm.describe() if hasattr(dm, "describe") else {}
    metrics = {k: v for k, v in test_metrics.items() if k.startswith("test/")}
    results: dict[str, Any] = {
        "model": type(backbone).__name__,
        "task": type(model).__name__,
        "experiment": experiment_of(trainer),
        # what `biosig report` puts in the row beside the model: the recipe, when it is one that wraps any
        # backbone as its own method (STDRO), then the result-changing override files
        "variant": "+".join(filter(None, [getattr(model, "recipe_label", None),
                                          variant_of([str(p) for p in cfg.get("config") or []])])),
        "dataset": described.get("dataset", type(dm).__name__),
        "seed": int(cfg.get("seed_everything") or 0),
        "metrics": metrics,
        "subjects": described.get("subjects", {}),
        "windows": described.get("windows", {}),
        "split_id": described.get("split_id"),
        "num_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "fit_seconds": round(fit_seconds, 3),
        "epochs": int(trainer.current_epoch),
        "best_checkpoint": best or None,
        "best_val": _best_score(trainer),
        "monitor": getattr(model.hparams, "monitor", None) if hasattr(model, "hparams") else None,
        "run_dir": str(run_dir),
        "versions": {"biosig_lightning": biosig_lightning.__version__, "torch": torch.__version__,
                     "lightning": _version("lightning"), "python": platform.python_version()},
        "config": config,
    }
    preds = run_dir / "test_predictions.npz"
    if preds.exists():
        results.update(_prediction_summaries(preds, dm))
    return results


def print_metrics_table(results: dict[str, Any]) -> None:
    """Print the test metrics of a results dict as a two-column table."""
    metrics = results.get("metrics", {})
    if not metrics:
        print("(no test metrics: --test_after_fit false)")
        return
    width = 10
    title = f"test metrics: {results.get('model')} on {results.get('dataset')} (seed {results.get('seed')})"
    print(title)
    print("-" * len(title))
    keys = [f"test/{k}" for k in METRIC_ORDER if f"test/{k}" in metrics]
    keys += [k for k in metrics if k not in keys]
    for k in keys:
        print(f"  {k.split('/', 1)[-1]:<{width}} {metrics[k]:.4f}")


def config_dict(parser: Any, config: Any, subcommand: str | None) -> dict[str, Any]:
    """The fully resolved config of the run, as ``--print_config`` would show it."""
    full = parse_yaml(parser.dump(config, skip_none=False, skip_validation=True))
    return full.get(subcommand, full) if subcommand else full


def experiment_of(trainer: Trainer) -> str | None:
    """The experiment name of a run: its first logger's ``name``."""
    lg = trainer.logger
    return getattr(lg, "name", None) if lg is not None else None


def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return None


def _best_score(trainer: Trainer) -> float | None:
    cb = trainer.checkpoint_callback
    score = getattr(cb, "best_model_score", None) if cb else None
    return float(score) if score is not None else None


def _prediction_summaries(path: Path, dm: Any) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as z:
        probs, y = z["probs"], z["y"]
    k = probs.shape[1]
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (y, probs.argmax(1)), 1)
    rel = reliability_bins(probs, y, n_bins=15)
    classes = list(getattr(getattr(dm, "spec", None), "classes", [])) or [str(i) for i in range(k)]
    return {"classes": classes, "confusion_matrix": cm.tolist(),
            "reliability": {key: _finite_or_none(v) for key, v in rel.items()},
            "test_predictions": str(path)}


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN: empty reliability bins become null."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return float(arr) if np.isfinite(arr) else None
    return [float(v) if np.isfinite(v) else None for v in arr]
