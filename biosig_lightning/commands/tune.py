"""``biosig tune``: an Optuna study over any config key of a ``biosig fit`` experiment.

``biosig tune --config X.yaml [--config ...] --search-space SPACE.yaml --study-name S
[--storage URL] --n-trials N [--metric M] [--direction maximize|minimize] [--key value ...]``

``SPACE.yaml`` maps dotted config keys (as on the ``biosig fit`` command line, without ``--``) to
specs::

    model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.init_args.backbone.init_args.n_blocks: {type: int, low: 2, high: 4, step: 1}
    model.init_args.optimizer: {type: categorical, choices: [adamw, adam]}

:func:`load_search_space` turns the specs into Optuna distributions (a bad spec is one error naming
the key), and :func:`validate_space` checks every categorical choice and both ends of every range
against the real ``biosig fit`` parser before any study exists. The setup every trial shares is
checked up front too (:func:`check_setup`): the metric, and a trainer that can run inside this
process (``--trainer.strategy ddp`` would relaunch the whole command; ``ddp_spawn`` is the one).

Each trial is a fresh ``BiosigCLI(args=[configs..., --key=value..., logger name trial_<n>],
run=False)`` whose trainer is fitted here with :class:`OptunaPruning` (reports the monitored
metric each validation epoch, raises ``TrialPruned`` when the pruner says so); the objective is the
best validation score of ``--metric`` (the checkpoint callback's ``best_model_score`` when it
monitors that metric). ``--metric``/``--direction`` default to the experiment's own
``model.init_args.monitor``/``mode``. Trial runs land in ``runs/tune/<study>/trial_<n>/``.

Storage: default ``sqlite:///<study>.db``; any SQLAlchemy URL works (a plain ``postgresql://``
uses psycopg2 when psycopg 3 is not installed: ``pip install 'biosig-lightning[postgres]'``;
passwords never appear in messages). The study is opened with ``load_if_exists=True`` so several
``biosig tune`` processes cooperate on one study, and a killed worker can simply be restarted.
Trials carry a heartbeat, so a trial whose worker was killed is marked FAIL (error "heartbeat lost
(worker died)") after ``--grace-period`` seconds and its slot is taken by a new trial.

``--n-trials N`` means "the study ends with N COMPLETE trials", across all workers; pruned and failed
trials are extra. Stricter than ``MaxTrialsCallback`` (which lets each concurrently running worker
overshoot by one): a worker only starts a trial while COMPLETE + RUNNING < N, waits while the
remaining slots are being run by other workers (one of them may fail), and a trial that finds N
earlier COMPLETE/RUNNING trials ahead of it (two workers raced for the last slot) stops at once as
FAIL with user_attr ``skipped``. A crashed trial (an exception, or the parser rejecting a sampled
value) is recorded as FAIL with ``user_attrs["error"]``; the study goes on (a worker gives up after
``--max-failures`` failures of its own, default N, and at once on an error every trial would hit).

The best trial is written to ``runs/tune/<study>/best.yaml`` as nested keys, usable as
``biosig fit --config X.yaml --config runs/tune/<study>/best.yaml`` (and by ``biosig repeat``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import re
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from biosig_lightning.metrics import METRIC_KEYS
from biosig_lightning.runs.biosig_cli import BiosigCLI

# biosig's own argv is not LightningCLI's: the args it gets are the complete fit arguments
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
# heartbeats are what lets a restarted worker take over a dead one's slot; the warning is Optuna's
# note that the option is "experimental", nothing the user can act on
warnings.filterwarnings("ignore", message=r".*``(heartbeat_interval|grace_period)``.*experimental",
                        category=optuna.exceptions.ExperimentalWarning)

SPEC_FIELDS = {"float": {"type", "low", "high", "log", "step"}, "int": {"type", "low", "high", "log", "step"},
               "categorical": {"type", "choices"}}
#: validation metrics the biosig tasks log each epoch (SDFormerTask adds the graph's edge density)
VAL_METRICS = tuple(f"val/{k}" for k in (*METRIC_KEYS, "loss", "edge_density"))
LOWER_IS_BETTER = ("loss", "ece")
HEARTBEAT_LOST = "heartbeat lost (worker died)"


class TuneError(ValueError):
    """Bad ``biosig tune`` input (one line, names the key / file / URL)."""


class FatalTrialError(TuneError):
    """A trial error every later trial would hit too (bad setup): the worker stops instead of retrying."""


# ---- search space -------------------------------------------------------------------------------------
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
    if not path.is_file():
        raise TuneError(f"search space {path} does not exist")
    try:
        space = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise TuneError(f"search space {path}: not valid YAML ({str(err).splitlines()[0]})") from None
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
            raise TuneError(f"{where}: spec must be a mapping with type one of {tuple(SPEC_FIELDS)}, got {spec!r}")
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
            raise TuneError(f"{where}: log and step cannot be combined (a log scale has no even grid); drop one")
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
        pass

    def instantiate_classes(self) -> None:
        pass


def validate_space(config_args: list[str], space: dict[str, BaseDistribution]) -> Any:
    """Parse the configs with every categorical choice and both ends of every range; returns the parsed config.

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
        reason = exc.code if isinstance(exc.code, str) else _parser_reason(err.getvalue())
        raise TuneError(f"{what} is not accepted by biosig fit: {reason}") from None


