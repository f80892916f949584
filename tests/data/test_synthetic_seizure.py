"""The STDRO stand-ins (TUSZ, CHB-MIT, DOD-H) are learnable across patients by a band-power baseline,
and carry nothing learnable once the class signal is switched off; SD-Former's CHB-MIT stand-in leaves band
powers
below ceiling on held-out subjects."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import welch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from biosig_lightning.data.corpora.chb_mit import CHBMIT
from biosig_lightning.data.corpora.dodh import DODH
from biosig_lightning.data.corpora.tusz import TUSZ
from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.synthetic import SyntheticReader


def band_powers(x: np.ndarray, fs: float) -> np.ndarray:
    f, p = welch(x, fs=fs, nperseg=int(fs), axis=-1)
    bands = [(0.5, 4), (4, 8), (8, 13), (13, 30), (30, fs / 2)]
    return np.log(np.stack([p[..., (f >= a) & (f < b)].mean(-1) for a, b in bands], -1) + 1e-12).reshape(
        len(x), -1
    )


def cross_patient_score(spec: CorpusSpec, kind: str, n: int, per: int, held_out: int, separation: float,
                        **options: object) -> tuple[float, float]:
    """Balanced accuracy of logistic regression on log band powers, trained and tested on disjoint patients,
    and its chance level (1 / the number of classes present among the test patients)."""
    reader = SyntheticReader(spec, n_subjects=n, windows_per_subject=per, kind=kind,
                             class_separation=separation,
                             **options)
    xs, ys, ss = [], [], []
    for b in reader.iter_blocks():
        xs.append(band_powers(b.x, spec.sfreq))
        ys.append(b.y)
        ss.append(np.full(len(b.y), b.subject))
    x, y, s = map(np.concatenate, (xs, ys, ss))
    train = s <= n - held_out
    scaler = StandardScaler().fit(x[train])
    clf = LogisticRegression(max_iter=3000,
                             C=0.1, class_weight="balanced").fit(scaler.transform(x[train]), y[train])
    score = balanced_accuracy_score(y[~train], clf.predict(scaler.transform(x[~train])))
    return score, 1.0 / len(np.unique(y[~train]))


CASES = {
    "tusz_detection": (TUSZ.make_spec("detection", 12), "seizure", 12, 24, {}),
    "tusz_classification": (TUSZ.make_spec("classification", 12), "seizure", 12, 24, {}),
    "chbmit_4s": (CHBMIT.make_spec("18", 4.0, 64.0), "seizure", 12, 40, {}),
    "dodh": (DODH.make_spec(), "sleep", 16, 10, {"sleep_start": "stationary"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_band_power_baseline_learns_across_patients(case: str) -> None:
    spec, kind, n, per, options = CASES[case]
    learned, chance = cross_patient_score(spec, kind, n, per, 4, 1.0, **options)
    blind, blind_chance = cross_patient_score(spec, kind, n, per, 4, 0.0, **options)
    # measured (balanced accuracy vs chance): tusz det 0.72 vs 0.5, cls 0.56 vs 0.25, chbmit 0.80 vs 0.5,
    # dodh 0.51 vs 0.33 (classes present among the 4 test records); without the class signal ~chance
    assert learned > chance + 0.15, learned
    assert blind < blind_chance + 0.1, blind


def test_seizures_spread_from_the_focus() -> None:
    spec = TUSZ.make_spec("classification", 12)
    reader = SyntheticReader(spec, n_subjects=1, windows_per_subject=40, kind="seizure", noise=0.0,
                             subject_drift=0.0)
    params = reader._subject_params(1)
    rng = np.random.default_rng(0)
    y = np.zeros(40, dtype=np.int64)  # CF: focal
    ictal = reader._seizures(rng, y, params)
    power = ictal**2
    focus = params.focus
    far = int(
        np.argmax(np.linalg.norm(reader._global["positions"] - reader._global["positions"][focus], axis=1))
    )
    first = [int(np.argmax(power[i, focus] > 1e-3)) for i in range(40) if power[i, focus].any()]
    later = [int(np.argmax(power[i, far] > 1e-3)) if power[i, far].max() > 1e-3 else spec.n_times
             for i in range(40) if power[i, focus].any()]
    assert len(first) > 20
    assert np.median(np.asarray(later) - np.asarray(first)) > spec.sfreq  # reaches far channels > 1 s later


def test_the_chbmit_stand_in_leaves_band_powers_below_ceiling_on_held_out_subjects() -> None:
    # SD-Former's CHB-MIT stand-in must rank methods: with spike-and-wave bursts (kind "spikes") a band-power
    # regression read every held-out subject at AUROC ~1.0 (0.991-1.0 at these seeds) and every method tied at
    # 1.
    # Evolving seizures among artifacts leave band powers informative but well short of that
    from sklearn.metrics import roc_auc_score

    from biosig_lightning.analysis.band_power_baseline import log_band_powers
    from biosig_lightning.data.corpora.chb_mit import SYNTHETIC_DEFAULTS

    spec = CHBMIT.make_spec("23", 2.0)
    scores = []
    for seed in (0, 1, 2):
        reader = SyntheticReader(spec, **{**SYNTHETIC_DEFAULTS, "n_subjects": 8, "windows_per_subject": 60,
                                          "seed": seed})
        blocks = list(reader.iter_blocks())
        x = log_band_powers(np.concatenate([b.x for b in blocks]), spec.sfreq)
        y = np.concatenate([b.y for b in blocks])
        train = np.concatenate([np.full(len(b.y), b.subject <= 4) for b in blocks])
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x[train], y[train])
        scores.append(roc_auc_score(y[~train], clf.predict_proba(x[~train])[:, 1]))
    # measured: 0.927, 0.740, 0.777 (mean 0.81)
    assert 0.65 < np.mean(scores) < 0.9, scores

