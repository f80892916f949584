"""Resuming a run in its own directory: which checkpoint ``--ckpt_path last`` means, and which rows
of its ``metrics.csv`` the resumed fit keeps (:mod:`biosig_lightning.runs.csv_history`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.runs.csv_history import CsvHistory, read_history
from biosig_lightning.runs.placement import csv_logger
from biosig_lightning.runs.rundir import RunDirError, claim_lock, is_finished, is_held


def history_to_keep(logger_cfgs: list[Any], ckpt_path: Any) -> CsvHistory | None:
    """The CSV rows a fit resumed from ``ckpt_path`` into an existing run directory must keep."""
    if not ckpt_path or not Path(str(ckpt_path)).is_file():
        return None  # a fresh run, or one of Lightning's named checkpoints ("best", "hpc", ...)
    csv = csv_logger(logger_cfgs)
    version = csv.init_args.get("version") if csv is not None else None
    if version is None:
        return None  # a new version directory: nothing there to lose
    assert csv is not None  # the version came from it
    version = version if isinstance(version, str) else f"version_{version}"
    run_dir = Path(csv.init_args.get("save_dir") or "runs") / str(csv.init_args.get("name") or "") / version
    return read_history(run_dir / "metrics.csv", Path(str(ckpt_path)))


def latest_last_checkpoint(experiment_dir: Path) -> tuple[Path, Path] | None:
    """``(run directory, checkpoint)`` of the newest ``last*.ckpt`` of an unfinished run under
    ``experiment_dir/version_*/``; ``None`` when there is no ``last*.ckpt`` at all.

    Finished runs (``results.json``) are never resumed: when every run with a ``last.ckpt`` has
    finished, :class:`~biosig_lightning.runs.rundir.RunDirError` says so.
    """
    candidates = sorted(experiment_dir.glob("version_*/checkpoints/last*.ckpt"),
                        key=lambda p: p.stat().st_mtime)
    if not candidates:
        return None
    unfinished = [c for c in candidates if not is_finished(c.parent.parent)]
    if not unfinished:
        raise RunDirError(f"--ckpt_path last: every run under {experiment_dir} with a last.ckpt has finished "
                          f"(newest: {candidates[-1].parent.parent}); a finished run is never resumed: drop "
                          "--ckpt_path to start a new run")
    ckpt = unfinished[-1]
    return ckpt.parent.parent, ckpt


def resume_plan(run_dir: Path) -> tuple[str, Path | None]:
    """What a rerun does with a named run directory (``biosig repeat``'s seeds, ``biosig cv``'s folds,
    ``biosig benchmark``'s cells): ``("finished", None)`` when it holds ``results.json`` (skip it);
    ``("resume", last.ckpt)`` when it stopped after a checkpoint (killed, Ctrl-C, or preempted:
    :data:`~biosig_lightning.runs.rundir.INTERRUPTED`); ``("fresh", None)`` otherwise, an interrupted
    directory without a checkpoint being removed first (it died in its first epoch).

    The caller holds the directory's :func:`~biosig_lightning.runs.rundir.try_claim`; a directory
    whose own ``biosig fit`` still lives (it holds :func:`~biosig_lightning.runs.rundir.claim_lock`)
    is neither resumed nor removed: :class:`~biosig_lightning.runs.rundir.RunDirError` names it.
    """
    if is_finished(run_dir):
        return "finished", None
    if is_held(run_dir):
        raise RunDirError(f"{run_dir} is being trained by a living biosig fit (it holds "
                          f"{claim_lock(run_dir)}); "
                          "neither resumed nor removed: wait for it to end")
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.is_file():
        return "resume", last
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    return "fresh", None
