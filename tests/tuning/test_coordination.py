"""Workers of one study: the heartbeat fits the grace period, only dead workers' trials are failed, and a
worker whose trial another worker failed ends cleanly with its trial directory kept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from lightning.pytorch import Callback, LightningModule, Trainer
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import TrialState

from biosig_lightning.cli import main
from biosig_lightning.tuning.coordination import HEARTBEAT_LOST, fail_dead_trials, worker_identity
from biosig_lightning.tuning.pruning import OptunaPruning
from biosig_lightning.tuning.storage import open_storage
from tests.commands.test_tune import _tune_args


def test_a_grace_period_shorter_than_the_heartbeat_needs_is_refused(in_tmp: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "g", 1, "--grace-period", "2"))
    msg = str(err.value)
    assert "--grace-period must be at least 3 s, got 2" in msg and "\n" not in msg
    assert not (in_tmp / "g.db").exists()  # refused before any study exists


@pytest.mark.parametrize("grace,interval", [(5, 1), (60, 20), (3600, 30)])
def test_the_heartbeat_fits_three_times_into_the_grace_period(in_tmp: Path,
                                                              grace: int, interval: int) -> None:
    assert open_storage("sqlite:///h.db", grace=grace).heartbeat_interval == interval


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_trials_of_gone_workers_are_failed(in_tmp: Path) -> None:
    url = "sqlite:///w.db"
    storage = open_storage(url, grace=3)
    study = optuna.create_study(study_name="w", storage=storage, direction="maximize")
    here = socket.gethostname()
    workers = {
        # a worker on another host, alive: its heartbeat thread runs at the interval grace 3 s needs
        "remote_alive": {"worker": "elsewhere:1"},
        # this very process: alive whatever its heartbeat says (stalled on a database lock, say)
        "local_alive": worker_identity(),
        "local_dead": {"worker": f"{here}:{_dead_pid()}"},
        # this process's pid, but recorded with another start time: the pid now belongs to a later process
        "pid_reused": {"worker": f"{here}:{os.getpid()}", "worker_start": "1"},
    }
    trials = {}
    for name, attrs in workers.items():
        trial = study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        storage.record_heartbeat(trial._trial_id)
        trials[name] = trial._trial_id
    with get_heartbeat_thread(trials["remote_alive"], storage):
        time.sleep(4.5)  # beyond the grace period: every trial without fresh heartbeats is stale
        other = optuna.load_study(study_name="w", storage=open_storage(url, grace=3))  # another worker
        failed = fail_dead_trials(other)
    assert sorted(failed) == sorted([trials["local_dead"], trials["pid_reused"]])
    states = {name: storage.get_trial(i).state for name, i in trials.items()}
    assert states == {"remote_alive": TrialState.RUNNING, "local_alive": TrialState.RUNNING,
                      "local_dead": TrialState.FAIL, "pid_reused": TrialState.FAIL}


@pytest.mark.parametrize("gone_is_stale", [False, True])
def test_a_gone_local_worker_fails_at_once_when_asked(in_tmp: Path, gone_is_stale: bool) -> None:
    # biosig benchmark's queue hands a killed worker's cell on without waiting for the grace period, and
    # sends the trial to the storage's stale-trial callback (Optuna's retry, which enqueues it again)
    retried: list[int] = []
    storage = open_storage("sqlite:///g.db", grace=60, gone_is_stale=gone_is_stale,
                           stale_callback=lambda study, trial: retried.append(trial.number))
    study = optuna.create_study(study_name="g", storage=storage, direction="maximize")
    alive, gone = study.ask(), study.ask()
    for trial, attrs in ((alive, worker_identity()),
                         (gone, {"worker": f"{socket.gethostname()}:{_dead_pid()}"})):
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        storage.record_heartbeat(trial._trial_id)
    failed = fail_dead_trials(study)  # well within the grace period
    assert failed == ([gone._trial_id] if gone_is_stale else [])
    assert retried == ([gone.number] if gone_is_stale else [])
    assert storage.get_trial(alive._trial_id).state == TrialState.RUNNING


class FailTrialZero(Callback):
    """Plays another worker that judged trial 0 dead: marks it FAIL (as ``fail_dead_trials`` does) once it
    trains."""

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pruning = next(cb for cb in trainer.callbacks if isinstance(cb, OptunaPruning))
        storage = open_storage(pruning.storage_url)
        if storage.get_trial(pruning._trial_id).number == 0:
            storage.set_trial_user_attr(pruning._trial_id, "error", HEARTBEAT_LOST)
            storage.set_trial_state_values(pruning._trial_id, TrialState.FAIL)


def test_a_worker_whose_trial_another_failed_ends_it_cleanly(in_tmp: Path,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    main(_tune_args(in_tmp, "t", 1, "--trainer.callbacks+=tests.tuning.test_coordination.FailTrialZero"))
    out, err = capfd.readouterr()
    trials = optuna.load_study(study_name="t", storage="sqlite:///t.db").trials
    assert {t.number: t.state for t in trials} == {0: TrialState.FAIL, 1: TrialState.COMPLETE}
    run_dir = in_tmp / trials[0].user_attrs["run_dir"]
    assert (
        f"tune: trial 0 was failed by another worker while this worker ran it; it stopped after epoch 0, "
        f"and its run stays in {trials[0].user_attrs['run_dir']}" in out
    )
    assert "Traceback" not in err and "Cannot tell" not in err + out
    # the trial's run is kept as it was: its log and the checkpoint of the epoch it finished
    assert (run_dir / "metrics.csv").is_file() and list((run_dir / "checkpoints").glob("last*.ckpt"))
    # ... marked as a trial's run, so `biosig report` does not offer to resume it as an interrupted fit
    assert json.loads((run_dir / "tune_trial.json").read_text()) == {"study": "t", "trial": 0}
