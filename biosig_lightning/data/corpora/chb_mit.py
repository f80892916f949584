"""CHB-MIT Scalp EEG (PhysioNet ``chbmit``): windows labelled seizure / background.

Layout (PhysioNet ``chbmit/1.0.0``)::

    chbNN/chbNN_MM.edf          one recording, 256 Hz, bipolar channels ("FP1-F7", ...)
    chbNN/chbNN-summary.txt     per file: seizure start/end seconds, montage changes

The summary is parsed line by line (:func:`parse_summary`); every line must be one of
the known kinds, so a typo fails loudly with the file and line number rather than
silently losing a seizure. Both seizure spellings are accepted ("Seizure Start Time: X
seconds" and "Seizure 2 Start Time: X seconds"), and "Channels changed:" blocks assign
the new channel list to the files that follow (kept as :attr:`SummaryEntry.channels`,
for reference; the EDF header is what the reader trusts).

**Channels.** SD-Former uses 23 CHB-MIT channels (paper Table 1), which is the
"double banana" every standard CHB-MIT file carries: the 18 common bipolar derivations
(:data:`CHANNELS_18`, the montage most seizure papers and the STDRO proposal use) plus
P7-T7, T7-FT9, FT9-FT10, FT10-T8 and a second T8-P8 (:data:`CHANNELS_23`). EDF files
label that 23rd channel ``T8-P8`` again (MNE renames the pair ``T8-P8-0`` and
``T8-P8-1``), so a name ``X-Y-k`` here means the ``k``-th (0-based) signal labelled
``X-Y`` in the file; labels already carrying such a suffix are understood the same way.
Matching ignores case. A file lacking any selected channel (chb12's referential files,
for instance) is left out: it is listed in :attr:`CHBMIT.skipped` and in one warning.
So is an EDF the summary does not list (its seizures would be unknown).

**Windows.** ``window_seconds`` (2) long, every ``stride_seconds`` (default: the window,
so non-overlapping), from the file start; the tail shorter than a window is dropped.
A window is labelled 1 (seizure) when it overlaps a seizure interval ``[start, end)``
for a positive length. Files with no seizure count too (all windows 0). Subject id =
``NN``; chb01 and chb21 are the same child recorded 1.5 years apart, so
:data:`SUBJECT_GROUPS` tells the splitter to keep them together.

**Keeping it manageable.** The full corpus is ~980 h, about 1.8 M two-second windows
(~80 GB as 23-channel float32). ``max_files_per_subject`` keeps, per subject, the files
with seizures first, then seizure-free ones, in name order, up to the cap.
``background_ratio`` keeps, per subject, every seizure window and at most
``ceil(ratio x seizure windows)`` background windows, evenly spaced over the subject's
background windows in time order (deterministic, so the cache key stays honest); a
subject without seizure windows then keeps none. ``resample_to`` resamples with a
polyphase filter (``scipy.signal.resample_poly``), e.g. 64 Hz for the STDRO protocol.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.edf import SkippedFile, files_fingerprint, read_header, read_signals
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CHANNELS_18", "CHANNELS_23", "CHBMIT", "SUBJECT_GROUPS", "SYNTHETIC_DEFAULTS", "SkippedFile",
           "SummaryEntry", "parse_summary"]

READER_VERSION = 1
SFREQ = 256.0
CLASSES = ("background", "seizure")
CHANNELS_18 = ("FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP1-F3", "F3-C3", "C3-P3", "P3-O1", "FP2-F4", "F4-C4",
               "C4-P4", "P4-O2", "FP2-F8", "F8-T8", "T8-P8", "P8-O2", "FZ-CZ", "CZ-PZ")
CHANNELS_23 = CHANNELS_18 + ("P7-T7", "T7-FT9", "FT9-FT10", "FT10-T8", "T8-P8-1")
MONTAGES = {"18": CHANNELS_18, "23": CHANNELS_23}
#: subjects that are one child (chb21 is chb01 recorded 1.5 years later)
SUBJECT_GROUPS = [[1, 21]]
EDF_PATTERN = "chbNN/chbNN_MM.edf with chbNN/chbNN-summary.txt"

#: options of the synthetic stand-in with this corpus's shape (``SyntheticReader``)
# : ``kind``: evolving, spreading ictal rhythms among eye and muscle artifacts
# (``data/synthetic_seizure.py``), as
#: STDRO's CHB-MIT stand-in; spike-and-wave bursts (``spikes``) were read off theta band power alone, so every
#: method tied at AUROC 1 on held-out subjects
# : ``coupling_edges``: a planted directed graph on the channels, the truth ``biosig graphs`` scores
# SD-Former's
#: learned graph against (``data/synthetic_coupling.py``)
SYNTHETIC_DEFAULTS: dict[str, Any] = {"kind": "seizure", "n_subjects": 6, "windows_per_subject": 120,
                                      "coupling_edges": 11}

_SUBJECT_DIR = re.compile(r"^chb(\d{2})$")
_EDF = re.compile(r"^chb(\d{2})[a-z]?_\d+[a-z]?\+?\.edf$", re.IGNORECASE)
_SUFFIXED = re.compile(r"^(.+-.+)-(\d+)$")
_LINES: dict[str, re.Pattern[str]] = {
    "rate": re.compile(r"^Data Sampling Rate\s*:\s*([\d.]+)\s*Hz$", re.I),
    "channels": re.compile(r"^Channels (?:in EDF Files|changed)\s*:?$", re.I),
    "channel": re.compile(r"^Channel\s+(\d+)\s*:\s*(.*)$", re.I),
    "file": re.compile(r"^File Name\s*:\s*(\S+)$", re.I),
    "time": re.compile(r"^File (?:Start|End) Time\s*:\s*\d{1,2}:\d{2}:\d{2}$", re.I),
    "count": re.compile(r"^Number of Seizures in File\s*:\s*(\d+)$", re.I),
    "seizure": re.compile(r"^Seizure(?:\s*(\d+))?\s+(Start|End) Time\s*:\s*([\d.]+)\s*seconds?$", re.I),
    "rule": re.compile(r"^\*+$"),
}


@dataclass
class SummaryEntry:
    """One "File Name:" entry of a ``chbNN-summary.txt``.

    Attributes:
        name: the EDF file name.
        line: line of the "File Name:" entry (for error messages).
        n_declared: the "Number of Seizures in File" value.
        seizures: ``(start, end)`` seconds from the file start.
        channels: the channel list in force for this file ("Channels in EDF Files" or the
            last "Channels changed" block before it); ``None`` if the summary gives none.
    """

    name: str
    line: int
    n_declared: int | None = None
    seizures: list[tuple[float, float]] | None = None
    channels: tuple[str, ...] | None = None


def parse_summary(path: str | Path) -> dict[str, SummaryEntry]:
    """Parse a ``chbNN-summary.txt`` into its file entries, in file order.

    Raises :class:`DataError` naming the file and line for an unknown line, a seizure
    time outside a file entry, an end without a start (or the reverse), ``end <= start``,
    a repeated file name, or a seizure count that disagrees with the listed seizures.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise DataError(f"{path}: cannot read the summary ({err})") from err
    entries: dict[str, SummaryEntry] = {}
    current: SummaryEntry | None = None
    channels: list[str] | None = None  # the block being read
    in_force: tuple[str, ...] | None = None
    open_start: float | None = None
    open_line = 0

    def close_entry(entry: SummaryEntry | None) -> None:
        if entry is None:
            return
        if open_start is not None:
            raise DataError(f"{path}:{open_line}: seizure start of {entry.name} has no end time")
        n = len(entry.seizures or [])
        declared = entry.n_declared
        if declared is None:
            raise DataError(f"{path}:{entry.line}: {entry.name} has no 'Number of Seizures in File' line")
        if declared != n:
            raise DataError(f"{path}:{entry.line}: {entry.name} declares {declared} seizures but lists {n}")

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        kind, m = next(((k, p.match(line)) for k, p in _LINES.items() if p.match(line)), (None, None))
        if kind is None or m is None:
            raise DataError(f"{path}:{lineno}: cannot parse summary line {line!r}")
        if kind == "rule":  # "****" underlines, also between a block title and its channels
            continue
        if kind == "channels":
            channels = []
            continue
        if kind == "channel":
            if channels is None:
                raise DataError(f"{path}:{lineno}: channel line {line!r} outside a 'Channels' block")
            channels.append(m.group(2).strip())
            in_force = tuple(channels)
            continue
        channels = None
        if kind == "file":
            close_entry(current)
            name = m.group(1)
            if name in entries:
                raise DataError(f"{path}:{lineno}: {name} is listed twice (first at line "
                                f"{entries[name].line})")
            current = SummaryEntry(name=name, line=lineno, seizures=[], channels=in_force)
            entries[name] = current
        elif kind in ("time", "count", "seizure"):
            if current is None:
                raise DataError(f"{path}:{lineno}: {line!r} before any 'File Name:' line")
            if kind == "count":
                current.n_declared = int(m.group(1))
            elif kind == "seizure":
                value = float(m.group(3))
                if m.group(2).lower() == "start":
                    if open_start is not None:
                        raise DataError(f"{path}:{lineno}: seizure start without an end for the previous "
                                        f"seizure of {current.name}")
                    open_start, open_line = value, lineno
                else:
                    if open_start is None:
                        raise DataError(f"{path}:{lineno}: seizure end time without a start time "
                                        f"({current.name})")
                    if value <= open_start:
                        raise DataError(f"{path}:{lineno}: seizure of {current.name} ends at {value:g} s, "
                                        f"not after its start {open_start:g} s")
                    assert current.seizures is not None
                    current.seizures.append((open_start, value))
                    open_start = None
    close_entry(current)
    return entries


