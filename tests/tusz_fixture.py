"""Writes TUSZ v1.5.2 trees in the real format: pyedflib EDFs with ``.tse`` / ``.tse_bi`` beside each.

Layout (as NEDC publishes v1.5.2)::

    edf/{train,dev}/<montage>/NNN/<patient>/sSSS_YYYY_MM_DD/<patient>_sSSS_tTTT.edf (+ .tse, .tse_bi)

:func:`write_tse` and :func:`write_edf` are the two file writers (the reader tests in
``tests/data/corpora/test_tusz.py`` use them too); :func:`write_seizure_corpus` builds a
small learnable corpus for end-to-end runs: scalp-EEG-like background and, in seizure
segments, an evolving rhythmic spike-wave burst, with patient drift (channel gains,
background rhythm, seizure frequency and focus differ per patient).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pyedflib import highlevel

from biosig_lightning.data.corpora.tusz import CHANNELS

Event = tuple[float, float, str]


def write_tse(stem: Path, events: list[Event], seconds: float) -> None:
    """``.tse`` (types) and ``.tse_bi`` (seiz/bckg) exactly as TUSZ v1.5.2 publishes them.

    Gaps between events are written as ``bckg`` terms, so the terms tile ``[0, seconds]``.
    """
    def body(evs: list[Event]) -> str:
        lines, t = [], 0.0
        for s, e, lab in evs:
            if s > t:
                lines.append(f"{t:.4f} {s:.4f} bckg 1.0000")
            lines.append(f"{s:.4f} {e:.4f} {lab} 1.0000")
            t = e
        if t < seconds:
            lines.append(f"{t:.4f} {seconds:.4f} bckg 1.0000")
        return "version = tse_v1.0.0\n\n" + "\n".join(lines) + "\n"

    stem.with_suffix(".tse").write_text(body(events))
    stem.with_suffix(".tse_bi").write_text(body([(s, e, "seiz") for s, e, _ in events]))


def write_edf(path: Path, signals: np.ndarray, fs: int, suffix: str = "REF", physical: float = 1000.0,
              order: np.ndarray | None = None) -> None:
    """An EDF with the 19 channels of ``signals`` (``(19, n)`` in uV, :data:`CHANNELS` order) labelled
    ``EEG XX-<suffix>`` in the given channel ``order``, plus an ``EEG EKG1-REF`` channel the reader
    must skip."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = np.arange(len(CHANNELS)) if order is None else order
    sigs = [np.asarray(signals[i], dtype=np.float64) for i in order]
    headers = [highlevel.make_signal_header(f"{CHANNELS[i]}-{suffix}", sample_frequency=fs,
                                            physical_min=-physical, physical_max=physical) for i in order]
    sigs.insert(3, np.zeros(signals.shape[1]))
    headers.insert(3,
                   highlevel.make_signal_header("EEG EKG1-REF", sample_frequency=fs, physical_min=-physical,
                                                   physical_max=physical))
    assert highlevel.write_edf(str(path), sigs, headers), path


def v152_path(root: Path, folder: str, montage: str, patient: str, session: int, token: int,
              date: str = "2003_07_21") -> Path:
    """``edf/<folder>/<montage>/NNN/<patient>/sSSS_<date>/<patient>_sSSS_tTTT.edf``."""
    return (root / "edf" / folder / montage / patient[-3:] / patient / f"s{session:03d}_{date}"
            / f"{patient}_s{session:03d}_t{token:03d}.edf")


@dataclass
class SeizureCorpus:
    """What :func:`write_seizure_corpus` wrote: patient ids per split folder and, per EDF stem, its split
    folder, its seizure events and the detection label of each of its clips."""

    folders: dict[str, list[int]] = field(default_factory=dict)
    folder_of: dict[str, str] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    clip_labels: dict[str, list[int]] = field(default_factory=dict)


