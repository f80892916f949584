"""Search spaces: ``SPACE.yaml`` read into Optuna distributions and checked against the real ``biosig fit``
parser.

``SPACE.yaml`` maps dotted config keys (as on the ``biosig fit`` command line, without ``--``) to
specs::

    model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.init_args.backbone.init_args.n_blocks: {type: int, low: 2, high: 4, step: 1}
    model.init_args.optimizer: {type: categorical, choices: [adamw, adam]}

:func:`load_search_space` turns the specs into distributions (a bad spec is one error naming the
key), and :func:`validate_space` parses every categorical choice and both ends of every range with
the ``biosig fit`` parser, and applies the value checks of every fit (a dropout in [0, 1), a learning
rate >= 0, sizes >= 1: :func:`~biosig_lightning.runs.checks.check_hyperparameters`), before any study exists.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from biosig_lightning.runs.biosig_cli import BiosigCLI
from biosig_lightning.runs.checks import RunConfigError, check_hyperparameters, check_sizes
from biosig_lightning.tuning.errors import TuneError
from biosig_lightning.yaml_io import load_yaml

SPEC_FIELDS = {"float": {"type", "low", "high", "log", "step"}, "int": {"type", "low", "high", "log", "step"},
               "categorical": {"type", "choices"}}


def _number(spec: dict[str, Any], field: str, kind: str, where: str) -> float | int:
    value = spec.get(field)
    if isinstance(value, bool) or value is None:
        raise TuneError(f"{where}: {kind} needs a numeric {field!r}, got {value!r}")
    try:
        num = float(value)  # also "1e-4", which YAML 1.1 reads as a string
    except (TypeError, ValueError):
        raise TuneError(f"{where}: {kind} needs a numeric {field!r}, got {value!r}") from None
    if not math.isfinite(num):
        raise TuneError(f"{where}: {field} must be finite, got {value!r}")
    if kind == "int":
        if not num.is_integer():
            raise TuneError(f"{where}: int {field} must be a whole number, got {value!r}")
        return int(num)
    return num


def load_search_space(path: str | Path) -> dict[str, BaseDistribution]:
    """Read ``SPACE.yaml`` into Optuna distributions; a bad spec is one error naming the key.

    Everything Optuna would only reject when a trial samples (``log`` together with ``step``, a
    fractional int ``step``, ``log`` with ``low <= 0``) is rejected here, before any study exists.
    """
    path = Path(path)
    space = load_yaml(path, "search space", TuneError)
    if not space:
        raise TuneError(f"search space {path} is empty: map at least one config key to a spec")
    if not isinstance(space, dict):
        raise TuneError(f"search space {path}: expected a mapping 'config.key: {{type: ...}}'")
    out: dict[str, BaseDistribution] = {}
    for key, spec in space.items():
        where = f"search space {path}: {key}"
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise TuneError(f"{where}: keys are dotted config keys without '--', e.g. model.init_args.lr")
        if not isinstance(spec, dict) or spec.get("type") not in SPEC_FIELDS:
            raise TuneError(f"{where}: spec must be a mapping with type one of {tuple(SPEC_FIELDS)}, got "
                            f"{spec!r}")
        kind = spec["type"]
        extra = set(spec) - SPEC_FIELDS[kind]
        if extra:
            raise TuneError(f"{where}: unknown spec field(s) {sorted(extra)} for type {kind} "
                            f"(allowed: {sorted(SPEC_FIELDS[kind] - {'type'})})")
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise TuneError(f"{where}: categorical needs a non-empty 'choices' list")
            bad = [c for c in choices if c is not None and not isinstance(c, bool | int | float | str)]
            if bad:
                raise TuneError(f"{where}: choices must be scalars (Optuna stores them), got {bad!r}")
            if len(set(map(repr, choices))) < len(choices):
                raise TuneError(f"{where}: choices repeat a value: {choices!r}")
            out[key] = CategoricalDistribution(choices)
            continue
        low, high = _number(spec, "low", kind, where), _number(spec, "high", kind, where)
        if not low < high:
            raise TuneError(f"{where}: low ({low}) must be < high ({high})")
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise TuneError(f"{where}: log must be true or false, got {log!r}")
        step = _number(spec, "step", kind, where) if spec.get("step") is not None else None
        if step is not None and step <= 0:
            raise TuneError(f"{where}: step must be > 0, got {step}")
        if log and step is not None:
            raise TuneError(f"{where}: log and step cannot be combined (a log scale has no even grid); drop "
                            f"one")
        if log and low <= 0:
            raise TuneError(f"{where}: log scale needs low > 0, got {low}")
        try:
            with warnings.catch_warnings():
                # a range not divisible by step: Optuna lowers high to the last grid point, which is
                # what validate_space then checks, so the user is not warned about it twice
                warnings.simplefilter("ignore", UserWarning)
                if kind == "int":
                    out[key] = IntDistribution(int(low), int(high), log=log, step=int(step or 1))
                else:
                    out[key] = FloatDistribution(float(low), float(high), log=log, step=step)
        except ValueError as err:
            raise TuneError(f"{where}: {err}") from None
    return out


def suggest(trial: optuna.Trial, key: str, dist: BaseDistribution) -> Any:
    """One value for ``key`` from its distribution."""
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(key, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, list(dist.choices))
    raise TuneError(f"{key}: unsupported distribution {dist!r}")


def _edge_values(dist: BaseDistribution) -> list[Any]:
    """The values validation tries: every choice, or both ends of a range."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, FloatDistribution | IntDistribution):
        return [dist.low, dist.high]
    raise TuneError(f"unsupported distribution {dist!r}")