def _label_key(label: str) -> tuple[str, int | None]:
    """``'T8-P8-1'`` -> ``('T8-P8', 1)``; ``'FP1-F7'`` -> ``('FP1-F7', None)`` (case folded)."""
    label = label.strip().upper()
    m = _SUFFIXED.match(label)
    if m:
        return m.group(1), int(m.group(2))
    return label, None


def resolve_channels(labels: Sequence[str], wanted: Sequence[str]) -> tuple[list[int], list[str]]:
    """Indices in ``labels`` of the ``wanted`` channels, and the wanted names not found.

    ``X-Y-k`` selects the ``k``-th signal labelled ``X-Y`` (or one labelled ``X-Y-k``);
    a plain ``X-Y`` selects the first.
    """
    occurrences: dict[tuple[str, int], int] = {}
    counts: dict[str, int] = {}
    for i, label in enumerate(labels):
        base, k = _label_key(label)
        if k is None:
            k = counts.get(base, 0)
            counts[base] = k + 1
        occurrences.setdefault((base, k), i)
    found, missing = [], []
    for name in wanted:
        base, k = _label_key(name)
        key = (base, 0 if k is None else k)
        if key in occurrences:
            found.append(occurrences[key])
        else:
            missing.append(name)
    return found, missing


@dataclass
class _FilePlan:
    path: Path
    subject: int
    indices: list[int]
    starts: np.ndarray  # window starts, seconds
    labels: np.ndarray
    keep: np.ndarray  # bool mask over windows


