"""Stand-in for routine clinical EEG of epilepsy (or abnormal) vs control subjects, with signed channel
structure.

:class:`SignedEEGStandIn` is a :class:`~biosig_lightning.data.spec.CorpusReader` used by the Turkish
epilepsy and TUH Abnormal DataModules when ``synthetic: true``. It is built to be learnable the way
Yao et al. argue the real corpora are: through anti-correlations between channels and an
epileptiform rhythm in one class. Every window (``(C, T)`` in microvolts) is

* background: independent pink (1/f) noise per channel, ~5 uV, plus a shared pink source with a
  subject-specific spatial loading (volume conduction);
* **anti-correlated channel pairs**: consecutive channels ``(2k, 2k+1)`` share a source with opposite
  signs (as neighbouring bipolar derivations sharing an electrode do), in both classes;
* class 0 (control / normal): a posterior-dominant alpha rhythm (subject peak 8.5-11.5 Hz) with the
  same sign on all channels;
* class 1 (epilepsy / abnormal): bursts of generalised ~3 Hz spike-and-wave (subject rate 2.5-3.5 Hz,
  two to four bursts of 2-4 s per window) with a phase reversal between the first and the second half
  of the channels (opposite signs), so the class's channel graph carries *negative edges between the
  halves* that the control class lacks, and a weaker alpha rhythm;
* subject drift: amplitude scale (x0.7-1.4), per-channel gains, rhythm frequencies, loading patterns,
  a channel-mixing matrix near the identity; each window draws its own phases and burst times.

Labels are per subject (the diagnosis). Determinism: every random stream is keyed by
``(seed, subject, window)``, so a subject's windows do not depend on the other subjects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.spec import CorpusSpec, WindowBlock

__all__ = ["GENERATOR_VERSION", "SignedEEGStandIn"]

GENERATOR_VERSION = "signed-eeg-1"


def _pink(rng: np.random.Generator, shape: tuple[int, ...], n: int, sfreq: float) -> np.ndarray:
    """Unit-variance 1/f noise of length ``n`` along the last axis."""
    freqs = np.fft.rfftfreq(n, 1.0 / sfreq)
    amp = 1.0 / np.sqrt(np.maximum(freqs, 0.5))
    amp[0] = 0.0
    spec = (rng.standard_normal((*shape, len(freqs))) + 1j * rng.standard_normal((*shape, len(freqs)))) * amp
    x = np.fft.irfft(spec, n=n)
    return x / x.std(axis=-1, keepdims=True).clip(1e-12)


class SignedEEGStandIn:
    """Synthetic two-class EEG with anti-correlated channel pairs (see the module docstring).

    Args:
        spec: the corpus shape (channels, rate, window, two classes).
        n_subjects: subjects; classes alternate with a seeded order, ``class1_fraction`` of them class 1.
        windows_per_subject: windows per subject.
        seed: generator seed.
        subject_drift: scale of the between-subject variability (0 = identical subjects).
        class_separation: amplitude of the class rhythms relative to the default.
        class1_fraction: share of class-1 subjects (Turkish corpus: 50 / 121).
        unit: ``recording`` yields every window as its own pseudo-subject (numbered in order), for the
            recording-level split of the Turkish default protocol; ``subject`` keeps subjects.
    """

    def __init__(self, spec: CorpusSpec, n_subjects: int = 12, windows_per_subject: int = 30, seed: int = 0,
                 subject_drift: float = 1.0, class_separation: float = 1.0, class1_fraction: float = 0.42,
                 unit: Literal["subject", "recording"] = "subject") -> None:
        if spec.n_outputs != 2:
            raise ValueError(f"{spec.name}: the signed-EEG stand-in makes two classes, the spec has "
                             f"{spec.n_outputs}")
        if n_subjects < 2 or windows_per_subject < 1:
            raise ValueError("the stand-in needs n_subjects >= 2 and windows_per_subject >= 1")
        self.spec = spec
        self.n_subjects, self.windows_per_subject, self.seed = n_subjects, windows_per_subject, seed
        self.subject_drift, self.class_separation, self.class1_fraction = (
            subject_drift,
            class_separation,
            class1_fraction,
        )
        if unit not in ("subject", "recording"):
            raise ValueError(f"unit must be 'subject' or 'recording', got {unit!r}")
        self.unit = unit
        n1 = min(n_subjects - 1, max(1, round(class1_fraction * n_subjects)))
        order = np.random.default_rng([seed, 7]).permutation(n_subjects)
        self._labels = np.zeros(n_subjects, dtype=np.int64)
        self._labels[order[:n1]] = 1

    def config(self) -> dict[str, Any]:
        return {"generator": GENERATOR_VERSION, "spec": self.spec.to_dict(), "n_subjects": self.n_subjects,
                "windows_per_subject": self.windows_per_subject, "seed": self.seed,
                "subject_drift": self.subject_drift, "class_separation": self.class_separation,
                "class1_fraction": self.class1_fraction, "unit": self.unit}

    def subject_class(self, subject: int) -> int:
        return int(self._labels[subject - 1])

    def iter_blocks(self) -> Iterator[WindowBlock]:
        k = 0
        for s in range(1, self.n_subjects + 1):
            block = self.subject_block(s)
            block.validate(self.spec, f"synthetic {self.spec.name}")
            if self.unit == "subject":
                yield block
                continue
            for i in range(len(block.y)):
                k += 1
                yield WindowBlock(subject=k, recording=f"{block.recording}-w{i:03d}", x=block.x[i: i + 1],
                                  y=block.y[i: i + 1], start=block.start[i: i + 1])

    def subject_block(self, subject: int) -> WindowBlock:
        c, t, fs = self.spec.n_chans, self.spec.n_times, self.spec.sfreq
        drift = self.subject_drift
        rng = np.random.default_rng([self.seed, subject])
        label = self.subject_class(subject)
        scale = np.exp(drift * rng.uniform(np.log(0.7), np.log(1.4)))
        gains = np.exp(0.15 * drift * rng.standard_normal(c))
        mixing = np.eye(c) + 0.05 * drift * rng.standard_normal((c, c))
        loading = 0.5 + 0.3 * drift * rng.standard_normal(c)
        alpha_f = 10.0 + drift * rng.uniform(-1.5, 1.5)
        sw_f = 3.0 + drift * rng.uniform(-0.5, 0.5)
        post = np.linspace(0.3, 1.0, c)  # "posterior" channels carry more alpha
        pair_sign = np.where(np.arange(c) % 2 == 0, 1.0, -1.0)
        # anterior-posterior phase reversal: the discharge has opposite signs on the two halves of the montage
        sw_pattern = np.where(np.arange(c) < c // 2, 1.0, -1.0) * (0.6 + 0.4 * rng.random(c))
        time = np.arange(t) / fs
        windows = np.empty((self.windows_per_subject, c, t), dtype=np.float32)
        for w in range(self.windows_per_subject):
            r = np.random.default_rng([self.seed, subject, w + 1])
            x = 5.0 * _pink(r, (c,), t, fs)
            x += 6.0 * loading[:, None] * _pink(r, (1,), t, fs)
            pair_src = 8.0 * _pink(r, (c // 2 + 1,), t, fs)
            x += pair_sign[:, None] * np.repeat(pair_src, 2, axis=0)[:c]
            alpha_amp = (5.0 if label == 1 else 20.0) * self.class_separation
            envelope = 1.0 + 0.3 * np.sin(2 * np.pi * r.uniform(0.05, 0.2) * time + r.uniform(0, 2 * np.pi))
            alpha = (
                np.sin(2 * np.pi * (alpha_f + r.normal(0, 0.2)) * time + r.uniform(0, 2 * np.pi)) * envelope
            )
            x += alpha_amp * post[:, None] * alpha[None]
            if label == 1:
                x += (
                    (50.0 * self.class_separation)
                    * sw_pattern[:, None]
                    * self._spike_wave(r, time, sw_f)[None]
                )
            windows[w] = (scale * gains[:, None] * (mixing @ x)).astype(np.float32)
        y = np.full(self.windows_per_subject, label, dtype=np.int64)
        return WindowBlock(
            subject=subject,
            recording=f"synthetic-s{subject:03d}",
            x=windows,
            y=y,
            start=np.arange(self.windows_per_subject, dtype=np.float64) * self.spec.window_seconds,
        )

    @staticmethod
    def _spike_wave(rng: np.random.Generator, time: np.ndarray, rate: float) -> np.ndarray:
        """2-4 bursts of 2-4 s of spike-and-wave complexes (a sharp spike then a slow wave, ``rate`` per
        second)."""
        out = np.zeros_like(time)
        length = time[-1] + (time[1] - time[0])
        for _ in range(int(rng.integers(2, 5))):
            dur = rng.uniform(2.0, 4.0)
            onset = rng.uniform(0, max(length - dur, 1e-3))
            inside = (time >= onset) & (time < onset + dur)
            phase = ((time - onset) * rate) % 1.0
            spike = np.exp(-0.5 * ((phase - 0.1) / 0.025) ** 2)
            wave = -0.5 * np.sin(np.pi * np.clip((phase - 0.2) / 0.8, 0, 1))
            out += inside * (spike + wave)
        return out
