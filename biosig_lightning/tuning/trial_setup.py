"""What every trial of a study shares, checked before the study exists: the metric and the trainer."""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch import Trainer

from biosig_lightning.metrics import METRIC_KEYS
from biosig_lightning.tuning.errors import FatalTrialError, TuneError

#: validation metrics the biosig tasks log each epoch (SDFormerTask adds the graph's edge density)
VAL_METRICS = tuple(f"val/{k}" for k in (*METRIC_KEYS, "loss", "edge_density"))
LOWER_IS_BETTER = ("loss", "ece")


def experiment_monitor(cfg: Any) -> tuple[str, str]:
    """The experiment's own selection metric and direction: ``model.init_args.monitor``/``mode``."""
    init = cfg.get("model", {}).get("init_args") if cfg.get("model") is not None else None
    monitor = (init.get("monitor") if init is not None else None) or "val/f1"
    mode = (init.get("mode") if init is not None else None) or "max"
    return str(monitor), "minimize" if mode == "min" else "maximize"


def check_setup(cfg: Any, metric: str) -> None:
    """Errors every trial would hit, found before the study exists: the metric and the trainer."""
    monitor, _ = experiment_monitor(cfg)
    if metric != monitor and metric not in VAL_METRICS:
        raise TuneError(f"--metric {metric!r} is not a validation metric the tasks log "
                        f"(the experiment monitors {monitor}; others: {', '.join(VAL_METRICS)})")
    trainer = cfg.get("trainer")
    strategy = trainer.get("strategy") if trainer is not None else None
    if not isinstance(strategy, str):
        return  # a strategy object: the trial itself checks its launcher
    kwargs = {k: trainer.get(k) for k in ("accelerator", "devices", "num_nodes", "precision")
              if trainer.get(k) is not None}
    pl_logger = logging.getLogger("lightning.pytorch")
    level = pl_logger.level
    pl_logger.setLevel(logging.WARNING)  # no "GPU available: ..." lines for this probe
    try:
        probe = Trainer(strategy=strategy, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False,
                        enable_model_summary=False, **kwargs)
    except Exception as err:
        raise TuneError(f"the trainer settings ({', '.join(f'{k}={v}' for k, v in kwargs.items())}, "
                        f"strategy={strategy}) cannot run: {str(err).splitlines()[0]}") from None
    finally:
        pl_logger.setLevel(level)
    check_launcher(probe, strategy)


def check_launcher(trainer: Trainer, strategy: Any) -> None:
    if type(getattr(trainer.strategy, "launcher", None)).__name__ == "_SubprocessScriptLauncher":
        # it would re-run this whole `biosig tune` command in every extra process
        raise FatalTrialError(f"a trial cannot use --trainer.strategy {strategy} with "
                              f"{trainer.num_devices} devices (it relaunches the command line); "
                              "use --trainer.strategy ddp_spawn for multi-process trials")