def _parser_reason(stderr: str) -> str:
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


# ---- what every trial shares --------------------------------------------------------------------------
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
        probe = Trainer(strategy=strategy, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **kwargs)
    except Exception as err:
        raise TuneError(f"the trainer settings ({', '.join(f'{k}={v}' for k, v in kwargs.items())}, "
                        f"strategy={strategy}) cannot run: {str(err).splitlines()[0]}") from None
    finally:
        pl_logger.setLevel(level)
    _check_launcher(probe, strategy)


def _check_launcher(trainer: Trainer, strategy: Any) -> None:
    if type(getattr(trainer.strategy, "launcher", None)).__name__ == "_SubprocessScriptLauncher":
        # it would re-run this whole `biosig tune` command in every extra process
        raise FatalTrialError(f"a trial cannot use --trainer.strategy {strategy} with "
                              f"{trainer.num_devices} devices (it relaunches the command line); "
                              "use --trainer.strategy ddp_spawn for multi-process trials")


# ---- pruning ------------------------------------------------------------------------------------------
class OptunaPruning(Callback):
    """Reports ``metric`` to the trial after each validation epoch and prunes on the pruner's word.

    Also keeps the best value seen (by ``direction``), the objective when no checkpoint callback
    monitors ``metric``.

    A trial may itself train with several processes (``--trainer.strategy ddp_spawn
    --trainer.devices 2``). Then only rank 0 talks to the study (one report per epoch, not one per
    process), its prune decision is broadcast so every rank stops at the same epoch, and the
    decision and best value travel back to the tuning process in ``callback_metrics``
    (``optuna/pruned_epoch``, ``optuna/best``), which Lightning returns from spawned workers. The
    callback is pickled into spawned workers without its ``Trial`` (whose storage holds a
    database connection); a worker reopens the trial from ``storage_url``.
    """

    def __init__(self, trial: optuna.Trial, metric: str, direction: str, storage_url: str | None = None) -> None:
        self.trial: optuna.Trial | None = trial
        self.metric, self.direction, self.storage_url = metric, direction, storage_url
        self._study_name, self._trial_id = trial.study.study_name, trial._trial_id
        self.best: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["trial"] = None
        return state

    def _trial(self) -> optuna.Trial:
        if self.trial is None:
            if self.storage_url is None:
                raise TuneError("OptunaPruning was copied into another process without a storage URL")
            study = optuna.load_study(study_name=self._study_name, storage=open_storage(self.storage_url))
            self.trial = optuna.trial.Trial(study, self._trial_id)
        return self.trial

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            raise FatalTrialError(f"--metric {self.metric!r} was not logged; logged: {sorted(trainer.callback_metrics)}")
        value = float(value)
        epoch = trainer.current_epoch
        if math.isfinite(value) and (self.best is None or
                                     (value > self.best if self.direction == "maximize" else value < self.best)):
            self.best = value
        prune = False
        if trainer.is_global_zero:
            trial = self._trial()
            trial.report(value, step=epoch)
            prune = trial.should_prune()
        if trainer.world_size > 1:
            prune = bool(trainer.strategy.broadcast(prune, src=0))
        if self.best is not None:
            trainer.callback_metrics["optuna/best"] = torch.tensor(self.best)
        if not prune:
            return
        if trainer.world_size == 1:
            raise optuna.TrialPruned(f"pruned at epoch {epoch}: {self.metric}={value:.4f}")
        # an exception in one spawned rank would leave the others waiting in a collective
        trainer.callback_metrics["optuna/pruned_epoch"] = torch.tensor(epoch)
        trainer.should_stop = True


