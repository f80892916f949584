"""The ``biosig`` command: LightningCLI for fit/validate/test/predict, plus ``profile``.

``biosig fit --config experiments/X.yaml [--config override.yaml] [--a.b=c]`` is plain
LightningCLI. What this subclass adds:

* the DataModule's shape (``n_chans``, ``n_outputs``, ``n_times``, ``sfreq``) is linked into
  the backbone, so no config repeats it and braindecode models plug in by ``class_path``;
* every fit tests its best checkpoint and writes ``results.json`` into its run directory,
  printing ``results: <path>`` as its last line;
* ``--ckpt_path last`` resumes the newest run of the same experiment where it stopped, keeping
  the rows of its ``metrics.csv`` that the checkpoint covers (:mod:`biosig_lightning.csv_history`);
* ``biosig profile --config X`` prints parameters, FLOPs and train-step speed as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger

import biosig_lightning
import biosig_lightning.data.datamodules  # noqa: F401  (LightningCLI registers imported subclasses: short names)
import biosig_lightning.robust  # noqa: F401  (DGTask by short name)
import biosig_lightning.tasks  # noqa: F401
from biosig_lightning.csv_history import CsvHistory, read_history, restore_history
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import DataError
from biosig_lightning.utils import atomic_write_json

SHAPE_LINKS = ("n_chans", "n_outputs", "n_times", "sfreq")
METRIC_ORDER = ("acc", "precision", "recall", "f1", "auroc", "auprc", "ece", "kappa")


class BiosigCLI(LightningCLI):
    """LightningCLI with biosig's shape links, run naming, resume and results contract."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("model_class", None)
        kwargs.setdefault("datamodule_class", BiosignalDataModule)
        kwargs.setdefault("subclass_mode_model", True)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        defaults = {
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": "runs", "name": "auto"}},
            "deterministic": "warn",
            "log_every_n_steps": 10,
        }
        defaults.update(kwargs.pop("trainer_defaults", None) or {})
        kwargs["trainer_defaults"] = defaults
        self._fit_started = 0.0
        self._csv_history: CsvHistory | None = None
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for name in SHAPE_LINKS:
            targets: tuple[str, ...] = (f"model.init_args.backbone.init_args.{name}",)
            if name == "n_outputs":
                targets += ("model.init_args.n_outputs",)
            for target in targets:
                parser.link_arguments(f"data.{name}", target, apply_on="instantiate")
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="test the best checkpoint after fit and write results.json")
        # where the run lands, for every configured logger at once (a logger list cannot be
        # addressed as --trainer.logger.init_args.*); `biosig repeat` and `biosig tune` set these
        parser.add_argument("--run.save_dir", type=str | None, default=None, help="parent folder of the run")
        parser.add_argument("--run.name", type=str | None, default=None, help="experiment name (default: logger's)")
        parser.add_argument("--run.version", type=str | None, default=None, help="run folder (default version_N)")
        parser.add_argument("--run.group", type=str | None, default=None,
                            help="wandb group (default: the experiment name, so seeds of one experiment group)")
        parser.add_argument("--tensorboard", type=bool, default=False,
                            help="also log to TensorBoard, in the run directory of the first logger")
        # a wandb dashboard added to whatever loggers the experiment has (experiments/wandb.yaml)
        parser.add_argument("--wandb.enabled", type=bool, default=False, help="also log to wandb")
        parser.add_argument("--wandb.project", type=str, default="biosig-lightning")
        parser.add_argument("--wandb.entity", type=str | None, default=None)
        parser.add_argument("--wandb.group", type=str | None, default=None, help="default: the experiment name")
        parser.add_argument("--wandb.tags", type=list[str], default=[])
        parser.add_argument("--wandb.mode", type=str | None, default=None,
                            help="offline (default unless WANDB_MODE is set), online or disabled")
        # a paper's GPU precision (SD-Former Sec. 6.1: bfloat16) without forcing bf16 autocast on CPU runs,
        # which torch emulates slowly on CPUs without bf16 instructions
        from lightning.fabric.connector import _PRECISION_INPUT

        parser.add_argument("--gpu_precision", type=_PRECISION_INPUT | None, default=None,
                            help="trainer.precision for a run on a CUDA GPU (accelerator gpu/cuda, or auto with CUDA "
                                 "available) whose trainer.precision is not set, e.g. bf16-mixed; CPU runs keep theirs")

    # ---- run naming and resume -------------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        cfg = self.config.get(self.subcommand) if self.subcommand else self.config
        if cfg is None:
            return
        logger_cfgs = _logger_configs(cfg.trainer.get("logger"))
        name = _auto_name(cfg)
        for lg in logger_cfgs:
            init = lg.get("init_args") if hasattr(lg, "get") else None
            if init is not None and init.get("name") in (None, "auto"):
                init["name"] = name
        if cfg.get("tensorboard"):
            logger_cfgs = _add_logger(cfg, logger_cfgs, "lightning.pytorch.loggers.TensorBoardLogger",
                                      default_hp_metric=False)
        wandb_cfg = cfg.get("wandb")
        if wandb_cfg is not None and wandb_cfg.get("enabled"):
            logger_cfgs = _add_wandb_logger(cfg, logger_cfgs, wandb_cfg)
        _apply_placement(logger_cfgs, cfg.get("run"), name)
        gpu_precision = cfg.get("gpu_precision")
        if gpu_precision is not None and cfg.trainer.get("precision") is None:
            accelerator = cfg.trainer.get("accelerator")
            kind = accelerator if isinstance(accelerator, str) else str(getattr(accelerator, "class_path", accelerator))
            kind = kind.lower()
            # "gpu" without CUDA means Apple's MPS to Lightning: not a CUDA run, precision untouched
            if kind == "cuda" or "cudaaccelerator" in kind or (kind in ("gpu", "auto") and torch.cuda.is_available()):
                cfg.trainer.precision = gpu_precision
        if self.subcommand == "fit" and cfg.get("ckpt_path") == "last":
            csv = next((lg for lg in logger_cfgs if str(lg.get("class_path", "")).endswith("CSVLogger")), None)
            if csv is not None:
                save_dir = Path(csv.init_args.get("save_dir") or "runs") / csv.init_args["name"]
                found = _latest_last_checkpoint(save_dir)
                if found is None:
                    raise SystemExit(f"biosig fit: --ckpt_path last: no last.ckpt under {save_dir}/version_*/"
                                     "checkpoints; nothing to resume (drop --ckpt_path to start a new run)")
                version_dir, ckpt = found
                csv.init_args["version"] = version_dir.name
                cfg.ckpt_path = str(ckpt)
                print(f"resuming {ckpt}", file=sys.stderr)
        if self.subcommand == "fit":
            self._csv_history = _history_to_keep(logger_cfgs, cfg.get("ckpt_path"))

    # ---- fit -> test best -> results.json ------------------------------------------------------------
    def before_fit(self) -> None:
        _ = self.trainer.log_dir  # fixes the logger version before any spawn
        history = self._csv_history
        if history is not None and self.trainer.is_global_zero:
            for lg in self.trainer.loggers:
                if isinstance(lg, CSVLogger) and Path(lg.log_dir).resolve() == history.path.parent.resolve():
                    restore_history(lg, history)
        self._fit_started = time.perf_counter()

    def after_fit(self) -> None:
        fit_seconds = time.perf_counter() - self._fit_started
        trainer, model, dm = self.trainer, self.model, self.datamodule
        cfg = self.config[self.subcommand]
        if trainer.interrupted:
            return
        test_metrics: dict[str, float] = {}
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if cfg.get("test_after_fit", True):
            ckpt = best or None
            out = trainer.test(model, datamodule=dm, ckpt_path=ckpt, verbose=False, weights_only=True)
            test_metrics = {k: float(v) for k, v in (out[0] if out else {}).items()}
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if not trainer.is_global_zero:
            return
        results = self._results(cfg, model, dm, run_dir, test_metrics, best, fit_seconds)
        path = atomic_write_json(run_dir / "results.json", results)
        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger):
                _wandb_summary(lg, results, model)
        print_metrics_table(results)
        print(f"results: {path}", flush=True)

    def _results(self, cfg: Any, model: LightningModule, dm: LightningDataModule, run_dir: Path,
                 test_metrics: dict[str, float], best: str, fit_seconds: float) -> dict[str, Any]:
        from biosig_lightning.repeat import variant_of

        backbone = getattr(model, "backbone", model)
        described = dm.describe() if hasattr(dm, "describe") else {}
        metrics = {k: v for k, v in test_metrics.items() if k.startswith("test/")}
        results: dict[str, Any] = {
            "model": type(backbone).__name__,
            "task": type(model).__name__,
            "experiment": _experiment_name(self.trainer),
            # what `biosig report` puts in the row beside the model: the result-changing override files
            "variant": variant_of([str(p) for p in cfg.get("config") or []]),
            "dataset": described.get("dataset", type(dm).__name__),
            "seed": int(cfg.get("seed_everything") or 0),
            "metrics": metrics,
            "subjects": described.get("subjects", {}),
            "windows": described.get("windows", {}),
            "split_id": described.get("split_id"),
            "num_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "fit_seconds": round(fit_seconds, 3),
            "epochs": int(self.trainer.current_epoch),
            "best_checkpoint": best or None,
            "best_val": _best_score(self.trainer),
            "monitor": getattr(model.hparams, "monitor", None) if hasattr(model, "hparams") else None,
            "run_dir": str(run_dir),
            "versions": {"biosig_lightning": biosig_lightning.__version__, "torch": torch.__version__,
                         "lightning": _version("lightning"), "python": platform.python_version()},
            "config": _config_dict(self.parser, self.config, self.subcommand),
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


# ---- profile --------------------------------------------------------------------------------------
def profile(argv: list[str]) -> dict[str, Any]:
    """``biosig profile``: size, forward FLOPs and train-step speed of an experiment's model."""
    import argparse

    from biosig_lightning.profiling import count_forward_flops

    ap = argparse.ArgumentParser(prog="biosig profile", add_help=True)
    ap.add_argument("--steps", type=int, default=10, help="timed train steps (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch_size", type=int, default=None, help="default: the config's data batch size")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    own, rest = ap.parse_known_args(argv)
    cli = BiosigCLI(args=rest, run=False, save_config_callback=None)
    model, dm = cli.model, cli.datamodule
    device = torch.device(own.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device)
    dm.setup("fit")
    if own.batch_size:
        dm.batch_size = own.batch_size
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.to(device) for k, v in batch.items()}
    bs = int(batch["y"].shape[0])

    model.eval()
    flops = count_forward_flops(model, batch["x"][:1])

    model.train()
    opt = model.build_optimizer() if hasattr(model, "build_optimizer") else torch.optim.AdamW(model.parameters())
    times = []
    for i in range(own.warmup + own.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.training_loss(batch)[0] if hasattr(model, "training_loss") else model.training_step(batch, 0)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= own.warmup:
            times.append(time.perf_counter() - t0)
    step_ms = float(np.median(times) * 1000)
    dev = str(device)
    if device.type == "cuda":
        dev += f" ({torch.cuda.get_device_name(device)})"
    else:
        dev += f" ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {
        "model": type(getattr(model, "backbone", model)).__name__,
        "dataset": getattr(dm, "dataset_name", type(dm).__name__),
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "flops_per_sample": flops,
        "train_step_ms": round(step_ms, 3),
        "samples_per_s": round(bs / (step_ms / 1000), 2),
        "batch_size": bs,
        "device": dev,
    }


