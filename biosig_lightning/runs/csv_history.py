"""Keep a resumed run's learning curves: the CSV rows logged before the checkpoint.

Lightning's ``CSVLogger`` deletes ``metrics.csv`` when it opens a run directory that already
holds one, so a fit resumed into its own directory (``biosig fit --ckpt_path last``, or
``biosig repeat`` picking up an interrupted seed) would keep only the epochs trained after the
restart, and ``biosig report``'s learning curves would start halfway. :func:`read_history`
takes the rows of the epochs the checkpoint already holds (``epoch <= checkpoint epoch``;
rows of the unfinished epoch are dropped, since the resumed fit logs that epoch again) before
the logger opens the directory, and :func:`restore_history` writes them back right after it
has, so the resumed fit appends to a complete file.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from lightning.pytorch.loggers import CSVLogger

from biosig_lightning.atomic_io import atomic_write_bytes


@dataclass(frozen=True)
class CsvHistory:
    """The rows of ``path`` that a resumed fit keeps, with their header."""

    path: Path
    fieldnames: list[str]
    rows: list[dict[str, str]]


def checkpoint_epoch(ckpt: Path) -> int | None:
    """The epoch a Lightning checkpoint was saved in (``None`` if the file does not say)."""
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file: keep every row, say why
        warnings.warn(f"{ckpt}: cannot read its epoch ({err}); the resumed run keeps all rows of metrics.csv",
                      stacklevel=2)
        return None
    epoch = state.get("epoch") if isinstance(state, dict) else None
    return int(epoch) if isinstance(epoch, int) else None


def read_history(metrics_csv: Path, ckpt: Path) -> CsvHistory | None:
    """Rows of ``metrics_csv`` up to ``ckpt``'s epoch, or ``None`` when there is no such file."""
    if not metrics_csv.is_file():
        return None
    with metrics_csv.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or [])
        rows = list(reader)
    last = checkpoint_epoch(ckpt)
    if last is not None:
        rows = [r for r in rows if (epoch := _epoch(r)) is None or epoch <= last]
    return CsvHistory(metrics_csv, fieldnames, rows)


def restore_history(logger: CSVLogger, history: CsvHistory) -> None:
    """Write ``history`` back after ``logger`` opened (and emptied) its directory.

    The writer's key list is set to the old header, so rows with the same keys are appended
    and a new key rewrites the file with the union header, as Lightning does for a fresh run.
    """
    with warnings.catch_warnings():
        # its "previous log files will be deleted" is what this function undoes
        warnings.filterwarnings("ignore", message="Experiment logs directory")
        writer = logger.experiment  # opening the writer is what deletes the old file
    keys = sorted(history.fieldnames)  # Lightning keeps its header sorted; appends must line up
    buf = io.StringIO()
    out = csv.DictWriter(buf, fieldnames=keys)
    out.writeheader()
    out.writerows(history.rows)
    atomic_write_bytes(Path(writer.metrics_file_path), buf.getvalue().encode())
    writer.metrics_keys = keys


def _epoch(row: dict[str, str]) -> float | None:
    try:
        value = float(row.get("epoch") or "nan")
    except ValueError:
        return None
    return None if math.isnan(value) else value
