"""Two benchmark workers, two processes, one SQLite queue: an enqueued cell is run by exactly one of them,
even when both read its WAITING row before either writes (``tests/benchmarking/queue_worker.py``).

The workers are forked from the test process, so they start with its imports (a fresh interpreter
spends seconds importing Lightning); each opens its own storage, as a separate ``biosig benchmark`` does."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from optuna.trial import TrialState

from biosig_lightning.benchmarking.queue import enqueue_missing, open_study, trials_by_cell
from tests.benchmarking import queue_worker


def test_two_sqlite_workers_racing_for_one_cell_run_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'benchmark.db'}"
    study = open_study(url, "race", grace=60)
    assert enqueue_missing(study, ["corpus/method/seed_1"]) == ["corpus/method/seed_1"]
    meet = tmp_path / "meet"
    meet.mkdir()
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=queue_worker.main,
                            args=(url, "race", str(meet), name)) for name in ("w1", "w2")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]
    assert len(list(meet.glob("read-*"))) >= 1  # the forced wait was reached
    got = sorted((meet / f"got-{name}").read_text() for name in ("w1", "w2"))
    assert got == ["None", "corpus/method/seed_1"]  # the other worker got a fresh trial, not the cell
    held = trials_by_cell(open_study(url, "race", grace=60))
    assert [t.state for t in held["corpus/method/seed_1"]] == [TrialState.COMPLETE]