# ---- helpers ----------------------------------------------------------------------------------------
def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return None


def _logger_configs(logger: Any) -> list[Any]:
    if logger is None or isinstance(logger, bool):
        return []
    return list(logger) if isinstance(logger, list | tuple) else [logger]


def _short(class_path: str | None) -> str:
    return (class_path or "").rsplit(".", 1)[-1]


def _add_logger(cfg: Any, logger_cfgs: list[Any], class_path: str, **extra: Any) -> list[Any]:
    """Append a file logger that writes beside the first one (same save_dir, name and version)."""
    from jsonargparse import Namespace

    first = logger_cfgs[0].get("init_args") if logger_cfgs and hasattr(logger_cfgs[0], "get") else None
    init = Namespace(save_dir=(first.get("save_dir") if first is not None else None) or "runs",
                     name=first.get("name") if first is not None else None,
                     version=first.get("version") if first is not None else None, **extra)
    logger_cfgs = [*logger_cfgs, Namespace(class_path=class_path, init_args=init)]
    cfg.trainer.logger = logger_cfgs
    return logger_cfgs


def _add_wandb_logger(cfg: Any, logger_cfgs: list[Any], wandb_cfg: Any) -> list[Any]:
    """Append a WandbLogger to the run's loggers; it takes the experiment's name and folder.

    wandb stays offline unless ``--wandb.mode`` or the ``WANDB_MODE`` variable says otherwise
    (``wandb sync runs/wandb/offline-run-*`` uploads later).
    """
    from jsonargparse import Namespace

    mode = wandb_cfg.get("mode") or os.environ.get("WANDB_MODE") or "offline"
    mode = "offline" if mode == "dryrun" else mode  # wandb's old name, which it sets itself in-process
    try:  # Lightning always passes anonymous=None, which wandb >= 0.2x warns about on every run; its
        # termwarn(repeat=False) prints a message once, so mark that one as already printed
        from wandb.errors import term

        term._printed_messages.add(f"{term.WARN_STRING} The anonymous setting has no effect and will be removed "
                                   "in a future version.")
    except (ImportError, AttributeError):
        pass
    first = logger_cfgs[0].get("init_args") if logger_cfgs and hasattr(logger_cfgs[0], "get") else None
    experiment = first.get("name") if first is not None else None
    init = Namespace(name=experiment, save_dir=(first.get("save_dir") if first is not None else None) or "runs",
                     project=wandb_cfg.get("project"), entity=wandb_cfg.get("entity"),
                     group=wandb_cfg.get("group"), tags=list(wandb_cfg.get("tags") or []) or None,
                     offline=mode == "offline", mode=None if mode == "offline" else mode, log_model=False)
    logger_cfgs = [*logger_cfgs, Namespace(class_path="lightning.pytorch.loggers.WandbLogger", init_args=init)]
    cfg.trainer.logger = logger_cfgs
    return logger_cfgs


