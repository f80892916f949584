"""BioFormer's analyses: Frequency-Band Discriminability (Appendix F) and subject separability (Sec. 5.5, G.6)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn import metrics as skm
from sklearn.decomposition import PCA

from biosig_lightning.analysis import fbd, subject_probe
from biosig_lightning.analysis.fbd import (
    AnalysisError,
    band_power,
    band_summary,
    fbd_from_band_power,
    parse_bands,
)
from biosig_lightning.analysis.subject_probe import (
    adjusted_mutual_info,
    kmeans,
    macro_f1,
    normalized_mutual_info,
    pca_2d,
    principal_coordinates,
    probe_split,
    silhouette_score,
    train_probe,
)
from biosig_lightning.cli import main
from biosig_lightning.commands import fbd as fbd_command
from biosig_lightning.commands import probe as probe_command
from biosig_lightning.models.baselines import CNN1D, Medformer, TransformerClassifier
from biosig_lightning.models.bioformer import BioFormer
from tests.conftest import EXPERIMENTS

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
    # 4 samples at 16 Hz: FFT frequencies 0, 4, 8 Hz; bins [2,4) and [6,8] hold none... except Nyquist 8 -> last
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
    power, labels, subjects = _cells({(0, 1): [1.0], (0, 2): [3.0], (1, 3): [7.0], (2, 4): [5.0], (2, 5): [5.0]})
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


# --------------------------------------------------------------------------- clustering scores vs sklearn


@pytest.mark.parametrize(("n", "ka", "kb", "seed"), [(40, 3, 5, 0), (200, 8, 8, 1), (57, 2, 11, 2), (30, 1, 4, 3)])
def test_nmi_ami_match_sklearn(n: int, ka: int, kb: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(ka, size=n)
    b = np.where(rng.random(n) < 0.6, a % kb, rng.integers(kb, size=n))  # partly dependent
    assert normalized_mutual_info(a, b) == pytest.approx(skm.normalized_mutual_info_score(a, b), abs=1e-10)
    assert adjusted_mutual_info(a, b) == pytest.approx(skm.adjusted_mutual_info_score(a, b), abs=1e-10)


def test_nmi_ami_limits() -> None:
    a = np.repeat(np.arange(4), 10)
    relabelled = (a + 1) % 4 * 7
    assert normalized_mutual_info(a, relabelled) == pytest.approx(1.0)
    assert adjusted_mutual_info(a, relabelled) == pytest.approx(1.0)
    assert normalized_mutual_info(np.zeros(5), np.ones(5)) == 1.0
    rng = np.random.default_rng(0)
    rand = [adjusted_mutual_info(a, rng.permutation(a)) for _ in range(20)]
    assert abs(np.mean(rand)) < 0.03  # AMI is 0 in expectation for independent labelings


def test_silhouette_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 7))
    labels = rng.integers(4, size=90)
    x[:, 0] += 3 * labels
    assert silhouette_score(x, labels, chunk=17) == pytest.approx(skm.silhouette_score(x, labels), abs=1e-10)
    labels[5] = 9  # a singleton scores 0, as in sklearn
    assert silhouette_score(x, labels) == pytest.approx(skm.silhouette_score(x, labels), abs=1e-10)
    with pytest.raises(AnalysisError, match="2 <= number of groups"):
        silhouette_score(x, np.zeros(90))


def test_kmeans_recovers_separated_blobs() -> None:
    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(5), 20)
    centres = rng.normal(scale=10.0, size=(5, 30))
    x = centres[truth] + rng.normal(size=(100, 30))
    labels = kmeans(x, 5, seed=0)
    assert normalized_mutual_info(truth, labels) == pytest.approx(1.0)
    np.testing.assert_array_equal(labels, kmeans(x, 5, seed=0))
    with pytest.raises(AnalysisError, match="k-means needs"):
        kmeans(x, 101)


def test_principal_coordinates_keep_every_distance() -> None:
    rng = np.random.default_rng(1)
    for shape in ((15, 40), (40, 6)):
        x = rng.normal(size=shape)
        z, ratio = principal_coordinates(x)
        assert z.shape == (shape[0], min(shape[0] - 1, shape[1])) and ratio.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(skm.pairwise_distances(z), skm.pairwise_distances(x), atol=1e-9)
        labels = rng.integers(3, size=shape[0])
        assert silhouette_score(z, labels) == pytest.approx(silhouette_score(x, labels), abs=1e-9)


def test_pca_2d_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    for shape in ((20, 50), (60, 5)):  # both the Gram and the covariance route
        x = rng.normal(size=shape) * np.linspace(3, 0.5, shape[1])
        coords, ratio = pca_2d(x)
        ref = PCA(2).fit(x)
        np.testing.assert_allclose(ratio, ref.explained_variance_ratio_, rtol=1e-8)
        np.testing.assert_allclose(np.abs(coords), np.abs(ref.transform(x)), atol=1e-8)


# --------------------------------------------------------------------------- subject probe


def test_macro_f1_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(6, size=80)
    p = np.where(rng.random(80) < 0.5, y, rng.integers(7, size=80))
    assert macro_f1(y, p) == pytest.approx(skm.f1_score(y, p, average="macro", zero_division=0))


def test_probe_split_is_within_subject_stratified_and_seeded() -> None:
    subjects = np.repeat([3, 8, 9], 20)
    labels = np.tile(np.repeat([0, 1], 10), 3)
    train, test = probe_split(subjects, labels, 0.3, seed=0)
    assert not set(train) & set(test) and len(train) + len(test) == 60
    for s in (3, 8, 9):
        for c in (0, 1):
            assert np.sum((subjects[test] == s) & (labels[test] == c)) == 3
    np.testing.assert_array_equal(test, probe_split(subjects, labels, 0.3, seed=0)[1])
    assert not np.array_equal(test, probe_split(subjects, labels, 0.3, seed=1)[1])
    with pytest.raises(AnalysisError, match="subject 7 has 1 window"):
        probe_split(np.array([1, 1, 7]), np.zeros(3), 0.3)


def test_probe_reads_subjects_only_when_features_encode_them() -> None:
    rng = np.random.default_rng(0)
    subjects = np.repeat(np.arange(8), 30)
    labels = np.tile([0, 1], 120)
    train, test = probe_split(subjects, labels, 0.3, seed=0)
    signature = rng.normal(size=(8, 32))
    encoded = signature[subjects] + 0.5 * rng.normal(size=(240, 32))
    pred = train_probe(encoded[train], subjects[train], encoded[test], epochs=30, hidden=32, seed=0)
    assert macro_f1(subjects[test], pred) > 0.9
    noise = rng.normal(size=(240, 32))
    pred = train_probe(noise[train], subjects[train], noise[test], epochs=30, hidden=32, seed=0)
    assert macro_f1(subjects[test], pred) < 0.35  # chance is 1/8


# --------------------------------------------------------------------------- end to end


TINY_RUN = """
seed_everything: 0
trainer:
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args: {save_dir: runs, name: tiny_bioformer}
model:
  class_path: ClassificationTask
  init_args:
    backbone:
      class_path: biosig_lightning.models.bioformer.BioFormer
      init_args: {d_model: 16, d_ff: 32, n_heads: 2, n_layers: 2}
    lr: 3.0e-3
