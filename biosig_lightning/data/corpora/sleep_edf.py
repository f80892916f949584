"""Sleep-EDF Expanded, Sleep Cassette (PhysioNet ``sleep-edfx``): 30 s sleep-stage epochs.

Layout (the PhysioNet ``sleep-cassette/`` folder, or its parent)::

    SC4ssNxx-PSG.edf         polysomnogram of subject ss, night N (EEG Fpz-Cz, Pz-Oz at 100 Hz, ...)
    SC4ssNyy-Hypnogram.edf   EDF+ annotations "Sleep stage W/1/2/3/4/R/?", "Movement time"

The hypnogram's last two letters differ from the PSG's (``SC4001E0-PSG.edf`` goes with
``SC4001EC-Hypnogram.edf``), so the two are paired by their first six characters
``SC4ssN``. This is the SD-Former Sleep-EDF setting (paper Table 1: 2 EEG channels,
5 classes, 30 s windows):

* classes W, N1, N2, N3, REM; AASM N3 merges the R&K stages 3 and 4;
* unscored (``Sleep stage ?``) and ``Movement time`` epochs are dropped;
* wake is trimmed to ``crop_wake_minutes`` (30) before the first and after the last
  sleep epoch, the common Sleep-EDF protocol that keeps the long recorded daytime wake
  from swamping the classes (``None`` keeps every scored epoch);
* subject id = ``ss``; both nights of a subject share it, so a subject split never
  separates them. Recording id = the PSG file stem; ``start`` = epoch start in seconds
  from the PSG start.

Epochs are cut where the hypnogram puts them: each stage annotation of length ``d``
starting at ``t`` gives ``floor(d / 30)`` epochs at ``t, t + 30, ...`` (time measured on
the PSG clock: the hypnogram's own start time is honoured if it differs). Epochs that
do not fit inside the PSG signal are dropped. Signals stay in the file's µV.
"""

from __future__ import annotations

import math
import re
import warnings
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

__all__ = ["SYNTHETIC_DEFAULTS", "SleepEDF", "SleepRecording"]

READER_VERSION = 1
CLASSES = ("W", "N1", "N2", "N3", "REM")
EEG_CHANNELS = ("EEG Fpz-Cz", "EEG Pz-Oz")
SFREQ = 100.0
EPOCH_SECONDS = 30.0
#: hypnogram text -> class index; stages 3 and 4 both become N3
STAGES = {"Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3,
          "Sleep stage 4": 3, "Sleep stage R": 4}
#: hypnogram texts whose epochs are dropped (unscored, movement)
DROPPED = ("Sleep stage ?", "Movement time")
PSG_PATTERN = "SC4ssN??-PSG.edf"
_PSG_RE = re.compile(r"^SC4(\d{2})(\d)[A-Za-z0-9]{2}-PSG\.edf$")
_HYP_RE = re.compile(r"^SC4(\d{2})(\d)[A-Za-z0-9]{2}-Hypnogram\.edf$")

#: options of the synthetic stand-in with this corpus's shape (``SyntheticReader``)
# : ``coupling_edges``: Fpz-Cz and Pz-Oz coupled in theta and alpha (one direction), the truth ``biosig
# graphs`` scores
#: SD-Former's learned channel-band graph against (``data/synthetic_coupling.py``)
SYNTHETIC_DEFAULTS: dict[str, Any] = {"kind": "sleep", "n_subjects": 8, "recordings_per_subject": 2,
                                      "windows_per_subject": 120, "coupling_edges": 2}


@dataclass(frozen=True)
class SleepRecording:
    """One night: its PSG and hypnogram files, subject ``ss`` and night ``N``."""

    psg: Path
    hypnogram: Path
    subject: int
    night: int


def _resolve_root(root: str | Path) -> Path:
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise DataError(f"sleep_edf: corpus root {root} does not exist or is not a folder; expected the "
                        f"Sleep-EDF Expanded sleep-cassette folder with {PSG_PATTERN} and "
                        f"SC4ssN??-Hypnogram.edf")
    if (root / "sleep-cassette").is_dir():
        return root / "sleep-cassette"
    return root


def find_recordings(root: Path) -> list[SleepRecording]:
    """Pair every ``SC4ssN??-PSG.edf`` in ``root`` with its ``SC4ssN??-Hypnogram.edf``."""
    psgs: dict[str, Path] = {}
    hyps: dict[str, list[Path]] = {}
    for p in sorted(root.iterdir()):
        if _PSG_RE.match(p.name):
            psgs[p.name[:6]] = p
        elif _HYP_RE.match(p.name):
            hyps.setdefault(p.name[:6], []).append(p)
    if not psgs:
        raise DataError(f"sleep_edf: no Sleep Cassette recordings in {root}: expected files named "
                        f"{PSG_PATTERN} "
                        f"(e.g. SC4001E0-PSG.edf) with their SC4ssN??-Hypnogram.edf")
    out = []
    for key, psg in psgs.items():
        found = hyps.get(key, [])
        if not found:
            raise DataError(f"{psg}: no hypnogram: expected {key}??-Hypnogram.edf next to it")
        if len(found) > 1:
            raise DataError(f"{psg}: several hypnograms match {key}??-Hypnogram.edf: "
                            f"{', '.join(h.name for h in found)}")
        m = _PSG_RE.match(psg.name)
        assert m is not None
        out.append(SleepRecording(psg=psg, hypnogram=found[0],
                                  subject=int(m.group(1)), night=int(m.group(2))))
    return out


