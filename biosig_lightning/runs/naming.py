"""Experiment and variant names: which run directory a run belongs to, which report row it makes.

* :func:`auto_name` names a run from its resolved config when the logger says ``name: auto``
  (``<backbone>_<datamodule>[-synthetic]``);
* :func:`experiment_name` names a ``biosig repeat`` experiment from its ``biosig fit`` arguments:
  the logger name the configs give plus ``+<stem>`` for each later override file that changes
  results, so variants of one experiment never share a directory, while an overlay that only adds
  a dashboard (``wandb.yaml``, ``tensorboard.yaml``; :func:`is_overlay`) leaves the name, and so the
  resumable directory, alone;
* :func:`variant_of` is the ``variant`` of ``results.json`` that ``biosig report`` labels rows with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from biosig_lightning.yaml_io import parse_yaml

#: config keys that change where and how a run is logged, never what it computes
OVERLAY_KEYS = ("wandb", "tensorboard", "run", "trainer.logger", "trainer.enable_progress_bar",
                "trainer.enable_model_summary")
#: keys that choose the dataset (the report's column says which) ...
DATASET_KEYS = ("data.class_path", "data.init_args.synthetic", "data.init_args.root")
#: ... and the key that chooses the backbone (the report's row names the model)
BACKBONE_KEY = "model.init_args.backbone.class_path"


def _load(path: str | Path) -> Any:
    try:
        return parse_yaml(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None  # the fit itself reports an unreadable config, with jsonargparse's message


def _leaves(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys of every leaf value a config sets (``data.init_args.root``, ...)."""
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [prefix[:-1]] if prefix else []


def _under(key: str, roots: tuple[str, ...]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in roots)


def config_keys(path: str | Path) -> list[str] | None:
    """The dotted keys ``path`` sets; ``None`` when it cannot be read as a mapping."""
    cfg = _load(path)
    if cfg is None and Path(path).is_file():
        return []  # comments only: sets nothing
    return _leaves(cfg) if isinstance(cfg, dict) else None


def is_overlay(path: str | Path) -> bool:
    """Whether a config only touches logging (``wandb``, ``tensorboard``, ``run``, ``trainer.logger`` keys).

    Such a file (``experiments/overlays/wandb.yaml``) cannot change a result, so it neither renames the
    experiment (its seeds stay resumable in the same directory) nor makes a new report row.
    """
    keys = config_keys(path)
    return keys is not None and all(_under(k, OVERLAY_KEYS) for k in keys)


def config_label(path: str | Path) -> str:
    """The short name of an override file in experiment names and report rows: its stem.

    ``biosig tune`` exports ``runs/tune/<study>/best.yaml``; that one is called ``<study>_best`` so the
    best configs of two studies never share a ``biosig repeat`` directory.
    """
    path = Path(path)
    if path.stem == "best" and path.parent.name:
        return f"{path.parent.name}_best"
    return path.stem


def experiment_name(fit_args: list[str]) -> str:
    """The experiment's name: the logger name the configs give, plus ``+<label>`` per later override file.

    ``--config sdformer_sleepedf.yaml --config sdformer/variants/no_dep.yaml`` gives
    ``sdformer_sleepedf+no_dep``, so a variant never shares (and never skips the seeds of) the base
    experiment's directory. Overlays (:func:`is_overlay`: ``wandb.yaml``, ``tensorboard.yaml``) add
    nothing. A ``--trainer.logger.init_args.name`` / ``--run.name`` on the command line names the
    experiment outright. Without any logger name, the first config's stem is the name.
    """
    name: str | None = None
    suffix: list[str] = []
    explicit: str | None = None
    i = 0
    while i < len(fit_args):
        arg = fit_args[i]
        key, eq, value = arg.partition("=")
        if not eq and i + 1 < len(fit_args):
            value = fit_args[i + 1]
        if key == "--config":
            path = Path(value)
            found = _logger_name(path)
            if found is not None:
                name, suffix = found, []
            elif name is None and not suffix:
                name = path.stem
            elif not is_overlay(path):
                suffix.append(config_label(path))
        elif key in ("--trainer.logger.init_args.name", "--run.name") and value != "auto":
            explicit = value
        i += 1 if eq else 2 if key.startswith("--") else 1
    if explicit:
        return explicit
    return "+".join([name or "experiment", *suffix])


def variant_of(config_paths: list[str | Path]) -> str:
    """The variant a run's configs make of its base experiment (the first config): ``'+'``-joined labels.

    It is what distinguishes two report rows of one model: ``bioformer_apava.yaml +
    bioformer/baselines/medformer.yaml + bioformer/baselines/mmd.yaml`` is the variant ``mmd`` of the model
    Medformer. Left out
    are overlays (they change no result), files that only pick the dataset (``synthetic.yaml``: the
    report's column names the dataset) and files that pick the backbone
    (``bioformer/baselines/medformer.yaml``:
    the row names the model).
    """
    labels: list[str] = []
    for path in config_paths[1:]:
        keys = config_keys(path)
        if keys is None:
            labels.append(config_label(path))
            continue
        if all(_under(k, OVERLAY_KEYS + DATASET_KEYS) for k in keys) or BACKBONE_KEY in keys:
            continue
        labels.append(config_label(path))
    return "+".join(labels)


def _logger_name(path: Path) -> str | None:
    cfg = _load(path) or {}
    logger = (cfg.get("trainer") or {}).get("logger") if isinstance(cfg, dict) else None
    loggers = [logger] if isinstance(logger, dict) else logger if isinstance(logger, list) else []
    for lg in loggers:  # the first file logger names the experiment (wandb names runs, not folders)
        if isinstance(lg, dict) and not str(lg.get("class_path", "")).endswith("WandbLogger"):
            name = (lg.get("init_args") or {}).get("name")
            return str(name) if name not in (None, "auto") else None
    return None


def _short(class_path: str | None) -> str:
    return (class_path or "").rsplit(".", 1)[-1]


def auto_name(cfg: Any) -> str:
    """``<backbone>_<datamodule>``, lower case (``-synthetic`` on a synthetic stand-in): the name of a run
    whose logger says ``name: auto``."""
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
