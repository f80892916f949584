"""Frequency-Band Discriminability (BioFormer Appendix F, Eqs. 14-20): band power and FBD against hand-made
examples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biosig_lightning.analysis import fbd
from biosig_lightning.analysis.fbd import (
    AnalysisError,
    band_power,
    band_summary,
    fbd_from_band_power,
    parse_bands,
)
from biosig_lightning.models.baselines import CNN1D, Medformer, TransformerClassifier
from biosig_lightning.models.bioformer import BioFormer

# --------------------------------------------------------------------------- band power (Eqs. 14-16)


def test_band_power_parseval_and_sinusoid_bin() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(5, 3, 128))
    power, edges = band_power(z, fs=64.0, bin_hz=2.0)
    assert power.shape == (5, 16) and edges[0] == 0 and edges[-1] == 32.0
    # the bins tile [0, Nyquist]: their powers add up to the mean square of each window
    np.testing.assert_allclose(power.sum(axis=1), (z**2).mean(axis=(1, 2)), rtol=1e-10)
    t = np.arange(128) / 64.0
    sine = np.sin(2 * np.pi * 10.0 * t)[None, None, :]  # exactly 20 cycles: no leakage
    p, _ = band_power(sine, fs=64.0)
    assert np.argmax(p[0]) == 5  # bin [10, 12) Hz
    np.testing.assert_allclose(p[0, 5], 0.5, rtol=1e-10)  # power of a unit sine
    assert p[0, np.arange(16) != 5].max() < 1e-20
    # Eq. 14 keeps the mean (DC) in bin [0, 2); --demean removes it
    offset = np.full((1, 2, 128), 3.0)
    assert band_power(offset, 64.0)[0][0, 0] == pytest.approx(9.0)
    assert band_power(offset, 64.0, demean=True)[0][0, 0] == pytest.approx(0.0, abs=1e-20)


def test_band_power_marks_bins_without_fft_frequency() -> None:
    # 4 samples at 16 Hz: FFT frequencies 0, 4, 8 Hz; bins [2,4) and [6,8] hold none... except Nyquist 8 ->
    # last
    power, edges = band_power(np.ones((2, 1, 4)), fs=16.0, bin_hz=2.0)
    assert list(edges) == [0, 2, 4, 6, 8]
    assert np.isnan(power[:, 1]).all()
    assert np.isfinite(power[:, [0, 2, 3]]).all()
    with pytest.raises(AnalysisError, match=r"\(N, D, L\)"):
        band_power(np.ones((3, 4)), fs=16.0)


# --------------------------------------------------------------------------- FBD (Eqs. 17-20)


def _cells(values: dict[tuple[int, int], list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows with one bin: {(class, subject): [power per window]} -> (power, labels, subjects)."""
    power, labels, subjects = [], [], []
    for (c, s), vals in values.items():
        for v in vals:
            power.append([v])
            labels.append(c)
            subjects.append(s)
    return np.array(power), np.array(labels), np.array(subjects)


def test_fbd_exact_value_on_a_hand_made_example() -> None:
    # class 0: subjects 1, 2, 3 with cell means 1, 2, 3 (windows averaged first, Eq. 16 -> E^(y,s))
    # class 1: subjects 4, 5 with cell means 10, 14; subject 6 of class 1 has two windows 12 +- 1
    power, labels, subjects = _cells({(0, 1): [0.5, 1.5], (0, 2): [2.0], (0, 3): [3.0],
                                      (1, 4): [10.0], (1, 5): [14.0], (1, 6): [11.0, 13.0]})
    res = fbd_from_band_power(power, labels, subjects)
    intra = (np.std([1, 2, 3], ddof=1) + np.std([10, 14, 12], ddof=1)) / 2
    inter = 12.0 - 2.0
    np.testing.assert_allclose(res.intra, [intra])
    np.testing.assert_allclose(res.inter, [inter])
    np.testing.assert_allclose(res.fbd, [inter / (intra + fbd.EPS)])
    np.testing.assert_allclose(res.class_means[:, 0], [2.0, 12.0])
    assert res.subjects_per_class == {0: [1, 2, 3], 1: [4, 5, 6]} and res.classes_without_spread == []


