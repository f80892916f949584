"""The ``sleep`` stand-in: a hypnogram per recording and the spectra and events of each stage.

Per recording, a Markov chain over the stages W, N1, N2, N3, REM (N2 most frequent, N1 rare)
gives the labels; windows are consecutive in time, so neighbouring windows carry information. W
carries alpha and beta, N1 theta, N2 spindles (12-14 Hz) and K-complexes, N3 large delta, REM
low-amplitude sawtooth theta. Class names are read as stages (``Sleep stage W``, ``N3``, ``S4``,
``REM``...); unrecognised names take the unused stages in order. Stage labels are per window,
so the spec must have ``label_level="window"``.
"""

from __future__ import annotations

import numpy as np

from biosig_lightning.data.synthetic_base import SubjectParams, SyntheticReader, gauss

__all__ = ["SLEEP_STAGES", "STAGE_ALIASES", "SleepStandIn", "stage_key"]

SLEEP_STAGES = ("W", "N1", "N2", "N3", "REM")
STAGE_ALIASES = {
    "w": "W", "wake": "W", "awake": "W", "0": "W",
    "n1": "N1", "s1": "N1", "1": "N1",
    "n2": "N2", "s2": "N2", "2": "N2",
    "n3": "N3", "s3": "N3", "s4": "N3", "n4": "N3", "3": "N3", "4": "N3", "sws": "N3", "deep": "N3",
    "rem": "REM", "r": "REM", "5": "REM",
}
# Stage transitions per 30 s epoch (rows: from, columns: to, in SLEEP_STAGES order). The
# stationary distribution is about W 0.13, N1 0.06, N2 0.50, N3 0.15, REM 0.17, close to
# adult hypnogram statistics; recordings start awake.
_SLEEP_TRANSITIONS = np.array([
    [0.86, 0.11, 0.02, 0.00, 0.01],
    [0.07, 0.50, 0.38, 0.00, 0.05],
    [0.015, 0.02, 0.895, 0.045, 0.025],
    [0.01, 0.00, 0.14, 0.85, 0.00],
    [0.035, 0.02, 0.045, 0.00, 0.90],
])
# Spectral peaks per stage: (centre Hz, width Hz, peak power / background power at centre).
_STAGE_PEAKS = {
    "W": ((10.0, 1.2, 12.0), (20.0, 4.0, 2.0), (38.0, 8.0, 2.0)),
    "N1": ((6.0, 1.5, 8.0), (10.0, 1.2, 1.6)),
    "N2": ((5.0, 2.0, 3.0),),
    "N3": ((1.2, 0.7, 24.0),),
    "REM": ((3.0, 1.0, 6.0), (6.0, 1.5, 3.0), (20.0, 5.0, 1.2)),
}
_STAGE_GAIN = {"W": 1.0, "N1": 0.9, "N2": 1.0, "N3": 1.5, "REM": 0.75}
# Transient events per stage: rate per second of spindles and of K-complexes.
_STAGE_EVENTS = {"W": (0.0, 0.0), "N1": (0.0, 0.0), "N2": (0.12, 0.05), "N3": (0.03, 0.02), "REM": (0.0, 0.0)}


def stage_key(name: str) -> str:
    """A class name reduced to its stage alias key (``"Sleep stage W"`` -> ``"w"``)."""
    return name.strip().lower().replace("sleep stage", "").replace("stage", "").strip()


def _stage_of(classes: tuple[str, ...]) -> list[str]:
    """Map class names to sleep stages; unrecognised names take the unused stages in order."""
    if len(classes) > len(SLEEP_STAGES):
        raise ValueError(f"kind='sleep' supports at most {len(SLEEP_STAGES)} classes "
                         f"({', '.join(SLEEP_STAGES)}), got {len(classes)}: {', '.join(classes)}")
    stages: list[str | None] = []
    for name in classes:
        stage = STAGE_ALIASES.get(stage_key(name))
        stages.append(stage if stage not in stages else None)
    free = iter(s for s in SLEEP_STAGES if s not in stages)
    return [s if s is not None else next(free) for s in stages]


