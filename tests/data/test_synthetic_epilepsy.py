"""The signed-EEG epilepsy stand-in: anticorrelated channel pairs and a class rhythm, reproducible by seed."""

from __future__ import annotations

import numpy as np

from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.synthetic_epilepsy import SignedEEGStandIn


def test_standin_has_anticorrelated_pairs_and_class_rhythm() -> None:
    spec = CorpusSpec("x", tuple(f"c{i}" for i in range(6)), 100.0, 1200, ("control", "epilepsy"), "subject")
    gen = SignedEEGStandIn(spec, n_subjects=6, windows_per_subject=3, seed=1)
    blocks = list(gen.iter_blocks())
    again = list(SignedEEGStandIn(spec, n_subjects=6, windows_per_subject=3, seed=1).iter_blocks())
    assert all(np.array_equal(a.x, b.x) for a, b in zip(blocks, again, strict=True))
    assert {int(b.y[0]) for b in blocks} == {0, 1}
    pair, other = [], []
    for b in blocks:
        corr = np.mean([np.corrcoef(w) for w in b.x], axis=0)
        cross = corr[:3, 3:].mean()  # between the two halves of the montage
        # the epileptiform class reverses phase between the halves (negative edges), controls do not
        assert (cross < -0.1) if b.y[0] == 1 else (cross > 0.1), (int(b.y[0]), cross)
        pair += [corr[0, 1], corr[2, 3], corr[4, 5]]
        other += [corr[0, 2], corr[1, 2], corr[3, 5]]
        assert 5 < b.x.std() < 200  # microvolt scale
    assert np.mean(pair) < np.mean(other) - 0.2  # channel pairs share an anti-correlated source
    # the epileptiform class has much more 2-4 Hz power relative to 8-12 Hz
    def ratio(x: np.ndarray) -> float:
        f = np.fft.rfftfreq(x.shape[-1], 0.01)
        p = np.abs(np.fft.rfft(x, axis=-1)) ** 2
        return float(p[..., (f > 2) & (f < 4)].sum() / p[..., (f > 8) & (f < 12)].sum())
    r1 = [ratio(b.x) for b in blocks if b.y[0] == 1]
    r0 = [ratio(b.x) for b in blocks if b.y[0] == 0]
    assert min(r1) > 2 * max(r0)
