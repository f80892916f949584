"""``biosig tune``: an Optuna study over any config key of a ``biosig fit`` experiment.

``biosig tune --config X.yaml [--config ...] --search-space SPACE.yaml --study-name S
[--storage URL] --n-trials N [--metric val/f1] [--direction maximize] [--key value ...]``

``SPACE.yaml`` maps dotted config keys (as on the ``biosig fit`` command line, without ``--``) to
specs::

    model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.init_args.backbone.init_args.n_blocks: {type: int, low: 2, high: 4, step: 1}
    model.init_args.optimizer: {type: categorical, choices: [adamw, adam]}

Each trial is a fresh ``BiosigCLI(args=[configs..., --key=value..., logger name trial_<n>],
run=False)`` whose trainer is fitted here with :class:`OptunaPruning` (reports the monitored
metric each validation epoch, raises ``TrialPruned`` when the pruner says so); the objective is the
best validation score of ``--metric`` (the checkpoint callback's ``best_model_score`` when it
monitors that metric). Trial runs land in ``runs/tune/<study>/trial_<n>/``.

Storage: default ``sqlite:///<study>.db``; any SQLAlchemy URL works. The study is opened with
``load_if_exists=True`` so several ``biosig tune`` processes cooperate on one study, and a killed
worker can simply be restarted. Trials carry a heartbeat, so a trial whose worker was killed is
marked FAIL after ``--grace-period`` seconds and its slot is taken by a new trial.

``--n-trials N`` means "the study ends with N COMPLETE trials", across all workers. Stricter than
``MaxTrialsCallback`` (which lets each concurrently running worker overshoot by one): a worker
only starts a trial while COMPLETE + RUNNING < N, waits while the remaining slots are being run by
other workers (one of them may fail), and a trial that finds N earlier COMPLETE/RUNNING trials
ahead of it (two workers raced for the last slot) stops at once as FAIL with user_attr
``skipped``. A crashed trial is recorded as FAIL with ``user_attrs["error"]``; the study goes on
(a worker gives up after ``--max-failures`` failures of its own, default N).

The best trial is written to ``<study>_best.yaml`` as nested keys, usable as
``biosig fit --config X.yaml --config <study>_best.yaml``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from optuna.trial import TrialState

from biosig_lightning.cli import BiosigCLI

# biosig's own argv is not LightningCLI's: the args it gets are the complete fit arguments
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")

SPEC_TYPES = ("float", "int", "categorical")


class TuneError(ValueError):
    """Bad ``biosig tune`` input (one line, names the key / file / URL)."""


# ---- search space -------------------------------------------------------------------------------------
def load_search_space(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read and check ``SPACE.yaml`` (types, bounds, choices); every problem names the key."""
    path = Path(path)
    if not path.is_file():
        raise TuneError(f"search space {path} does not exist")
    try:
        space = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise TuneError(f"search space {path}: not valid YAML ({err})") from None
    if not space:
        raise TuneError(f"search space {path} is empty: map at least one config key to a spec")
    if not isinstance(space, dict):
        raise TuneError(f"search space {path}: expected a mapping 'config.key: {{type: ...}}'")
    for key, spec in space.items():
        where = f"search space {path}: {key}"
        if not isinstance(spec, dict) or spec.get("type") not in SPEC_TYPES:
            raise TuneError(f"{where}: spec must be a mapping with type one of {SPEC_TYPES}, got {spec!r}")
        kind = spec["type"]
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise TuneError(f"{where}: categorical needs a non-empty 'choices' list")
            bad = [c for c in choices if c is not None and not isinstance(c, bool | int | float | str)]
            if bad:
                raise TuneError(f"{where}: choices must be scalars (Optuna stores them), got {bad!r}")
        else:
            num = float if kind == "float" else int
            try:
                low, high = num(spec["low"]), num(spec["high"])
            except (KeyError, TypeError, ValueError):
                raise TuneError(f"{where}: {kind} needs numeric 'low' and 'high'") from None
            if not low < high:
                raise TuneError(f"{where}: low ({low}) must be < high ({high})")
            if spec.get("log") and low <= 0:
                raise TuneError(f"{where}: log scale needs low > 0, got {low}")
            extra = set(spec) - {"type", "low", "high", "log", "step"}
            if extra:
                raise TuneError(f"{where}: unknown spec field(s) {sorted(extra)}")
    return space


def suggest(trial: optuna.Trial, key: str, spec: dict[str, Any]) -> Any:
    """One value for ``key`` from its spec."""
    kind = spec["type"]
    if kind == "float":
        return trial.suggest_float(key, float(spec["low"]), float(spec["high"]), log=bool(spec.get("log", False)),
                                   step=spec.get("step"))
    if kind == "int":
        return trial.suggest_int(key, int(spec["low"]), int(spec["high"]), step=int(spec.get("step", 1)),
                                 log=bool(spec.get("log", False)))
    return trial.suggest_categorical(key, spec["choices"])