# ---- storage and study --------------------------------------------------------------------------------
def shown_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for every message and log line."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)  # not a URL SQLAlchemy parses; mask anyway


def storage_url(url: str) -> str:
    """The URL to connect with: a plain ``postgresql://`` goes through psycopg2 when psycopg 3 is missing.

    SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3; the ``postgres`` extra installs psycopg2.
    A missing driver is one error naming the module to install.
    """
    from importlib.util import find_spec

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: not an SQLAlchemy URL "
                        "(e.g. sqlite:///study.db, postgresql://user@host/db)") from None
    if parsed.drivername == "postgresql" and find_spec("psycopg") is None and find_spec("psycopg2") is not None:
        parsed = parsed.set(drivername="postgresql+psycopg2")
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: SQLAlchemy has no dialect "
                        f"{parsed.drivername!r}") from None
    except ImportError as err:
        module = getattr(err, "name", None) or str(err)
        hint = "pip install 'biosig-lightning[postgres]'" if parsed.get_backend_name() == "postgresql" else \
            f"install the {module} package"
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: its driver module {module!r} is not "
                        f"installed ({hint})") from None
    return parsed.render_as_string(hide_password=False)


def open_storage(url: str, heartbeat: int = 30, grace: int = 120) -> optuna.storages.RDBStorage:
    """An RDB storage with trial heartbeats; an unreachable URL is one error naming it (password hidden)."""
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    real = storage_url(url)
    parsed = make_url(real)
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs["connect_args"] = {"timeout": 60}  # concurrent workers wait for the file lock
    elif parsed.drivername == "postgresql+psycopg2":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}  # an unroutable host fails in seconds
    last: Exception | None = None
    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(real, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat,
                                              grace_period=grace)
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as err:
            last = err
            text = str(err).lower()
            if "locked" in text or "already exists" in text or "unique" in text:
                time.sleep(0.5 * (attempt + 1))  # another worker is creating the tables right now
                continue
            break
        except (sqlalchemy.exc.ArgumentError, ImportError, ValueError) as err:
            last = err
            break
    msg = str(getattr(last, "orig", None) or last).strip().splitlines()[0] if last else "unknown error"
    if parsed.password:
        msg = msg.replace(str(parsed.password), "***")
    raise TuneError(f"cannot open study storage {shown_url(url)!r}: {msg}")


