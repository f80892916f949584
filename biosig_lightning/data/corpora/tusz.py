"""TUSZ (Temple University Hospital EEG Seizure Corpus): 19-channel clips for seizure detection and typing.

Layouts read (the corpus as NEDC publishes it; ``root`` may be the release folder holding
``edf/`` or the ``edf/`` folder itself)::

    v1.5.2   edf/{train,dev}/<montage>/NNN/<patient>/sSSS_YYYY_MM_DD/<patient>_sSSS_tTTT.edf
             + <stem>.tse (term events, seizure types) and <stem>.tse_bi (seiz / bckg)
    v2.x     edf/{train,dev,eval}/<patient>/sSSS_YYYY/<montage>/<patient>_sSSS_tTTT.edf
             + <stem>.csv (per-channel events, seizure types) and <stem>.csv_bi (TERM, seiz / bckg)

Only the split folder (the first folder under ``edf/``) and the file names matter; the
folders in between are not interpreted. A corpus whose annotations mix the two formats
(any ``.tse*`` and any ``.csv*`` beside its EDFs) is refused with one error naming a file
of each: TUSZ 2.x renamed files and re-annotated seizures, so the two releases' labels
are not interchangeable.

Annotation formats (parsed strictly; a malformed line is an error naming file and line)::

    .tse / .tse_bi      version = tse_v1.0.0          (first non-comment line)
                        <start> <stop> <label> <confidence>          (seconds, space separated)
    .csv / .csv_bi      # version = csv_v1.0.0  ... comment header ...
                        channel,start_time,stop_time,label,confidence
                        TERM,0.0000,36.8868,bckg,1.0000          (.csv_bi: channel TERM)
                        FP1-F7,36.8868,183.3055,cpsz,1.0000      (.csv: one row per channel)

Preprocessing follows the DCRNN reference (Tang et al. 2022, ``tsy935/eeg-gnn-ssl``), which STDRO builds
on (STDRO paper, Appendix D): the 19 channels, resampling to 200 Hz, detection and classification clips
as :class:`TUSZ` describes.

Subjects are patients: v1.5.2 ids are 8 digits (``00000258`` -> 258), v2 ids 8 letters
(``aaaaaajy``), read as a base-26 number (a = 0) so they stay integers. The split folder
of each patient is kept (:meth:`TUSZ.patient_folders`): test = the ``dev`` folder, as in
the reference. A patient with recordings in both ``train`` and ``dev`` (five in v1.5.2)
keeps its ``train`` recordings and loses its ``dev`` ones, which is how the reference
removed them from its test set; ``eval`` (v2) is not read.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.edf import SkippedFile, files_fingerprint, read_header, read_signals
from biosig_lightning.data.corpora.tuh import patient_id
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CHANNELS", "CLASSIFICATION_CLASSES", "DETECTION_CLASSES", "SEIZURE_TYPE_CLASS", "SFREQ", "TUSZ",
           "Event", "parse_csv", "parse_tse", "patient_id"]

READER_VERSION = 1
SFREQ = 200.0
CHANNELS = ("EEG FP1", "EEG FP2", "EEG F3", "EEG F4", "EEG C3", "EEG C4", "EEG P3", "EEG P4", "EEG O1",
            "EEG O2",
            "EEG F7", "EEG F8", "EEG T3", "EEG T4", "EEG T5", "EEG T6", "EEG FZ", "EEG CZ", "EEG PZ")
DETECTION_CLASSES = ("background", "seizure")
CLASSIFICATION_CLASSES = ("CF", "GN", "AB", "CT")
SEIZURE_TYPE_CLASS: dict[str, int] = {"fnsz": 0, "spsz": 0, "cpsz": 0, "gnsz": 1,
                                      "absz": 2, "tnsz": 3, "tcsz": 3}
"""Four-class map of TUSZ seizure types; types absent here (mysz, cnsz, atsz, nesz) are dropped."""
SEIZURE_TYPES = frozenset({"seiz", "fnsz", "gnsz", "spsz", "cpsz", "absz", "tnsz", "cnsz", "tcsz", "atsz",
                           "mysz",
                           "nesz"})
CLASSIFICATION_OFFSET_SECONDS = 2.0
SPLIT_FOLDERS = ("train", "dev")
LAYOUT = ("edf/{train,dev}/<montage>/NNN/<patient>/sSSS_*/<patient>_sSSS_tTTT.edf with .tse/.tse_bi beside "
          "each EDF (v1.5.2), or TUSZ 2.x with .csv/.csv_bi")

_TSE_VERSION = re.compile(r"^version\s*=\s*tse_v1\.0\.0$")
_CSV_HEADER = "channel,start_time,stop_time,label,confidence"
_FILE = re.compile(r"^([0-9]{8}|[a-z]{8})_s(\d{3})_t(\d{3})\.edf$")
_FORMATS = {"tse": (".tse", ".tse_bi"), "csv": (".csv", ".csv_bi")}


@dataclass(frozen=True)
class Event:
    """One annotated interval: ``start``/``stop`` in seconds, lower-case ``label``."""

    start: float
    stop: float
    label: str



def _check_event(path: Path, lineno: int, start: float, stop: float, label: str) -> Event:
    if not (np.isfinite(start) and np.isfinite(stop)) or start < 0 or stop < start:
        raise DataError(f"{path}:{lineno}: event {start:g}-{stop:g} s is not a valid interval")
    return Event(float(start), float(stop), label.lower())


def _content_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, stripped line)`` of the non-empty, non-comment (``#``) lines of a text file."""
    for lineno, raw in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield lineno, line


