"""A fit stopped by Ctrl-C or preempted: its run directory marked unfinished, and a last line that says how to
resume.

Lightning catches the ``KeyboardInterrupt`` of a fit, tells the callbacks (``on_exception``) and
exits with status 1. A preemption signal (SIGTERM from SLURM, Kubernetes or systemd; SIGHUP; SIGUSR1,
SLURM's ``--signal``, unless Lightning's SLURM auto-requeue plugin owns it) goes through Lightning's
own SIGTERM handling: the fit stops after the running batch with ``SIGTERMException``, which
Lightning would let end the process with status 0. :class:`InterruptMarker` then saves
``last.ckpt`` where the fit stopped (preemption only: a Ctrl-C keeps the last finished epoch's),
writes :data:`~biosig_lightning.runs.rundir.INTERRUPTED` into the run directory (the reason, the
epoch, the newest checkpoint and the command that resumes the run), so tools that list runs can
tell an interrupted run from a finished one; :func:`resume_line` is the line the command ends with
(:class:`Interrupted`, status 1).

Reading: a checkpoint saved inside an epoch resumes that epoch with the batches it had left;
Lightning warns that a plain DataLoader restarts its order (``training_epoch_loop.reset``).
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.runs.rundir import INTERRUPTED


def resume_command(argv: list[str]) -> str:
    """``biosig fit ... --ckpt_path last``: ``argv`` (from the subcommand on) with any ``--ckpt_path``
    replaced."""
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


class Interrupted(SystemExit):
    """The end of a fit stopped by Ctrl-C or preemption; its code is :func:`resume_line` (status 1)."""


#: signals that stop a fit as SIGTERM does, where no cluster plugin of Lightning handles them
EXTRA_SIGNALS = tuple(getattr(signal, n) for n in ("SIGHUP", "SIGUSR1") if hasattr(signal, n))


def _requeue_signal(trainer: Trainer) -> int | None:
    """The signal Lightning's SLURM plugin handles itself (``auto_requeue``), if it does."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = getattr(trainer.strategy, "cluster_environment", None)
    if isinstance(env, SLURMEnvironment) and env.auto_requeue:
        return env.requeue_signal
    return None


class InterruptMarker(Callback):
    """Marks the run directory of a fit stopped by Ctrl-C or preemption (rank zero only); ``marked`` is
    the directory marked, ``checkpoint`` the newest ``last*.ckpt`` there (``None``: nothing to resume)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.marked: Path | None = None
        self.checkpoint: Path | None = None
        self.epoch = 0
        self.interrupted = False
        self.reason = "interrupted (Ctrl-C)"
        self.signal_name = "SIGTERM"

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Name the preemption signal in the marker and let SIGHUP/SIGUSR1 stop the fit as SIGTERM does.

        Called after Lightning registered its SIGTERM handler (restored with every other handler at
        the end of the fit); the handlers here call it.
        """
        if not _main_thread():
            return
        own = _requeue_signal(trainer)
        lightning_sigterm = signal.getsignal(signal.SIGTERM)

        def preempted(signum: int, frame: FrameType | None) -> None:
            self.signal_name = signal.Signals(signum).name
            if callable(lightning_sigterm):
                lightning_sigterm(signal.SIGTERM, frame)

        for signum in (signal.SIGTERM, *EXTRA_SIGNALS):
            if signum != own:
                signal.signal(signum, preempted)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        preempted = isinstance(exception, SIGTERMException)
        if not (preempted or isinstance(exception, KeyboardInterrupt)):
            return
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)
        if preempted:
            self.reason = f"preempted ({self.signal_name})"
            _save_last(trainer, run_dir)  # every rank: saving is collective under DDP
        if not trainer.is_global_zero:
            return
        self.interrupted = True
        found = sorted((run_dir / "checkpoints").glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
        self.checkpoint = found[-1] if found else None
        self.epoch = int(trainer.current_epoch)
        if self.checkpoint is None and trainer.global_step == 0:
            return  # nothing trained: the directory is released, not marked
        atomic_write_json(run_dir / INTERRUPTED, {
            "reason": self.reason, "epoch": self.epoch, "global_step": int(trainer.global_step),
            "last_checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "resume": resume_command(self.argv) if self.checkpoint else None,
        })
        self.marked = run_dir


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _save_last(trainer: Trainer, run_dir: Path) -> None:
    """Save ``last.ckpt`` where a preempted fit stopped, unless it already holds this step."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    if trainer.state.fn != "fit" or trainer.global_step == 0:
        return  # testing after the fit holds the best weights, not the last; nothing trained yet
    last: Any = next(
        (
            cb
            for cb in trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint) and cb.monitor is None and cb.filename == "last"
        ),
        None,
    )
    if last is not None and last._last_global_step_saved == trainer.global_step:
        return
    path = Path(last.dirpath) if last is not None and last.dirpath else run_dir / "checkpoints"
    trainer.save_checkpoint(path / "last.ckpt")


def resume_line(marker: InterruptMarker, command: str = "fit") -> str:
    """The last line of an interrupted fit: where it stopped and how to go on."""
    if marker.marked is None or marker.checkpoint is None:
        where = f" ({marker.marked} is marked unfinished: {INTERRUPTED})" if marker.marked else ""
        return (f"biosig {command}: {marker.reason} before the first checkpoint{where}; nothing to resume: "
                f"start again with: {shlex.join(['biosig', *marker.argv])}")
    return (f"biosig {command}: {marker.reason} in epoch {marker.epoch}; {marker.marked} is marked "
            f"unfinished "
            f"({INTERRUPTED}); resume it with: {resume_command(marker.argv)}")


def unmark(run_dir: Path) -> None:
    """A run that finished is no longer interrupted."""
    (Path(run_dir) / INTERRUPTED).unlink(missing_ok=True)

