"""What a failed start or a killed cache build leaves behind: nothing that lasts."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.cli import main
from biosig_lightning.data.cache import load_or_build
from biosig_lightning.data.spec import CorpusSpec, WindowBlock
from tests.conftest import EXPERIMENTS, REPO

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def test_a_fit_that_fails_before_training_leaves_no_run_dir(in_tmp: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # a valid split setting that only the data can refute: the error comes from setup, after the
    # run directory was claimed and its config.yaml written
    with pytest.raises(SystemExit, match="loso fold 50 is out of range"):
        main(["fit", *DEMO, "--data.init_args.split", '{"strategy": "loso", "fold": 50}'])
    assert list(Path("runs/demo").glob("version_*")) == []
    # the next run still gets version_0, and a run that trained keeps its directory
    main(["fit", *DEMO])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "results: runs/demo/version_0/results.json"


SPEC = CorpusSpec(name="slow", ch_names=("C3", "C4"), sfreq=10.0, n_times=5, classes=("a", "b"))


class SlowReader:
    """Yields ``n`` recordings, sleeping ``delay`` seconds before each one after the first."""

    spec = SPEC

    def __init__(self, n: int = 3, delay: float = 0.0) -> None:
        self.n, self.delay = n, delay

    def config(self) -> dict:
        return {"reader": "slow", "n": self.n}

    def iter_blocks(self):
        for i in range(self.n):
            if i:
                time.sleep(self.delay)
            x = np.full((4, 2, 5), float(i), dtype=np.float32)
            yield WindowBlock(subject=i + 1, recording=f"r{i}", x=x,
                              y=np.array([0, 1, 0, 1]), start=np.arange(4.0))


BUILD = """
import sys
from tests.runs.test_debris import SlowReader
from biosig_lightning.data.cache import load_or_build
load_or_build(SlowReader(delay=60.0), sys.argv[1], progress=False)
"""

HOLD = """
import fcntl, sys, time
with open(sys.argv[1], "a+") as f:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(120)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_a_killed_cache_build_is_reclaimed_by_the_next_build(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(tmp_path)], env=_env())
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob(".tmp-slow-*/signals.bin")):  # the build has started writing
            assert proc.poll() is None and time.monotonic() < deadline, "the build never started"
            time.sleep(0.05)
        lock = next(tmp_path.glob(".slow-*.lock"))
        assert lock.read_text().split()[:2] == ["pid", str(proc.pid)]  # the lock says who builds
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (left,) = tmp_path.glob(".tmp-slow-*")  # the debris of the killed build
    cache = load_or_build(SlowReader(), tmp_path, progress=False)
    assert len(cache) == 12
    assert not left.exists() and list(tmp_path.glob(".tmp-*")) == []


def test_a_build_in_progress_keeps_its_tmp_dir_until_its_owner_is_gone(tmp_path: Path) -> None:
    # another configuration is being built by a live process: its lock is held, its folder stays
    other_lock = tmp_path / ".slow-otherkey.lock"
    other_tmp = tmp_path / ".tmp-slow-otherkey-abcd1234"
    other_tmp.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(other_lock)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        load_or_build(SlowReader(n=1), tmp_path, progress=False)
        assert other_tmp.is_dir()
    finally:
        holder.kill()
        holder.wait()
    with open(other_lock) as f:  # the holder is gone: its lock is free
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    load_or_build(SlowReader(n=2), tmp_path, progress=False)  # the next build of any key reclaims it
    assert not other_tmp.exists()


CLAIM = """
import importlib.util, sys, time
from pathlib import Path
# rundir alone, without the package's Lightning imports: the claim is all this process does
spec = importlib.util.spec_from_file_location("rundir", sys.argv[2])
rundir = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rundir)
n = rundir.claim_new_version(Path(sys.argv[1]))
(Path(sys.argv[1]) / f"version_{n}" / "config.yaml").write_text("seed_everything: 1\\n")
print(n, flush=True)
time.sleep(120)  # the window cache being built: a long time before the first epoch
"""


RUNDIR = str(REPO / "biosig_lightning" / "runs" / "rundir.py")


def test_a_run_killed_before_it_trained_is_removed_by_the_next_claim(tmp_path: Path) -> None:
    from biosig_lightning.runs.rundir import claim_new_version

    experiment = tmp_path / "demo"
    killed = subprocess.Popen([sys.executable, "-c", CLAIM, str(experiment), RUNDIR], stdout=subprocess.PIPE,
                              text=True,
                              env=_env())
    alive = None
    try:
        assert killed.stdout.readline().strip() == "0"
        alive = subprocess.Popen([sys.executable, "-c", CLAIM, str(experiment), RUNDIR],
                                 stdout=subprocess.PIPE, text=True,
                                 env=_env())
        assert alive.stdout.readline().strip() == "1"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        # the killed run's version_0 (config.yaml only) is gone; the live run's version_1 is kept
        assert claim_new_version(experiment) == 2
        assert sorted(p.name for p in experiment.glob("version_*")) == ["version_1", "version_2"]
    finally:
        for proc in (killed, alive):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
