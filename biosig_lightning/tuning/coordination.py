"""Trials shared by several workers: counting the slots, heartbeats, and failing the trials of dead workers.

Every trial carries a heartbeat (Optuna's ``RDBStorage(heartbeat_interval=..., grace_period=...)``):
its worker records one every :func:`heartbeat_interval` seconds, and a RUNNING trial whose last
heartbeat is older than ``--grace-period`` counts as stale. The interval follows from the grace
period, so that :data:`MISSED_BEATS` heartbeats in a row must be missed before a trial is stale
(at most :data:`MAX_HEARTBEAT_S` seconds apart, at least one second; a grace period too short for
that is refused).

A stale trial is failed only when its worker is really gone. Each trial records its worker
(``user_attrs["worker"] = "host:pid"``, and ``worker_start``, the process's start time from
``/proc``): on the worker's own host a trial whose process still runs is never failed, whatever
its heartbeat says (a worker stalled on a locked database, or stopped with SIGSTOP, is not dead);
one whose pid is gone, or now belongs to a process started later, is. A worker on another host
cannot be asked, so there the heartbeat alone decides.

Reading: Optuna fails stale trials itself at the start of every trial (``fail_stale_trials``
through the storage's ``_get_stale_trial_ids``), so the liveness check sits in the storage
(:class:`WorkerAwareStorage`), where both that path and :func:`fail_dead_trials` pass.
"""

from __future__ import annotations

import contextlib
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from biosig_lightning.tuning.errors import TuneError

HEARTBEAT_LOST = "heartbeat lost (worker died)"
#: heartbeats a trial must miss in a row before it counts as stale
MISSED_BEATS = 3
#: the longest time between two heartbeats of a trial
MAX_HEARTBEAT_S = 30


class TrialTakenOver(BaseException):  # noqa: N818 (not an error of the trial: it passes Optuna's handlers)
    """This worker's trial was failed by another worker while it ran: the trial ends here, untold.

    A ``BaseException``, so that Optuna's trial loop (which tells every ``Exception`` as FAIL, and
    cannot tell a trial that is already FAIL) lets it through to :func:`~.study.tune`.
    """

    def __init__(self, number: int, how: str, run_dir: str | None) -> None:
        super().__init__(f"trial {number} was failed by another worker while this worker ran it; it {how}, "
                         f"and "
                         f"its run stays in {run_dir or '(no run directory yet)'}")
        self.number, self.run_dir = number, run_dir


def heartbeat_interval(grace_period: int) -> int:
    """Seconds between a trial's heartbeats for ``--grace-period`` seconds: :data:`MISSED_BEATS` of them
    fit into the grace period, and at most :data:`MAX_HEARTBEAT_S`; a shorter grace period is refused."""
    if grace_period < MISSED_BEATS:
        raise TuneError(f"--grace-period must be at least {MISSED_BEATS} s, got {grace_period}: a trial "
                        f"counts as "
                        f"dead after {MISSED_BEATS} missed heartbeats, and heartbeats are at most one a "
                        f"second")
    return min(MAX_HEARTBEAT_S, grace_period // MISSED_BEATS)


def _process_start(pid: int) -> str | None:
    """Start time of process ``pid`` (clock ticks after boot, field 22 of ``/proc/<pid>/stat``); ``""``
    when it runs but ``/proc`` cannot say; ``None`` when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass  # someone else's process: it exists
    return ""


def worker_identity() -> dict[str, str]:
    """The user attributes that name this process as a trial's worker."""
    return {"worker": f"{socket.gethostname()}:{os.getpid()}",
            "worker_start": _process_start(os.getpid()) or ""}


def worker_alive(user_attrs: dict[str, Any]) -> bool | None:
    """Whether a trial's worker still runs: ``True``/``False`` for a worker on this host, ``None`` when
    this process cannot tell (another host, or no worker recorded yet)."""
    host, _, pid = str(user_attrs.get("worker") or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    start = _process_start(int(pid))
    if start is None:
        return False
    recorded = str(user_attrs.get("worker_start") or "")
    return not (recorded and start and recorded != start)  # a pid now used by a later process: gone


class WorkerAwareStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage, whose stale trials leave out those whose worker still runs on this host.

    With ``gone_is_stale=True`` a RUNNING trial whose worker on this host is gone counts as stale at
    once, without waiting for the grace period (``biosig benchmark`` hands such a cell to the next
    worker on the same machine right away).
    """

    def __init__(self, *args: Any, gone_is_stale: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gone_is_stale = gone_is_stale

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = [i for i in super()._get_stale_trial_ids(study_id)
                 if worker_alive(self.get_trial(i).user_attrs) is not True]
        if self.gone_is_stale:
            running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
            stale += [
                t._trial_id
                for t in running
                if t._trial_id not in stale and worker_alive(t.user_attrs) is False
            ]
        return stale


def count_slots(study: optuna.Study) -> tuple[int, list[int]]:
    """COMPLETE trials, and the numbers of the RUNNING ones."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    return (sum(t.state == TrialState.COMPLETE for t in trials),
            [t.number for t in trials if t.state == TrialState.RUNNING])


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Mark RUNNING trials without a heartbeat for the grace period, and no live worker, FAIL, with the
    error saying why; returns their trial ids."""
    storage = study._storage
    stale = getattr(storage, "_get_stale_trial_ids", None)
    ids = stale(study._study_id) if stale is not None else []
    for trial_id in ids:
        # while the trial is still RUNNING: a finished trial's attributes cannot change
        with contextlib.suppress(Exception):  # another worker failed it a moment ago
            storage.set_trial_user_attr(trial_id, "error", HEARTBEAT_LOST)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", optuna.exceptions.ExperimentalWarning
        )  # "fail_stale_trials is experimental"
        optuna.storages.fail_stale_trials(study)
    return ids
