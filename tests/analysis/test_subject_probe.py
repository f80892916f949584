"""Subject separability (BioFormer Sec. 5.5, App. G.6): clustering scores against scikit-learn, and the
subject probe."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm
from sklearn.decomposition import PCA

from biosig_lightning.analysis.fbd import (
    AnalysisError,
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

# --------------------------------------------------------------------------- clustering scores vs sklearn


@pytest.mark.parametrize(("n", "ka", "kb", "seed"),
                         [(40, 3, 5, 0), (200, 8, 8, 1), (57, 2, 11, 2), (30, 1, 4, 3)])
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
