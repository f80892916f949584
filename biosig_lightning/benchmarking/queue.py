"""The benchmark's shared queue of cells: an Optuna study on the storage ``biosig tune`` uses.

Optuna's RDB storage (SQLite or PostgreSQL, opened by :func:`~biosig_lightning.tuning.storage.open_storage`)
is already a distributed work queue: ``study.enqueue_trial`` adds a WAITING trial, and ``study.ask``
pops one by an atomic WAITING -> RUNNING update, so of two workers asking at once exactly one gets
it (on SQLite with every transaction holding the write lock from its start,
:func:`~biosig_lightning.tuning.storage.serialise_sqlite`, as ``SELECT ... FOR UPDATE`` makes it on
PostgreSQL). Each cell of the grid is one enqueued trial whose user attribute ``cell`` is the cell id; a
worker pops trials through ``study.optimize(n_trials=1)``, which also keeps the trial's heartbeat
while the cell runs. A worker killed mid-cell is found as ``biosig tune`` finds one
(:mod:`~biosig_lightning.tuning.coordination`): on its own host at once (the process named by the
trial's ``worker`` and ``worker_start`` attributes is gone), elsewhere when its heartbeat is older
than the grace period. Its trial is marked FAIL and Optuna's retry callback
(``RetryHeartbeatStaleTrialCallback``, formerly ``RetryFailedTrialCallback``) enqueues the cell again.

Exactly once. Workers starting together may both enqueue a cell; every cell is run by the
lowest-numbered of its trials that is WAITING, RUNNING or COMPLETE, and any other is closed as
PRUNED with user attribute ``duplicate``. A cell whose ``results.json`` exists is closed COMPLETE
without running (a rerun after the storage was lost, or a cell finished by ``biosig fit`` itself).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from biosig_lightning.tuning.storage import open_storage

__all__ = ["OPEN", "claim_is_first", "default_storage", "enqueue_missing", "open_study", "trials_by_cell"]

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

#: trial states that hold a cell: being run, waiting to be, or done
OPEN = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
MAX_RETRY = 3
# Optuna >= 4.9 names the retry callback after heartbeats; older releases have only the first name
_RETRY = getattr(optuna.storages,
                 "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback


def default_storage(out: Path) -> str:
    """``sqlite:///DIR/benchmark.db``: the queue beside the runs when no ``--storage`` is given."""
    return f"sqlite:///{(Path(out) / 'benchmark.db').resolve()}"


def open_study(url: str, name: str, heartbeat: int | None = None, grace: int = 60) -> optuna.Study:
    """The grid's queue study on ``url`` (created when missing), with heartbeats and retries; a bad or
    unreachable URL is one :class:`~biosig_lightning.tuning.errors.TuneError` naming it (password hidden)."""
    storage = open_storage(url, heartbeat, grace, stale_callback=_RETRY(max_retry=MAX_RETRY),
                           gone_is_stale=True,
                           atomic_sqlite=True)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed cell is said by the runner, in one line
    return optuna.create_study(study_name=name, storage=storage, direction="maximize", load_if_exists=True)


def trials_by_cell(study: optuna.Study) -> dict[str, list[FrozenTrial]]:
    out: dict[str, list[FrozenTrial]] = {}
    for t in study.get_trials(deepcopy=False):
        if "cell" in t.user_attrs:
            out.setdefault(t.user_attrs["cell"], []).append(t)
    return out


def enqueue_missing(study: optuna.Study, cell_ids: list[str]) -> list[str]:
    """Enqueue every cell without a WAITING, RUNNING or COMPLETE trial (a new grid, failed cells, new
    seeds); returns the cells enqueued."""
    held = trials_by_cell(study)
    added = []
    for cid in cell_ids:
        if not any(t.state in OPEN for t in held.get(cid, [])):
            study.enqueue_trial({}, user_attrs={"cell": cid})
            added.append(cid)
    return added


def claim_is_first(study: optuna.Study, trial: optuna.Trial, cell: str) -> bool:
    """Whether ``trial`` is the lowest-numbered open trial of ``cell`` (module docstring)."""
    return not any(t.number < trial.number and t.state in OPEN for t in trials_by_cell(study).get(cell, []))
