"""``biosig tune``: an Optuna study over any config key of a ``biosig fit`` experiment.

``biosig tune --config X.yaml [--config ...] --search-space SPACE.yaml --study-name S
[--storage URL] --n-trials N [--metric M] [--direction maximize|minimize] [--key value ...]``

``SPACE.yaml`` maps dotted config keys (as on the ``biosig fit`` command line, without ``--``) to
specs::

    model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.init_args.backbone.init_args.n_blocks: {type: int, low: 2, high: 4, step: 1}
    model.init_args.optimizer: {type: categorical, choices: [adamw, adam]}

Before any study exists, :func:`~biosig_lightning.tuning.search_space.load_search_space` turns the specs
into Optuna distributions (a bad spec is one error naming the key),
:func:`~biosig_lightning.tuning.search_space.validate_space` checks every choice and both ends of every
range against the real ``biosig fit`` parser, and :func:`~biosig_lightning.tuning.trial_setup.check_setup`
checks the metric and that the trainer runs inside this process (``ddp_spawn``, not ``ddp``).

Each trial is a fresh ``BiosigCLI(args=[configs..., --key=value..., logger name trial_<n>], run=False)``
in this process, fitted with :class:`~biosig_lightning.tuning.pruning.OptunaPruning`; its objective is the
best validation score of ``--metric`` (default: the experiment's ``model.init_args.monitor``/``mode``).
Trial runs land in ``runs/tune/<study>/trial_<n>/``; the best trial is written to
``runs/tune/<study>/best.yaml`` as nested keys, usable as a further ``--config`` of ``biosig fit`` or
``biosig repeat``.

Storage: default ``sqlite:///<study>.db``; any SQLAlchemy URL works (``pip install
'biosig-lightning[postgres]'`` for PostgreSQL; passwords never appear in messages). Several ``biosig tune``
processes cooperate on one study (``load_if_exists=True``) and a killed worker is simply restarted:
heartbeats, the ``--grace-period`` and which stale trials are failed are
:mod:`biosig_lightning.tuning.coordination`'s. A worker sent SIGTERM stops its trial after the running
batch, records it FAIL, queues its parameters again and exits non-zero.

``--n-trials N`` means "the study ends with N COMPLETE trials" across all workers (pruned and failed trials
are extra; stricter than Optuna's ``MaxTrialsCallback``:
:func:`~biosig_lightning.tuning.coordination.count_slots`). A crashed trial is recorded as FAIL with
``user_attrs["error"]`` and the study goes on; a worker gives up after ``--max-failures`` failures of its
own (default N), and at once on an error every trial would hit. This module parses the command line; the
library is :mod:`biosig_lightning.tuning`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import optuna
from optuna.trial import TrialState

from biosig_lightning.tuning import TuneError, export_best, tune
from biosig_lightning.tuning.errors import TunePreempted

EPILOG = """Every other option goes to `biosig fit` unchanged: --config files and any --key value, e.g.
--trainer.max_epochs 20. Start the same command in several shells (or machines, with a shared
--storage) to run trials in parallel: every process is a worker of the one study."""


def run(argv: list[str]) -> optuna.Study:
    """Entry point of ``biosig tune`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig tune", allow_abbrev=False, epilog=EPILOG,
                                 usage="biosig tune --config X.yaml [--config MORE.yaml] --search-space "
                                       "SPACE.yaml "
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
    ap.add_argument("--max-failures", type=int, default=None,
                    help="this worker stops after so many FAIL trials")
    ap.add_argument("--grace-period", type=int, default=120,
                    help="seconds without heartbeat after which a RUNNING trial counts as dead")
    ap.add_argument("--best-out", type=Path, default=None, help="default <runs-dir>/best.yaml")
    own, rest = ap.parse_known_args(argv)
    try:
        study = tune(rest, own.search_space, own.study_name, own.n_trials, own.storage, own.metric,
                     own.direction,
                     own.runs_dir, own.max_failures, grace_period=own.grace_period)
        states = [t.state for t in study.get_trials(deepcopy=False)]
        if not any(s == TrialState.COMPLETE for s in states):
            raise TuneError(f"study {own.study_name!r} has no COMPLETE trial")
        runs_dir = own.runs_dir or Path("runs") / "tune" / own.study_name
        path = export_best(study, own.best_out or runs_dir / "best.yaml")
    except TunePreempted as err:
        raise SystemExit(f"biosig tune: {err}") from None
    except TuneError as err:
        raise SystemExit(f"biosig tune: error: {err}") from None
    counts = {s.name: states.count(s) for s in TrialState if states.count(s)}
    print(f"study {study.study_name!r}: {counts}")
    metric = study.user_attrs.get("metric", "value")
    print(f"best trial {study.best_trial.number}: {metric}={study.best_value:.4f} {study.best_params}")
    print(f"best config: {path} (biosig fit --config <experiment.yaml> --config {path})")
    return study