def _apply_placement(logger_cfgs: list[Any], run: Any, default_name: str) -> None:
    """Put every logger of the run in the place ``--run.*`` names.

    File loggers (CSV, TensorBoard) get ``save_dir``/``name``/``version``. wandb gets
    ``save_dir``, the display name ``name/version`` and a ``group`` (the user's ``--wandb.group``,
    else ``--run.group``, else the experiment name), so a dashboard shows the seeds of one
    experiment, or the trials of one study, side by side; wandb's own ``version`` is its run id and
    is left alone.
    """
    get = (lambda key: run.get(key)) if run is not None else (lambda key: None)
    save_dir, name, version, group = get("save_dir"), get("name"), get("version"), get("group")
    files = [lg.get("init_args") for lg in logger_cfgs
             if hasattr(lg, "get") and not str(lg.get("class_path", "")).endswith("WandbLogger")]
    default_name = next((f.get("name") for f in files if f is not None and f.get("name")), default_name)
    for lg in logger_cfgs:
        init = lg.get("init_args") if hasattr(lg, "get") else None
        if init is None:
            continue
        if save_dir is not None:
            init["save_dir"] = save_dir
        if str(lg.get("class_path", "")).endswith("WandbLogger"):
            # wandb's background service outlives a run and keeps its first working directory
            init["save_dir"] = str(Path(init.get("save_dir") or ".").absolute())
            experiment = name or default_name
            if name is not None or version is not None:
                init["name"] = f"{experiment}/{version}" if version else experiment
            # the user's --wandb.group wins; repeat/tune only fill in a group where none was given
            init["group"] = init.get("group") or group or experiment
            continue
        if name is not None:
            init["name"] = name
        if version is not None:
            init["version"] = version