def _count(study: optuna.Study) -> tuple[int, list[int]]:
    """COMPLETE trials, and the numbers of the RUNNING ones."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    return (sum(t.state == TrialState.COMPLETE for t in trials),
            [t.number for t in trials if t.state == TrialState.RUNNING])


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Mark RUNNING trials without a heartbeat for the grace period FAIL, with the error saying why."""
    storage = study._storage
    stale = getattr(storage, "_get_stale_trial_ids", None)
    ids = stale(study._study_id) if stale is not None else []
    for trial_id in ids:
        # while the trial is still RUNNING: a finished trial's attributes cannot change
        with contextlib.suppress(Exception):  # another worker failed it a moment ago
            storage.set_trial_user_attr(trial_id, "error", HEARTBEAT_LOST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # "fail_stale_trials is experimental"
        optuna.storages.fail_stale_trials(study)
    return ids


class Objective:
    """The Optuna objective: one fresh BiosigCLI run per trial, scored by best ``metric``.

    ``fatal`` holds the first :class:`FatalTrialError` a trial hit (recorded on that trial as
    usual), which :func:`tune` turns into the worker's own error instead of trying again.
    """

    def __init__(self, config_args: list[str], space: dict[str, BaseDistribution], metric: str, direction: str,
                 n_trials: int, runs_dir: Path, storage_url: str | None = None) -> None:
        self.config_args, self.space, self.metric, self.direction = config_args, space, metric, direction
        self.n_trials, self.runs_dir, self.storage_url = n_trials, runs_dir, storage_url
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.fatal: FatalTrialError | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        ahead = [t for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
                 if t.number < trial.number]
        if len(ahead) >= self.n_trials:
            trial.set_user_attr("skipped", f"{len(ahead)} earlier trials already fill --n-trials {self.n_trials}")
            raise _Surplus()
        trial.set_user_attr("worker", self.worker)
        cli: BiosigCLI | None = None
        params: dict[str, Any] = {}
        try:
            params = {key: suggest(trial, key, dist) for key, dist in self.space.items()}
            args = [*self.config_args, *override_args(params),
                    f"--run.save_dir={self.runs_dir}", f"--run.name=trial_{trial.number}",
                    f"--run.group={trial.study.study_name}"]
            cli = _trial_cli(args)
            _check_launcher(cli.trainer, cli.trainer.strategy.__class__.__name__)
            pruning = OptunaPruning(trial, self.metric, self.direction, storage_url=self.storage_url)
            cli.trainer.callbacks.append(pruning)
            trial.set_user_attr("run_dir", str(cli.trainer.log_dir))
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            returned = cli.trainer.callback_metrics  # from rank 0 of a spawned multi-process trial too
            if "optuna/pruned_epoch" in returned:
                raise optuna.TrialPruned(f"pruned at epoch {int(returned['optuna/pruned_epoch'])}")
            ckpt = next((cb for cb in cli.trainer.checkpoint_callbacks
                         if isinstance(cb, ModelCheckpoint) and cb.monitor == self.metric), None)
            score = ckpt.best_model_score if ckpt is not None and ckpt.best_model_score is not None else None
            if score is None:
                score = returned.get("optuna/best", pruning.best)
            if score is None or not math.isfinite(float(score)):
                raise TuneError(f"trial {trial.number}: no finite {self.metric} was reached")
            if ckpt is not None and ckpt.best_model_path:
                trial.set_user_attr("best_checkpoint", ckpt.best_model_path)
            return float(score)
        except optuna.TrialPruned:
            raise
        except BaseException as err:  # recorded on the trial; optuna marks it FAIL
            trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:2000])
            if isinstance(err, FatalTrialError):
                self.fatal = self.fatal or err
            raise
        finally:
            if cli is not None:
                _finish_wandb(cli.trainer, trial, params)


def _trial_cli(args: list[str]) -> BiosigCLI:
    """The trial's CLI; a value the parser rejects is an error of this trial, not the end of the worker."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            cli = BiosigCLI(args=args, run=False)
    except SystemExit as exc:  # jsonargparse exits; Optuna would leave the trial RUNNING
        reason = exc.code if isinstance(exc.code, str) else _parser_reason(err.getvalue())
        raise TuneError(f"biosig fit rejected the trial's config: {reason}") from None
    sys.stderr.write(err.getvalue())  # warnings of a config that parsed stay visible
    return cli


def make_objective(config_args: list[str], space: dict[str, BaseDistribution], metric: str, direction: str,
                   n_trials: int, runs_dir: Path, storage_url: str | None = None) -> Objective:
    """The trial function :func:`tune` optimises (see :class:`Objective`)."""
    return Objective(config_args, space, metric, direction, n_trials, runs_dir, storage_url)


def _finish_wandb(trainer: Trainer, trial: optuna.Trial, params: dict[str, Any]) -> None:
    """Close the trial's wandb run (else the next trial would reuse it), tagged with its parameters."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            try:
                run = lg.experiment
                run.summary["optuna/trial"] = trial.number
                run.config.update({"optuna_params": params}, allow_val_change=True)
                run.finish()
            except Exception as err:  # a dashboard problem must not fail the trial
                print(f"wandb: could not close trial {trial.number}'s run: {err}", file=sys.stderr)


