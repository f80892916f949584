"""TUH Abnormal EEG Corpus (TUAB; Obeid & Picone 2016): normal vs abnormal routine EEG, in its public layout.

Layouts read (``root`` is the release folder holding ``edf/``, or ``edf/`` itself):

    v3.x   edf/{train,eval}/{normal,abnormal}/01_tcp_ar/<patient>_s<session>_t<token>.edf
    v2.0
    edf/{train,eval}/{normal,abnormal}/01_tcp_ar/<nnn>/<patient>/s<session>_<date>/<patient>_s<session>_t<token>.edf

* Label: the ``normal`` / ``abnormal`` folder. Split folder: ``train`` / ``eval`` (the official split).
* Patient (subject): the file name's first ``_`` field: 8 digits (v2, ``00000021`` -> 21) or 8 letters
  (v3, ``aaaaamyj``, read as a base-26 number so ids stay integers). A patient found under both
  ``train`` and ``eval`` is an error (the official split is patient-disjoint and we keep it so).
* Channels: the 21 electrodes of :data:`CHANNELS` (10-20 system plus A1/A2), matched on the EDF label
  cut at its first ``-`` and upper-cased, so ``EEG FP1-REF`` -> ``EEG FP1``; a file missing one is an
  error naming the file and the channel.
* Rate: every recording is resampled (polyphase) to ``sfreq`` = 250 Hz, the corpus's most common rate.
* Windows: ``windows_per_recording`` (default 1: the paper's 2,993 "segments" are TUAB's 2,993
  recordings) non-overlapping windows of ``window_seconds`` (24 s = 6,000 samples, so the signed-graph
  model's 6 chunks of 1,000 samples apply unchanged) from ``offset_seconds`` (60 s, past the set-up
  artefacts of the first minute) on; a recording shorter than that starts its window earlier, and one
  shorter than a window is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.corpora.edf import files_fingerprint, read_header, read_signals
from biosig_lightning.data.corpora.tuh import patient_id
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CHANNELS", "TUAB", "patient_id"]

CHANNELS = ("FP1", "FP2", "F3", "F4", "C3", "C4", "P3", "P4", "O1", "O2", "F7", "F8", "T3", "T4", "T5", "T6",
            "A1", "A2", "FZ", "CZ", "PZ")
CLASSES = ("normal", "abnormal")



@dataclass(frozen=True)
class Recording:
    path: Path
    patient: int
    label: int
    folder: str  # "train" or "eval"


class TUAB:
    """Reader of the TUAB release under ``root`` (see the module docstring)."""

    def __init__(self, root: str | Path, window_seconds: float = 24.0, sfreq: float = 250.0,
                 windows_per_recording: int = 1, offset_seconds: float = 60.0) -> None:
        self.root = self._resolve_root(Path(root))
        if windows_per_recording < 1 or offset_seconds < 0:
            raise ValueError("tuab: windows_per_recording must be >= 1 and offset_seconds >= 0")
        self.window_seconds, self.sfreq = window_seconds, sfreq
        self.windows_per_recording, self.offset_seconds = windows_per_recording, offset_seconds
        self.spec = self.make_spec(window_seconds, sfreq)
        self.recordings = self._discover()

    @staticmethod
    def make_spec(window_seconds: float = 24.0, sfreq: float = 250.0) -> CorpusSpec:
        return CorpusSpec("tuab", tuple(f"EEG {c}" for c in CHANNELS), sfreq,
                          int(round(window_seconds * sfreq)),
                          CLASSES, label_level="window")

    @staticmethod
    def _resolve_root(root: Path) -> Path:
        edf = root if root.name == "edf" else root / "edf"
        if not (edf / "train").is_dir() and not (edf / "eval").is_dir():
            raise DataError(f"tuab: {root} holds no edf/train or edf/eval folder; expected "
                            "edf/{train,eval}/{normal,abnormal}/01_tcp_ar/...edf")
        return edf

    def _discover(self) -> list[Recording]:
        recs: list[Recording] = []
        for folder in ("train", "eval"):
            for label, cls in enumerate(CLASSES):
                base = self.root / folder / cls
                if not base.is_dir():
                    continue
                for path in sorted(base.rglob("*.edf")):
                    patient = patient_id(path.stem.split("_")[0], "tuab")
                    recs.append(Recording(path, patient, label, folder))
        if not recs:
            raise DataError(f"tuab: no .edf files under {self.root}/{{train,eval}}/{{normal,abnormal}}")
        folders: dict[int, set[str]] = {}
        for r in recs:
            folders.setdefault(r.patient, set()).add(r.folder)
        both = sorted(p for p, f in folders.items() if len(f) > 1)
        if both:
            raise DataError(f"tuab: patient(s) {both} have recordings in both train and eval; the official "
                            "split must be patient-disjoint")
        return recs

    def patient_folders(self) -> dict[str, list[int]]:
        """Patients of the official ``train`` and ``eval`` folders."""
        out: dict[str, set[int]] = {"train": set(), "eval": set()}
        for r in self.recordings:
            out[r.folder].add(r.patient)
        return {k: sorted(v) for k, v in out.items()}

    def config(self) -> dict[str, Any]:
        return {"corpus": "tuab", "window_seconds": self.window_seconds, "sfreq": self.sfreq,
                "windows_per_recording": self.windows_per_recording, "offset_seconds": self.offset_seconds,
                "files": files_fingerprint([r.path for r in self.recordings], self.root)}

    def read_recording(self, path: Path) -> np.ndarray:
        """``(21, n)`` signals of :data:`CHANNELS` at ``sfreq``."""
        header = read_header(path)
        names = [lbl.split("-")[0].strip().upper() for lbl in header.labels]
        idx = []
        for ch in CHANNELS:
            want = f"EEG {ch}"
            if want not in names:
                raise DataError(f"{path}: channel {want!r} (e.g. 'EEG {ch}-REF') not found; labels: "
                                f"{', '.join(header.labels)}")
            idx.append(names.index(want))
        fs = header.sfreqs[idx[0]]
        sig = read_signals(path, idx, fs)
        if abs(fs - self.sfreq) > 1e-6:
            from scipy.signal import resample_poly

            ratio = Fraction(self.sfreq / fs).limit_denominator(1000)
            sig = resample_poly(sig, ratio.numerator, ratio.denominator, axis=1).astype(np.float32)
        return sig

    def iter_blocks(self) -> Iterator[WindowBlock]:
        n = self.spec.n_times
        for rec in self.recordings:
            sig = self.read_recording(rec.path)
            length = sig.shape[1]
            if length < n:
                raise DataError(f"{rec.path}: {length / self.sfreq:g} s is shorter than one "
                                f"{self.window_seconds:g}-s window")
            start = min(int(round(self.offset_seconds * self.sfreq)), length - n)
            count = min(self.windows_per_recording, (length - start) // n)
            x = np.stack([sig[:, start + i * n: start + (i + 1) * n] for i in range(count)])
            block = WindowBlock(subject=rec.patient, recording=str(rec.path.relative_to(self.root)), x=x,
                                y=np.full(count, rec.label),
                                start=(start + np.arange(count) * n) / self.sfreq)
            block.validate(self.spec, str(rec.path))
            yield block
