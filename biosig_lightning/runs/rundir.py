"""Run directories that two runs never share, and that a failed start does not leave behind.

* **Claim.** A new run's directory ``<save_dir>/<name>/version_N`` is created by this process
  with ``os.mkdir`` (create-exclusive: of two processes trying the same ``N``, one gets
  ``FileExistsError`` and moves on to ``N + 1``) before any logger opens it; every file logger of
  the run (CSV, TensorBoard) is then pointed at that version, and wandb is named after it. Two
  ``biosig fit`` of one experiment started at once get two complete, separate directories.
  Under multi-process training only rank 0 claims; ranks launched from it inherit the claimed
  directory through ``BIOSIG_RUN_DIR``.
* **Finished runs are final.** A directory holding ``results.json`` is never trained into again:
  naming it (``--run.version``) or resuming it is refused with one line, and ``results.json`` is
  written create-exclusive (:func:`write_results_once`).
* **Debris.** A run that fails before training started (a bad split, a bad checkpoint, a corpus
  that cannot be read) removes the directory it claimed, as long as that holds nothing but the
  saved config (``config.yaml``, ``hparams.yaml``) and empty folders. A run killed before it
  trained (``kill -9`` during a cache build) cannot clean up after itself: the process that
  claims ``version_N`` holds an ``flock`` on ``.version_N.lock`` beside it (:func:`claim_lock`:
  outside the run directory, which Lightning's loggers expect empty) until its command ends, and
  the next claim in the same experiment removes every directory that never trained and whose lock
  nobody holds any more.
* **Unfinished runs.** A fit stopped by Ctrl-C or a preemption signal leaves :data:`INTERRUPTED`
  (JSON: reason, epoch, last checkpoint, the command that resumes it), removed when the run finishes.
* **Runner claims.** A command that runs many fits (``repeat``, ``cv``, ``benchmark``) takes
  :func:`try_claim` on each named directory before it looks at, resumes or removes it: an
  ``flock`` on ``.<name>.claim`` beside it, naming its holder, held until the fit ends.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any

from biosig_lightning.atomic_io import atomic_write_json

RESULTS = "results.json"
#: the marker of a run stopped by Ctrl-C before it finished
INTERRUPTED = "INTERRUPTED"
#: what a run that never trained leaves in its directory
CONFIG_ONLY = frozenset({"config.yaml", "hparams.yaml"})
_held_locks: dict[str, int] = {}  # the claim locks of this process (by directory), open until it exits
#: the environment variable through which launched ranks find the directory rank 0 claimed
CLAIMED_ENV = "BIOSIG_RUN_DIR"
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


class RunDirError(ValueError):
    """A run directory that cannot be used as asked (one line, names the path)."""


def is_finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds the ``results.json`` of a completed fit."""
    return (Path(run_dir) / RESULTS).is_file()


def is_rank_zero() -> bool:
    """Whether this process is the first (or only) one of its training job, from the launcher's variables."""
    for var in _RANK_VARIABLES:
        value = os.environ.get(var)
        if value not in (None, "") and value.strip() != "0":
            return False
    return True


def _versions(experiment_dir: Path) -> list[int]:
    found = []
    for child in experiment_dir.glob("version_*") if experiment_dir.is_dir() else []:
        match = re.fullmatch(r"version_(\d+)", child.name)
        if match:
            found.append(int(match.group(1)))
    return found


def claim_lock(run_dir: Path) -> Path:
    """The file whose ``flock`` says that the process which claimed ``run_dir`` still lives."""
    return run_dir.parent / f".{run_dir.name}.lock"


