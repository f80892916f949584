"""One benchmark-queue worker for the two-process race test: :func:`main` (run in its own process) pops
one trial the way the runner does (``study.optimize(n_trials=1)`` on the study
:func:`~biosig_lightning.benchmarking.queue.open_study` opens) and writes the cell it got.

The race is forced, not hoped for: once this worker has read the enqueued trial's row, it waits (1 s at
most) until the other worker has read it too. When every transaction holds SQLite's write lock from
its start the other worker cannot read until this one has committed, so the wait times out and one
worker gets the cell; without the lock both read WAITING and both take the cell (or one of them fails
on the lock).
"""

from __future__ import annotations

import time
from pathlib import Path

from optuna.storages._rdb import models

from biosig_lightning.benchmarking.queue import open_study


def _arrive_and_wait(folder: Path, me: str, what: str, timeout: float) -> None:
    (folder / f"{what}-{me}").touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.glob(f"{what}-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)


def main(url: str, name: str, rendezvous: str, me: str) -> None:
    """Pop one trial; write ``got-<me>`` in ``rendezvous`` holding its cell (``None`` for a fresh trial)."""
    folder = Path(rendezvous)
    study = open_study(url, name, grace=60)
    find = models.TrialModel.find_or_raise_by_id
    first = []

    def find_then_wait(*args: object, **kwargs: object) -> models.TrialModel:
        row = find(*args, **kwargs)
        if not first:
            first.append(True)
            _arrive_and_wait(folder, me, "read", timeout=1.0)
        return row

    models.TrialModel.find_or_raise_by_id = staticmethod(find_then_wait)
    got = []
    _arrive_and_wait(folder, me, "ready", timeout=60.0)  # both workers start asking together
    study.optimize(lambda trial: got.append(trial.user_attrs.get("cell")) or 0.0, n_trials=1)
    (folder / f"got-{me}").write_text(str(got[0]))