def _background(rng: np.random.Generator, n: int, fs: int, alpha_hz: float) -> np.ndarray:
    """(19, n) pink-ish noise (1/sqrt(f) amplitude) plus a posterior alpha rhythm, about 10 uV rms."""
    spec = rng.normal(size=(19, n // 2 + 1)) + 1j * rng.normal(size=(19, n // 2 + 1))
    f = np.fft.rfftfreq(n, 1 / fs)
    spec *= 1.0 / np.sqrt(np.maximum(f, 0.5))
    spec[:, f > 60] *= 0.1
    bg = np.fft.irfft(spec, n=n, axis=-1)
    bg *= 8.0 / bg.std(axis=-1, keepdims=True)
    posterior = np.array([ch in ("EEG O1", "EEG O2", "EEG P3", "EEG P4", "EEG PZ", "EEG T5", "EEG T6")
                          for ch in CHANNELS], dtype=float)
    t = np.arange(n) / fs
    alpha = 6.0 * np.sin(2 * np.pi * alpha_hz * t[None] + rng.uniform(0, 2 * np.pi, size=(19, 1)))
    return bg + (0.3 + 0.7 * posterior[:, None]) * alpha


def _burst(rng: np.random.Generator, n: int, fs: int, onset: float, duration: float, freq: float,
           focus: np.ndarray, amp: float) -> np.ndarray:
    """(19, n) an ictal spike-wave rhythm: ``freq`` Hz with harmonics, slowing by 30 % over the event,
    ramping in over 1 s, strongest on the patient's ``focus`` channels (weights in [0, 1])."""
    t = np.arange(n) / fs
    inside = (t >= onset) & (t < onset + duration)
    tau = np.clip((t - onset) / duration, 0.0, 1.0)
    phase = 2 * np.pi * np.cumsum(freq * (1.0 - 0.3 * tau)) / fs
    lag = rng.uniform(0, 0.4, size=(19, 1))  # channels join the rhythm at slightly different phases
    ph = phase[None] + 2 * np.pi * lag
    wave = np.sin(ph) + 0.6 * np.sin(2 * ph + 0.5) + 0.35 * np.sin(3 * ph + 1.0)
    envelope = np.clip((t - onset) / 1.0, 0.0, 1.0) * inside
    return amp * focus[:, None] * envelope[None] * wave


def write_seizure_corpus(root: Path, n_train: int = 12, n_dev: int = 4, recordings: int = 2, clips: int = 6,
                         clip_seconds: int = 12, seizure_clips: int = 2, shared: int = 1,
                         seed: int = 0) -> SeizureCorpus:
    """A TUSZ v1.5.2 tree whose seizure clips carry a learnable seizure-like burst with patient drift.

    Patients ``00000101..`` go to ``edf/train``, the next ``n_dev`` to ``edf/dev``; each has
    ``recordings`` sessions of one EDF of ``clips * clip_seconds`` seconds, ``seizure_clips``
    of whose clips hold one seizure (8-10.5 s, inside the clip). Every third patient is recorded
    in the LE montage at 256 Hz, the others AR at 250 Hz, so the reader's channel matching and
    resampling take part. Per patient (drift): channel gains (log-normal, sd 0.3) times a
    patient gain in [0.6, 1.6], alpha frequency 8-12 Hz, seizure frequency 3-6 Hz, a focus of
    6 channels (others see the rhythm at 25 %) and seizure amplitude 4-6x the background.
    The first ``shared`` train patients also get one recording under ``edf/dev`` (as five
    v1.5.2 patients do); the reader must leave those out of the test set.
    """
    out = SeizureCorpus(folders={"train": [], "dev": []})
    seconds = clips * clip_seconds
    for k in range(n_train + n_dev):
        pid = 101 + k
        patient = f"{pid:08d}"
        folder = "train" if k < n_train else "dev"
        out.folders[folder].append(pid)
        rng = np.random.default_rng([seed, pid])
        le = k % 3 == 2
        fs, suffix, montage = (256, "LE", "02_tcp_le") if le else (250, "REF", "01_tcp_ar")
        gain = rng.uniform(0.6, 1.6) * np.exp(0.3 * rng.normal(size=19))
        alpha_hz, sz_hz = rng.uniform(8.0, 12.0), rng.uniform(3.0, 6.0)
        focus = np.full(19, 0.25)
        focus[rng.choice(19, size=6, replace=False)] = 1.0
        amp = rng.uniform(4.0, 6.0) * 8.0
        order = rng.permutation(19)
        places = [(folder, r + 1) for r in range(recordings)]
        if k < shared:
            places.append(("dev", recordings + 1))
        for where, session in places:
            n = seconds * fs
            x = _background(rng, n, fs, alpha_hz)
            events: list[Event] = []
            chosen = sorted(int(c) for c in rng.choice(clips, size=seizure_clips, replace=False))
            for c in chosen:
                duration = rng.uniform(8.0, 10.5)
                onset = c * clip_seconds + rng.uniform(0.5, clip_seconds - duration - 0.5)
                x += _burst(rng, n, fs, onset, duration, sz_hz, focus, amp)
                events.append((round(onset, 4), round(onset + duration, 4),
                               str(rng.choice(["fnsz", "cpsz"]))))
            edf = v152_path(root, where, montage, patient, session, 0,
                            date=f"20{10 + session:02d}_0{1 + k % 9}_15")
            write_edf(edf, gain[:, None] * x, fs, suffix, order=order)
            write_tse(edf.with_suffix(""), events, seconds)
            out.folder_of[edf.stem] = where
            out.events[edf.stem] = events
            out.clip_labels[edf.stem] = [
                int(c in chosen) for c in range(clips)
            ]  # seizures lie inside their clip
    return out