class _Surplus(Exception):
    """A trial started after the study's N slots were taken by other workers."""


def tune(config_args: list[str], space_path: str | Path, study_name: str, n_trials: int,
         storage: str | None = None, metric: str | None = None, direction: str | None = None,
         runs_dir: Path | None = None, max_failures: int | None = None, poll_s: float = 2.0,
         grace_period: int = 120) -> optuna.Study:
    """Run this worker's share of the study until it holds ``n_trials`` COMPLETE trials.

    ``metric``/``direction`` default to the experiment's ``monitor``/``mode``.
    """
    if n_trials < 1:
        raise TuneError(f"--n-trials must be >= 1, got {n_trials}")
    if direction not in (None, "maximize", "minimize"):
        raise TuneError(f"--direction must be maximize or minimize, got {direction!r}")
    space = load_search_space(space_path)
    cfg = validate_space(config_args, space)
    monitor, mode = experiment_monitor(cfg)
    metric = metric or monitor
    if direction is None:
        direction = mode if metric == monitor else \
            "minimize" if metric.split("/")[-1] in LOWER_IS_BETTER else "maximize"
    check_setup(cfg, metric)
    url = storage or f"sqlite:///{study_name}.db"
    store = open_storage(url, grace=grace_period)
    study = optuna.create_study(study_name=study_name, storage=store, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise TuneError(f"study {study_name!r} in {shown_url(url)} was created to {study.direction.name.lower()}, "
                        f"not {direction}")
    if study.user_attrs.get("metric", metric) != metric:  # workers scoring different metrics would mix them
        raise TuneError(f"study {study_name!r} in {shown_url(url)} optimises {study.user_attrs['metric']}, "
                        f"not {metric} (pass --metric {study.user_attrs['metric']})")
    study.set_user_attr("metric", metric)
    runs_dir = runs_dir or Path("runs") / "tune" / study_name
    print(f"tune: study {study_name!r} in {shown_url(url)}: {direction} {metric} over {', '.join(space)}; "
          f"until {n_trials} COMPLETE trials", flush=True)
    objective = make_objective(config_args, space, metric, direction, n_trials, runs_dir, url)
    max_failures = n_trials if max_failures is None else max_failures
    failures = 0
    waiting_for: list[int] = []
    finished: list[optuna.trial.FrozenTrial] = []
    while True:
        dead = fail_dead_trials(study)
        for number in [t.number for t in study.get_trials(deepcopy=False) if t._trial_id in dead]:
            print(f"tune: trial {number} failed: {HEARTBEAT_LOST}; its slot is free again", flush=True)
        complete, running = _count(study)
        if complete >= n_trials:
            break
        if complete + len(running) >= n_trials:
            if running != waiting_for:  # say once what this worker waits for, not every poll
                print(f"tune: {complete}/{n_trials} COMPLETE; waiting for RUNNING trial(s) {running} of other "
                      f"workers (a dead worker's trial is failed after --grace-period {grace_period} s without "
                      "heartbeat, and its slot is taken again)", flush=True)
                waiting_for = running
            time.sleep(poll_s)  # the last slots are being run elsewhere; one may still fail
            continue
        waiting_for = []
        if failures >= max_failures:
            last_error = next((t.user_attrs["error"] for t in finished if "error" in t.user_attrs), "?")
            raise TuneError(f"{failures} trials of this worker failed (study {study_name!r}, FAIL trials keep "
                            f"user_attrs['error']); last: {last_error.splitlines()[0][:300]}")
        finished.clear()
        study.optimize(objective, n_trials=1, catch=(Exception,), callbacks=[lambda _, t: finished.append(t)])
        if objective.fatal is not None:
            raise TuneError(f"stopping this worker: {objective.fatal}") from None
        failures += sum(t.state == TrialState.FAIL and "skipped" not in t.user_attrs for t in finished)
    return study


def export_best(study: optuna.Study, path: str | Path) -> Path:
    """Write the best trial's parameters as a nested YAML override file."""
    best = study.best_trial
    nested: dict[str, Any] = {}
    for key, value in best.params.items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# best trial {best.number} of study {study.study_name!r}: value {best.value}\n"
              f"# biosig fit --config <experiment.yaml> --config {path}\n")
    path.write_text(header + yaml.safe_dump(nested, sort_keys=False))
    return path