class SleepStandIn(SyntheticReader):
    """Sleep stages (module docstring); arguments are :class:`SyntheticReader`'s (``sleep_start`` is read
    here)."""

    kind = "sleep"

    def _setup(self) -> None:
        if self.spec.label_level == "subject":
            raise ValueError(f"synthetic corpus {self.spec.name!r}: kind='sleep' makes window-level stage "
                             f"labels, "
                             "but the spec has label_level='subject'")
        self._stages = _stage_of(self.spec.classes)

    def _window_labels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """A stage sequence from the transition matrix restricted to the spec's stages."""
        order = [SLEEP_STAGES.index(s) for s in self._stages]
        trans = _SLEEP_TRANSITIONS[np.ix_(order, order)]
        trans = trans / trans.sum(axis=1, keepdims=True)
        cum = np.cumsum(trans, axis=1)
        if self.sleep_start == "stationary":
            # a stretch from anywhere in the night: start from the chain's stationary distribution
            evals, evecs = np.linalg.eig(trans.T)
            pi = np.abs(np.real(evecs[:, np.argmin(np.abs(evals - 1.0))]))
            cum_pi = np.cumsum(pi / pi.sum())
            state = min(int(np.searchsorted(cum_pi, rng.random(), side="right")), len(order) - 1)
        else:
            state = self._stages.index("W") if "W" in self._stages else int(rng.integers(len(order)))
        u = rng.random(n)
        y = np.empty(n, dtype=np.int64)
        for i in range(n):
            y[i] = state
            state = min(int(np.searchsorted(cum[state], u[i], side="right")), len(order) - 1)
        return y

    def _class_power(self, rng: np.random.Generator, power: np.ndarray, bg2: np.ndarray, y: np.ndarray,
                     params: SubjectParams) -> np.ndarray:
        sep = self.class_separation
        gain, peaks = self._stage_spectra(bg2, params)
        return power * gain[y][:, None, None] ** (2.0 * min(sep, 1.0)) + sep**2 * peaks[y][:, None, :]

    def _stage_spectra(self, bg2: np.ndarray, params: SubjectParams) -> tuple[np.ndarray, np.ndarray]:
        """Per class: background gain and (F,) peak power of its sleep stage."""
        f = self._freqs
        gains, peaks = [], []
        for stage in self._stages:
            p = np.zeros_like(f)
            for centre, width, ratio in _STAGE_PEAKS[stage]:
                centre = centre * self._hz * params.peak_shift
                level = np.interp(centre, f, bg2)
                p += ratio * level * gauss(f, centre, max(width * self._hz, f[1])) ** 2
            gains.append(_STAGE_GAIN[stage])
            peaks.append(p)
        return np.array(gains), np.stack(peaks)

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        out = super()._events(rng, y, params)
        sep, seconds = self.class_separation, self.spec.window_seconds
        spindle, kcomplex = self._sleep_kernels(params)
        spindle_rate = np.array([_STAGE_EVENTS[s][0] for s in self._stages])[y]
        kc_rate = np.array([_STAGE_EVENTS[s][1] for s in self._stages])[y]
        out[:, 0] += self._train(rng, rng.poisson(spindle_rate * seconds), spindle, 1.5 * sep)
        out[:, 0] += self._train(rng, rng.poisson(kc_rate * seconds), kcomplex, 4.0 * sep)
        return out

    def _sleep_kernels(self, params: SubjectParams) -> tuple[np.ndarray, np.ndarray]:
        sfreq = self.spec.sfreq
        length = self._kernel_len(1.5)
        tt = np.arange(length) / sfreq
        mid = tt[-1] / 2.0
        spindle = np.sin(2.0 * np.pi * 13.0 * self._hz * params.peak_shift * tt) * gauss(tt, mid, mid / 3.0)
        length = self._kernel_len(1.0)
        tt = np.arange(length) / sfreq
        scale = tt[-1] if tt[-1] > 0 else 1.0
        kcomplex = -gauss(tt, 0.3 * scale, 0.08 * scale) + 0.6 * gauss(tt, 0.6 * scale, 0.15 * scale)
        return spindle, kcomplex
