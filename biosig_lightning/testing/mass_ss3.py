"""Writes a small MASS SS3 corpus in its real layout (``01-03-00NN PSG.edf`` + ``01-03-00NN Base.edf``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pyedflib
from pyedflib import highlevel

START = datetime(2010, 3, 1, 22, 0, 0)
FS = 256
ELECTRODES = ("F3", "F4", "C3", "C4", "T3", "T4", "O1", "O2")
STAGE_TEXT = ("Sleep stage W", "Sleep stage 1", "Sleep stage 2", "Sleep stage 3", "Sleep stage R")
# stage -> (centre Hz, which electrodes carry it: anterior or posterior) of its dominant rhythm
RHYTHM = {0: (10.0, "post"), 1: (6.0, "all"), 2: (13.0, "ant"), 3: (1.5, "ant"), 4: (20.0, "post")}


def stage_signal(rng: np.random.Generator, stage: int, seconds: float, gain: np.ndarray) -> np.ndarray:
    """(8, seconds * FS) EEG in uV: pink-ish background plus the stage's rhythm on its electrodes."""
    n = int(seconds * FS)
    white = rng.normal(size=(8, n))
    bg = np.cumsum(white, axis=1) * 0.05 + white * 3.0
    bg -= bg.mean(axis=1, keepdims=True)
    t = np.arange(n) / FS
    f, where = RHYTHM[stage]
    amp = np.zeros(8)
    amp[{"ant": slice(0, 4), "post": slice(4, 8), "all": slice(0, 8)}[where]] = 12.0
    phase = rng.uniform(0, 2 * np.pi, size=(8, 1))
    rhythm = amp[:, None] * np.sin(2 * np.pi * f * t + phase) * (1 + 0.3 * rng.normal(size=(8, 1)))
    return gain[:, None] * (bg + rhythm)


def write_subject(root: Path, subject: int, stages: list[int], seed: int, lead: float = 7.3,
                  reference: str = "CLE", unknown: tuple[int, ...] = ()) -> None:
    """PSG + Base for one subject: ``lead`` seconds of signal before the first scored epoch (onsets not
    aligned with the PSG start); epochs listed in ``unknown`` are annotated "Sleep stage ?"."""
    rng = np.random.default_rng(seed)
    gain = rng.uniform(0.7, 1.4, size=8)  # subject drift
    pieces = [stage_signal(rng, 0, lead, gain)]
    pieces += [stage_signal(rng, s, 30.0, gain) for s in stages]
    pieces.append(stage_signal(rng, 0, 12.0, gain))
    eeg = np.concatenate(pieces, axis=1)
    n = eeg.shape[1]
    labels = [f"EEG {e}-{reference}" for e in ELECTRODES]
    signals = [eeg[i] for i in range(8)]
    # non-EEG channels in the PSG, as in SS3
    for label in ("EOG Left Horiz", "EMG Chin", "ECG I"):
        labels.insert(3, label)
        signals.insert(3, rng.normal(size=n) * 5)
    headers = [highlevel.make_signal_header(lab, sample_frequency=FS, physical_min=-500, physical_max=500)
               for lab in labels]
    name = f"01-03-{subject:04d}"
    psg = root / f"{name} PSG.edf"
    if not highlevel.write_edf(str(psg), signals, headers, header=highlevel.make_header(startdate=START)):
        raise OSError(f"{psg}: pyedflib could not write the PSG")
    w = pyedflib.EdfWriter(str(root / f"{name} Base.edf"), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
    try:
        w.setStartdatetime(START)
        for k, s in enumerate(stages):
            w.writeAnnotation(lead + 30.0 * k, 30.0, "Sleep stage ?" if k in unknown else STAGE_TEXT[s])
    finally:
        w.close()


def hypnogram(rng: np.random.Generator, n: int) -> list[int]:
    """A plausible stage sequence: runs of 2..6 epochs, N2 most common."""
    out: list[int] = []
    while len(out) < n:
        out += [int(rng.choice(5, p=[0.2, 0.12, 0.34, 0.17, 0.17]))] * int(rng.integers(2, 7))
    return out[:n]


def write_corpus(root: Path, subjects: list[int], n_epochs: int, seed: int = 0) -> dict[int, list[int]]:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for k, s in enumerate(subjects):
        stages = hypnogram(rng, n_epochs)
        write_subject(root, s, stages, seed=seed * 100 + s, reference="CLE" if k % 2 == 0 else "LER")
        out[s] = stages
    return out
