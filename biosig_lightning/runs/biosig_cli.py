"""BiosigCLI: the LightningCLI behind ``biosig fit|validate|test|predict``.

``biosig fit --config experiments/X.yaml [--config override.yaml] [--a.b=c]`` is plain
LightningCLI. What this subclass adds:

* the DataModule's shape (``n_chans``, ``n_outputs``, ``n_times``, ``sfreq``) is linked into
  the backbone, so no config repeats it and braindecode models plug in by ``class_path``;
* the run lands where ``--run.*`` says, for every logger at once (:mod:`.placement`), named
  after its experiment (:func:`~biosig_lightning.runs.naming.auto_name`);
* every fit tests its best checkpoint and writes ``results.json`` into its run directory
  (:mod:`.results`), printing ``results: <path>`` as its last line;
* ``--ckpt_path last`` resumes the newest run of the same experiment where it stopped, keeping
  the rows of its ``metrics.csv`` that the checkpoint covers (:mod:`.resume`, :mod:`.csv_history`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger

import biosig_lightning.data.datamodules  # noqa: F401  (LightningCLI registers imported subclasses: short names)
import biosig_lightning.robust  # noqa: F401  (DGTask by short name)
import biosig_lightning.tasks  # noqa: F401
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.runs.csv_history import CsvHistory, restore_history
from biosig_lightning.runs.dashboard import add_wandb_logger, wandb_summary
from biosig_lightning.runs.errors import one_line_errors, quiet_environment
from biosig_lightning.runs.naming import auto_name
from biosig_lightning.runs.placement import add_file_logger, apply_placement, csv_logger, logger_configs
from biosig_lightning.runs.results import build_results, config_dict, print_metrics_table
from biosig_lightning.runs.resume import history_to_keep, latest_last_checkpoint
from biosig_lightning.utils import atomic_write_json

SHAPE_LINKS = ("n_chans", "n_outputs", "n_times", "sfreq")


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
        loggers = logger_configs(cfg.trainer.get("logger"))
        name = auto_name(cfg)
        for lg in loggers:
            init = lg.get("init_args") if hasattr(lg, "get") else None
            if init is not None and init.get("name") in (None, "auto"):
                init["name"] = name
        if cfg.get("tensorboard"):
            loggers = add_file_logger(cfg, loggers, "lightning.pytorch.loggers.TensorBoardLogger",
                                      default_hp_metric=False)
        wandb_cfg = cfg.get("wandb")
        if wandb_cfg is not None and wandb_cfg.get("enabled"):
            loggers = add_wandb_logger(cfg, loggers, wandb_cfg)
        apply_placement(loggers, cfg.get("run"), name)
        _gpu_precision(cfg)
        if self.subcommand == "fit" and cfg.get("ckpt_path") == "last":
            csv = csv_logger(loggers)
            if csv is not None:
                save_dir = Path(csv.init_args.get("save_dir") or "runs") / csv.init_args["name"]
                found = latest_last_checkpoint(save_dir)
                if found is None:
                    raise SystemExit(f"biosig fit: --ckpt_path last: no last.ckpt under {save_dir}/version_*/"
                                     "checkpoints; nothing to resume (drop --ckpt_path to start a new run)")
                version_dir, ckpt = found
                csv.init_args["version"] = version_dir.name
                cfg.ckpt_path = str(ckpt)
                print(f"resuming {ckpt}", file=sys.stderr)
        if self.subcommand == "fit":
            self._csv_history = history_to_keep(loggers, cfg.get("ckpt_path"))

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
        results = build_results(trainer, model, dm, cfg, config_dict(self.parser, self.config, self.subcommand),
                                run_dir, test_metrics, best, fit_seconds)
        path = atomic_write_json(run_dir / "results.json", results)
        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger):
                wandb_summary(lg, results, model)
        print_metrics_table(results)
        print(f"results: {path}", flush=True)


def _gpu_precision(cfg: Any) -> None:
    """``--gpu_precision`` becomes ``trainer.precision`` on a CUDA run that sets none."""
    gpu_precision = cfg.get("gpu_precision")
    if gpu_precision is None or cfg.trainer.get("precision") is not None:
        return
    accelerator = cfg.trainer.get("accelerator")
    kind = accelerator if isinstance(accelerator, str) else str(getattr(accelerator, "class_path", accelerator))
    kind = kind.lower()
    # "gpu" without CUDA means Apple's MPS to Lightning: not a CUDA run, precision untouched
    if kind == "cuda" or "cudaaccelerator" in kind or (kind in ("gpu", "auto") and torch.cuda.is_available()):
        cfg.trainer.precision = gpu_precision


def run_lightning(argv: list[str]) -> None:
    """``biosig fit|validate|test|predict ...`` (``argv`` starts with the subcommand), bad input in one line."""
    quiet_environment()
    with one_line_errors(argv[0] if argv else "fit"):
        BiosigCLI(args=argv)
