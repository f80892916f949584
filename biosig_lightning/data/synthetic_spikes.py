"""The ``spikes`` stand-in: bursts of spike-and-wave complexes mark the positive classes.

Classes ``>= 1`` carry a burst of repeated spike-and-wave complexes (~3 Hz, the subject's own
rate, faster for higher classes: ``(1 + (k - 1) / 2) x`` that rate) over half to all of the window;
every window may also hold isolated sharp transients, so one spike is not a seizure. About 30 % of
windows are positive; under subject-level labels half of a patient's windows carry bursts.
"""

from __future__ import annotations

import numpy as np

from biosig_lightning.data.synthetic_base import SubjectParams, SyntheticReader

__all__ = ["SpikesStandIn"]

_SPIKE_AMP = 5.0  # burst spike height over the background standard deviation
_SPIKE_FRACTION = 0.3  # window-level positives
_SUBJECT_SPIKE_FRACTION = 0.5  # windows with bursts in a patient subject, subject-level labels


class SpikesStandIn(SyntheticReader):
    """Classes as spike-and-wave bursts (module docstring); arguments are :class:`SyntheticReader`'s."""

    kind = "spikes"

    def _window_labels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        y = np.zeros(n, dtype=np.int64)
        positive = rng.permutation(n)[: int(round(_SPIKE_FRACTION * n))]
        y[positive] = rng.integers(1, self.spec.n_outputs, len(positive))
        return y

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        out = super()._events(rng, y, params)
        n = len(y)
        kernel = self._spike_wave(0.33)
        isolated = rng.poisson(0.3 * self.spec.window_seconds, n)
        out[:, 0] += self._train(rng, isolated, kernel[: max(len(kernel) // 3, 4)], 2.5)
        burst = y > 0
        if params.label >= 0:
            burst &= rng.random(n) < _SUBJECT_SPIKE_FRACTION
        rows = np.flatnonzero(burst)
        out[rows, 0] += self._bursts(rng, y[rows], kernel, params, _SPIKE_AMP * self.class_separation)
        return out

    def _bursts(self, rng: np.random.Generator, y: np.ndarray, kernel: np.ndarray, params: SubjectParams,
                amplitude: float) -> np.ndarray:
        """(n, F) ortho rFFT of spike-and-wave bursts; class ``k`` repeats at ``(1 + (k-1)/2) * 3 Hz``."""
        t, sfreq = self.spec.n_times, self.spec.sfreq
        n = len(y)
        if n == 0 or amplitude == 0.0:
            return np.zeros((n, len(self._freqs)), dtype=np.complex128)
        period = sfreq / (params.spike_freq * self._hz * (1.0 + 0.5 * (y - 1)))
        span = t - len(kernel)
        duration = np.minimum(rng.uniform(0.5, 1.0, n) * span, span)
        duration = np.minimum(np.maximum(duration, 2.0 * period), span)
        start = rng.uniform(0.0, 1.0, n) * (span - duration)
        m = int(np.ceil((duration / period).max())) + 1
        offsets = np.arange(m)[None] * period[:, None]
        pos = np.round(start[:, None] + offsets).astype(np.int64)
        live = (offsets <= duration[:, None]) & (pos <= span)
        amp = amplitude * rng.uniform(0.8, 1.2, (n, 1)) * live
        return self._place(np.minimum(pos, span), amp, kernel)
