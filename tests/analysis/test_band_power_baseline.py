"""The band-power logistic-regression baseline printed by ``make demo``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from biosig_lightning.analysis.band_power_baseline import band_power_baseline, log_band_powers

FS = 128.0


def test_a_sinusoid_lands_in_its_band_with_its_power() -> None:
    t = np.arange(256) / FS
    tone = [2.0 * np.sin(2 * np.pi * 10.0 * t), np.sin(2 * np.pi * 10.0 * t), np.sin(2 * np.pi * 6.0 * t)]
    feats = log_band_powers(np.stack(tone)[None], FS, bands=((4.0, 8.0), (8.0, 13.0))).reshape(3, 2)
    # 10 Hz -> alpha (column 1), 6 Hz -> theta (column 0); the other band holds ~nothing
    assert feats[0, 1] > feats[0, 0] + 5 and feats[2, 0] > feats[2, 1] + 5
    # power is quadratic in amplitude: twice the amplitude is log(4) more log power
    assert math.isclose(feats[0, 1] - feats[1, 1], math.log(4.0), rel_tol=1e-6)


def _subjects(rng: np.random.Generator, n_subjects: int, per: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(256) / FS
    xs, ys = [], []
    for _ in range(n_subjects):
        gain = rng.uniform(0.3, 3.0)  # subject drift: overall gain
        y = rng.integers(0, 2, per)
        freq = np.where(y == 1, 6.0, 10.0)[:, None, None]  # class: theta vs alpha peak
        phase = rng.uniform(0, 2 * np.pi, (per, 3, 1))
        x = gain * (np.sin(2 * np.pi * freq * t + phase) + 0.5 * rng.standard_normal((per, 3, 256)))
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def test_baseline_solves_a_band_power_task_across_subjects_and_not_shuffled_labels() -> None:
    rng = np.random.default_rng(0)
    x_tr, y_tr = _subjects(rng, 6, 40)
    x_te, y_te = _subjects(rng, 3, 40)
    solved = band_power_baseline(x_tr, y_tr, x_te, y_te, FS)
    assert solved["f1"] == 1.0 and solved["auroc"] == 1.0
    shuffled = band_power_baseline(x_tr, rng.permutation(y_tr), x_te, y_te, FS)
    assert shuffled["f1"] < 0.75  # labels unrelated to the windows: nothing to learn
    # the AUROC ranks by the positive class's probability: the solved task's, reversed, ranks every window
    # wrong
    assert band_power_baseline(x_tr, y_tr, x_te, 1 - y_te, FS)["auroc"] == 0.0
    assert "auroc" not in band_power_baseline(
        x_tr, y_tr, x_te, np.zeros_like(y_te), FS
    )  # one class in the test set


def test_bad_shapes_and_bands_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="windows"):
        log_band_powers(np.zeros((4, 256)), FS)
    with pytest.raises(ValueError, match="no band"):
        log_band_powers(np.zeros((1, 1, 16)), FS, bands=((100.0, 200.0),))


def test_newest_run_picks_the_run_dir_or_the_newest_results_below(tmp_path) -> None:
    import os

    from biosig_lightning.analysis.band_power_baseline import newest_run

    old, new = tmp_path / "exp" / "version_0", tmp_path / "exp" / "version_1"
    for i, run in enumerate((new, old)):  # version_1 written first, then made the newer one
        run.mkdir(parents=True)
        (run / "results.json").write_text("{}")
        os.utime(run / "results.json", (1_000 + 10 * (1 - i), 1_000 + 10 * (1 - i)))
    assert newest_run(tmp_path / "exp") == new  # by mtime, not by name
    assert newest_run(old) == old  # a run directory is itself
    with pytest.raises(SystemExit, match="no results.json"):
        newest_run(tmp_path / "empty")
