"""Checks a ``biosig`` command makes before it starts, so bad input ends in one line, not a traceback.

* :func:`check_config_files` -- every ``--config`` file parses as YAML (else: which file, which line);
* :func:`check_sizes` -- batch sizes, worker counts and epoch limits are in range (else: which key);
* :func:`read_checkpoint` -- a ``--ckpt_path`` exists and is a Lightning checkpoint, read with
  ``weights_only=True`` (else: the path and what is wrong with it);
* :func:`check_same_experiment` -- a checkpoint was trained with the same corpus, model and split
  as the command asks for (:func:`identity`; else: the differing keys);
* :func:`check_weights_fit` -- its weights fit the model the command builds (else: the first key
  that does not).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from biosig_lightning.yaml_io import parse_yaml

#: what ``--ckpt_path`` may name besides a file (Lightning resolves these itself; biosig adds ``last``)
NAMED_CHECKPOINTS = ("best", "last", "hpc", "registry")
#: ``data.init_args`` keys that say how the data is read, not which data: a resumed or tested run may
#: change them (a corpus moved to another folder, another batch size or worker count on another machine)
LOADING_KEYS = ("root", "batch_size", "eval_batch_size", "num_workers", "cache_dir", "rebuild_cache")
#: the key under which biosig stores a run's resolved config in each of its checkpoints
CONFIG_KEY = "biosig_config"


class RunConfigError(ValueError):
    """A command whose config cannot run (one line, names the file or key)."""


class CheckpointError(ValueError):
    """A ``--ckpt_path`` that cannot be used (one line, names the file and what is wrong)."""


# ---- config files and values --------------------------------------------------------------------
def config_paths(args: list[str]) -> list[Path]:
    """The files named by ``--config X`` / ``--config=X`` in a command line."""
    paths: list[Path] = []
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            paths.append(Path(args[i + 1]))
        elif arg.startswith("--config="):
            paths.append(Path(arg.split("=", 1)[1]))
    return paths


def check_config_files(args: list[str]) -> None:
    """Parse every ``--config`` file as YAML: a missing file, a malformed one (with its line) and one
    that holds a list or a single value instead of config keys are each named in one line."""
    for path in config_paths(args):
        if not path.is_file():
            if path.suffix.lower() in (".yaml", ".yml", ".json"):
                what = "a directory, not a file" if path.is_dir() else "no such file"
                raise RunConfigError(f"--config {path}: {what}")
            continue  # jsonargparse also takes inline YAML here, and judges it itself
        try:
            loaded = parse_yaml(path.read_text())
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or err.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown line"
            raise RunConfigError(
                f"--config {path}: malformed YAML at {where}: {err.problem or err}"
            ) from None
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise RunConfigError(f"--config {path}: not valid YAML ({err})") from None
        except OSError as err:
            raise RunConfigError(f"--config {path}: cannot read it ({err.strerror})") from None
        if loaded is not None and not isinstance(loaded, dict):
            kind = "a list" if isinstance(loaded, list) else f"a single {type(loaded).__name__} value"
            raise RunConfigError(f"--config {path}: holds {kind}, not config keys (a mapping such as "
                                 "'trainer:', 'model:', 'data:')")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sizes(cfg: Any) -> None:
    """Batch sizes >= 1, worker counts >= 0, and epoch/step limits Lightning would not reject itself.

    ``trainer.max_epochs`` may be ``None`` (Lightning's default), ``-1`` (no limit) or >= 1: a fit
    of 0 epochs would test an untrained model and report it as a result.
    """
    data = cfg.get("data")
    init = data.get("init_args") if data is not None and hasattr(data, "get") else None
    if init is not None:
        for key, low in (("batch_size", 1), ("eval_batch_size", 1), ("num_workers", 0)):
            value = init.get(key)
            if value is None and key == "eval_batch_size":
                continue
            if value is not None and (not _whole(value) or value < low):
                need = "a positive integer" if low == 1 else "an integer >= 0"
                raise RunConfigError(f"data.init_args.{key} must be {need}, got {value!r}")
    trainer = cfg.get("trainer")
    if trainer is None:
        return
    max_epochs = trainer.get("max_epochs")
    if max_epochs is not None and (not _whole(max_epochs) or max_epochs == 0 or max_epochs < -1):
        raise RunConfigError(f"trainer.max_epochs must be a positive integer (or -1: no limit), got "
                             f"{max_epochs!r}")
    min_epochs = trainer.get("min_epochs")
    if min_epochs is not None and (not _whole(min_epochs) or min_epochs < 0):
        raise RunConfigError(f"trainer.min_epochs must be an integer >= 0, got {min_epochs!r}")
    max_steps = trainer.get("max_steps")
    if max_steps is not None and (not _whole(max_steps) or max_steps == 0 or max_steps < -1):
        raise RunConfigError(f"trainer.max_steps must be a positive integer (or -1: no limit), got "
                             f"{max_steps!r}")


#: the seeds every library ``seed_everything`` seeds accepts (numpy's are 32-bit unsigned)
SEED_MIN, SEED_MAX = 0, 2**32 - 1


def check_seed(value: Any) -> None:
    """``seed_everything`` is true, false, or an integer in :data:`SEED_MIN`..:data:`SEED_MAX` (else one
    line)."""
    if isinstance(value, bool) or value is None:
        return
    if not _whole(value) or not SEED_MIN <= value <= SEED_MAX:
        raise RunConfigError(f"seed_everything must be an integer in {SEED_MIN}..{SEED_MAX} (or true for a "
                             f"random "
                             f"seed, false for none), got {value!r}")


def _rule(name: str) -> tuple[str, Any] | None:
    """What a hyperparameter called ``name`` must be, by the naming conventions of the models and
    tasks: ``(description, test)``, or ``None`` for a name with no rule."""
    if name.startswith("min_lr"):
        return "a number >= 0 (a learning-rate floor)", lambda v: math.isfinite(v) and v >= 0
    if name in ("lr", "learning_rate") or name.endswith(
        "_lr"
    ):  # 0 is the frozen-weights control of a learning test
        return "a number >= 0 (a learning rate)", lambda v: math.isfinite(v) and v >= 0
    if name == "weight_decay":
        return "a number >= 0", lambda v: math.isfinite(v) and v >= 0
    if name in ("label_smoothing", "drop_rate",
                "attn_drop", "proj_drop") or name.endswith(("dropout", "drop_path")):
        return "a probability in [0, 1)", lambda v: 0 <= v < 1
    if name.endswith(("_prob", "_probability")):
        return "a probability in [0, 1]", lambda v: 0 <= v <= 1
    # sizes by name only: ``channel_dim`` and the like are axes, where 0 is valid
    if name in ("d_model", "d_ff", "n_heads", "width", "hidden_size", "hidden_dim",
                "embed_dim", "kernel_size"):
        return "a positive integer (a size)", lambda v: isinstance(v, int) and v >= 1
    return None


def _hyperparameters(node: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """``(dotted key, name, value)`` of every number under ``node`` (a config section)."""
    items = node.items() if hasattr(node, "items") else []
    for key, value in items:
        dotted = f"{prefix}.{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            yield dotted, str(key).rsplit(".", 1)[-1], value  # a Namespace yields flattened dotted keys
        elif hasattr(value, "items"):
            yield from _hyperparameters(value, dotted)


def check_hyperparameters(cfg: Any) -> None:
    """Learning rates > 0, weight decay >= 0, dropout and other probabilities in [0, 1] and sizes
    >= 1, wherever the ``model`` and ``data`` sections declare them (at any depth: the backbone's
    ``init_args`` too); the error names the full config key, before any optimiser sees the value."""
    for section in ("model", "data"):
        node = cfg.get(section) if hasattr(cfg, "get") else None
        for key, name, value in _hyperparameters(node, section) if node is not None else ():
            rule = _rule(name)
            if rule is not None and not rule[1](value):
                raise RunConfigError(f"{key} must be {rule[0]}, got {value!r}")


# ---- checkpoints ----------------------------------------------------------------------------------
def is_named_checkpoint(ckpt_path: Any) -> bool:
    """Whether ``--ckpt_path`` names a checkpoint Lightning or biosig resolves (``best``, ``last``, ...)."""
    text = str(ckpt_path)
    return text in NAMED_CHECKPOINTS or text.startswith("registry:")


def check_checkpoint_size(path: Path, limit: int | None = None) -> None:
    """Refuse a checkpoint whose zip members would inflate past ``limit`` bytes before reading it.

    ``torch.save`` stores its members uncompressed, so a checkpoint's contents are its size on disk;
    a compressed member (a few KiB standing for gigabytes) is read from the zip's central directory,
    which lists each member's uncompressed size, and refused before torch inflates it. ``limit``
    defaults to twice the file's size plus 64 MiB (``BIOSIG_MAX_CHECKPOINT_BYTES`` overrides it).
    A file that is no zip (torch's legacy format) has no members to inflate and is left to torch.
    """
    import zipfile

    size = path.stat().st_size
    if limit is None:
        env = os.environ.get("BIOSIG_MAX_CHECKPOINT_BYTES", "")
        limit = int(env) if env.isdigit() else 2 * size + 64 * 2**20
    try:
        with zipfile.ZipFile(path) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    if inflated > limit:
        raise CheckpointError(f"--ckpt_path {path}: its members inflate to {inflated / 2**20:,.0f} MiB from "
                              f"{size / 2**20:,.1f} MiB on disk, over the {limit / 2**20:,.0f} MiB limit "
                              f"(torch never "
                              "compresses a checkpoint; set BIOSIG_MAX_CHECKPOINT_BYTES to allow more)")


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load a Lightning checkpoint on the CPU with ``weights_only=True``; one clear error otherwise.

    The error never passes torch's own message on: for an arbitrary file that message suggests
    loading it with ``weights_only=False``, which would run whatever code the file holds.
    """
    if not path.exists():
        raise CheckpointError(f"--ckpt_path {path}: no such file")
    if not path.is_file():
        raise CheckpointError(f"--ckpt_path {path}: not a file")
    check_checkpoint_size(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any unreadable file gets the same one line
        raise CheckpointError(f"--ckpt_path {path}: not a checkpoint (torch cannot read it as saved tensors "
                              "and plain values)") from None
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict):
        raise CheckpointError(f"--ckpt_path {path}: not a Lightning checkpoint (it holds no state_dict)")
    return state


def checkpoint_config(path: Path, state: dict[str, Any]) -> dict[str, Any] | None:
    """The resolved config a checkpoint was trained with: stored in it by biosig, else the run
    directory's ``config.yaml`` beside ``checkpoints/``; ``None`` when neither is there."""
    stored = state.get(CONFIG_KEY)
    if isinstance(stored, dict):
        return stored
    saved = path.parent.parent / "config.yaml" if path.parent.name == "checkpoints" else None
    if saved is not None and saved.is_file():
        try:
            loaded = parse_yaml(saved.read_text())
        except yaml.YAMLError:
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = node


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a run computes on, as dotted keys: the whole ``model`` section (backbone and recipe) and
    the ``data`` section (corpus, its options, the subject split) without :data:`LOADING_KEYS`.

    Logging, ``trainer`` limits, seeds and the run's placement are left out: resuming with a
    longer ``max_epochs`` or another logger continues the same experiment.
    """
    flat: dict[str, Any] = {}
    _flatten({"model": config.get("model"), "data": config.get("data")}, "", flat)
    loading = tuple(f"data.init_args.{k}" for k in LOADING_KEYS)
    # a class path given in full or by its short name (``CNN1D``) names the same class
    return {k: _short(v) if k.endswith("class_path") else v for k, v in flat.items()
            if not any(k == p or k.startswith(p + ".") for p in loading)}


def _short(value: Any) -> Any:
    return value.rsplit(".", 1)[-1] if isinstance(value, str) else value


def differing_keys(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Dotted keys of :func:`identity` whose values differ between two resolved configs."""
    a, b = identity(saved), identity(now)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    # another class has other arguments: its class_path is the difference worth naming
    other_class = [k[: -len("class_path")] for k in keys if k.endswith("class_path")]
    return [k for k in keys if not any(k.startswith(f"{c}init_args.") for c in other_class)]


def describe_difference(keys: list[str], saved: dict[str, Any], now: dict[str, Any], limit: int = 4) -> str:
    """``key (X there, Y here), ...`` for the first ``limit`` differing keys."""
    a, b = identity(saved), identity(now)
    shown = [f"{k} ({a.get(k)!r} there, {b.get(k)!r} here)" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(shown) + more


def check_same_experiment(path: Path, state: dict[str, Any], config_now: dict[str, Any], what: str) -> None:
    """Refuse a checkpoint trained on another corpus, model or split than ``config_now`` asks for.

    ``what`` says what the checkpoint would be used for (``resume``, ``test``, ...). A checkpoint
    with no config to compare (not written by ``biosig fit``) passes here and is judged by its
    weights (:func:`check_weights_fit`).
    """
    saved = checkpoint_config(path, state)
    if saved is None:
        return
    keys = differing_keys(saved, config_now)
    if keys:
        raise CheckpointError(f"--ckpt_path {path}: cannot {what}: it was trained for another model, corpus "
                              f"or "
                              f"split: {describe_difference(keys, saved, config_now)}")


def check_weights_fit(path: Path, state: dict[str, Any], model: torch.nn.Module) -> None:
    """Refuse a checkpoint whose weights do not fit ``model``: the first key it lacks or has in another shape.

    Keys only the checkpoint has are not counted against it: a task may build parts lazily
    (DGTask's subject discriminator) and restore them from the checkpoint; nor is a shape where the
    model holds an empty placeholder that takes the checkpoint's shape on loading (STDROTask's period
    graphs and environments, sized by the data at setup).
    """
    saved = state["state_dict"]
    for key, tensor in model.state_dict().items():
        if key not in saved:
            raise CheckpointError(f"--ckpt_path {path}: trained for another model: it has no weights for "
                                  f"{key}")
        have = getattr(saved[key], "shape", None)
        if have is not None and tuple(have) != tuple(tensor.shape) and tensor.numel() > 0:
            raise CheckpointError(f"--ckpt_path {path}: trained for another model: {key} has shape "
                                  f"{tuple(have)} there, {tuple(tensor.shape)} here")
