"""Two workers popping the same enqueued trial from one SQLite file at once: exactly one gets it (the
benchmark queue's storage serialises its transactions; without that, both got it)."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
from optuna.storages._rdb import models
from optuna.trial import TrialState

from biosig_lightning.tuning.storage import open_storage


def test_an_enqueued_trial_is_popped_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    study = optuna.create_study(study_name="q", storage=open_storage(url, grace=60, atomic_sqlite=True))
    study.enqueue_trial({})
    trial_id = study.get_trials(deepcopy=False)[0]._trial_id
    # each worker's storage, as two processes have; both read the trial, then both try to take it
    stores = [open_storage(url, grace=60, atomic_sqlite=True) for _ in range(2)]
    both_read = threading.Barrier(2, timeout=1.0)
    find = models.TrialModel.find_or_raise_by_id

    def find_then_wait(*args: object, **kwargs: object) -> models.TrialModel:
        row = find(*args, **kwargs)
        try:
            both_read.wait()  # serialised: the other worker waits for the lock, so this times out
        except threading.BrokenBarrierError:
            pass
        return row

    monkeypatch.setattr(models.TrialModel, "find_or_raise_by_id", staticmethod(find_then_wait))
    took: list[bool] = []
    workers = [
        threading.Thread(
            target=lambda s=s: took.append(s.set_trial_state_values(trial_id, TrialState.RUNNING))
        )
        for s in stores
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert sorted(took) == [False, True]
