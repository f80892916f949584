"""BiosigCLI: the LightningCLI behind ``biosig fit|validate|test|predict``.

``biosig fit --config experiments/X.yaml [--config override.yaml] [--a.b=c]`` is plain
LightningCLI. What this subclass adds:

* the DataModule's shape (``n_chans``, ``n_outputs``, ``n_times``, ``sfreq``) is linked into
  the backbone, so no config repeats it and braindecode models plug in by ``class_path``;
* the run lands where ``--run.*`` says, for every logger at once (:mod:`.placement`), named
  after its experiment (:func:`~biosig_lightning.runs.naming.auto_name`);
* every fit tests its best checkpoint and writes ``results.json`` into its run directory
  (:mod:`.results`), printing ``results: <path>`` as its last line;
* ``--ckpt_path last`` resumes the newest unfinished run of the same experiment where it stopped,
  keeping the rows of its ``metrics.csv`` that the checkpoint covers (:mod:`.resume`,
  :mod:`.csv_history`), once the checkpoint is known to come from the same corpus, model and
  split (:mod:`.checks`); every checkpoint biosig writes carries the run's resolved config for
  that check;
* a new run claims its directory create-exclusive before any logger opens it, a run that fails
  before training removes it again, and a finished run's ``results.json`` is never replaced
  (:mod:`.rundir`);
* bad input (a malformed ``--config``, a non-positive size, a checkpoint that is missing, not a
  checkpoint or another model's) is refused before anything starts, in one line (:mod:`.checks`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_warn

import biosig_lightning.data.datamodules  # noqa: F401  (LightningCLI registers imported subclasses: short names)
import biosig_lightning.robust  # noqa: F401  (DGTask by short name)
import biosig_lightning.tasks  # noqa: F401
from biosig_lightning import accel
from biosig_lightning.atomic_io import writing
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.runs.atomic_files import use_atomic_checkpoints, use_atomic_csv
from biosig_lightning.runs.checks import (
    CONFIG_KEY,
    CheckpointError,
    RunConfigError,
    check_config_files,
    check_hyperparameters,
    check_same_experiment,
    check_seed,
    check_sizes,
    check_weights_fit,
    is_named_checkpoint,
    read_checkpoint,
)
from biosig_lightning.runs.csv_history import CsvHistory, restore_history
from biosig_lightning.runs.dashboard import add_wandb_logger, wandb_summary
from biosig_lightning.runs.errors import one_line_errors, quiet_environment
from biosig_lightning.runs.interrupt import Interrupted, InterruptMarker, resume_line, unmark
from biosig_lightning.runs.naming import auto_name
from biosig_lightning.runs.parser_errors import BiosigArgumentParser
from biosig_lightning.runs.placement import (
    add_file_logger,
    apply_placement,
    csv_logger,
    is_wandb,
    logger_configs,
)
from biosig_lightning.runs.results import build_results, config_dict, print_metrics_table
from biosig_lightning.runs.resume import history_to_keep, latest_last_checkpoint
from biosig_lightning.runs.rundir import (
    CLAIMED_ENV,
    claim_named,
    claim_new_version,
    drop_claim,
    is_rank_zero,
    release_if_unused,
    write_results_once,
)
from biosig_lightning.yaml_io import parse_yaml

SHAPE_LINKS = ("n_chans", "n_outputs", "n_times", "sfreq")
#: what a checkpoint given to each subcommand is used for (in refusals)
PURPOSE = {"fit": "resume from it", "validate": "validate it", "test": "test it",
           "predict": "predict with it"}


class ConfigInCheckpoint(Callback):
    """Stores the run's resolved config in every checkpoint (under :data:`~.checks.CONFIG_KEY`), so a
    later resume or test can tell which corpus, model and split the weights belong to."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = self.config


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
        kwargs.setdefault("parser_class", BiosigArgumentParser)
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
        self._will_run = bool(kwargs.get("run", True))
        self._claimed: Path | None = None  # the run directory this process created
        self._checkpoint: tuple[Path, dict[str, Any]] | None = None  # --ckpt_path, read and checked
        self._resolved: dict[str, Any] = {}
        argv = list(kwargs["args"]) if isinstance(kwargs.get("args"), list | tuple) else []
        self._interrupt = InterruptMarker(argv)
        if argv:
            check_config_files(argv)
        self._only_subcommand = _requested_subcommand(kwargs.get("args"))
        try:
            super().__init__(*args, **kwargs)
        except BaseException as err:
            # a run that fails before it trained leaves no directory behind (a config.yaml at most)
            if self._claimed is not None:
                release_if_unused(self._claimed)
            if isinstance(err, SystemExit) and self._interrupt.interrupted:
                # Ctrl-C or preemption stopped the fit: the last line says where the run stopped and how to
                # resume
                raise Interrupted(resume_line(self._interrupt, self.subcommand or "fit")) from None
            raise
        finally:
            if self._claimed is not None:
                drop_claim(self._claimed)  # the command is over: nobody needs to tell it is alive

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """LightningCLI's subcommands; only the requested one when ``args`` starts with it.

        LightningCLI builds a complete parser (every Trainer, model and data argument) for each of
        fit, validate, test and predict before it reads ``args``; that was most of the start-up of
        a ``biosig fit``. When the first argument names the subcommand (as ``biosig`` always
        passes it), the parsers of the other three can never be used, so they are not built.
        """
        every = LightningCLI.subcommands()
        only = getattr(self, "_only_subcommand", None)
        return {only: every[only]} if only else every

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
        parser.add_argument("--run.name", type=str | None, default=None,
                            help="experiment name (default: logger's)")
        parser.add_argument("--run.version", type=str | None, default=None,
                            help="run folder (default version_N)")
        parser.add_argument("--run.group", type=str | None, default=None,
                            help="wandb group (default: the experiment name, so seeds of one experiment "
                                 "group)")
        parser.add_argument("--tensorboard", type=bool, default=False,
                            help="also log to TensorBoard, in the run directory of the first logger")
        # a wandb dashboard added to whatever loggers the experiment has (experiments/overlays/wandb.yaml)
        parser.add_argument("--wandb.enabled", type=bool, default=False, help="also log to wandb")
        parser.add_argument("--wandb.project", type=str, default="biosig-lightning")
        parser.add_argument("--wandb.entity", type=str | None, default=None)
        parser.add_argument("--wandb.group", type=str | None, default=None,
                            help="default: the experiment name")
        parser.add_argument("--wandb.tags", type=list[str], default=[])
        parser.add_argument("--wandb.mode", type=str | None, default=None,
                            help="offline (default unless WANDB_MODE is set), online or disabled")
        # a paper's GPU precision (SD-Former Sec. 6.1: bfloat16) without forcing bf16 autocast on CPU runs,
        # which torch emulates slowly on CPUs without bf16 instructions
        from lightning.fabric.connector import _PRECISION_INPUT

        parser.add_argument("--gpu_precision", type=_PRECISION_INPUT | None, default=None,
                            help="trainer.precision for a run on a CUDA GPU (accelerator gpu/cuda, or auto "
                                 "with CUDA "
                                 "available) whose trainer.precision is not set, e.g. bf16-mixed; CPU runs "
                                 "keep theirs")

    def _dump_config(self) -> None:
        """LightningCLI's dump of the config for the hyperparameters it saves, without a second validation.

        The same YAML as LightningCLI's own (link targets and ``None`` values kept); the config was
        validated when parsed, and checking it again is most of what the dump costs.
        """
        if hasattr(self, "config_dump"):
            return
        dump = parse_yaml(self.parser.dump(self.config, skip_link_targets=False, skip_none=False,
                                           format="yaml", skip_validation=True))
        self.config_dump = dump[self.config.subcommand] if "subcommand" in self.config else dump

    # ---- checks, run naming, resume and the run directory ----------------------------------------
    def _parse_ckpt_path(self) -> None:
        """Check a ``--ckpt_path`` file before LightningCLI reads its hyperparameters into the config."""
        subcommand = self.config.get("subcommand")
        cfg = self.config.get(subcommand) if subcommand else None
        ckpt = cfg.get("ckpt_path") if cfg is not None else None
        if ckpt and not is_named_checkpoint(ckpt):
            path = Path(str(ckpt))
            state = read_checkpoint(path)
            # compared with the command's own config, before LightningCLI merges the checkpoint's hparams in
            check_same_experiment(path, state, config_dict(self.parser, self.config, subcommand),
                                  PURPOSE.get(subcommand, "use it"))
            self._checkpoint = (path, state)
            self._merge_hyperparameters(path, state, subcommand)

    def _merge_hyperparameters(self, path: Path, state: dict[str, Any], subcommand: str) -> None:
        """LightningCLI's merge of a checkpoint's hyperparameters into the config, from the state read
        once above (LightningCLI would read the file again); a key the model no longer takes is one line."""
        hparams = dict(state.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            class_path = hparams.pop("_class_path")
            unknown = _keys_not_taken(class_path, hparams)
            if unknown:
                raise CheckpointError(f"--ckpt_path {path}: its saved hyperparameter {unknown[0]!r} is not "
                                      f"an "
                                      f"argument of {class_path} in this version (the checkpoint was saved "
                                      f"by "
                                      "another version of the model)")
            hparams = {"class_path": class_path, "dict_kwargs": hparams}
        try:
            self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)
        except SystemExit as err:
            reason = str(err.code or "").removeprefix(f"biosig {subcommand}: error: ").split(" (`biosig")[0]
            raise CheckpointError(f"--ckpt_path {path}: its saved hyperparameters do not fit the model this "
                                  f"version builds: {reason}") from None

    def _set_seed(self) -> None:
        """LightningCLI's seeding, after the seed is checked (:func:`~.checks.check_seed`): numpy refuses
        one past 32 bits with a traceback."""
        subcommand = self.config.get("subcommand")
        cfg = self.config.get(subcommand) if subcommand else self.config
        check_seed(cfg.get("seed_everything") if cfg is not None else None)
        super()._set_seed()

    def before_instantiate_classes(self) -> None:
        cfg = self.config.get(self.subcommand) if self.subcommand else self.config
        if cfg is None:
            return
        check_sizes(cfg)
        check_hyperparameters(cfg)
        loggers = logger_configs(cfg.trainer.get("logger"))
        name = auto_name(cfg)
        for lg in loggers:
            init = lg.get("init_args") if hasattr(lg, "get") else None
            if init is not None and init.get("name") in (None, "auto"):
                init["name"] = name
        if cfg.get("tensorboard"):
            _require_tensorboard()
            loggers = add_file_logger(cfg, loggers, "lightning.pytorch.loggers.TensorBoardLogger",
                                      default_hp_metric=False)
        wandb_cfg = cfg.get("wandb")
        if wandb_cfg is not None and wandb_cfg.get("enabled"):
            loggers = add_wandb_logger(cfg, loggers, wandb_cfg)
        apply_placement(loggers, cfg.get("run"), name)
        _gpu_precision(cfg)
        self._resolved = config_dict(self.parser, self.config, self.subcommand)
        if self.subcommand == "fit" and cfg.get("ckpt_path") == "last":
            csv = csv_logger(loggers)
            if csv is not None:
                save_dir = Path(csv.init_args.get("save_dir") or "runs") / csv.init_args["name"]
                found = latest_last_checkpoint(save_dir)
                if found is None:
                    raise SystemExit(f"biosig fit: --ckpt_path last: no last.ckpt under {save_dir}/version_*/"
                                     "checkpoints; nothing to resume (drop --ckpt_path to start a new run)")
                version_dir, ckpt = found
                state = read_checkpoint(ckpt)
                check_same_experiment(ckpt, state, self._resolved, PURPOSE["fit"])
                self._checkpoint = (ckpt, state)
                csv.init_args["version"] = version_dir.name
                cfg.ckpt_path = str(ckpt)
                print(f"resuming {ckpt}", file=sys.stderr)
        if self.subcommand == "fit":
            self._csv_history = history_to_keep(loggers, cfg.get("ckpt_path"))
        if self._will_run and self.subcommand is not None:
            self._claim_run_dir(loggers)

    def _claim_run_dir(self, loggers: list[Any]) -> None:
        """Create the run's directory create-exclusive and point every file logger at it (:mod:`.rundir`)."""
        files = [
            lg
            for lg in loggers
            if hasattr(lg, "get")
            and lg.get("init_args") is not None
            and not is_wandb(lg)
            and "save_dir" in lg.init_args
            and "name" in lg.init_args
        ]
        if not files:
            return  # no file logger: Lightning's default_root_dir is the run directory
        first = files[0].init_args
        experiment = Path(first.get("save_dir") or "runs") / str(first.get("name") or "")
        version = first.get("version")
        if not is_rank_zero():
            # a rank launched by rank 0 writes nothing itself, but must name the directory rank 0 claimed
            claimed = os.environ.get(CLAIMED_ENV)
            if version is None and claimed and Path(claimed).parent == experiment:
                for lg in files:
                    lg.init_args["version"] = Path(claimed).name
            return
        with writing("the run directory", experiment, "point --run.save_dir (or the logger's save_dir) at a "
                     "writable directory"):
            if version is None:
                number = claim_new_version(experiment)
                for lg in files:
                    lg.init_args["version"] = number
                run_dir, created = experiment / f"version_{number}", True
            else:
                run_dir = experiment / (version if isinstance(version, str) else f"version_{version}")
                created = claim_named(run_dir)
        os.environ[CLAIMED_ENV] = str(run_dir)
        self._claimed = run_dir if created else None

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        cfg = self.config.get(self.subcommand) if self.subcommand else self.config
        _check_accelerator(cfg)  # here, where Lightning would fail with a traceback; a parse alone never asks
        trainer = super().instantiate_trainer(**kwargs)
        check_precision_ran(cfg.trainer.get("precision"), trainer)
        trainer.callbacks.append(ConfigInCheckpoint(self._resolved))  # type: ignore[attr-defined]  # Lightning sets it
        use_atomic_checkpoints(trainer, self._checkpoint)
        if self.subcommand == "fit":
            trainer.callbacks.append(self._interrupt)  # type: ignore[attr-defined]  # Lightning's connector sets it
        return trainer

    def after_instantiate_classes(self) -> None:
        if self._checkpoint is not None:
            path, state = self._checkpoint
            self._checkpoint = None  # the weights are Lightning's to load; do not hold a second copy
            check_weights_fit(path, state, self.model)

    # ---- fit -> test best -> results.json ------------------------------------------------------------
    def before_fit(self) -> None:
        _ = self.trainer.log_dir  # fixes the logger version before any spawn
        history = self._csv_history
        if history is not None and self.trainer.is_global_zero:
            for lg in self.trainer.loggers:
                if isinstance(lg, CSVLogger) and Path(lg.log_dir).resolve() == history.path.parent.resolve():
                    restore_history(lg, history)
        if self.trainer.is_global_zero:
            use_atomic_csv(self.trainer)
        warning = accel.bf16_cpu_warning(self.trainer.precision, self.trainer.strategy.root_device.type,
                                         accel.cpu_native_bf16())
        if warning:
            rank_zero_warn(warning)
        self._fit_started = time.perf_counter()

    def after_fit(self) -> None:
        fit_seconds = time.perf_counter() - self._fit_started
        trainer, model, dm = self.trainer, self.model, self.datamodule
        cfg = self.config[self.subcommand]
        if trainer.interrupted:
            return
        test_metrics: dict[str, float] = {}
        best = trainer.checkpoint_callback.best_model_path if isinstance(trainer.checkpoint_callback,
                                                                         ModelCheckpoint) else ""
        if cfg.get("test_after_fit", True):
            ckpt = best or None
            out = trainer.test(model, datamodule=dm, ckpt_path=ckpt, verbose=False, weights_only=True)
            test_metrics = {k: float(v) for k, v in (out[0] if out else {}).items()}
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if not trainer.is_global_zero:
            return
        results = build_results(trainer, model, dm, cfg,
                                config_dict(self.parser, self.config, self.subcommand),
                                run_dir, test_metrics, best, fit_seconds)
        path = write_results_once(run_dir, results)
        unmark(run_dir)
        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger):
                wandb_summary(lg, results, model)
        print_metrics_table(results)
        print(f"results: {path}", flush=True)