def _auto_name(cfg: Any) -> str:
    model = cfg.get("model")
    backbone = None
    if model is not None and model.get("init_args") is not None:
        bb = model.init_args.get("backbone")
        backbone = _short(bb.get("class_path")) if bb is not None and hasattr(bb, "get") else None
    data = cfg.get("data")
    data_name = _short(data.get("class_path")) if data is not None else "data"
    data_name = data_name.replace("DataModule", "").lower() or "data"
    if data is not None and data.get("init_args") is not None and data.init_args.get("synthetic"):
        data_name += "-synthetic" if "synthetic" not in data_name else ""
    return f"{(backbone or _short(model.get('class_path')) if model else 'model').lower()}_{data_name}"


def _history_to_keep(logger_cfgs: list[Any], ckpt_path: Any) -> CsvHistory | None:
    """The CSV rows a fit resumed from ``ckpt_path`` into an existing run directory must keep."""
    if not ckpt_path or not Path(str(ckpt_path)).is_file():
        return None  # a fresh run, or one of Lightning's named checkpoints ("best", "hpc", ...)
    csv = next((lg for lg in logger_cfgs if str(lg.get("class_path", "")).endswith("CSVLogger")), None)
    version = csv.init_args.get("version") if csv is not None else None
    if version is None:
        return None  # a new version directory: nothing there to lose
    version = version if isinstance(version, str) else f"version_{version}"
    run_dir = Path(csv.init_args.get("save_dir") or "runs") / str(csv.init_args.get("name") or "") / version
    return read_history(run_dir / "metrics.csv", Path(str(ckpt_path)))