def cli_value(value: Any) -> str:
    """A value as jsonargparse reads it from the command line."""
    return value if isinstance(value, str) else json.dumps(value)


def override_args(params: dict[str, Any]) -> list[str]:
    """``{key: value}`` as ``--key=value`` command-line overrides."""
    return [f"--{key}={cli_value(v)}" for key, v in params.items()]


class _ParseOnly(BiosigCLI):
    """BiosigCLI that stops after parsing: checks keys without building data or model (or seeding)."""

    def _set_seed(self) -> None:
        pass  # no "Seed set to ..." line per validation parse

    def before_instantiate_classes(self) -> None:
        # the value checks every fit makes before it builds anything (a dropout of 1.5, a batch size of 0):
        # a space whose ends break them would fail every trial that samples near those ends
        check_sizes(self.config)
        check_hyperparameters(self.config)

    def instantiate_classes(self) -> None:
        pass


def validate_space(config_args: list[str], space: dict[str, BaseDistribution]) -> Any:
    """Parse the configs with every categorical choice and both ends of every range; returns the parsed
    config.

    A value the parser rejects is one error naming its key and value. The values are tried a
    column at a time (all lows, all highs, each choice index) and a rejected column again key by
    key, so a space of k keys costs a few parses, not 2k.
    """
    cfg = _parse(config_args, "the configs")
    values = {key: _edge_values(dist) for key, dist in space.items()}
    for i in range(max(len(v) for v in values.values())):
        column = {key: v[i] for key, v in values.items() if i < len(v)}
        try:
            _parse([*config_args, *override_args(column)], "the search space's values")
        except TuneError:
            for key, value in column.items():
                _parse([*config_args, *override_args({key: value})],
                       f"search-space key {key!r} (value {cli_value(value)})")
            raise  # only the combination is rejected
    return cfg


def _parse(args: list[str], what: str) -> Any:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            return _ParseOnly(args=args, run=False, save_config_callback=None).config
    except SystemExit as exc:
        reason = exc.code if isinstance(exc.code, str) else parser_reason(err.getvalue())
        raise TuneError(f"{what} is not accepted by biosig fit: {reason}") from None
    except RunConfigError as exc:
        raise TuneError(f"{what} is not accepted by biosig fit: {exc}") from None


def parser_reason(stderr: str) -> str:
    """The most specific line of a jsonargparse error (it nests: key -> union subtype -> option)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("error:")), None)
    if start is None:
        return lines[-1][:300] if lines else "rejected"
    block = [lines[start][len("error:"):].strip(), *lines[start + 1:]]
    specific = [ln.lstrip("- ") for ln in block
                if re.search(r"not accepted|nrecognized|not a valid|Expected a|nvalid|must be", ln)
                and "NoneType" not in ln]
    return " ".join([block[0], *specific[:1]])[:300]

