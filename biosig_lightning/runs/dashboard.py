"""The wandb side of a run: adding the logger (``--wandb.enabled``) and completing its summary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch import LightningModule
from lightning.pytorch.loggers import WandbLogger

from biosig_lightning.runs.placement import add_logger, first_file_logger


def add_wandb_logger(cfg: Any, logger_cfgs: list[Any], wandb_cfg: Any) -> list[Any]:
    """Append a WandbLogger to the run's loggers; it takes the experiment's name and folder.

    wandb stays offline unless ``--wandb.mode`` or the ``WANDB_MODE`` variable says otherwise
    (``wandb sync runs/wandb/offline-run-*`` uploads later).
    """
    mode = wandb_cfg.get("mode") or os.environ.get("WANDB_MODE") or "offline"
    mode = "offline" if mode == "dryrun" else mode  # wandb's old name, which it sets itself in-process
    try:  # Lightning always passes anonymous=None, which wandb >= 0.2x warns about on every run; its
        # termwarn(repeat=False) prints a message once, so mark that one as already printed
        from wandb.errors import term

        term._printed_messages.add(f"{term.WARN_STRING} The anonymous setting has no effect and will be "
                                   f"removed "
                                   "in a future version.")
    except (ImportError, AttributeError):
        pass
    first = first_file_logger(logger_cfgs)
    return add_logger(cfg, logger_cfgs, "lightning.pytorch.loggers.WandbLogger",
                      name=first.get("name") if first is not None else None,
                      save_dir=(first.get("save_dir") if first is not None else None) or "runs",
                      project=wandb_cfg.get("project"), entity=wandb_cfg.get("entity"),
                      group=wandb_cfg.get("group"), tags=list(wandb_cfg.get("tags") or []) or None,
                      offline=mode == "offline", mode=None if mode == "offline" else mode, log_model=False)


def wandb_summary(logger: WandbLogger, results: dict[str, Any], model: LightningModule) -> None:
    """Complete the wandb run: the full resolved config, test metrics, confusion matrix, model summary."""
    try:
        import html

        import wandb
        from lightning.pytorch.utilities.model_summary import ModelSummary

        run = logger.experiment
        # the resolved config as LightningCLI saw it (hparams alone miss the data and trainer sections)
        run.config.update({"config": results["config"], "experiment": results.get("experiment"),
                           "dataset": results.get("dataset"),
                           "seed": results.get("seed")}, allow_val_change=True)
        for k, v in results["metrics"].items():
            run.summary[k] = v
        for key in ("num_params", "fit_seconds", "epochs", "best_val", "monitor", "split_id"):
            if results.get(key) is not None:
                run.summary[key] = results[key]
        summary = str(ModelSummary(model, max_depth=2))
        run.summary["model/summary_text"] = summary
        payload: dict[str, Any] = {"model/summary": wandb.Html(f"<pre>{html.escape(summary)}</pre>")}
        preds = results.get("test_predictions")
        if preds and Path(preds).exists():
            with np.load(preds, allow_pickle=False) as z:
                y, pred = z["y"].astype(int).tolist(), z["probs"].argmax(1).astype(int).tolist()
            payload["test/confusion_matrix"] = wandb.plot.confusion_matrix(
                y_true=y, preds=pred, class_names=[str(c) for c in results.get("classes", [])] or None)
        if "confusion_matrix" in results:
            run.summary["test/confusion_matrix_counts"] = results["confusion_matrix"]
        run.log(payload)
        run.finish()
    except Exception as err:  # a dashboard problem must not lose the run's results
        print(f"wandb: could not write the summary: {err}", file=sys.stderr)
