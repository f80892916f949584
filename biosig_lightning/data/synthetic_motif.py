"""The ``motif`` stand-in: each class embeds its own waveform at random times.

Class ``k``'s waveform is a fixed smooth random shape (four Gaussian bumps of random sign under a
Hann window, 0.3 s long), drawn once from the seed; a window holds ``1 + Poisson(0.5 s^-1 x
seconds)`` copies at random times with amplitudes around ``2 x class_separation``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from biosig_lightning.data.synthetic_base import SubjectParams, SyntheticReader, gauss

__all__ = ["MotifStandIn"]


class MotifStandIn(SyntheticReader):
    """Classes as waveforms (module docstring); arguments are :class:`SyntheticReader`'s."""

    kind = "motif"

    def _kind_globals(self, rng: np.random.Generator, out: dict[str, Any]) -> None:
        length = int(np.clip(round(0.3 * self.spec.sfreq), 8, self.spec.n_times // 3))
        t = np.linspace(0.0, 1.0, length)
        motifs = []
        for _ in range(self.spec.n_outputs):
            shape = sum(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0)
                        * gauss(t, rng.uniform(0.15, 0.85), rng.uniform(0.04, 0.12)) for _ in range(4))
            shape = shape * np.hanning(length)
            motifs.append(shape / np.abs(shape).max())
        out["motifs"] = motifs

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        out = super()._events(rng, y, params)
        for k, shape in enumerate(self._global["motifs"]):
            rows = np.flatnonzero(y == k)
            counts = 1 + rng.poisson(0.5 * self.spec.window_seconds, len(rows))
            out[rows, 0] += self._train(rng, counts, shape, 2.0 * self.class_separation)
        return out