data:
  class_path: SyntheticDataModule
  init_args: {n_chans: 3, sfreq: 128.0, n_times: 64, n_classes: 2, label_level: window, n_subjects: 10}
"""


def test_fbd_and_probe_on_a_trained_bioformer_run(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (in_tmp / "tiny.yaml").write_text(TINY_RUN)
    main(["fit", "--config", "tiny.yaml", "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml"),
          "--data.init_args.synthetic_options", '{"windows_per_subject": 30}', "--trainer.enable_progress_bar=false"])
    run_dir = in_tmp / "runs" / "tiny_bioformer" / "version_0"
    results = json.loads((run_dir / "results.json").read_text())
    test_subjects = results["subjects"]["test"]

    fbd_command.run([str(run_dir), "--device", "cpu"])
    out = run_dir / "analysis"
    rep = json.loads((out / "fbd.json").read_text())
    assert (out / "fbd.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["split"] == "test" and rep["subjects"] == sorted(test_subjects) and rep["n_windows"] == 30 * 2
    assert rep["input"]["fs_hz"] == 128.0 and len(rep["input"]["fbd"]) == 32  # 2 Hz bins up to 64 Hz
    # BioFormer branches of 32, 16, 8 tokens per 0.5 s window: 64, 32, 16 Hz token rates
    assert [b["fs_hz"] for b in rep["branches"]] == [64.0, 32.0, 16.0]
    assert [len(b["fbd"]) for b in rep["branches"]] == [16, 8, 4]
    assert rep["embedding"] == rep["branches"][0]
    emb = rep["embedding"]
    for i, (a, e, f) in enumerate(zip(emb["inter"], emb["intra"], emb["fbd"], strict=True)):
        assert f == pytest.approx(a / (e + fbd.EPS)), i
    assert set(rep["comparison"]) >= {"low", "all"}
    assert rep["comparison"]["low"]["embedding"] == emb["bands"]["low"]["fbd_mean"]

    probe_command.run([str(run_dir), "--epochs", "20", "--device", "cpu", "--out", str(in_tmp / "probe")])
    rep = json.loads((in_tmp / "probe" / "probe.json").read_text())
    assert (in_tmp / "probe" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bf = BioFormer(n_chans=3, n_outputs=2, n_times=64, sfreq=128.0, d_model=16, d_ff=32, n_heads=2, n_layers=2)
    assert rep["feature_dim"] == bf.feature_dim and rep["n_windows"] == 60
    # 30 % of each (subject, class) cell, rounded per cell
    assert rep["probe"]["n_train"] + rep["probe"]["n_test"] == 60 and 15 <= rep["probe"]["n_test"] <= 21
    assert rep["clustering"]["k"] == 2 and rep["clustering"]["n_windows"] == 60
    # the silhouettes are scikit-learn's on the run's own frozen test features (PCA keeps the distances)
    from sklearn.metrics import silhouette_score as sk_silhouette

    from biosig_lightning.runs import load_run

    feats = subject_probe.collect_features(load_run(run_dir), "test")
    assert feats["features"].shape == (60, bf.feature_dim)
    for key, labels in (("subject", feats["subject"]), ("label", feats["y"])):
        assert rep["silhouette"][key]["score"] == pytest.approx(sk_silhouette(feats["features"], labels), abs=1e-5)
    # two test subjects whose windows carry the stand-in's subject drift: the probe beats the majority guess
    assert rep["probe"]["subject_acc"] >= rep["probe"]["majority_acc"] + 0.2, rep["probe"]
    printed = capsys.readouterr().out
    assert "fbd: " in printed and "probe: " in printed

    with pytest.raises(AnalysisError, match="--bands"):
        fbd_command.run([str(run_dir), "--bands", "nonsense"])