def parse_tse(path: str | Path) -> list[Event]:
    """Events of a ``.tse`` / ``.tse_bi`` file (``version = tse_v1.0.0`` then ``start stop label conf``)."""
    path = Path(path)
    events: list[Event] = []
    seen_version = False
    for lineno, line in _content_lines(path):
        if not seen_version:
            if not _TSE_VERSION.match(line):
                raise DataError(f"{path}:{lineno}: expected the header 'version = tse_v1.0.0', got {line!r}")
            seen_version = True
            continue
        parts = line.split()
        if len(parts) != 4:
            raise DataError(f"{path}:{lineno}: expected '<start> <stop> <label> <confidence>', got {line!r}")
        try:
            start, stop, _ = float(parts[0]), float(parts[1]), float(parts[3])
        except ValueError as err:
            raise DataError(f"{path}:{lineno}: cannot read times/confidence in {line!r}") from err
        events.append(_check_event(path, lineno, start, stop, parts[2]))
    if not seen_version:
        raise DataError(f"{path}: empty annotation file (expected 'version = tse_v1.0.0' and event lines)")
    return events


def parse_csv(path: str | Path) -> list[tuple[str, Event]]:
    """``(channel, event)`` rows of a TUSZ 2.x ``.csv`` / ``.csv_bi`` file."""
    path = Path(path)
    rows: list[tuple[str, Event]] = []
    header_seen = False
    for lineno, line in _content_lines(path):
        if not header_seen:
            if line.replace(" ", "").lower() != _CSV_HEADER:
                raise DataError(f"{path}:{lineno}: expected the column header '{_CSV_HEADER}', got {line!r}")
            header_seen = True
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            raise DataError(f"{path}:{lineno}: expected 5 comma-separated fields ({_CSV_HEADER}), got "
                            f"{line!r}")
        try:
            start, stop, _ = float(parts[1]), float(parts[2]), float(parts[4])
        except ValueError as err:
            raise DataError(f"{path}:{lineno}: cannot read times/confidence in {line!r}") from err
        rows.append((parts[0], _check_event(path, lineno, start, stop, parts[3])))
    if not header_seen:
        raise DataError(f"{path}: no '{_CSV_HEADER}' header line")
    return rows


def merge_channel_events(rows: Sequence[tuple[str, Event]]) -> list[Event]:
    """Term events from per-channel rows: per label, the union of its intervals over channels."""
    by_label: dict[str, list[tuple[float, float]]] = {}
    for _, ev in rows:
        by_label.setdefault(ev.label, []).append((ev.start, ev.stop))
    merged: list[Event] = []
    for label, spans in by_label.items():
        spans.sort()
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s <= cur_e:
                cur_e = max(cur_e, e)
            else:
                merged.append(Event(cur_s, cur_e, label))
                cur_s, cur_e = s, e
        merged.append(Event(cur_s, cur_e, label))
    return sorted(merged, key=lambda ev: (ev.start, ev.stop))


@dataclass
class Recording:
    """One EDF with its split folder, patient and annotation files."""

    edf: Path
    folder: str
    patient: str
    subject: int
    annotations: dict[str, Path] = field(default_factory=dict)