def test_fbd_single_subject_class_is_left_out_of_intra() -> None:
    power, labels, subjects = _cells({(0, 1): [1.0], (0, 2): [3.0], (1, 3): [7.0],
                                      (2, 4): [5.0], (2, 5): [5.0]})
    res = fbd_from_band_power(power, labels, subjects)
    assert res.classes_without_spread == [1]
    np.testing.assert_allclose(res.intra, [(np.std([1, 3], ddof=1) + 0.0) / 2])
    np.testing.assert_allclose(res.inter, [7.0 - 2.0])
    with pytest.raises(AnalysisError, match="at least two subjects"):
        fbd_from_band_power(*_cells({(0, 1): [1.0], (1, 2): [2.0]}))
    with pytest.raises(AnalysisError, match="two classes"):
        fbd_from_band_power(*_cells({(0, 1): [1.0], (0, 2): [2.0]}))


def _oscillations(freq_by_class: dict[int, float], n_subjects: int, seed: int) -> tuple[np.ndarray, ...]:
    """Windows (N, 2, 256) at 128 Hz: a class-specific sine plus subject-scaled broadband noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(256) / 128.0
    xs, labels, subjects = [], [], []
    for c, freq in freq_by_class.items():
        for s in range(n_subjects):
            gain = 1.0 + 0.1 * rng.normal()
            for _ in range(6):
                phase = rng.uniform(0, 2 * np.pi)
                xs.append(gain * (2.0 * np.sin(2 * np.pi * freq * t + phase) + rng.normal(size=(2, 256))))
                labels.append(c)
                subjects.append(100 * c + s)
    return np.stack(xs), np.array(labels), np.array(subjects)


def test_fbd_large_where_classes_differ_and_small_where_they_do_not() -> None:
    x, labels, subjects = _oscillations({0: 10.0, 1: 30.0}, n_subjects=5, seed=1)
    power, edges = band_power(x, fs=128.0)
    res = fbd_from_band_power(power, labels, subjects)
    assert res.fbd[5] > 5 and res.fbd[15] > 5  # bins [10, 12) and [30, 32)
    others = np.ones(len(res.fbd), dtype=bool)
    others[[5, 15]] = False
    assert np.median(res.fbd[others]) < 1.0
    summary = band_summary(res.fbd, edges, parse_bands("alpha:8-13,high:40-64"))
    assert summary["alpha"]["n_bins"] == 2 and summary["alpha"]["frac_above_1"] == 0.5  # bins 8-10, 10-12
    assert summary["high"]["n_bins"] == 12 and summary["high"]["fbd_mean"] < 1.0
    assert summary["all"]["n_bins"] == 32
    # identical classes (both 10 Hz): no task structure in any bin
    x, labels, subjects = _oscillations({0: 10.0, 1: 10.0}, n_subjects=5, seed=2)
    same = fbd_from_band_power(band_power(x, fs=128.0)[0], labels, subjects)
    assert same.fbd[5] < 1.5 and np.median(same.fbd) < 1.0


def test_parse_bands_and_defaults() -> None:
    assert parse_bands(None)[0] == ("low", 0.0, 20.0)
    assert parse_bands("a:0-4, b:4-8") == (("a", 0.0, 4.0), ("b", 4.0, 8.0))
    with pytest.raises(AnalysisError, match="cannot parse"):
        parse_bands("alpha8-13")
    with pytest.raises(AnalysisError, match="low < high"):
        parse_bands("x:10-4")


def test_fbd_layers_need_a_temporal_embedding() -> None:
    shape = dict(n_chans=2, n_outputs=2, n_times=32, sfreq=64.0)
    tokens = fbd._token_fn(BioFormer(**shape, d_model=8, d_ff=16, n_heads=2, n_layers=1), "final")
    seqs = tokens(torch.randn(3, 2, 32))
    assert [tuple(s.shape) for s in seqs] == [(3, 16, 8), (3, 8, 8), (3, 4, 8)]
    with pytest.raises(AnalysisError, match="CNN1D has no forward_tokens.*--layer input"):
        fbd._token_fn(CNN1D(**shape), "final")
    # the Table 3 backbones give their own temporal embeddings, so Fig. 6 can compare methods
    transformer = TransformerClassifier(**shape, d_model=8, n_layers=1, n_heads=2, d_ff=8).eval()
    (seq,) = fbd._token_fn(transformer, "final")(x := torch.randn(3, 2, 32))
    assert seq.shape == (3, 32, 8)
    torch.testing.assert_close(transformer.encoder.norm(seq), transformer.tokens(x))  # before the final norm
    medformer = Medformer(**shape, patch_lens=[4, 8], d_model=8, n_heads=2, e_layers=1, d_ff=8).eval()
    seqs = fbd._token_fn(medformer, "final")(x)
    assert [tuple(s.shape) for s in seqs] == [(3, 8, 8), (3, 4, 8)]  # floor(32 / p) patches, routers left out
    with pytest.raises(AnalysisError, match="needs a BioFormer"):
        fbd._token_fn(CNN1D(**shape), "scln")