def _sample(spec: dict[str, Any]) -> Any:
    return spec["choices"][0] if spec["type"] == "categorical" else spec["low"]


def cli_value(value: Any) -> str:
    """A value as jsonargparse reads it from the command line."""
    return value if isinstance(value, str) else json.dumps(value)


def override_args(params: dict[str, Any]) -> list[str]:
    return [f"--{key}={cli_value(v)}" for key, v in params.items()]


class _ParseOnly(BiosigCLI):
    """BiosigCLI that stops after parsing: checks keys without building data or model."""

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


def validate_space(config_args: list[str], space: dict[str, dict[str, Any]]) -> None:
    """Parse the configs with a sample value for each key; a key the parser rejects is one error."""
    _parse(config_args, "the configs")
    for key, spec in space.items():
        _parse([*config_args, *override_args({key: _sample(spec)})],
               f"search-space key {key!r} (sample value {cli_value(_sample(spec))})")


def _parse(args: list[str], what: str) -> None:
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _ParseOnly(args=args, run=False, save_config_callback=None)
    except SystemExit:
        raise TuneError(f"{what} is not accepted by biosig fit: {_parser_reason(err.getvalue())}") from None


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
            raise TuneError(f"--metric {self.metric!r} was not logged; logged: {sorted(trainer.callback_metrics)}")
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
def open_storage(url: str, heartbeat: int = 30, grace: int = 120) -> optuna.storages.RDBStorage:
    """An RDB storage with trial heartbeats; an unreachable URL is one error naming it."""
    import sqlalchemy.exc

    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}  # concurrent workers wait for the file lock
    last: Exception | None = None
    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat,
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
    msg = str(getattr(last, "orig", None) or last).splitlines()[0] if last else "unknown error"
    raise TuneError(f"cannot open study storage {url!r}: {msg}")


def _count(study: optuna.Study) -> tuple[int, int]:
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    complete = sum(t.state == TrialState.COMPLETE for t in trials)
    return complete, len(trials) - complete


def make_objective(config_args: list[str], space: dict[str, dict[str, Any]], metric: str, direction: str,
                   n_trials: int, runs_dir: Path, storage_url: str | None = None) -> Any:
    """The Optuna objective: one fresh BiosigCLI run per trial, scored by best ``metric``."""

    def objective(trial: optuna.Trial) -> float:
        ahead = [t for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
                 if t.number < trial.number]
        if len(ahead) >= n_trials:
            trial.set_user_attr("skipped", f"{len(ahead)} earlier trials already fill --n-trials {n_trials}")
            raise _Surplus()
        params = {key: suggest(trial, key, spec) for key, spec in space.items()}
        args = [*config_args, *override_args(params),
                f"--run.save_dir={runs_dir}", f"--run.name=trial_{trial.number}",
                f"--run.group={trial.study.study_name}"]
        cli: BiosigCLI | None = None
        try:
            cli = BiosigCLI(args=args, run=False)
            if type(getattr(cli.trainer.strategy, "launcher", None)).__name__ == "_SubprocessScriptLauncher":
                # it would re-run this whole `biosig tune` command in every extra process
                raise TuneError("a trial cannot use --trainer.strategy ddp (it relaunches the command line); "
                                "use --trainer.strategy ddp_spawn for multi-process trials")
            pruning = OptunaPruning(trial, metric, direction, storage_url=storage_url)
            cli.trainer.callbacks.append(pruning)
            trial.set_user_attr("run_dir", str(cli.trainer.log_dir))
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            returned = cli.trainer.callback_metrics  # from rank 0 of a spawned multi-process trial too
            if "optuna/pruned_epoch" in returned:
                raise optuna.TrialPruned(f"pruned at epoch {int(returned['optuna/pruned_epoch'])}")
            ckpt = next((cb for cb in cli.trainer.checkpoint_callbacks
                         if isinstance(cb, ModelCheckpoint) and cb.monitor == metric), None)
            score = ckpt.best_model_score if ckpt is not None and ckpt.best_model_score is not None else None
            if score is None:
                score = returned.get("optuna/best", pruning.best)
            if score is None or not math.isfinite(float(score)):
                raise TuneError(f"trial {trial.number}: no finite {metric} was reached")
            if ckpt is not None and ckpt.best_model_path:
                trial.set_user_attr("best_checkpoint", ckpt.best_model_path)
            return float(score)
        except optuna.TrialPruned:
            raise
        except BaseException as err:  # recorded on the trial; optuna marks it FAIL
            trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:2000])
            raise
        finally:
            if cli is not None:
                _finish_wandb(cli.trainer, trial, params)

    return objective


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
                print(f"wandb: could not close trial {trial.number}'s run: {err}")


