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
from typing import Any, Protocol, TypeVar

import numpy as np

from biosig_lightning.data.corpora.reading import reading
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
    with reading(path, "EDF/EDF+ file"):
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

    pyedflib opens the file (so its header checks and error messages apply); a 16-bit EDF or
    EDF+ file is then read in one pass as an array of data records (:func:`_read_records`),
    which gives pyedflib's ``readSignal`` values bit for bit; a BDF file, or a header that does
    not describe the file's bytes exactly, goes through ``readSignal`` signal by signal.
    """
    path = Path(path)
    reader = _open(path)
    try:
        labels = [str(lbl).strip() for lbl in reader.getSignalLabels()]
        for i in indices:
            fs = float(reader.getSampleFrequency(i))
            if abs(fs - expected_sfreq) > 1e-6:
                raise DataError(f"{path}: channel {labels[i]!r} is sampled at {fs:g} Hz, expected "
                                f"{expected_sfreq:g} Hz")
        with reading(path, "EDF/EDF+ file"):
            records = _read_records(path, reader, indices) if reader.filetype in (_EDF, _EDF_PLUS) else None
            out = records if records is not None else [reader.readSignal(i) for i in indices]
        for i, sig in zip(indices, out, strict=True):
            if not np.isfinite(sig).all():
                raise DataError(f"{path}: channel {labels[i]!r} contains NaN/Inf")
        out = [sig.astype(np.float32) for sig in out]
    finally:
        reader.close()
    lengths = {len(s) for s in out}
    if len(lengths) > 1:
        raise DataError(f"{path}: selected channels have different lengths {sorted(lengths)}")
    return np.stack(out) if out else np.zeros((0, 0), dtype=np.float32)


#: pyedflib's ``filetype`` codes (edflib) of the 16-bit formats: EDF and EDF+ (contiguous or not: like
#: ``readSignal``, the records are read end to end whatever their onsets)
_EDF, _EDF_PLUS = 0, 1


def _read_records(path: Path, reader: Any, indices: Sequence[int]) -> list[np.ndarray] | None:
    """Physical values of the signals at ``indices`` (pyedflib's numbering, annotation signals left
    out), read as one ``(records, samples per record)`` int16 array; None where the header does not
    describe exactly the file's bytes (pyedflib's per-signal reader is used then).

    EDF stores each data record as every signal's samples in turn (Kemp et al., 1992, "A simple
    format for exchange of digitized polygraphic recordings", the data record layout), little-endian
    16-bit two's complement; the physical value is ``bitvalue * (offset + digital)`` with
    ``bitvalue = (pmax - pmin) / (dmax - dmin)`` and ``offset = pmax / bitvalue - dmax``, the
    arithmetic of edflib (pyedflib's C reader), in the same order, so the float64 results are equal.
    """
    with open(path, "rb") as f:
        fixed = f.read(256)
        try:
            ns = int(fixed[252:256])
            n_records = int(fixed[236:244])
        except ValueError:
            return None
        head = f.read(256 * ns)
    if ns <= 0 or n_records <= 0 or len(head) != 256 * ns:
        return None

    def field(offset: int, width: int) -> list[str]:
        start = offset * ns
        return [
            head[start + k * width : start + (k + 1) * width].decode("ascii", "replace").strip()
            for k in range(ns)
        ]

    raw_labels = field(0, 16)
    try:
        pmin = [float(v) for v in field(104, 8)]
        pmax = [float(v) for v in field(112, 8)]
        dmin = [int(v) for v in field(120, 8)]
        dmax = [int(v) for v in field(128, 8)]
        per_record = [int(v) for v in field(216, 8)]
    except ValueError:
        return None
    # pyedflib numbers the ordinary signals only: the k-th of them is the k-th non-annotation signal
    ordinary = [k for k, lbl in enumerate(raw_labels) if lbl != "EDF Annotations"]
    if len(ordinary) != reader.signals_in_file:
        return None
    record_len = sum(per_record)
    data_bytes = 256 * (ns + 1)
    if path.stat().st_size != data_bytes + 2 * record_len * n_records:
        return None
    data = np.fromfile(path, dtype="<i2", offset=data_bytes).reshape(n_records, record_len)
    starts = np.cumsum([0, *per_record])
    out = []
    for i in indices:
        k = ordinary[i]
        if dmax[k] == dmin[k]:
            return None
        digital = data[:, starts[k]:starts[k + 1]].reshape(-1).astype(np.float64)
        bitvalue = (pmax[k] - pmin[k]) / (dmax[k] - dmin[k])
        offset = pmax[k] / bitvalue - dmax[k]
        out.append(bitvalue * (offset + digital))
    return out


def read_annotations(path: str | Path) -> tuple[datetime, list[Annotation]]:
    """The start time of ``path`` and its EDF+ annotations, sorted by onset."""
    path = Path(path)
    reader = _open(path)
    try:
        with reading(path, "EDF/EDF+ file"):
            start = reader.getStartdatetime()
            onsets, durations, texts = reader.readAnnotations()
    finally:
        reader.close()
    notes = [Annotation(float(o), float(d), str(t).strip()) for o, d,
             t in zip(onsets, durations, texts, strict=True)]
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
            what = (
                "a symbolic link that loops"
                if err.errno == errno.ELOOP
                else f"cannot read it ({err.strerror})"
            )
            raise DataError(f"{p}: {what}") from None
        rows.append(f"{p.relative_to(root).as_posix()}\t{st.st_size}\t{st.st_mtime_ns}")
    rows.sort()
    digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return {"n_files": len(rows), "sha256": digest}


class _OfSubject(Protocol):
    @property
    def subject(self) -> int: ...


_R = TypeVar("_R", bound=_OfSubject)


def recordings_of(recordings: Sequence[_R], subjects: Sequence[int] | None, corpus: str,
                  root: Path) -> tuple[list[int] | None, list[_R]]:
    """The sorted distinct ``subjects`` (``None``: all) and the ``recordings`` of those subjects.

    A selection that matches no recording is a :class:`DataError` naming the corpus, the subjects and
    ``root``, so a typo in ``subjects`` never reads as an empty corpus.
    """
    if subjects is None:
        return None, list(recordings)
    wanted = sorted({int(s) for s in subjects})
    kept = [r for r in recordings if r.subject in wanted]
    if not kept:
        raise DataError(f"{corpus}: none of subjects {wanted} has a recording in {root}")
    return wanted, kept
