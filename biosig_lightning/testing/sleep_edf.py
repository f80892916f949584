"""Writes a small Sleep-EDF Expanded (Sleep Cassette) corpus in its real layout and format.

Per night ``SC4ssNE0-PSG.edf`` (EEG Fpz-Cz, EEG Pz-Oz, EOG horizontal at 100 Hz; Resp oro-nasal,
EMG submental, Temp rectal, Event marker at 1 Hz, as PhysioNet's files) and ``SC4ssNxx-Hypnogram.edf``
(EDF+ annotations, runs of one stage merged into one annotation as in the real hypnograms, text
``Sleep stage W/1/2/3/4/R/?`` or ``Movement time``, the last ``?`` running past the PSG end). The
hypnogram's two letters differ from the PSG's ``E0`` (``EC``, ``EH``, ``EJ``, ``EA``), as PhysioNet names
them. The EEG carries each stage's rhythm (:data:`biosig_lightning.testing.mass_ss3.RHYTHM`: Fpz-Cz is
anterior,
Pz-Oz posterior) over a pink-ish background with a per-subject gain.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pyedflib
from pyedflib import highlevel

from biosig_lightning.testing.mass_ss3 import RHYTHM, hypnogram

START = datetime(1989, 4, 24, 16, 13, 0)
FS = 100
#: class index (W, N1, N2, N3, REM) -> hypnogram text; N3 is written as R&K stage 3 or 4 (see write_night)
STAGE_TEXT = {0: "Sleep stage W", 1: "Sleep stage 1", 2: "Sleep stage 2",
              3: "Sleep stage 3", 4: "Sleep stage R"}
HYPNOGRAM_LETTERS = ("EC", "EH", "EJ", "EA")
#: the non-EEG channels of a Sleep Cassette PSG and their rates
OTHER_CHANNELS = {"EOG horizontal": FS, "Resp oro-nasal": 1, "EMG submental": 1,
                  "Temp rectal": 1, "Event marker": 1}


def write_hypnogram(path: Path, notes: list[tuple[float, float, str]], start: datetime = START) -> None:
    """An EDF+ annotations-only file of ``(onset s, duration s, text)``, as PhysioNet's hypnograms."""
    w = pyedflib.EdfWriter(str(path), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
    try:
        w.setStartdatetime(start)
        for onset, duration, text in notes:
            w.writeAnnotation(onset, duration, text)
    finally:
        w.close()


def stage_eeg(rng: np.random.Generator, stage: int, seconds: float, gain: np.ndarray) -> np.ndarray:
    """(2, seconds * FS) EEG in uV (Fpz-Cz, Pz-Oz): background plus the stage's rhythm where it lives."""
    n = int(seconds * FS)
    white = rng.normal(size=(2, n))
    bg = np.cumsum(white, axis=1) * 0.05 + white * 3.0
    bg -= bg.mean(axis=1, keepdims=True)
    f, where = RHYTHM[stage]
    amp = {"ant": np.array([12.0, 0.0]), "post": np.array([0.0, 12.0]), "all": np.array([12.0, 12.0])}[where]
    phase = rng.uniform(0, 2 * np.pi, size=(2, 1))
    rhythm = (
        amp[:, None] * np.sin(2 * np.pi * f * np.arange(n) / FS + phase) * (1 + 0.3 * rng.normal(size=(2, 1)))
    )
    return gain[:, None] * (bg + rhythm)


def _runs(labels: list[str]) -> list[tuple[int, int, str]]:
    """``(first epoch, n epochs, text)`` of each run of equal texts."""
    out: list[tuple[int, int, str]] = []
    for k, text in enumerate(labels):
        if out and out[-1][2] == text:
            out[-1] = (out[-1][0], out[-1][1] + 1, text)
        else:
            out.append((k, 1, text))
    return out


def write_night(root: Path, subject: int, night: int, stages: list[int], seed: int, letters: str = "EC",
                dropped: dict[int, str] | None = None) -> list[int]:
    """PSG + hypnogram of one night; ``dropped`` maps epoch positions to ``Sleep stage ?`` or ``Movement
    time``.

    Returns the class indices of the scored epochs the reader keeps (``dropped`` ones left out).
    """
    rng = np.random.default_rng(seed)
    gain = rng.uniform(0.7, 1.4, size=2)  # subject drift
    dropped = dropped or {}
    eeg = np.concatenate(
        [stage_eeg(rng, s, 30.0, gain) for s in stages] + [stage_eeg(rng, 0, 12.0, gain)], axis=1
    )
    n = eeg.shape[1]
    signals = [eeg[0], eeg[1]]
    labels = ["EEG Fpz-Cz", "EEG Pz-Oz"]
    for label, fs in OTHER_CHANNELS.items():
        labels.append(label)
        signals.append(rng.normal(size=n * fs // FS) * 5)
    headers = [
        highlevel.make_signal_header(
            lab,
            sample_frequency=FS if lab.startswith("EEG") else OTHER_CHANNELS[lab],
            physical_min=-500,
            physical_max=500,
        )
        for lab in labels
    ]
    name = f"SC4{subject:02d}{night}"
    psg = root / f"{name}E0-PSG.edf"
    if not highlevel.write_edf(str(psg), signals, headers, header=highlevel.make_header(startdate=START)):
        raise OSError(f"{psg}: pyedflib could not write the PSG")
    # R&K scoring: N3 is stage 3 or 4, chosen per epoch so both texts occur
    texts = [dropped.get(k) or (STAGE_TEXT[s] if s != 3 or rng.random() < 0.5 else "Sleep stage 4")
             for k, s in enumerate(stages)]
    notes = [(30.0 * k, 30.0 * m, text) for k, m, text in _runs(texts)]
    notes.append((30.0 * len(stages), 600.0, "Sleep stage ?"))  # the unscored tail past the PSG end
    write_hypnogram(root / f"{name}{letters}-Hypnogram.edf", notes)
    return [s for k, s in enumerate(stages) if k not in dropped]


def write_corpus(root: Path, nights: list[tuple[int, int]],
                 n_epochs: int, seed: int = 0) -> dict[int, list[int]]:
    """Nights ``(subject, night)``; each starts and ends awake (so wake cropping keeps every epoch) and has
    one unscored and one movement epoch inside. Returns ``{subject: kept class indices of its nights}``."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out: dict[int, list[int]] = {}
    for k, (subject, night) in enumerate(nights):
        stages = [0, 0] + hypnogram(rng, n_epochs - 4) + [0, 0]
        dropped = {n_epochs // 3: "Movement time", 2 * n_epochs // 3: "Sleep stage ?"}
        kept = write_night(root, subject, night, stages, seed=seed * 100 + 10 * subject + night,
                           letters=HYPNOGRAM_LETTERS[k % len(HYPNOGRAM_LETTERS)], dropped=dropped)
        out.setdefault(subject, []).extend(kept)
    return out
