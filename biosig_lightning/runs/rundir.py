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
  saved config (``config.yaml``, ``hparams.yaml``) and empty folders.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from biosig_lightning.atomic_io import atomic_write_json

RESULTS = "results.json"
#: what a run that never trained leaves in its directory
CONFIG_ONLY = frozenset({"config.yaml", "hparams.yaml"})
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


def claim_new_version(experiment_dir: Path) -> int:
    """Create ``experiment_dir/version_N`` for the smallest free ``N`` after the existing ones, exclusively."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    n = max(_versions(experiment_dir), default=-1) + 1
    while True:
        try:
            os.mkdir(experiment_dir / f"version_{n}")
            return n
        except FileExistsError:
            n += 1


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
        return True
    except FileExistsError:
        return False


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