class CHBMIT:
    """Reader for CHB-MIT (see the module docstring).

    Args:
        root: the folder holding ``chb01/`` ... ``chb24/``.
        montage: ``"23"`` (SD-Former; default) or ``"18"`` (the common bipolar set), or an
            explicit list of channel names.
        window_seconds: window length.
        stride_seconds: distance between window starts (default: ``window_seconds``).
        subjects: read only these subject ids ``NN``; ``None`` reads every ``chbNN`` folder.
        max_files_per_subject: cap on files per subject (seizure files first); ``None``: all.
        background_ratio: cap on background windows per subject as a multiple of its
            seizure windows; ``None`` keeps all.
        resample_to: target rate in Hz (polyphase); ``None`` keeps 256 Hz.
    """

    def __init__(self, root: str | Path, montage: Literal["18", "23"] | Sequence[str] = "23",
                 window_seconds: float = 2.0, stride_seconds: float | None = None,
                 subjects: Sequence[int] | None = None, max_files_per_subject: int | None = None,
                 background_ratio: float | None = None, resample_to: int | None = None) -> None:
        self.channels = self._channels(montage)
        self.window_seconds = float(window_seconds)
        self.stride_seconds = float(stride_seconds) if stride_seconds is not None else self.window_seconds
        if self.window_seconds <= 0 or self.stride_seconds <= 0:
            raise ValueError(f"chbmit: window_seconds and stride_seconds must be > 0, got "
                             f"{window_seconds} and {stride_seconds}")
        if max_files_per_subject is not None and max_files_per_subject < 1:
            raise ValueError(f"chbmit: max_files_per_subject must be >= 1 or None, got "
                             f"{max_files_per_subject}")
        if background_ratio is not None and background_ratio < 0:
            raise ValueError(f"chbmit: background_ratio must be >= 0 or None, got {background_ratio}")
        self.sfreq = float(resample_to) if resample_to is not None else SFREQ
        if resample_to is not None and resample_to <= 0:
            raise ValueError(f"chbmit: resample_to must be a positive rate in Hz, got {resample_to}")
        self.resample_to = resample_to
        self.subjects = sorted({int(s) for s in subjects}) if subjects is not None else None
        self.max_files_per_subject = max_files_per_subject
        self.background_ratio = background_ratio
        self.spec = self.make_spec(self.channels, self.window_seconds, self.sfreq)
        self.root = self._resolve_root(root)
        self.subject_dirs = self._subject_dirs()
        self.skipped: list[SkippedFile] = []
        self._plan: list[_FilePlan] | None = None

    # ---- shape -------------------------------------------------------------------------------
    @staticmethod
    def _channels(montage: Literal["18", "23"] | Sequence[str]) -> tuple[str, ...]:
        if isinstance(montage, str):
            if montage not in MONTAGES:
                raise ValueError(f"chbmit: montage must be '18', '23' or a list of channel names, got "
                                 f"{montage!r}")
            return MONTAGES[montage]
        channels = tuple(str(c).strip().upper() for c in montage)
        if not channels or len(set(channels)) != len(channels):
            raise ValueError(f"chbmit: montage channels must be non-empty and unique, got {list(montage)}")
        return channels

    @classmethod
    def make_spec(cls, montage: Literal["18", "23"] | Sequence[str] = "23", window_seconds: float = 2.0,
                  sfreq: float = SFREQ) -> CorpusSpec:
        """The corpus shape for these options; reads no file."""
        channels = cls._channels(montage)
        n_times = window_seconds * sfreq
        if abs(n_times - round(n_times)) > 1e-9:
            raise ValueError(f"chbmit: window_seconds={window_seconds} is not a whole number of samples at "
                             f"{sfreq:g} Hz")
        return CorpusSpec(name="chbmit", ch_names=channels, sfreq=float(sfreq), n_times=int(round(n_times)),
                          classes=CLASSES, label_level="window", modality="eeg")

    # ---- files ---------------------------------------------------------------------------------
    @staticmethod
    def _resolve_root(root: str | Path) -> Path:
        root = Path(root).expanduser().resolve()
        if not root.is_dir():
            raise DataError(f"chbmit: corpus root {root} does not exist or is not a folder; expected "
                            f"{EDF_PATTERN}")
        return root

    def _subject_dirs(self) -> list[tuple[int, Path]]:
        dirs = []
        for p in sorted(self.root.iterdir()):
            m = _SUBJECT_DIR.match(p.name)
            if p.is_dir() and m and (self.subjects is None or int(m.group(1)) in self.subjects):
                dirs.append((int(m.group(1)), p))
        if not dirs:
            which = f" for subjects {self.subjects}" if self.subjects is not None else ""
            raise DataError(f"chbmit: no chbNN folders{which} in {self.root}; expected {EDF_PATTERN}")
        for _, d in dirs:
            if not (d / f"{d.name}-summary.txt").is_file():
                raise DataError(f"{d}: missing {d.name}-summary.txt (seizure times); expected {EDF_PATTERN}")
        return dirs

    def _edfs(self, folder: Path) -> list[Path]:
        return sorted(p for p in folder.iterdir() if p.is_file() and _EDF.match(p.name))

    def config(self) -> dict[str, Any]:
        files = []
        for _, d in self.subject_dirs:
            files.append(d / f"{d.name}-summary.txt")
            files.extend(self._edfs(d))
        return {
            "corpus": "chbmit",
            "reader_version": READER_VERSION,
            "root": str(self.root),
            "channels": list(self.channels),
            "window_seconds": self.window_seconds,
            "stride_seconds": self.stride_seconds,
            "subjects": self.subjects,
            "max_files_per_subject": self.max_files_per_subject,
            "background_ratio": self.background_ratio,
            "resample_to": self.resample_to,
            "files": files_fingerprint(files, self.root),
        }

    # ---- planning: which windows, which labels (headers and summaries only) ---------------------
    def window_labels(self, duration: float,
                      seizures: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Window starts (s) over ``duration`` seconds and their labels given ``seizures``."""
        n = int(math.floor((duration - self.window_seconds) / self.stride_seconds + 1e-9)) + 1
        starts = np.arange(max(n, 0), dtype=np.float64) * self.stride_seconds
        labels = np.zeros(len(starts), dtype=np.int64)
        for s, e in seizures:
            labels[(starts < e) & (starts + self.window_seconds > s)] = 1
        return starts, labels

    def plan(self) -> list[_FilePlan]:
        """Decide every file's windows and labels from headers and summaries (cached)."""
        if self._plan is not None:
            return self._plan
        plans: list[_FilePlan] = []
        skipped: list[SkippedFile] = []
        for subject, folder in self.subject_dirs:
            summary_path = folder / f"{folder.name}-summary.txt"
            summary = parse_summary(summary_path)
            subject_plans = []
            for edf in self._edfs(folder):
                rel = edf.relative_to(self.root).as_posix()
                entry = summary.get(edf.name)
                if entry is None:
                    skipped.append(SkippedFile(rel, f"not listed in {summary_path.name}"))
                    continue
                header = read_header(edf)
                indices, missing = resolve_channels(header.labels, self.channels)
                if missing:
                    skipped.append(SkippedFile(rel, f"lacks channel(s) {', '.join(missing)}"))
                    continue
                for i in indices:
                    if abs(header.sfreqs[i] - SFREQ) > 1e-6:
                        raise DataError(f"{edf}: channel {header.labels[i]!r} is sampled at "
                                        f"{header.sfreqs[i]:g} Hz, "
                                        f"expected {SFREQ:g} Hz")
                duration = header.n_samples[indices[0]] / SFREQ
                seizures = entry.seizures or []
                for s, e in seizures:
                    if e > duration + 1.0:
                        raise DataError(f"{summary_path}:{entry.line}: seizure {s:g}-{e:g} s of {edf.name} "
                                        f"ends "
                                        f"after the recording ({duration:g} s)")
                starts, labels = self.window_labels(duration, seizures)
                subject_plans.append(_FilePlan(edf, subject, indices, starts, labels,
                                               np.ones(len(starts), dtype=bool)))
            plans.extend(self._limit(subject_plans))
        if skipped:
            warnings.warn(f"chbmit: {len(skipped)} EDF file(s) left out: "
                          + "; ".join(f"{s.path} ({s.reason})" for s in skipped), stacklevel=2)
        self.skipped = skipped
        self._plan = plans
        return plans

    def _limit(self, plans: list[_FilePlan]) -> list[_FilePlan]:
        if self.max_files_per_subject is not None and len(plans) > self.max_files_per_subject:
            ranked = sorted(plans, key=lambda p: (not p.labels.any(), p.path.name))
            chosen = {p.path for p in ranked[: self.max_files_per_subject]}
            plans = [p for p in plans if p.path in chosen]
        if self.background_ratio is not None:
            n_seizure = sum(int(p.labels.sum()) for p in plans)
            background = [(k, i) for k, p in enumerate(plans) for i in np.flatnonzero(p.labels == 0)]
            quota = min(len(background), math.ceil(self.background_ratio * n_seizure))
            for p in plans:
                p.keep = p.labels == 1
            if quota > 0:
                # evenly spaced over the subject's background, in file then time order
                picks = np.unique(np.round(np.linspace(0, len(background) - 1, quota)).astype(np.int64))
                for j in picks:
                    k, i = background[j]
                    plans[k].keep[i] = True
        return plans

    # ---- reading -------------------------------------------------------------------------------
    def _read(self, plan: _FilePlan) -> WindowBlock:
        signals = read_signals(plan.path, plan.indices, SFREQ)
        if self.resample_to is not None and self.sfreq != SFREQ:
            from scipy.signal import resample_poly

            ratio = Fraction(int(self.resample_to), int(SFREQ))
            signals = resample_poly(signals, ratio.numerator, ratio.denominator, axis=1).astype(np.float32)
        starts = plan.starts[plan.keep]
        win = self.spec.n_times
        first = np.rint(starts * self.sfreq).astype(np.int64)
        first = np.minimum(first, signals.shape[1] - win)
        x = signals[:, first[:, None] + np.arange(win)].transpose(1, 0, 2)
        block = WindowBlock(subject=plan.subject, recording=plan.path.stem, x=x, y=plan.labels[plan.keep],
                            start=starts)
        block.validate(self.spec, source=str(plan.path))
        return block

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for plan in self.plan():
            if plan.keep.any():
                yield self._read(plan)