def _requested_subcommand(args: Any) -> str | None:
    """The subcommand ``args`` starts with (``fit``, ``validate``, ``test``, ``predict``), if any."""
    if (
        isinstance(args, list | tuple)
        and args
        and isinstance(args[0], str)
        and args[0] in LightningCLI.subcommands()
    ):
        return args[0]
    return None


def _keys_not_taken(class_path: str, hparams: dict[str, Any]) -> list[str]:
    """The keys of ``hparams`` that the constructor of ``class_path`` takes no argument for (none when it
    takes ``**kwargs`` or cannot be imported: the parser then judges)."""
    import importlib
    import inspect

    module, _, name = str(class_path).rpartition(".")
    try:
        params = inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters
    except (ImportError, AttributeError, ValueError, TypeError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return sorted(k for k in hparams if k not in params)


def _gpu_precision(cfg: Any) -> None:
    """``--gpu_precision`` becomes ``trainer.precision`` on a CUDA run that sets none."""
    gpu_precision = cfg.get("gpu_precision")
    if gpu_precision is None or cfg.trainer.get("precision") is not None:
        return
    accelerator = cfg.trainer.get("accelerator")
    kind = accelerator if isinstance(accelerator, str) else str(getattr(accelerator,
                                                                        "class_path", accelerator))
    kind = kind.lower()
    # "gpu" without CUDA means Apple's MPS to Lightning: not a CUDA run, precision untouched
    if kind == "cuda" or "cudaaccelerator" in kind or (kind in ("gpu", "auto") and torch.cuda.is_available()):
        cfg.trainer.precision = gpu_precision


def check_precision_ran(asked: Any, trainer: Trainer) -> None:
    """Refuse a run whose ``trainer.precision`` Lightning replaced: ``16-mixed`` on a CPU runs as
    ``bf16-mixed``
    (with a warning only), and the run's config would record a precision that never ran."""
    ran = str(trainer.precision)
    if asked is None or str(asked) in (ran, ran.removesuffix("-true"), ran.removesuffix("-mixed")):
        return
    raise RunConfigError(f"trainer.precision: {asked} asked for, but on {trainer.strategy.root_device.type} "
                         f"Lightning "
                         f"runs {ran}; pass --trainer.precision {ran} (or 32) so the run records what ran")


def _check_accelerator(cfg: Any) -> None:
    """``trainer.accelerator: gpu|cuda`` on a machine where torch sees no GPU is one line, not Lightning's
    traceback."""
    accelerator = cfg.trainer.get("accelerator")
    kind = str(accelerator).lower() if isinstance(accelerator, str) else ""
    if kind not in ("gpu", "cuda") or torch.cuda.is_available():
        return
    if kind == "gpu" and torch.backends.mps.is_available():
        return  # Lightning's "gpu" is Apple's MPS there
    raise RunConfigError(
        f"trainer.accelerator: {kind} asked for, but torch {torch.__version__} sees no GPU "
        f"on this "
        "machine (torch.cuda.is_available() is False): use --trainer.accelerator auto or cpu"
    )


def _require_tensorboard() -> None:
    """``--tensorboard`` without the package TensorBoardLogger writes with: one line naming the extra."""
    from importlib.util import find_spec

    if find_spec("tensorboard") is None and find_spec("tensorboardX") is None:
        raise RunConfigError("--tensorboard needs the tensorboard package: pip install "
                             "'biosig-lightning[tensorboard]'")


def run_lightning(argv: list[str]) -> None:
    """``biosig fit|validate|test|predict ...`` (``argv`` starts with the subcommand), bad input in one
    line."""
    quiet_environment()
    with one_line_errors(argv[0] if argv else "fit"):
        BiosigCLI(args=argv)
