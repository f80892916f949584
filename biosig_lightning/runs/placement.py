"""Where a run's loggers write: one ``--run.*`` placement for every configured logger at once.

A logger list cannot be addressed as ``--trainer.logger.init_args.*``, so ``biosig fit`` takes
``--run.save_dir/name/version/group`` and applies them to every logger here (``biosig repeat`` and
``biosig tune`` set them); ``--tensorboard`` adds a file logger beside the first one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def logger_configs(logger: Any) -> list[Any]:
    """The configured loggers as a list (none for ``logger: false``)."""
    if logger is None or isinstance(logger, bool):
        return []
    return list(logger) if isinstance(logger, list | tuple) else [logger]


def is_wandb(logger_cfg: Any) -> bool:
    return str(logger_cfg.get("class_path", "")).endswith("WandbLogger")


def csv_logger(logger_cfgs: list[Any]) -> Any | None:
    """The CSVLogger's config among ``logger_cfgs`` (the run directory that holds ``metrics.csv``)."""
    return next((lg for lg in logger_cfgs if str(lg.get("class_path", "")).endswith("CSVLogger")), None)


def first_file_logger(logger_cfgs: list[Any]) -> Any | None:
    """``init_args`` of the first configured logger (where an added file logger or wandb writes)."""
    return logger_cfgs[0].get("init_args") if logger_cfgs and hasattr(logger_cfgs[0], "get") else None


def add_logger(cfg: Any, logger_cfgs: list[Any], class_path: str, **init_args: Any) -> list[Any]:
    """Append the logger ``class_path(**init_args)`` to the run's loggers and to ``cfg.trainer.logger``."""
    from jsonargparse import Namespace

    logger_cfgs = [*logger_cfgs, Namespace(class_path=class_path, init_args=Namespace(**init_args))]
    cfg.trainer.logger = logger_cfgs
    return logger_cfgs


def add_file_logger(cfg: Any, logger_cfgs: list[Any], class_path: str, **extra: Any) -> list[Any]:
    """Append a file logger that writes beside the first one (same save_dir, name and version)."""
    first = first_file_logger(logger_cfgs)
    get = (lambda key: first.get(key)) if first is not None else (lambda key: None)
    return add_logger(cfg, logger_cfgs, class_path, save_dir=get("save_dir") or "runs", name=get("name"),
                      version=get("version"), **extra)


def apply_placement(logger_cfgs: list[Any], run: Any, default_name: str) -> None:
    """Put every logger of the run in the place ``--run.*`` names.

    File loggers (CSV, TensorBoard) get ``save_dir``/``name``/``version``. wandb gets
    ``save_dir``, the display name ``name/version`` and a ``group`` (the user's ``--wandb.group``,
    else ``--run.group``, else the experiment name), so a dashboard shows the seeds of one
    experiment, or the trials of one study, side by side; wandb's own ``version`` is its run id and
    is left alone.
    """
    get = (lambda key: run.get(key)) if run is not None else (lambda key: None)
    save_dir, name, version, group = get("save_dir"), get("name"), get("version"), get("group")
    files = [lg.get("init_args") for lg in logger_cfgs if hasattr(lg, "get") and not is_wandb(lg)]
    default_name = next((f.get("name") for f in files if f is not None and f.get("name")), default_name)
    for lg in logger_cfgs:
        init = lg.get("init_args") if hasattr(lg, "get") else None
        if init is None:
            continue
        if save_dir is not None:
            init["save_dir"] = save_dir
        if is_wandb(lg):
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