def hypnogram_epochs(recording: SleepRecording, psg_start: Any, psg_seconds: float,
                     crop_wake_minutes: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Epoch starts (seconds on the PSG clock) and class indices of one night.

    Applies the module's rules: stage 3 + 4 -> N3, unscored and movement epochs dropped,
    epochs outside the PSG dropped, wake cropped around sleep.
    """
    hyp_start, notes = read_annotations(recording.hypnogram)
    shift = (hyp_start - psg_start).total_seconds()
    starts: list[float] = []
    labels: list[int] = []
    for note in notes:
        if note.text in STAGES:
            label = STAGES[note.text]
        elif note.text in DROPPED:
            continue
        else:
            raise DataError(f"{recording.hypnogram}: unknown annotation {note.text!r} at {note.onset:g} s; "
                            f"expected one of {', '.join(repr(t) for t in (*STAGES, *DROPPED))}")
        # an annotation lasting a hair under k epochs (float round-off) still holds k epochs
        n = int(math.floor(note.duration / EPOCH_SECONDS + 1e-6))
        for k in range(n):
            starts.append(note.onset + shift + k * EPOCH_SECONDS)
            labels.append(label)
    t = np.asarray(starts, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t, y = t[order], y[order]
    if len(t) > 1 and np.any(np.diff(t) < EPOCH_SECONDS - 1e-6):
        i = int(np.argmax(np.diff(t) < EPOCH_SECONDS - 1e-6))
        raise DataError(f"{recording.hypnogram}: overlapping stage annotations at {t[i]:g} s and "
                        f"{t[i + 1]:g} s")
    inside = (t >= 0) & (t + EPOCH_SECONDS <= psg_seconds + 1e-6)
    t, y = t[inside], y[inside]
    if crop_wake_minutes is not None and len(t):
        asleep = y != 0
        if not asleep.any():
            raise DataError(f"{recording.hypnogram}: no sleep epoch (stages 1-4, R) inside the PSG, so wake "
                            "cannot be cropped around sleep; set crop_wake_minutes=None to keep every epoch")
        margin = crop_wake_minutes * 60.0
        first = t[asleep][0] - margin
        last = t[asleep][-1] + EPOCH_SECONDS + margin
        keep = (t >= first - 1e-6) & (t + EPOCH_SECONDS <= last + 1e-6)
        t, y = t[keep], y[keep]
    return t, y


class SleepEDF:
    """Reader for the Sleep-EDF Expanded Sleep Cassette (see the module docstring).

    Args:
        root: the ``sleep-cassette`` folder (or the folder holding it).
        channels: EDF labels of the channels to read, in model order; each must be
            sampled at 100 Hz.
        crop_wake_minutes: minutes of wake kept before the first and after the last sleep
            epoch; ``None`` keeps all scored epochs.
        subjects: read only these subject ids ``ss`` (e.g. ``range(20)`` for Sleep-EDF-20);
            ``None`` reads every night found.
    """

    def __init__(self, root: str | Path, channels: Sequence[str] = EEG_CHANNELS,
                 crop_wake_minutes: float | None = 30.0, subjects: Sequence[int] | None = None) -> None:
        if crop_wake_minutes is not None and crop_wake_minutes < 0:
            raise ValueError(f"sleep_edf: crop_wake_minutes must be >= 0 or None, got {crop_wake_minutes}")
        if not channels:
            raise ValueError("sleep_edf: channels must name at least one EDF channel")
        self.root = _resolve_root(root)
        self.channels = tuple(channels)
        self.crop_wake_minutes = crop_wake_minutes
        self.spec = self.make_spec(self.channels)
        self.subjects, self.recordings = recordings_of(find_recordings(self.root), subjects, "sleep_edf",
                                                       self.root)

    @staticmethod
    def make_spec(channels: Sequence[str] = EEG_CHANNELS) -> CorpusSpec:
        """The corpus shape for ``channels``; reads no file."""
        return CorpusSpec(name="sleep_edf", ch_names=tuple(channels), sfreq=SFREQ,
                          n_times=int(EPOCH_SECONDS * SFREQ), classes=CLASSES, label_level="window",
                          modality="eeg")

    def config(self) -> dict[str, Any]:
        files = [p for r in self.recordings for p in (r.psg, r.hypnogram)]
        return {
            "corpus": "sleep_edf",
            "reader_version": READER_VERSION,
            "root": str(self.root),
            "channels": list(self.channels),
            "crop_wake_minutes": self.crop_wake_minutes,
            "subjects": self.subjects,
            "files": files_fingerprint(files, self.root),
        }

    def read_recording(self, recording: SleepRecording) -> WindowBlock:
        """The validated epochs of one night."""
        header = read_header(recording.psg)
        indices = []
        for name in self.channels:
            if name not in header.labels:
                raise DataError(f"{recording.psg}: missing channel {name!r} (channels: "
                                f"{', '.join(header.labels)})")
            indices.append(header.labels.index(name))
        signals = read_signals(recording.psg, indices, SFREQ)
        n_samples = signals.shape[1]
        t, y = hypnogram_epochs(recording, header.start, n_samples / SFREQ, self.crop_wake_minutes)
        win = self.spec.n_times
        first = np.rint(t * SFREQ).astype(np.int64)
        first = np.minimum(first, n_samples - win)  # rounding must not push the last epoch past the end
        # one contiguous copy per epoch from a strided view (an index array of n x win positions
        # gathered the same values sample by sample, several times slower)
        x = np.lib.stride_tricks.sliding_window_view(signals, win, axis=1)[:, first].transpose(1, 0, 2)
        block = WindowBlock(subject=recording.subject, recording=recording.psg.name[: -len(".edf")],
                            x=x, y=y, start=t)
        block.validate(self.spec, source=str(recording.psg))
        return block

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for recording in self.recordings:
            block = self.read_recording(recording)
            if len(block.y) == 0:
                warnings.warn(f"{recording.psg}: no scored epoch inside the recording; skipped", stacklevel=2)
                continue
            yield block