class TUSZ:
    """Reader for TUSZ v1.5.2 (or 2.x) on its public layout (see the module docstring).

    Preprocessing follows the DCRNN reference (Tang et al. 2022, ``tsy935/eeg-gnn-ssl``),
    which STDRO builds on (STDRO paper, Appendix D):

    * **Channels**: the 19 of :data:`CHANNELS` in that order, matched on the EDF label cut at
      its first ``-`` and upper-cased, so ``EEG FP1-REF`` (AR montage) and ``EEG FP1-LE`` (LE
      montage) are both ``EEG FP1``. A file missing one is left out (listed in
      :attr:`TUSZ.skipped` and one warning), as the reference skips it.
    * **Resampling**: the whole recording at once to 200 Hz with ``scipy.signal.resample``
      (FFT) to ``200 * int(n_samples / fs)`` samples, i.e. the reference's length rule (the
      duration is truncated to whole seconds).
    * **Detection clips** (``task="detection"``): non-overlapping ``clip_seconds`` (12 or 60)
      clips from the start, ``floor(L / clip)`` per file. Clip ``k`` covers samples
      ``[a, b) = [k*clip*200, (k+1)*clip*200)`` and is a seizure clip when some ``seiz``
      interval ``[s, e]`` of the ``.tse_bi`` / ``.csv_bi`` (in samples, ``int(t * 200)``)
      meets it with the reference's inclusive test ``not (b < s or a > e)``.
    * **Classification clips** (``task="classification"``): one clip per seizure event of
      the ``.tse`` / ``.csv``, starting 2 s before onset but not before the previous seizure's
      end plus one sample, ending at the earlier of ``start + clip_seconds`` and the seizure
      end; shorter clips are zero-padded to ``clip_seconds`` (the reference pads after
      standardisation; the DataModule restores that). Classes (STDRO paper Sec. 4.1, the
      reference's four-class file markers): CF = fnsz, spsz, cpsz; GN = gnsz; AB = absz;
      CT = tnsz, tcsz. mysz is dropped, and so are the types the reference never uses (cnsz,
      atsz, nesz); every seizure still bounds the next one's start.
      Reading (v2 ``.csv``): events are per channel; a seizure event is the union of one
      label's intervals over the channels (overlapping or touching intervals merged).
    * **Features** are not made here: the reader yields 200 Hz signals, and
      :class:`~biosig_lightning.data.feature_reader.LogFFTReader` turns them into the
      reference's log-amplitude spectra.

    Args:
        root: the release folder holding ``edf/``, or ``edf/`` itself.
        task: ``"detection"`` (seizure / background clips) or ``"classification"``
            (one clip per seizure, four classes).
        clip_seconds: clip length, 12 or 60 in the paper (any positive whole number works).
        folders: split folders to read (``train`` and ``dev``).
    """

    def __init__(self, root: str | Path, task: Literal["detection", "classification"] = "detection",
                 clip_seconds: int = 12, folders: Sequence[str] = SPLIT_FOLDERS) -> None:
        if task not in ("detection", "classification"):
            raise ValueError(f"tusz: task must be 'detection' or 'classification', got {task!r}")
        if int(clip_seconds) != clip_seconds or clip_seconds < 1:
            raise ValueError(f"tusz: clip_seconds must be a positive whole number of seconds, got "
                             f"{clip_seconds!r}")
        self.task = task
        self.clip_seconds = int(clip_seconds)
        self.folders = tuple(folders)
        self.spec = self.make_spec(task, self.clip_seconds)
        self.root = self._resolve_root(root)
        self.recordings, self.format = self._discover()
        self.skipped: list[SkippedFile] = []

    @staticmethod
    def make_spec(
        task: Literal["detection", "classification"] = "detection", clip_seconds: int = 12
    ) -> CorpusSpec:
        """The shape of the 200 Hz clips for these options; reads no file."""
        classes = DETECTION_CLASSES if task == "detection" else CLASSIFICATION_CLASSES
        return CorpusSpec(name="tusz", ch_names=CHANNELS, sfreq=SFREQ, n_times=int(clip_seconds * SFREQ),
                          classes=classes, label_level="window", modality="eeg")

    # ---- files ---------------------------------------------------------------------------------
    @staticmethod
    def _resolve_root(root: str | Path) -> Path:
        root = Path(root).expanduser().resolve()
        if not root.is_dir():
            raise DataError(f"tusz: corpus root {root} does not exist or is not a folder; expected {LAYOUT}")
        if (root / "edf").is_dir():
            root = root / "edf"
        if not any((root / f).is_dir() for f in SPLIT_FOLDERS):
            raise DataError(f"tusz: no train/ or dev/ folder under {root}; expected {LAYOUT}")
        return root

    def _discover(self) -> tuple[list[Recording], str]:
        recordings: list[Recording] = []
        found: dict[str, Path] = {}
        for folder in self.folders:
            base = self.root / folder
            if not base.is_dir():
                raise DataError(f"tusz: missing split folder {base}; expected {LAYOUT}")
            for edf in sorted(base.rglob("*.edf")):
                m = _FILE.match(edf.name)
                if m is None:
                    raise DataError(f"{edf}: not a TUSZ file name (<patient>_sSSS_tTTT.edf with an 8-digit "
                                    f"or "
                                    "8-letter patient id)")
                rec = Recording(edf=edf, folder=folder, patient=m.group(1),
                                subject=patient_id(m.group(1), "tusz"))
                for fmt, suffixes in _FORMATS.items():
                    for suffix in suffixes:
                        path = edf.with_suffix(suffix)
                        if path.is_file():
                            rec.annotations[suffix] = path
                            found.setdefault(fmt, path)
                recordings.append(rec)
        if not recordings:
            raise DataError(f"tusz: no EDF files under {self.root}/{{{','.join(self.folders)}}}; expected "
                            f"{LAYOUT}")
        if len(found) > 1:
            raise DataError(f"tusz: {self.root} mixes TUSZ v1.5.2 annotations ({found['tse']}) with TUSZ 2.x "
                            f"annotations ({found['csv']}); use one release")
        if not found:
            raise DataError(f"tusz: no .tse_bi/.tse (v1.5.2) or .csv_bi/.csv (2.x) annotation beside any "
                            f"EDF, e.g. "
                            f"{recordings[0].edf}")
        fmt = next(iter(found))
        needed = _FORMATS[fmt][1] if self.task == "detection" else _FORMATS[fmt][0]
        for rec in recordings:
            if needed not in rec.annotations:
                raise DataError(f"{rec.edf}: missing its annotation file {rec.edf.with_suffix(needed).name} "
                                f"(the {self.task} labels of this {fmt} release)")
        # a patient in both folders keeps its train recordings (the reference removed them from test)
        train_patients = {r.subject for r in recordings if r.folder == "train"}
        dropped = [r for r in recordings if r.folder != "train" and r.subject in train_patients]
        if dropped:
            warnings.warn(f"tusz: {len(dropped)} recording(s) of patients also in train/ left out of "
                          f"{sorted({r.folder for r in dropped})}: patients "
                          f"{sorted({r.patient for r in dropped})}", stacklevel=2)
        keep = [r for r in recordings if not (r.folder != "train" and r.subject in train_patients)]
        return keep, fmt

    def patient_folders(self) -> dict[str, list[int]]:
        """Split folder -> sorted subject ids of the patients whose recordings it holds."""
        out: dict[str, set[int]] = {f: set() for f in self.folders}
        for rec in self.recordings:
            out[rec.folder].add(rec.subject)
        return {f: sorted(s) for f, s in out.items()}

    def config(self) -> dict[str, Any]:
        files = [r.edf for r in self.recordings] + [
            p for r in self.recordings for p in r.annotations.values()
        ]
        return {
            "corpus": "tusz",
            "reader_version": READER_VERSION,
            "root": str(self.root),
            "task": self.task,
            "clip_seconds": self.clip_seconds,
            "folders": list(self.folders),
            "format": self.format,
            "channels": list(CHANNELS),
            "files": files_fingerprint(files, self.root),
        }

    # ---- labels --------------------------------------------------------------------------------
    def seizure_times(self, rec: Recording) -> list[tuple[float, float]]:
        """Binary seizure intervals (seconds) of a recording, from ``.tse_bi`` or ``.csv_bi``."""
        if self.format == "tse":
            events = parse_tse(rec.annotations[".tse_bi"])
        else:
            events = merge_channel_events(parse_csv(rec.annotations[".csv_bi"]))
        for ev in events:
            if ev.label not in ("seiz", "bckg"):
                path = rec.annotations[".tse_bi" if self.format == "tse" else ".csv_bi"]
                raise DataError(f"{path}: label {ev.label!r} in a binary annotation file (expected seiz or "
                                f"bckg)")
        return [(ev.start, ev.stop) for ev in events if ev.label == "seiz"]

    def seizure_events(self, rec: Recording) -> list[Event]:
        """Typed seizure events of a recording (every seizure type, in time order)."""
        if self.format == "tse":
            path = rec.annotations[".tse"]
            events = parse_tse(path)
        else:
            path = rec.annotations[".csv"]
            events = merge_channel_events(parse_csv(path))
        for ev in events:
            if ev.label != "bckg" and ev.label not in SEIZURE_TYPES:
                raise DataError(f"{path}: unknown event label {ev.label!r} (expected bckg or a TUSZ seizure "
                                f"type)")
        return sorted((ev for ev in events if ev.label in SEIZURE_TYPES), key=lambda ev: ev.start)

    def detection_labels(self, n_samples: int, seizures: Sequence[tuple[float, float]]) -> np.ndarray:
        """Labels of the ``floor(n_samples / clip)`` clips of a 200 Hz recording (inclusive overlap test)."""
        clip = int(self.clip_seconds * SFREQ)
        n = n_samples // clip
        a = np.arange(n, dtype=np.int64) * clip
        b = a + clip
        labels = np.zeros(n, dtype=np.int64)
        for s_sec, e_sec in seizures:
            s, e = int(s_sec * SFREQ), int(e_sec * SFREQ)
            labels[~((b < s) | (a > e))] = 1
        return labels

    def classification_spans(self, events: Sequence[Event]) -> list[tuple[int, int, int]]:
        """``(start, stop, class)`` sample spans of the classification clips (reference rule)."""
        spans = []
        clip = int(self.clip_seconds * SFREQ)
        for i, ev in enumerate(events):
            cls = SEIZURE_TYPE_CLASS.get(ev.label)
            previous_end = int(SFREQ * events[i - 1].stop) if i > 0 else 0
            start = max(previous_end + 1, int(SFREQ * (ev.start - CLASSIFICATION_OFFSET_SECONDS)))
            stop = min(start + clip, int(SFREQ * ev.stop))
            if cls is not None and stop - start >= int(SFREQ):
                spans.append((start, stop, cls))
        return spans

    # ---- reading -------------------------------------------------------------------------------
    def read_recording(self, rec: Recording) -> np.ndarray | None:
        """The 19 channels of ``rec`` resampled to 200 Hz, ``(19, L)``; ``None`` if a channel is missing."""
        header = read_header(rec.edf)
        keys = [label.split("-", 1)[0].strip().upper() for label in header.labels]
        indices, missing = [], []
        for ch in CHANNELS:
            if ch in keys:
                indices.append(keys.index(ch))
            else:
                missing.append(ch)
        if missing:
            self.skipped.append(SkippedFile(rec.edf.relative_to(self.root).as_posix(),
                                            f"lacks channel(s) {', '.join(missing)}"))
            return None
        rates = {header.sfreqs[i] for i in indices}
        if len(rates) != 1:
            raise DataError(f"{rec.edf}: the 19 EEG channels have different sampling rates {sorted(rates)}")
        fs = rates.pop()
        signals = read_signals(rec.edf, indices, fs).astype(np.float64)
        target = int(SFREQ * int(signals.shape[1] / fs))
        if target != signals.shape[1] or fs != SFREQ:
            from scipy.signal import resample

            signals = resample(signals, num=target, axis=1)
        return signals.astype(np.float32)

    def _blocks(self, rec: Recording) -> WindowBlock | None:
        clip = int(self.clip_seconds * SFREQ)
        if self.task == "detection":
            seizures = self.seizure_times(rec)
            signals = self.read_recording(rec)
            if signals is None:
                return None
            labels = self.detection_labels(signals.shape[1], seizures)
            n = len(labels)
            if n == 0:
                return None
            x = signals[:, : n * clip].reshape(signals.shape[0], n, clip).transpose(1, 0, 2)
            starts = np.arange(n, dtype=np.float64) * self.clip_seconds
        else:
            spans = self.classification_spans(self.seizure_events(rec))
            if not spans:
                return None
            signals = self.read_recording(rec)
            if signals is None:
                return None
            x = np.zeros((len(spans), signals.shape[0], clip), dtype=np.float32)
            keep = []
            for j, (start, stop, _) in enumerate(spans):
                stop = min(stop, signals.shape[1])
                # whole 1-s steps only, as the reference's step loop keeps them
                length = (stop - start) // int(SFREQ) * int(SFREQ)
                if length > 0:
                    x[j, :, :length] = signals[:, start:start + length]
                    keep.append(j)
            if not keep:
                return None
            x = x[keep]
            labels = np.array([spans[j][2] for j in keep], dtype=np.int64)
            starts = np.array([spans[j][0] / SFREQ for j in keep], dtype=np.float64)
        block = WindowBlock(subject=rec.subject, recording=rec.edf.stem, x=x, y=labels, start=starts)
        block.validate(self.spec, source=str(rec.edf))
        return block

    def iter_blocks(self) -> Iterator[WindowBlock]:
        self.skipped = []
        for rec in self.recordings:
            block = self._blocks(rec)
            if block is not None:
                yield block
        if self.skipped:
            warnings.warn(f"tusz: {len(self.skipped)} EDF file(s) left out: "
                          + "; ".join(f"{s.path} ({s.reason})" for s in self.skipped), stacklevel=2)