def hold_claim(run_dir: Path) -> None:
    """Take the :func:`claim_lock` of ``run_dir`` for the rest of this process's life."""
    fd = os.open(claim_lock(run_dir), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held_locks[str(run_dir)] = fd


def drop_claim(run_dir: Path) -> None:
    """Give up this process's claim lock on ``run_dir`` (the command is ending) and remove the lock file."""
    fd = _held_locks.pop(str(run_dir), None)
    if fd is not None:
        claim_lock(run_dir).unlink(missing_ok=True)
        os.close(fd)


def _owner_gone(run_dir: Path) -> bool:
    """Whether ``run_dir`` has a claim lock that no living process holds."""
    try:
        fd = os.open(claim_lock(run_dir), os.O_RDWR)
    except OSError:
        return False  # no lock: claimed by an older biosig, or by a process about to take it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock we may have taken
    return True


def is_held(run_dir: Path) -> bool:
    """Whether a living ``biosig fit`` holds the :func:`claim_lock` of ``run_dir`` (it created the
    directory)."""
    return claim_lock(run_dir).exists() and not _owner_gone(run_dir)


class Claim:
    """This process's exclusive hold on a named run directory (:func:`try_claim`); ``release()`` ends it."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir = run_dir
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            runner_lock(self.run_dir).unlink(
                missing_ok=True
            )  # before the unlock: a waiter re-checks the inode
            os.close(self._fd)
            self._fd = None


def runner_lock(run_dir: Path) -> Path:
    """The lock file of :func:`try_claim` (not :func:`claim_lock`, which the fit inside takes itself)."""
    return run_dir.parent / f".{run_dir.name}.claim"


def try_claim(run_dir: Path) -> Claim | None:
    """Claim ``run_dir`` for this process, or ``None`` when another living process holds it.

    The claim is an ``flock`` on :func:`runner_lock`: the kernel releases it when its holder dies, so
    a killed runner never leaves a directory claimed. The file names the holder (:func:`claim_holder`).
    """
    path = runner_lock(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else its holder released (and removed) it between our open and our lock: again
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()}:{os.getpid()}\n".encode())
            return Claim(run_dir, fd)
        os.close(fd)


def claim_holder(run_dir: Path) -> str:
    """``host:pid`` of the process holding :func:`try_claim` on ``run_dir`` (``?`` when it does not say)."""
    try:
        return runner_lock(run_dir).read_text().strip() or "?"
    except OSError:
        return "?"


def remove_dead_claims(experiment_dir: Path) -> list[Path]:
    """Remove the directories under ``experiment_dir`` that never trained and whose claiming process
    is gone (killed before training started); the removed paths."""
    removed = []
    for n in sorted(_versions(experiment_dir)):
        run_dir = experiment_dir / f"version_{n}"
        if not _owner_gone(run_dir):
            continue
        if never_trained(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(run_dir)
        claim_lock(run_dir).unlink(
            missing_ok=True
        )  # a killed run that trained keeps its directory, not its lock
    return removed


def claim_new_version(experiment_dir: Path) -> int:
    """Create ``experiment_dir/version_N`` for the smallest free ``N`` after the existing ones, exclusively
    (after removing the debris of runs killed before they trained: :func:`remove_dead_claims`)."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    remove_dead_claims(experiment_dir)
    n = max(_versions(experiment_dir), default=-1) + 1
    while True:
        try:
            os.mkdir(experiment_dir / f"version_{n}")
        except FileExistsError:
            n += 1
            continue
        hold_claim(experiment_dir / f"version_{n}")
        return n


def claim_named(run_dir: Path) -> bool:
    """Use the directory a run was told to use (``--run.version``); ``True`` when this call created it.

    A finished run (``results.json``) is refused; an unfinished one is used as it is (the
    resume of an interrupted ``biosig repeat`` seed, or a rerun of a run that died).
    """
    if is_finished(run_dir):
        raise RunDirError(f"{run_dir} is a finished run ({RESULTS} exists) and a finished run is never "
                          "overwritten: choose another --run.version, or drop it to start a new version_N")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(run_dir)
    except FileExistsError:
        return False
    hold_claim(run_dir)
    return True


def never_trained(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds nothing but the saved config files and empty folders."""
    for path in run_dir.rglob("*"):
        if path.is_file() or path.is_symlink():
            if path.parent != run_dir or path.name not in CONFIG_ONLY:
                return False
    return True


def release_if_unused(run_dir: Path) -> bool:
    """Remove a claimed ``run_dir`` in which no training happened; ``True`` if it was removed."""
    if run_dir.is_dir() and never_trained(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        drop_claim(run_dir)
        return True
    return False


def write_results_once(run_dir: Path, results: dict[str, Any]) -> Path:
    """Write ``run_dir/results.json`` atomically and create-exclusive: an existing one is never replaced.

    Should one exist (a second fit finishing in the same directory), this run's results are kept
    beside it as ``results.<n>.json`` and :class:`RunDirError` says where.
    """
    path = run_dir / RESULTS
    try:
        return atomic_write_json(path, results, exclusive=True)
    except FileExistsError:
        n = 1
        while (run_dir / f"results.{n}.json").exists():
            n += 1
        kept = atomic_write_json(run_dir / f"results.{n}.json", results)
        raise RunDirError(f"{path} exists (a finished run's results are never overwritten); "
                          f"this run's results are in {kept}") from None
