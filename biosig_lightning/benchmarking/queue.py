"""The benchmark's shared queue of cells: an Optuna study on an RDB storage (SQLite or PostgreSQL).

Optuna's RDB storage is already a distributed work queue: ``study.enqueue_trial`` adds a WAITING
trial, and ``study.ask`` pops one by an atomic WAITING -> RUNNING update, so of two workers asking
at once exactly one gets it. Each cell of the grid is one enqueued trial whose user attribute
``cell`` is the cell id; a worker pops trials through ``study.optimize(n_trials=1)``, which also
keeps the trial's heartbeat while the cell runs. A worker killed mid-cell stops beating: after the
grace period its trial is marked FAIL and Optuna's retry callback (``RetryHeartbeatStaleTrialCallback``,
formerly ``RetryFailedTrialCallback``) enqueues the cell
again (a worker on the same host sees at once that the process named in the trial's ``worker``
attribute is gone, and does the same without waiting).

Exactly once. Workers starting together may both enqueue a cell; every cell is run by the
lowest-numbered of its trials that is WAITING, RUNNING or COMPLETE, and any other is closed as
PRUNED with user attribute ``duplicate``. A cell whose ``results.json`` exists is closed COMPLETE
without running (a rerun after the storage was lost, or a cell finished by ``biosig fit`` itself).
"""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

__all__ = ["OPEN", "claim_is_first", "enqueue_missing", "fail_dead_local", "open_study", "worker_id"]

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

#: trial states that hold a cell: being run, waiting to be, or done
OPEN = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
MAX_RETRY = 3
# Optuna >= 4.9 names the retry callback after heartbeats; older releases have only the first name
_RETRY = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
_RETRY_KWARG = ("heartbeat_stale_trial_callback" if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback")
                else "failed_trial_callback")


def worker_id() -> str:
    """``host:pid`` of this worker, kept on each trial it runs."""
    return f"{socket.gethostname()}:{os.getpid()}"


def default_storage(out: Path) -> str:
    """``sqlite:///DIR/benchmark.db``: the queue beside the runs when no ``--storage`` is given."""
    return f"sqlite:///{(Path(out) / 'benchmark.db').resolve()}"


def _real_url(url: str) -> str:
    """A plain ``postgresql://`` means psycopg2 when psycopg 3 is not installed (as ``biosig tune``)."""
    if url.startswith("postgresql://"):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def open_study(url: str, name: str, heartbeat: int = 10, grace: int = 60) -> optuna.Study:
    """The grid's queue study on ``url`` (created when missing), with heartbeats and retries."""
    kwargs: dict[str, Any] = {}
    real = _real_url(url)
    if real.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    try:
        kwargs[_RETRY_KWARG] = _RETRY(max_retry=MAX_RETRY)
        storage = RDBStorage(real, heartbeat_interval=heartbeat, grace_period=grace, **kwargs)
    except Exception as err:  # SQLAlchemy's errors: a bad URL, a server that does not answer, a missing driver
        shown = url.split("@")[-1] if "@" in url else url
        raise ValueError(f"cannot open benchmark storage {shown!r}: {str(err).splitlines()[0]}") from None
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_dead_local(study: optuna.Study) -> list[int]:
    """RUNNING trials of a worker on this host whose process is gone: FAIL, and their cell enqueued again."""
    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = str(t.user_attrs.get("worker", ""))
        w_host, _, pid = worker.rpartition(":")
        if w_host != host or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        storage = study._storage
        storage.set_trial_user_attr(t._trial_id, "error", f"worker {worker} died")
        if storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
            _RETRY(max_retry=MAX_RETRY)(study, storage.get_trial(t._trial_id))
            failed.append(t.number)
    return failed
