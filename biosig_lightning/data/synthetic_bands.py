"""The ``bands`` stand-in: each class adds a spectral peak in its own EEG band.

Class ``k`` adds a peak in its band (alpha, theta, beta, delta, gamma in that order, so for two
classes "control" is alpha-dominant and "patient" theta-dominant, as in EEG slowing; more than five
classes use log-spaced bands), with a per-class spatial pattern and a per-window strength. Bands
are scaled down when the Nyquist frequency is below 50 Hz; every peak moves with the subject's
peak shift (the individual alpha frequency).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from biosig_lightning.data.synthetic_base import SubjectParams, SyntheticReader, gauss

__all__ = ["BandsStandIn"]

# Class bands in class order: class 0 alpha, class 1 theta, ...
_EEG_BANDS = ((8.0, 13.0), (4.0, 8.0), (13.0, 30.0), (1.0, 4.0), (30.0, 45.0))
_BAND_PEAK = 6.0  # class peak power over the background at the peak centre


class BandsStandIn(SyntheticReader):
    """Classes as band-power peaks (module docstring); arguments are :class:`SyntheticReader`'s."""

    kind = "bands"

    def _kind_globals(self, rng: np.random.Generator, out: dict[str, Any]) -> None:
        k = self.spec.n_outputs
        if k <= len(_EEG_BANDS):
            out["bands"] = [(lo * self._hz, hi * self._hz) for lo, hi in _EEG_BANDS[:k]]
        else:
            edges = np.geomspace(1.0 * self._hz, min(45.0 * self._hz, 0.9 * self._nyq), k + 1)
            out["bands"] = list(zip(edges[:-1], edges[1:], strict=True))

    def _class_power(self, rng: np.random.Generator, power: np.ndarray, bg2: np.ndarray, y: np.ndarray,
                     params: SubjectParams) -> np.ndarray:
        strength = self.class_separation**2 * np.exp(0.5 * rng.standard_normal((len(y), 1, 1)))
        return power + strength * self._band_peaks(bg2, params)[y]

    def _band_peaks(self, bg2: np.ndarray, params: SubjectParams) -> np.ndarray:
        """(K, C, F) peak power of each class in its band, as a multiple of the background."""
        f = self._freqs
        peaks = []
        for lo, hi in self._global["bands"]:
            centre = np.sqrt(lo * hi) * params.peak_shift
            width = max((hi - lo) / 4.0, f[1])
            level = np.interp(centre, f, bg2)
            peaks.append(_BAND_PEAK * level * gauss(f, centre, width) ** 2)
        return np.stack(peaks)[:, None, :] * self._global["class_pattern"][:, :, None] ** 2
