"""EDF/EDF+ reading for the corpus readers, in one place (pyedflib).

Every EDF the readers touch goes through here, so one library (pyedflib: a thin C
reader, several times faster than building an ``mne.io.Raw``) decides how labels,
sampling rates, start times, signals and EDF+ annotations are read, and every failure
becomes one :class:`~biosig_lightning.data.spec.DataError` naming the file and, where it
applies, the channel. Signals come back in the file's physical units (µV for the EEG
corpora), as float32.

:func:`files_fingerprint` is the cheap "has the corpus changed?" digest every reader puts
in its ``config()`` (names, sizes and modification times; no file is read).
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.spec import DataError

__all__ = ["Annotation", "EdfHeader", "SkippedFile", "files_fingerprint", "read_annotations", "read_header",
           "read_signals"]


@dataclass(frozen=True)
class EdfHeader:
    """What an EDF header says about its signals.

    Attributes:
        path: the file.
        labels: signal labels, stripped of padding, in file order (duplicates kept).
        sfreqs: sampling rate of each signal, in Hz.
        n_samples: samples of each signal.
        start: recording start (date and time from the header).
        duration: recording length in seconds.
    """

    path: Path
    labels: tuple[str, ...]
    sfreqs: tuple[float, ...]
    n_samples: tuple[int, ...]
    start: datetime
    duration: float


@dataclass(frozen=True)
class Annotation:
    """One EDF+ annotation: ``onset`` seconds from the file's start, ``duration`` seconds, ``text``."""

    onset: float
    duration: float
    text: str


@dataclass(frozen=True)
class SkippedFile:
    """An EDF on disk that a reader leaves out, and why."""

    path: str
    reason: str


def _open(path: Path) -> Any:
    import pyedflib

    if not path.is_file():
        raise DataError(f"{path}: {'a symbolic link that loops' if _loops(path) else 'EDF file not found'}")
    try:
        with _c_stdout_silenced():
            return pyedflib.EdfReader(str(path))
    except OSError as err:  # pyedflib reports every unreadable header as OSError
        raise DataError(f"{path}: not a readable EDF/EDF+ file ({err})") from err


def _loops(path: Path) -> bool:
    """Whether ``path`` is a symbolic link to itself or into a cycle of links (ELOOP)."""
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


@contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """Silence what the EDF library's C code prints itself (``filesize 6202 != ...`` for a truncated
    file) while it opens a file: the error it raises is what we report, in one line."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (a closed stdout): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def read_header(path: str | Path) -> EdfHeader:
    """Read the header of ``path`` (no signal data)."""
    path = Path(path)
    reader = _open(path)
    try:
        n = reader.signals_in_file
        return EdfHeader(
            path=path,
            labels=tuple(str(lbl).strip() for lbl in reader.getSignalLabels()),
            sfreqs=tuple(float(reader.getSampleFrequency(i)) for i in range(n)),
            n_samples=tuple(int(v) for v in reader.getNSamples()[:n]),
            start=reader.getStartdatetime(),
            duration=float(reader.getFileDuration()),
        )
    finally:
        reader.close()


def read_signals(path: str | Path, indices: Sequence[int], expected_sfreq: float) -> np.ndarray:
    """Read the signals at ``indices`` of ``path`` as a ``(len(indices), n)`` float32 array.

    Each selected signal must be sampled at ``expected_sfreq`` and be finite; the error
    names the file and the channel otherwise. Signals of one rate have one length in EDF
    (the samples per data record times the records), so they stack without trimming.
    """
    path = Path(path)
    reader = _open(path)
    try:
        labels = [str(lbl).strip() for lbl in reader.getSignalLabels()]
        out: list[np.ndarray] = []
        for i in indices:
            fs = float(reader.getSampleFrequency(i))
            if abs(fs - expected_sfreq) > 1e-6:
                raise DataError(f"{path}: channel {labels[i]!r} is sampled at {fs:g} Hz, expected {expected_sfreq:g} Hz")
            sig = reader.readSignal(i)
            if not np.isfinite(sig).all():
                raise DataError(f"{path}: channel {labels[i]!r} contains NaN/Inf")
            out.append(sig.astype(np.float32))
    finally:
        reader.close()
    lengths = {len(s) for s in out}
    if len(lengths) > 1:
        raise DataError(f"{path}: selected channels have different lengths {sorted(lengths)}")
    return np.stack(out) if out else np.zeros((0, 0), dtype=np.float32)


def read_annotations(path: str | Path) -> tuple[datetime, list[Annotation]]:
    """The start time of ``path`` and its EDF+ annotations, sorted by onset."""
    path = Path(path)
    reader = _open(path)
    try:
        start = reader.getStartdatetime()
        onsets, durations, texts = reader.readAnnotations()
    finally:
        reader.close()
    notes = [Annotation(float(o), float(d), str(t).strip()) for o, d, t in zip(onsets, durations, texts, strict=True)]
    notes.sort(key=lambda a: a.onset)
    return start, notes


def files_fingerprint(paths: Iterable[str | Path], root: str | Path) -> dict[str, Any]:
    """Digest of the names (relative to ``root``), sizes and modification times of ``paths``.

    Cheap enough for tens of thousands of files, and it changes whenever a file is added,
    removed, replaced or touched, which is what a window cache key needs. A listed file
    that does not exist is a :class:`DataError` naming it.
    """
    root = Path(root)
    rows = []
    for p in paths:
        p = Path(p)
        try:
            st = os.stat(p)
        except FileNotFoundError as err:
            what = "a symbolic link to a missing file" if p.is_symlink() else "file not found"
            raise DataError(f"{p}: {what}") from err
        except OSError as err:  # ELOOP: a symbolic link to itself, or a cycle of links
            what = "a symbolic link that loops" if err.errno == errno.ELOOP else f"cannot read it ({err.strerror})"
            raise DataError(f"{p}: {what}") from None
        rows.append(f"{p.relative_to(root).as_posix()}\t{st.st_size}\t{st.st_mtime_ns}")
    rows.sort()
    digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return {"n_files": len(rows), "sha256": digest}