def _latest_last_checkpoint(experiment_dir: Path) -> tuple[Path, Path] | None:
    candidates = sorted(experiment_dir.glob("version_*/checkpoints/last*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        return None
    ckpt = candidates[-1]
    return ckpt.parent.parent, ckpt


def _experiment_name(trainer: Trainer) -> str | None:
    lg = trainer.logger
    return getattr(lg, "name", None) if lg is not None else None


def _best_score(trainer: Trainer) -> float | None:
    cb = trainer.checkpoint_callback
    score = getattr(cb, "best_model_score", None) if cb else None
    return float(score) if score is not None else None


def _config_dict(parser: Any, config: Any, subcommand: str | None) -> dict[str, Any]:
    """The fully resolved config of the run, as ``--print_config`` would show it."""
    import yaml

    full = yaml.safe_load(parser.dump(config, skip_none=False, skip_validation=True))
    return full.get(subcommand, full) if subcommand else full


def _prediction_summaries(path: Path, dm: Any) -> dict[str, Any]:
    from biosig_lightning.metrics import reliability_bins

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


def _wandb_summary(logger: WandbLogger, results: dict[str, Any], model: LightningModule) -> None:
    """Complete the wandb run: the full resolved config, test metrics, confusion matrix, model summary."""
    try:
        import html

        import wandb
        from lightning.pytorch.utilities.model_summary import ModelSummary

        run = logger.experiment
        # the resolved config as LightningCLI saw it (hparams alone miss the data and trainer sections)
        run.config.update({"config": results["config"], "experiment": results.get("experiment"),
                           "dataset": results.get("dataset"), "seed": results.get("seed")}, allow_val_change=True)
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


COMMANDS = {
    "repeat": "biosig_lightning.repeat",
    "report": "biosig_lightning.report",
    "tune": "biosig_lightning.tune",
    "transfer": "biosig_lightning.transfer",
    "graphs": "biosig_lightning.analysis.graphs",
    "fbd": "biosig_lightning.analysis.fbd",
    "probe": "biosig_lightning.analysis.subject_probe",
}

USAGE = """usage: biosig {fit,validate,test,predict,profile,repeat,tune,report,transfer,graphs,fbd,probe} --config CONFIG.yaml [--config MORE.yaml] [--key value ...]

  fit        train, test the best checkpoint, write results.json (LightningCLI)
  validate   evaluate a checkpoint on the validation subjects (LightningCLI)
  test       evaluate a checkpoint on the test subjects (LightningCLI)
  predict    write predictions for the test subjects (LightningCLI)
  profile    print params, FLOPs per sample and train-step speed as JSON
  repeat     one fit per seed (--seeds 1,2,3 [--out DIR] [--workers N]) into DIR/seed_<s>/
  tune       Optuna search (--search-space SPACE.yaml --study-name S --n-trials N [--storage URL])
  report     biosig report RUN_DIR... [--format markdown|csv|latex] [--out FILE]: mean ± std table + figures
  transfer   linear probe of a trained run's frozen backbone on another corpus (--source RUN --target-config Y)
  graphs     SD-Former's learned graphs per class, and their stability across runs (RUN_DIR...)
  fbd        BioFormer's frequency-band discriminability of a run's embeddings (RUN_DIR)
  probe      subject probe of a run's frozen features: subject F1, NMI/AMI, silhouettes (RUN_DIR)

'biosig fit --help' lists every option; 'biosig fit --config X --print_config' shows the resolved config."""


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    # dashboards stay on this machine unless the user asks for online sync (WANDB_MODE=online)
    os.environ.setdefault("WANDB_MODE", "offline")
    # main() always hands LightningCLI its argv explicitly, which is what this warning is about;
    # the other one is Lightning's own use of a deprecated torch API: neither is the user's to fix
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    command = argv[0]
    try:
        if command == "profile":
            print(json.dumps(profile(argv[1:]), indent=2))
            return
        if command in ("fit", "validate", "test", "predict"):
            BiosigCLI(args=argv)
            return
        if command in COMMANDS:
            import importlib

            importlib.import_module(COMMANDS[command]).run(argv[1:])
            return
    except ValueError as err:
        # bad input (data, run directory, arguments): one line that names the file/channel/subject/key,
        # no traceback; only our own error types, so a bug elsewhere still shows where it happened
        if isinstance(err, DataError) or type(err).__module__.startswith("biosig_lightning."):
            raise SystemExit(f"biosig {command}: error: {err}") from None
        raise
    raise SystemExit(f"biosig: unknown command {command!r}\n\n{USAGE}")


def entry_point() -> None:
    """Console-script entry: ``main()``, quiet when the reader of our output goes away (``| head``)."""
    try:
        main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    entry_point()
