"""Checkpoints and ``metrics.csv`` rows written so that a full or read-only disk never leaves a torn file.

Lightning writes a checkpoint through fsspec's transaction, which stages it in the system's
temporary directory and then moves it across file systems onto the run directory: when the run's
disk fills during that copy, a truncated ``last.ckpt`` replaces the good one. Its CSV logger
appends rows in place, so a full disk tears the last row. Here both go through
:func:`~biosig_lightning.atomic_io.atomic_write_bytes` (a temporary file in the destination
directory, flushed, fsynced, renamed), and a write the disk refuses ends the run with one line
naming the directory and what was being written
(:class:`~biosig_lightning.atomic_io.StorageError`); the previous complete file stays in place.
"""

from __future__ import annotations

import csv
import io
import types
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from biosig_lightning.atomic_io import atomic_write_bytes, writing
from biosig_lightning.runs.checks import check_checkpoint_size

#: what a run that stopped on a full disk can do next
RESUME_ADVICE = ("the run stopped; the checkpoints already there are complete: free space and resume with "
                 "--ckpt_path last")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO, saving local checkpoints atomically in their own directory."""

    #: a checkpoint already in memory, ``(path, state)``: returned by the next load of that path
    preloaded: tuple[Path, dict[str, Any]] | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)  # remote storage: fsspec's own way
            return
        path = Path(path)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with writing(f"checkpoint {path.name}", path.parent, RESUME_ADVICE):
            atomic_write_bytes(path, buffer.getbuffer())


    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        """The checkpoint the command already read and checked (:attr:`preloaded`, handed over once), else
        the file read by Lightning after its size is checked (:func:`~.checks.check_checkpoint_size`)."""
        preloaded, self.preloaded = self.preloaded, None
        if (
            preloaded is not None
            and "://" not in str(path)
            and Path(path).resolve() == preloaded[0].resolve()
        ):
            return preloaded[1]
        if "://" not in str(path) and Path(path).is_file():
            check_checkpoint_size(Path(path))
        return super().load_checkpoint(path, *args, **kwargs)


def use_atomic_checkpoints(trainer: Trainer, preloaded: tuple[Path, dict[str, Any]] | None = None) -> None:
    """Give ``trainer`` :class:`AtomicCheckpointIO` unless the config chose a checkpoint IO of its own;
    ``preloaded`` (a ``--ckpt_path`` and its state, read by the command) is what its first load returns."""
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        trainer.strategy.checkpoint_io.preloaded = preloaded


def _save_rows(writer: Any) -> None:
    """Lightning's CSV writer's ``save``, as a rewrite of the whole file through a temporary file."""
    if not writer.metrics:
        return
    writer._record_new_keys()
    path = Path(writer.metrics_file_path)
    rows: list[dict[str, Any]] = []
    if path.is_file():
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    buffer = io.StringIO()
    out = csv.DictWriter(buffer, fieldnames=writer.metrics_keys)
    out.writeheader()
    out.writerows(rows + writer.metrics)
    with writing("metrics.csv rows", path.parent, RESUME_ADVICE):
        atomic_write_bytes(path, buffer.getvalue().encode())
    writer.metrics = []


def use_atomic_csv(trainer: Trainer) -> None:
    """Make every CSV logger of ``trainer`` write ``metrics.csv`` atomically (:func:`_save_rows`)."""
    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger):
            writer = logger.experiment
            writer.save = types.MethodType(_save_rows, writer)
