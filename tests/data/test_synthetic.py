"""Tests for the synthetic corpora (biosig_lightning/data/synthetic.py)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from scipy.signal import welch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from biosig_lightning.data.spec import CorpusReader, CorpusSpec, WindowBlock
from biosig_lightning.data.synthetic import (
    GENERATOR_VERSION,
    SYNTHETIC_DEFAULT_SPEC,
    SyntheticReader,
    infer_kind,
)

SLEEP = CorpusSpec("sleep_like", ("Fpz-Cz", "Pz-Oz"), 100.0, 3000, ("W", "N1", "N2", "N3", "REM"), "window")
SEIZURE = CorpusSpec("seizure_like", tuple(f"EEG{i:02d}" for i in range(23)), 256.0, 512,
                     ("non-seizure", "seizure"), "window")
ECG = CorpusSpec("ecg_like", ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6"),
                 250.0,
                 2500, ("NORM", "MI", "STTC", "CD", "HYP"), "window", modality="ecg")
SMALL = CorpusSpec("small", ("C3", "Cz", "C4", "Pz"), 128.0, 128, ("left", "right", "feet"), "window")


def _stack(reader: SyntheticReader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    blocks = list(reader.iter_blocks())
    x = np.concatenate([b.x for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    groups = np.concatenate([np.full(len(b.y), b.subject) for b in blocks])
    return x, y, groups


def _log_band_powers(x: np.ndarray, sfreq: float) -> np.ndarray:
    """Per-channel log Welch power in delta, theta, alpha, low/high beta and gamma."""
    f, p = welch(x, fs=sfreq, nperseg=min(x.shape[-1], int(sfreq)), axis=-1)
    edges = (1, 4, 8, 13, 20, 30, 45)
    bands = [p[..., (f >= lo) & (f < hi)].mean(-1) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return np.log(np.stack(bands, axis=-1) + 1e-12).reshape(len(x), -1)


def _split_gap(spec: CorpusSpec, seeds: tuple[int, ...], **kwargs) -> tuple[float, float]:
    """Mean accuracy of one model on random-window folds and on subject-disjoint folds."""
    dependent, disjoint = [], []
    # The fits are tiny: multithreaded BLAS only adds contention on a busy machine (~10x slower).
    with threadpool_limits(limits=1):
        for seed in seeds:
            x, y, groups = _stack(SyntheticReader(spec, seed=seed, **kwargs))
            features = _log_band_powers(x, spec.sfreq)
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
            random_folds = StratifiedKFold(4, shuffle=True, random_state=seed)
            dependent.append(cross_val_score(model, features, y, cv=random_folds).mean())
            disjoint.append(cross_val_score(model, features, y, cv=GroupKFold(4), groups=groups).mean())
    return float(np.mean(dependent)), float(np.mean(disjoint))


# -- contract, shapes, determinism ------------------------------------------------------

def test_default_spec_mirrors_apava() -> None:
    spec = SYNTHETIC_DEFAULT_SPEC
    assert spec.name == "synthetic" and spec.n_chans == 16 and spec.ch_names[:2] == ("Fp1", "Fp2")
    assert len(set(spec.ch_names)) == 16
    assert (spec.sfreq, spec.n_times, spec.classes, spec.label_level) == (256.0, 256, ("control", "patient"),
                                                                          "subject")


def test_default_reader_blocks_and_speed() -> None:
    reader = SyntheticReader(SYNTHETIC_DEFAULT_SPEC)
    assert isinstance(reader, CorpusReader)
    start = time.process_time()
    blocks = list(reader.iter_blocks())
    cpu = time.process_time() - start
    # 12 subjects x 60 windows x 16 channels x 256 samples; vectorised it takes ~0.1 s of CPU.
    assert cpu < 1.0, f"generation took {cpu:.2f} s of CPU"
    assert [b.subject for b in blocks] == list(range(1, 13))
    assert [b.recording for b in blocks] == [f"s{i:02d}_r1" for i in range(1, 13)]
    for b in blocks:
        assert isinstance(b, WindowBlock)
        assert b.x.shape == (60, 16, 256) and b.x.dtype == np.float32
        assert b.y.dtype == np.int64 and b.start.dtype == np.float64
        np.testing.assert_allclose(b.start, np.arange(60) * 1.0)
        assert 0.3 < float(b.x.std()) < 10.0


def test_config_is_json_and_tracks_every_argument() -> None:
    reader = SyntheticReader(SYNTHETIC_DEFAULT_SPEC)
    config = reader.config()
    assert json.loads(json.dumps(config)) == config
    assert config["generator"] == GENERATOR_VERSION and config["spec"] == SYNTHETIC_DEFAULT_SPEC.to_dict()
    changes = dict(n_subjects=5, windows_per_subject=10, kind="motif", seed=3, recordings_per_subject=2,
                   subject_drift=0.5, noise=2.0, class_separation=0.5, volume_conduction=0.5)
    for name, value in changes.items():
        other = SyntheticReader(SYNTHETIC_DEFAULT_SPEC, **{name: value}).config()
        assert other != config and other[name] == value, name


def test_same_seed_same_bytes_other_seed_other_data() -> None:
    a = _stack(SyntheticReader(SMALL, n_subjects=3, windows_per_subject=9, kind="motif", seed=7))
    b = _stack(SyntheticReader(SMALL, n_subjects=3, windows_per_subject=9, kind="motif", seed=7))
    c = _stack(SyntheticReader(SMALL, n_subjects=3, windows_per_subject=9, kind="motif", seed=8))
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b, strict=True))
    assert a[0].tobytes() != c[0].tobytes()
    assert not np.allclose(a[0], c[0])


def test_subject_data_does_not_depend_on_corpus_size() -> None:
    for spec, kind in ((SMALL, "bands"), (SYNTHETIC_DEFAULT_SPEC, "spikes"), (SLEEP, "sleep")):
        few = list(SyntheticReader(spec, n_subjects=3,
                                   windows_per_subject=8, kind=kind, seed=1).iter_blocks())
        many = list(SyntheticReader(spec, n_subjects=7,
                                    windows_per_subject=8, kind=kind, seed=1).iter_blocks())
        for a, b in zip(few, many[:3], strict=True):
            assert (a.subject, a.recording) == (b.subject, b.recording)
            assert a.x.tobytes() == b.x.tobytes() and a.y.tobytes() == b.y.tobytes()


@pytest.mark.parametrize(("spec", "kind"), [
    (SLEEP, "sleep"), (SEIZURE, "spikes"), (ECG, "bands"), (SMALL, "motif"), (SMALL, "spikes"),
    (SYNTHETIC_DEFAULT_SPEC, "motif"), (SYNTHETIC_DEFAULT_SPEC, "spikes"),
])
def test_shapes_dtypes_labels_per_kind(spec: CorpusSpec, kind: str) -> None:
    reader = SyntheticReader(spec, n_subjects=5, windows_per_subject=7, kind=kind, recordings_per_subject=2)
    blocks = list(reader.iter_blocks())
    assert len(blocks) == 10
    assert [b.recording for b in blocks[:2]] == ["s01_r1", "s01_r2"]
    assert len({b.recording for b in blocks}) == 10
    for subject in range(1, 6):
        assert sum(len(b.y) for b in blocks if b.subject == subject) == 7
    for b in blocks:
        b.validate(spec)
        assert b.x.shape[1:] == (spec.n_chans, spec.n_times) and b.x.dtype == np.float32
        assert b.y.dtype == np.int64 and b.y.min() >= 0 and b.y.max() < spec.n_outputs
        np.testing.assert_allclose(b.start, np.arange(len(b.y)) * spec.window_seconds)
        assert np.isfinite(b.x).all()
        # Every channel carries signal of EEG-like scale, not a constant.
        assert (b.x.std(axis=-1) > 0.05).all() and float(np.abs(b.x).max()) < 100.0


# -- labels -----------------------------------------------------------------------------

def test_subject_level_labels_constant_balanced_and_complete() -> None:
    spec = CorpusSpec("dx", tuple(f"c{i}" for i in range(3)), 128.0, 128, ("HC", "AD", "FTD"), "subject")
    reader = SyntheticReader(spec, n_subjects=9, windows_per_subject=5, kind="bands",
                             recordings_per_subject=2)
    labels: dict[int, set[int]] = {}
    for b in reader.iter_blocks():
        labels.setdefault(b.subject, set()).update(b.y.tolist())
    assert all(len(v) == 1 for v in labels.values())
    per_subject = [next(iter(labels[s])) for s in range(1, 10)]
    assert per_subject == [reader.subject_class(s) for s in range(1, 10)]
    assert np.bincount(per_subject, minlength=3).tolist() == [3, 3, 3]
    # The assignment is seeded, not the same fixed order for every seed.
    orders = {tuple(SyntheticReader(spec, n_subjects=9, seed=s).subject_class(i) for i in range(1, 10))
              for s in range(6)}
    assert len(orders) > 1


def test_window_level_labels_bands_balanced_spikes_thirty_percent() -> None:
    bands = list(SyntheticReader(SMALL, n_subjects=4, windows_per_subject=30, kind="bands").iter_blocks())
    for b in bands:
        assert np.bincount(b.y, minlength=3).tolist() == [10, 10, 10]
    assert len({b.y.tobytes() for b in bands}) == 4  # shuffled per recording
    spikes = list(SyntheticReader(SEIZURE, n_subjects=4, windows_per_subject=40, kind="spikes").iter_blocks())
    for b in spikes:
        assert int(b.y.sum()) == 12


def test_sleep_sequences_are_imbalanced_markov_chains() -> None:
    reader = SyntheticReader(SLEEP, n_subjects=6, windows_per_subject=200, kind="sleep")
    blocks = list(reader.iter_blocks())
    y = np.concatenate([b.y for b in blocks])
    freq = np.bincount(y, minlength=5) / len(y)
    assert freq.argmax() == SLEEP.classes.index("N2") and freq[2] > 0.35
    assert freq.argmin() == SLEEP.classes.index("N1") and freq[1] < 0.12
    assert (freq > 0).all()
    # Stages persist from one window to the next far more than independent draws would.
    stay = np.mean([np.mean(b.y[1:] == b.y[:-1]) for b in blocks])
    assert stay > 0.75 > float((freq**2).sum()) + 0.3
    assert all(b.y[0] == SLEEP.classes.index("W") for b in blocks)


def test_sleep_stages_are_matched_by_name_not_position() -> None:
    spec = CorpusSpec("edf", ("Fpz-Cz",), 100.0, 3000,
                      ("Sleep stage R", "Sleep stage 3", "Sleep stage 2", "Sleep stage 1", "Sleep stage W"),
                      "window")
    y = _stack(SyntheticReader(spec, n_subjects=4, windows_per_subject=150, kind="sleep"))[1]
    assert np.bincount(y, minlength=5).argmax() == 2
    assert np.bincount(y, minlength=5).argmin() == 3


# -- class signal and subject drift -----------------------------------------------------

def test_band_classes_boost_their_own_band() -> None:
    spec = CorpusSpec("b", tuple(f"c{i}" for i in range(4)), 256.0, 256, ("a", "b", "c"), "window")
    x, y, _ = _stack(SyntheticReader(spec, n_subjects=6, windows_per_subject=60, kind="bands"))
    f, p = welch(x, fs=256.0, nperseg=256, axis=-1)
    for k, (lo, hi) in enumerate(((8, 13), (4, 8), (13, 30))):  # alpha, theta, beta
        band = np.log(p[..., (f >= lo) & (f < hi)].mean(-1)).mean(-1)  # (n,)
        others = [band[y == j].mean() for j in range(3) if j != k]
        assert band[y == k].mean() > max(others) + 0.2, k


def test_sleep_stage_signatures() -> None:
    x, y, _ = _stack(SyntheticReader(SLEEP, n_subjects=4, windows_per_subject=120, kind="sleep",
                                     subject_drift=0.0))
    f, p = welch(x[:, 0], fs=100.0, nperseg=400, axis=-1)
    rel = p / p[:, (f >= 0.5) & (f < 30)].sum(-1, keepdims=True)

    def band(lo: float, hi: float) -> np.ndarray:
        return np.array([rel[y == k][:, (f >= lo) & (f < hi)].sum(-1).mean() for k in range(5)])

    assert band(8, 12).argmax() == 0  # alpha in W
    assert band(0.5, 2).argmax() == 3  # delta in N3
    assert band(5, 7).argmax() == 1  # theta in N1
    assert band(12, 14.5).argmax() == 2  # spindles in N2


def test_subject_dependent_split_beats_subject_disjoint_split() -> None:
    """The core property: subjects drift, so unseen subjects are harder than seen ones.

    One model (logistic regression on per-channel log band powers) is scored on
    random-window folds (subject-dependent) and on whole-subject folds (subject-disjoint),
    averaged over three seeds. Without drift (and with weaker classes, so neither protocol
    saturates) the two must agree: the gap comes from the subject variability, not the folds.
    """
    kwargs = dict(n_subjects=12, windows_per_subject=60, kind="sleep")
    dependent, disjoint = _split_gap(SLEEP, (0, 1, 2), **kwargs)
    assert dependent - disjoint >= 0.1, (dependent, disjoint)
    assert disjoint > 0.55 and dependent < 0.995, (dependent, disjoint)  # above majority class, not trivial

    dependent0, disjoint0 = _split_gap(SLEEP, (0, 1, 2), subject_drift=0.0, class_separation=0.3, **kwargs)
    assert abs(dependent0 - disjoint0) < 0.04 and dependent0 < 0.95, (dependent0, disjoint0)


def test_default_corpus_is_learnable_across_subjects_but_not_solved() -> None:
    dependent, disjoint = _split_gap(SYNTHETIC_DEFAULT_SPEC, (0, 1, 2))
    assert dependent - disjoint >= 0.1, (dependent, disjoint)
    assert 0.6 < disjoint < 0.9, disjoint


def test_class_separation_zero_leaves_nothing_to_learn() -> None:
    spec = CorpusSpec("b", tuple(f"c{i}" for i in range(4)), 256.0, 256, ("a", "b"), "window")
    _, disjoint = _split_gap(spec, (0,), kind="bands", n_subjects=8, class_separation=0.0)
    _, disjoint_on = _split_gap(spec, (0,), kind="bands", n_subjects=8)
    assert abs(disjoint - 0.5) < 0.1 < disjoint_on - 0.5, (disjoint, disjoint_on)


# -- errors and helpers -----------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(kind="noise"), "kind must be one of"),
    (dict(seed=-1), "seed must be a non-negative"),
    (dict(n_subjects=0), "n_subjects must be a positive"),
    (dict(windows_per_subject=2, recordings_per_subject=3), "recording would be empty"),
    (dict(subject_drift=-0.1), "subject_drift must be"),
    (dict(kind="sleep"), "label_level='subject'"),
    (dict(volume_conduction=-1.0), "volume_conduction must be"),
])
def test_bad_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SyntheticReader(SYNTHETIC_DEFAULT_SPEC, **kwargs)


def test_sleep_with_too_many_classes_names_them() -> None:
    spec = CorpusSpec("six", ("Fpz-Cz",), 100.0, 3000, ("W", "S1", "S2", "S3", "S4", "R"), "window")
    with pytest.raises(ValueError, match="at most 5 classes.*S4"):
        SyntheticReader(spec, kind="sleep")


def _neighbour_correlation(x: np.ndarray, spec: CorpusSpec) -> tuple[float, float]:
    """Mean channel correlation of the closest and of the farthest third of channel pairs."""
    from biosig_lightning.features.montage import electrode_positions

    pos = electrode_positions(spec.ch_names)
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    corr = np.corrcoef(x.transpose(1, 0, 2).reshape(x.shape[1], -1))
    iu = np.triu_indices(len(pos), 1)
    d, c = dist[iu], corr[iu]
    near, far = d <= np.quantile(d, 1 / 3), d >= np.quantile(d, 2 / 3)
    return float(c[near].mean()), float(c[far].mean())


def test_volume_conduction_correlates_neighbouring_channels_by_distance() -> None:
    spec = CorpusSpec("scalp", ("Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "C3", "Cz", "C4", "P3", "Pz",
                                "P4", "O1", "O2", "T7"), 128.0, 256, ("a", "b"), "subject")
    kw = dict(n_subjects=2, windows_per_subject=40, subject_drift=0.0)
    near0, far0 = _neighbour_correlation(_stack(SyntheticReader(spec, **kw))[0], spec)
    near, far = _neighbour_correlation(_stack(SyntheticReader(spec, volume_conduction=0.5, **kw))[0], spec)
    # without the head every channel records its own sources; with it, near pairs correlate, far ones less
    assert abs(near0) < 0.1 and near > 0.3 and near > far + 0.2
    x = _stack(SyntheticReader(spec, volume_conduction=0.5, **kw))[0]
    assert 0.8 < float(x.std()) / float(_stack(SyntheticReader(spec, **kw))[0].std()) < 1.25  # unit rows


def test_volume_conduction_needs_placeable_channels() -> None:
    with pytest.raises(ValueError, match="synthetic volume_conduction on 'seizure_like'.*EEG00"):
        SyntheticReader(SEIZURE, volume_conduction=0.5)


def test_infer_kind() -> None:
    assert infer_kind(SLEEP) == "sleep"
    assert infer_kind(SEIZURE) == "spikes"
    assert infer_kind(ECG) == "bands"
    assert infer_kind(SYNTHETIC_DEFAULT_SPEC) == "bands"
