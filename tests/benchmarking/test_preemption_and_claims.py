"""Many fits sharing a machine with a scheduler and with each other: a preempted fit is saved, marked
and resumed; a run directory another living process holds is neither shared nor removed."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from biosig_lightning.benchmarking.launch import forwarding_signals, launch, stop_signal
from biosig_lightning.benchmarking.runner import DONE, HELD, Job, run_job, run_jobs
from biosig_lightning.benchmarking.sweep import seed_jobs
from biosig_lightning.cli import main
from biosig_lightning.runs.rundir import INTERRUPTED, try_claim
from tests.conftest import EXPERIMENTS, REPO
from tests.helpers import csv_val_epochs

SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1", **extra}


def test_sigterm_during_a_fit_saves_and_marks_it_and_the_runner_resumes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, paused = tmp_path / "demo", tmp_path / "paused"
    # epoch 0 (2 batches) is checkpointed; epoch 1 pauses 2 s at its start, then trains on
    args = [*SMOKE, "--trainer.max_epochs=3", "--trainer.callbacks+=tests.helpers.PauseForKill",
            "--trainer.callbacks.init_args.seed=7", "--trainer.callbacks.init_args.seconds=2"]
    (job,) = seed_jobs(args, out, [7])  # the fit `biosig repeat --seeds 7 --out DIR` starts
    fit = subprocess.Popen([sys.executable, "-m", "biosig_lightning.cli", "fit", *job.args,
                            "--trainer.enable_progress_bar=false"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT,
                           text=True, env=_env(BIOSIG_TEST_PAUSE=str(paused)))
    deadline = time.monotonic() + 180
    while not paused.exists():
        assert fit.poll() is None and time.monotonic() < deadline, fit.communicate()[0][-3000:]
        time.sleep(0.1)
    fit.send_signal(signal.SIGTERM)  # as SLURM, Kubernetes or systemd send it
    text = fit.communicate(timeout=120)[0]
    run_dir, last = out / "seed_7", out / "seed_7" / "checkpoints" / "last.ckpt"
    assert fit.returncode == 1, text[-3000:]
    assert text.strip().splitlines()[-1].startswith(f"biosig fit: preempted (SIGTERM) in epoch 1; {run_dir} "
                                                    f"is "
                                                    "marked unfinished"), text[-3000:]
    assert not (run_dir / "results.json").exists()
    marker = json.loads((run_dir / INTERRUPTED).read_text())
    assert marker["reason"] == "preempted (SIGTERM)" and marker["last_checkpoint"] == str(last)
    # saved where the fit stopped: after epoch 1's first batch, not the end-of-epoch-0 checkpoint (step 2)
    assert marker["global_step"] == 3 and torch.load(last, weights_only=True)["global_step"] == 3
    # the runner treats it as unfinished: the rerun resumes it and it finishes, no longer marked
    capsys.readouterr()
    main(["repeat", *args, "--seeds", "7", "--out", str(out)])
    assert f"seed 7: resuming from {last} into {run_dir}" in capsys.readouterr().out
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 3
    assert not (run_dir / INTERRUPTED).exists()
    assert csv_val_epochs(run_dir / "metrics.csv") == [0, 1, 2]


CHILD = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(3)); print('up', "
    "flush=True); "
    "time.sleep(60)"
)


def test_the_runner_passes_a_preemption_signal_on_and_starts_nothing_after_it(in_tmp: Path) -> None:
    log = in_tmp / "child.log"
    codes: list[int] = []
    with forwarding_signals():
        worker = threading.Thread(target=lambda: codes.append(launch([sys.executable, "-c", CHILD], None,
                                                                     log.open("w"))))
        worker.start()
        while "up" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # to the runner alone
        worker.join(10)
        assert codes == [3] and stop_signal() == "SIGTERM"
        assert launch([sys.executable, "-c", "open('started', 'w')"], None) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and not Path("started").exists()


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from biosig_lightning.runs.rundir import try_claim
    run_dir = Path(sys.argv[1])
    claim = try_claim(run_dir)
    assert claim is not None
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    (run_dir / "results.json").write_text("{}")  # the fold it held is finished, then let go
    claim.release()
""")


def test_a_directory_held_by_another_process_is_neither_shared_nor_removed(tmp_path: Path) -> None:
    out = tmp_path / "cv"
    held = out / "fold_00"
    held.mkdir(parents=True)
    (held / "metrics.csv").write_text("epoch,step\n")  # being trained, no last.ckpt yet
    finished = out / "fold_01"
    finished.mkdir()
    (finished / "results.json").write_text("{}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(held), "1.5"], stdout=subprocess.PIPE,
                              text=True,
                              env=_env())
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    job = Job("fold 0", held, ("--never-run",), out / "fold_00.log")
    assert try_claim(held) is None
    said: list[str] = []
    assert run_job(job, say=said.append) == HELD and said == []  # not looked at, not launched
    assert (held / "metrics.csv").is_file()
    # a second runner on the same folder: goes on with the other fold, comes back to the held one
    outcome = run_jobs([job, Job("fold 1", finished, ("--never-run",), out / "fold_01.log")], say=said.append)
    holder.wait(timeout=30)
    assert outcome == {"fold 0": DONE, "fold 1": DONE}
    assert (
        said[0]
        == f"fold 0: {held} is held by another process ({os.uname().nodename}:{holder.pid}); taking it "
        "up when that process lets it go"
    )
    assert said[1:] == [f"fold 1: {finished / 'results.json'} exists, skipped",
                        f"fold 0: {held / 'results.json'} exists, skipped"]
    assert (held / "metrics.csv").is_file() and not (out / "fold_00.log").exists()


def test_cv_json_holds_every_fold_finished_under_the_folder_written_in_turn(tmp_path: Path) -> None:
    """Two ``biosig cv`` sharing ``--out`` with different ``--folds``: the one writing last keeps the
    other's folds, and neither writes while the other holds the folder's lock."""
    from biosig_lightning.commands.cv import write_summary

    out = tmp_path / "cv"

    def finished(k: int, f1: float) -> None:
        (out / f"fold_{k:02d}").mkdir(parents=True)
        (out / f"fold_{k:02d}" / "results.json").write_text(json.dumps({"metrics": {"test/f1": f1}}))

    finished(0, 0.5)  # by a process run with --folds 0
    (out / "fold_7").mkdir()  # not a fold directory biosig cv names
    (out / "fold_7" / "results.json").write_text(json.dumps({"metrics": {"test/f1": 0.0}}))
    other = os.open(out, os.O_RDONLY)
    fcntl.flock(other, fcntl.LOCK_EX)  # that process is writing its cv.json
    got: list[dict[str, object]] = []
    writer = threading.Thread(target=lambda: got.append(write_summary(out, [1, 2], ("test/f1",))))
    writer.start()
    time.sleep(0.3)
    assert not (out / "cv.json").exists()  # waits its turn
    finished(1, 0.7)  # finished while it waited: read after the lock is its
    os.close(other)
    writer.join(10)
    summary = json.loads((out / "cv.json").read_text())
    assert summary == got[0]
    assert summary["folds"] == {"0": {"test/f1": 0.5}, "1": {"test/f1": 0.7}} and summary["missing"] == [2]
    assert summary["n_folds"] == 2 and summary["test/f1"]["mean"] == pytest.approx(0.6)