class _Surplus(Exception):
    """A trial started after the study's N slots were taken by other workers."""


def tune(config_args: list[str], space_path: str | Path, study_name: str, n_trials: int,
         storage: str | None = None, metric: str = "val/f1", direction: str = "maximize",
         runs_dir: Path | None = None, max_failures: int | None = None, poll_s: float = 2.0,
         grace_period: int = 120) -> optuna.Study:
    """Run this worker's share of the study until it holds ``n_trials`` COMPLETE trials."""
    if n_trials < 1:
        raise TuneError(f"--n-trials must be >= 1, got {n_trials}")
    if direction not in ("maximize", "minimize"):
        raise TuneError(f"--direction must be maximize or minimize, got {direction!r}")
    space = load_search_space(space_path)
    validate_space(config_args, space)
    url = storage or f"sqlite:///{study_name}.db"
    store = open_storage(url, grace=grace_period)
    study = optuna.create_study(study_name=study_name, storage=store, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise TuneError(f"study {study_name!r} in {url} was created to {study.direction.name.lower()}, "
                        f"not {direction}")
    runs_dir = runs_dir or Path("runs") / "tune" / study_name
    objective = make_objective(config_args, space, metric, direction, n_trials, runs_dir, url)
    max_failures = n_trials if max_failures is None else max_failures
    failures = 0
    finished: list[optuna.trial.FrozenTrial] = []
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # a killed worker's RUNNING trial frees its slot
        complete, running = _count(study)
        if complete >= n_trials:
            break
        if complete + running >= n_trials:
            time.sleep(poll_s)  # the last slots are being run elsewhere; one may still fail
            continue
        if failures >= max_failures:
            last_error = next((t.user_attrs["error"] for t in finished if "error" in t.user_attrs), "?")
            raise TuneError(f"{failures} trials of this worker failed (study {study_name!r}, FAIL trials keep "
                            f"user_attrs['error']); last: {last_error.splitlines()[0][:300]}")
        finished.clear()
        study.optimize(objective, n_trials=1, catch=(Exception,), callbacks=[lambda _, t: finished.append(t)])
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
    header = (f"# best trial {best.number} of study {study.study_name!r}: value {best.value}\n"
              f"# biosig fit --config <experiment.yaml> --config {path.name}\n")
    path.write_text(header + yaml.safe_dump(nested, sort_keys=False))
    return path


def run(argv: list[str]) -> optuna.Study:
    """Entry point of ``biosig tune`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig tune", allow_abbrev=False,
                                 description="Optuna study over config keys; other options go to fit")
    ap.add_argument("--search-space", required=True, help="YAML: dotted config key -> spec")
    ap.add_argument("--study-name", required=True)
    ap.add_argument("--storage", default=None, help="SQLAlchemy URL (default sqlite:///<study-name>.db)")
    ap.add_argument("--n-trials", type=int, required=True, help="the study ends with this many COMPLETE trials")
    ap.add_argument("--metric", default="val/f1")
    ap.add_argument("--direction", default="maximize", choices=("maximize", "minimize"))
    ap.add_argument("--runs-dir", type=Path, default=None, help="default runs/tune/<study-name>")
    ap.add_argument("--max-failures", type=int, default=None, help="this worker stops after so many FAIL trials")
    ap.add_argument("--grace-period", type=int, default=120,
                    help="seconds without heartbeat after which a RUNNING trial counts as dead")
    ap.add_argument("--best-out", type=Path, default=None, help="default <study-name>_best.yaml")
    own, rest = ap.parse_known_args(argv)
    try:
        study = tune(rest, own.search_space, own.study_name, own.n_trials, own.storage, own.metric, own.direction,
                     own.runs_dir, own.max_failures, grace_period=own.grace_period)
        states = [t.state for t in study.get_trials(deepcopy=False)]
        if not any(s == TrialState.COMPLETE for s in states):
            raise TuneError(f"study {own.study_name!r} has no COMPLETE trial")
        path = export_best(study, own.best_out or Path(f"{own.study_name}_best.yaml"))
    except TuneError as err:
        raise SystemExit(f"biosig tune: error: {err}") from None
    counts = {s.name: states.count(s) for s in TrialState if states.count(s)}
    print(f"study {study.study_name!r}: {counts}")
    print(f"best trial {study.best_trial.number}: {own.metric}={study.best_value:.4f} {study.best_params}")
    print(f"best: {path}")
    return study