EPILOG = """Every other option goes to `biosig fit` unchanged: --config files and any --key value, e.g.
--trainer.max_epochs 20. Start the same command in several shells (or machines, with a shared
--storage) to run trials in parallel: every process is a worker of the one study."""


def run(argv: list[str]) -> optuna.Study:
    """Entry point of ``biosig tune`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig tune", allow_abbrev=False, epilog=EPILOG,
                                 usage="biosig tune --config X.yaml [--config MORE.yaml] --search-space SPACE.yaml "
                                       "--study-name S --n-trials N [options] [--key value ...]",
                                 description="Optuna study over config keys of a biosig fit experiment")
    ap.add_argument("--search-space", required=True, help="YAML: dotted config key -> spec")
    ap.add_argument("--study-name", required=True)
    ap.add_argument("--storage", default=None, help="SQLAlchemy URL (default sqlite:///<study-name>.db)")
    ap.add_argument("--n-trials", type=int, required=True,
                    help="the study ends with this many COMPLETE trials; pruned and failed trials are extra")
    ap.add_argument("--metric", default=None, help="validation metric to optimise (default: the experiment's "
                                                   "model.init_args.monitor, e.g. val/f1)")
    ap.add_argument("--direction", default=None, choices=("maximize", "minimize"),
                    help="default: from the experiment's model.init_args.mode (max: maximize)")
    ap.add_argument("--runs-dir", type=Path, default=None, help="default runs/tune/<study-name>")
    ap.add_argument("--max-failures", type=int, default=None, help="this worker stops after so many FAIL trials")
    ap.add_argument("--grace-period", type=int, default=120,
                    help="seconds without heartbeat after which a RUNNING trial counts as dead")
    ap.add_argument("--best-out", type=Path, default=None, help="default <runs-dir>/best.yaml")
    own, rest = ap.parse_known_args(argv)
    try:
        study = tune(rest, own.search_space, own.study_name, own.n_trials, own.storage, own.metric, own.direction,
                     own.runs_dir, own.max_failures, grace_period=own.grace_period)
        states = [t.state for t in study.get_trials(deepcopy=False)]
        if not any(s == TrialState.COMPLETE for s in states):
            raise TuneError(f"study {own.study_name!r} has no COMPLETE trial")
        runs_dir = own.runs_dir or Path("runs") / "tune" / own.study_name
        path = export_best(study, own.best_out or runs_dir / "best.yaml")
    except TuneError as err:
        raise SystemExit(f"biosig tune: error: {err}") from None
    counts = {s.name: states.count(s) for s in TrialState if states.count(s)}
    print(f"study {study.study_name!r}: {counts}")
    metric = study.user_attrs.get("metric", "value")
    print(f"best trial {study.best_trial.number}: {metric}={study.best_value:.4f} {study.best_params}")
    print(f"best config: {path} (biosig fit --config <experiment.yaml> --config {path})")
    return study
