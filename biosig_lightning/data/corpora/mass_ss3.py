"""MASS SS3 (Montreal Archive of Sleep Studies, subset 3): 62 nights, 30 s AASM epochs.

Layout (the folder as MASS distributes SS3)::

    01-03-00NN PSG.edf    polysomnogram of subject NN (EEG "EEG F3-CLE" or "EEG F3-LER", ..., EOG,
                          EMG, ECG; EEG at 256 Hz)
    01-03-00NN Base.edf   EDF+ annotations "Sleep stage W", "Sleep stage 1", "Sleep stage 2",
                          "Sleep stage 3", "Sleep stage R", "Sleep stage ?" of 30 s each

Subjects 01..64 without 43 and 49 (62 recordings). The scoring onsets are *not* aligned with the PSG
start: each epoch is cut at ``round(onset * sfreq)`` samples of the PSG (onsets are seconds from the
PSG start; the Base file's own start time is honoured if it differs).

Electrodes: for each requested electrode (default F3, F4, C3, C4, T3, T4, O1, O2, the SPDTransNet
selection) the EEG channel ``EEG <el>-CLE`` or ``EEG <el>-LER`` (the two references SS3 uses) is read;
exactly one must exist. Signals stay in the file's physical units.

Label map (ours, shared with Sleep-EDF): W=0, N1=1, N2=2, N3=3, REM=4. The authors' code numbers
them N3=0, N2=1, N1=2, REM=3, W=4; only the order differs. ``Sleep stage ?`` epochs (and any epoch
that does not fit inside the PSG) are dropped. Dropping leaves a gap in the epoch start times: the
``start`` of every kept epoch is its true time, so downstream code sees the gap. The SPD pipeline
(:mod:`biosig_lightning.data.spd`) restarts its filters there and never builds a context window
across it (the authors silently concatenated the remaining epochs).

Subject id = NN; recording id = ``01-03-00NN``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.corpora.edf import (
    files_fingerprint,
    read_annotations,
    read_header,
    read_signals,
    recordings_of,
)
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CLASSES", "ELECTRODES", "MASSSS3", "SFREQ", "STAGES"]

READER_VERSION = 1
CLASSES = ("W", "N1", "N2", "N3", "REM")
ELECTRODES = ("F3", "F4", "C3", "C4", "T3", "T4", "O1", "O2")
REFERENCES = ("CLE", "LER")
SFREQ = 256.0
EPOCH_SECONDS = 30.0
STAGES = {"Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3, "Sleep stage R": 4}
UNKNOWN = ("Sleep stage ?",)
_PSG_RE = re.compile(r"^01-03-(\d{4}) PSG\.edf$")


@dataclass(frozen=True)
class MASSRecording:
    psg: Path
    base: Path
    subject: int


def find_recordings(root: Path) -> list[MASSRecording]:
    """Every ``01-03-00NN PSG.edf`` in ``root`` with its ``01-03-00NN Base.edf``."""
    out = []
    for p in sorted(root.iterdir()):
        m = _PSG_RE.match(p.name)
        if not m:
            continue
        base = p.with_name(f"01-03-{m.group(1)} Base.edf")
        if not base.is_file():
            raise DataError(f"{p}: no annotation file: expected {base.name} next to it")
        out.append(MASSRecording(psg=p, base=base, subject=int(m.group(1))))
    if not out:
        raise DataError(f"mass_ss3: no recordings in {root}: expected files named '01-03-00NN PSG.edf' with "
                        f"their '01-03-00NN Base.edf'")
    return out


class MASSSS3:
    """Reader for MASS SS3 (see the module docstring).

    Args:
        root: the folder holding the ``PSG.edf`` / ``Base.edf`` pairs.
        electrodes: electrode names, in model order.
        subjects: read only these subject ids (``None``: all found).
    """

    def __init__(self, root: str | Path, electrodes: Sequence[str] = ELECTRODES,
                 subjects: Sequence[int] | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise DataError(f"mass_ss3: corpus root {self.root} is not a folder; expected the SS3 files "
                            f"'01-03-00NN PSG.edf' and '01-03-00NN Base.edf' there")
        self.electrodes = tuple(electrodes)
        if not self.electrodes:
            raise ValueError("mass_ss3: electrodes must name at least one electrode")
        self.subjects, self.recordings = recordings_of(find_recordings(self.root), subjects, "mass_ss3",
                                                       self.root)
        self.spec = self.make_spec(self.electrodes)

    @staticmethod
    def make_spec(electrodes: Sequence[str] = ELECTRODES) -> CorpusSpec:
        return CorpusSpec(name="mass_ss3", ch_names=tuple(electrodes), sfreq=SFREQ,
                          n_times=int(EPOCH_SECONDS * SFREQ), classes=CLASSES, label_level="window")

    def config(self) -> dict[str, Any]:
        files = [p for r in self.recordings for p in (r.psg, r.base)]
        return {"corpus": "mass_ss3", "reader_version": READER_VERSION, "root": str(self.root),
                "electrodes": list(self.electrodes), "subjects": self.subjects,
                "files": files_fingerprint(files, self.root)}

    def channel_indices(self, labels: Sequence[str], psg: Path) -> list[int]:
        out = []
        for el in self.electrodes:
            found = [i for i, lab in enumerate(labels) if lab in {f"EEG {el}-{ref}" for ref in REFERENCES}]
            if len(found) != 1:
                what = "no" if not found else "several"
                raise DataError(f"{psg}: {what} EEG channel for electrode {el!r} (expected exactly one of "
                                f"'EEG {el}-CLE', 'EEG {el}-LER'; channels: {', '.join(labels)})")
            out.append(found[0])
        return out

    def epochs(self, rec: MASSRecording, psg_start: Any, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """Start times (s on the PSG clock) and labels of the scored epochs inside the PSG."""
        base_start, notes = read_annotations(rec.base)
        shift = (base_start - psg_start).total_seconds()
        starts, labels = [], []
        for note in notes:
            if note.text in UNKNOWN:
                continue
            if note.text not in STAGES:
                if note.text.startswith("Sleep stage"):
                    raise DataError(f"{rec.base}: unknown stage {note.text!r} at {note.onset:g} s; expected "
                                    f"one of {', '.join(repr(t) for t in (*STAGES, *UNKNOWN))}")
                continue  # other events (arousals, ...) are not stages
            k = int(math.floor(note.duration / EPOCH_SECONDS + 1e-6))
            for j in range(k):
                starts.append(note.onset + shift + j * EPOCH_SECONDS)
                labels.append(STAGES[note.text])
        t = np.asarray(starts, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        t, y = t[order], y[order]
        inside = (t >= 0) & (np.rint(t * SFREQ) + EPOCH_SECONDS * SFREQ <= n_samples)
        return t[inside], y[inside]

    def read_recording(self, rec: MASSRecording) -> WindowBlock:
        header = read_header(rec.psg)
        idx = self.channel_indices(header.labels, rec.psg)
        signals = read_signals(rec.psg, idx, SFREQ)
        t, y = self.epochs(rec, header.start, signals.shape[1])
        win = self.spec.n_times
        first = np.rint(t * SFREQ).astype(np.int64)
        x = signals[:, first[:, None] + np.arange(win)].transpose(1, 0, 2)
        block = WindowBlock(subject=rec.subject, recording=f"01-03-{rec.subject:04d}", x=x, y=y, start=t)
        block.validate(self.spec, source=str(rec.psg))
        return block

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for rec in self.recordings:
            block = self.read_recording(rec)
            if len(block.y):
                yield block
