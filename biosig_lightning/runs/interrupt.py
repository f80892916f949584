"""A fit stopped by Ctrl-C: its run directory marked unfinished, and a last line that says how to resume.

Lightning catches the ``KeyboardInterrupt`` of a fit, tells the callbacks (``on_exception``) and
exits with status 1. :class:`InterruptMarker` writes
:data:`~biosig_lightning.runs.rundir.INTERRUPTED` into the run directory at that moment (the
epoch, the newest checkpoint and the command that resumes the run), so tools that list runs can
tell an interrupted run from a finished one; :func:`resume_line` is the line the command ends with.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer

from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.runs.rundir import INTERRUPTED


def resume_command(argv: list[str]) -> str:
    """``biosig fit ... --ckpt_path last``: ``argv`` (from the subcommand on) with any ``--ckpt_path`` replaced."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--ckpt_path":
            skip = True
            continue
        if arg.startswith("--ckpt_path="):
            continue
        kept.append(arg)
    return shlex.join(["biosig", *kept, "--ckpt_path", "last"])


class InterruptMarker(Callback):
    """Marks the run directory of a fit interrupted by Ctrl-C (rank zero only); ``marked`` is the
    directory marked, ``checkpoint`` the newest ``last*.ckpt`` there (``None``: nothing to resume)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.marked: Path | None = None
        self.checkpoint: Path | None = None
        self.epoch = 0
        self.interrupted = False

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, KeyboardInterrupt) or not trainer.is_global_zero:
            return
        self.interrupted = True
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)
        found = sorted((run_dir / "checkpoints").glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
        self.checkpoint = found[-1] if found else None
        self.epoch = int(trainer.current_epoch)
        if self.checkpoint is None and trainer.global_step == 0:
            return  # nothing trained: the directory is released, not marked
        atomic_write_json(run_dir / INTERRUPTED, {
            "reason": "interrupted (Ctrl-C)", "epoch": self.epoch, "global_step": int(trainer.global_step),
            "last_checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "resume": resume_command(self.argv) if self.checkpoint else None,
        })
        self.marked = run_dir


def resume_line(marker: InterruptMarker, command: str = "fit") -> str:
    """The last line of an interrupted fit: where it stopped and how to go on."""
    if marker.marked is None or marker.checkpoint is None:
        where = f" ({marker.marked} is marked unfinished: {INTERRUPTED})" if marker.marked else ""
        return (f"biosig {command}: interrupted (Ctrl-C) before the first checkpoint{where}; nothing to resume: "
                f"start again with: {shlex.join(['biosig', *marker.argv])}")
    return (f"biosig {command}: interrupted (Ctrl-C) in epoch {marker.epoch}; {marker.marked} is marked unfinished "
            f"({INTERRUPTED}); resume it with: {resume_command(marker.argv)}")


def unmark(run_dir: Path) -> None:
    """A run that finished is no longer interrupted."""
    (Path(run_dir) / INTERRUPTED).unlink(missing_ok=True)

