"""The Medformer-family stand-ins (APAVA, ADFTD, PTB, PTB-XL): realistic scale, and a class signal
that survives subject drift the way the real corpora's does (docs/corpora.md).

Real APAVA is learnable across subjects (BioFormer Table 2: F1 ~0.8 on the fixed split); a stand-in
whose subject drift is as large as its class effect is not a stand-in for it. The checks are cheap
(band powers and a logistic regression, no deep model) and pin the property ``make demo`` relies on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.analysis.band_power_baseline import datamodule_baseline, log_band_powers
from biosig_lightning.data.corpora.medformer import APAVA, REAL_SCALE, SPECS, SYNTHETIC_DEFAULTS
from biosig_lightning.data.datamodules.medformer import APAVADataModule, synthetic_options
from biosig_lightning.data.synthetic import SyntheticReader

# the stand-in at a test-sized scale: every subject, fewer windows
SMALL = {"windows_per_subject": 30}


@pytest.mark.parametrize("corpus", sorted(SYNTHETIC_DEFAULTS))
def test_standin_keeps_windows_per_subject_within_3x_of_the_real_corpus(corpus: str) -> None:
    subjects, windows = REAL_SCALE[corpus]
    real = windows / subjects
    ours = SYNTHETIC_DEFAULTS[corpus]["windows_per_subject"]
    assert real / 3 <= ours <= 3 * real, (corpus, ours, round(real))
    # subjects may be scaled down, never up
    assert SYNTHETIC_DEFAULTS[corpus]["n_subjects"] <= subjects


def _subject_theta_alpha(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per subject of the APAVA stand-in: mean log theta/alpha band-power ratio (channel mean), class."""
    reader = SyntheticReader(APAVA,
                             **{**synthetic_options(SYNTHETIC_DEFAULTS["apava"]), **SMALL, "seed": seed})
    ratios, labels = [], []
    for block in reader.iter_blocks():
        bands = log_band_powers(block.x, APAVA.sfreq).reshape(len(block.x), APAVA.n_chans, -1)
        ratios.append(float((bands[..., 1] - bands[..., 2]).mean()))  # theta (4-8 Hz) - alpha (8-13 Hz)
        labels.append(int(block.y[0]))
    return np.array(ratios), np.array(labels)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_apava_standin_class_effect_exceeds_the_subjects_drift(seed: int) -> None:
    """Slowing (theta up, alpha down) separates AD from HC subjects by many subject standard deviations.

    The subjects' band-gain drift is drawn independently of their class. Cohen's d of the subjects' mean
    log theta/alpha power over these seeds: at the generator's defaults (band-gain drift 1, class
    separation 1) 2.4-3.8, whole subjects look like the other class; band-gain drift 0.5 alone 4.3-6.2;
    class separation 3 alone 7.4-8.9; the stand-in's pair (0.5, 3) 11.3-13.0.
    """
    ratio, label = _subject_theta_alpha(seed)
    ad, hc = ratio[label == 1], ratio[label == 0]
    assert sorted((len(ad), len(hc))) == [11, 12]  # APAVA's 12 AD / 11 HC, up to which class gets the 23rd
    pooled = np.sqrt((ad.var(ddof=1) + hc.var(ddof=1)) / 2)
    cohen_d = (ad.mean() - hc.mean()) / pooled
    assert cohen_d > 10.0, cohen_d


def test_apava_standin_is_learnable_from_band_powers_on_the_paper_split(tmp_path: Path) -> None:
    """A log band-power logistic regression, trained on the 15 training subjects of APAVA's fixed split,
    classifies the unseen validation and test subjects' windows (F1 1.0 / 1.0; with the generator's
    default drift and class strength 0.92 / 0.71: one test subject in four reads as the other class;
    with the stand-in's drift but the default class strength 0.97 / 0.92)."""
    dm = APAVADataModule(synthetic=True, root=None, normalization="window", synthetic_options=SMALL,
                         cache_dir=str(tmp_path))
    val, test = datamodule_baseline(dm, "val"), datamodule_baseline(dm, "test")
    assert sorted(dm.subjects["test"]) == [1, 2, 17, 18] and sorted(dm.subjects["val"]) == [15, 16, 19, 20]
    assert val["f1"] > 0.98 and test["f1"] > 0.98, (val, test)


def test_standin_specs_are_the_corpora_specs() -> None:
    # the scale table names exactly the corpora that have a stand-in
    assert set(REAL_SCALE) == set(SYNTHETIC_DEFAULTS) == set(SPECS)


def test_band_gain_drift_scales_only_the_subjects_gain_response() -> None:
    base = SyntheticReader(APAVA, n_subjects=3, windows_per_subject=2)
    flat = SyntheticReader(APAVA, n_subjects=3, windows_per_subject=2, band_gain_drift=0.0)
    half = SyntheticReader(APAVA, n_subjects=3, windows_per_subject=2, band_gain_drift=0.5)
    for subject in (1, 2, 3):
        r0, r1, r5 = (g._subject_params(subject).response for g in (base, flat, half))
        np.testing.assert_allclose(np.abs(r1), 1.0, atol=1e-12)  # no gain drift left ...
        np.testing.assert_allclose(np.angle(r1), np.angle(r0), atol=1e-12)  # ... the phase drift untouched
        np.testing.assert_allclose(np.log(np.abs(r5)), 0.5 * np.log(np.abs(r0)), atol=1e-12)
    # the cache key changes only when it is set (every other stand-in's cache stays valid)
    assert "band_gain_drift" not in base.config() and half.config()["band_gain_drift"] == 0.5
    with pytest.raises(ValueError, match="band_gain_drift"):
        SyntheticReader(APAVA, band_gain_drift=-1.0)
