"""Report statistics (Yao et al. Tables 1, 8, 9) against scipy and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from biosig_lightning.analysis.stats import (
    one_way_anova,
    paired_t_test,
    per_subject_accuracy,
    per_subject_correct,
    spread,
    table1_row,
)


@pytest.mark.parametrize("seed", range(3))
def test_anova_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = [rng.normal(0.9 + 0.02 * i, 0.05, size=rng.integers(3, 12)) for i in range(6)]
    ours = one_way_anova(groups)
    ref = stats.f_oneway(*groups)
    assert ours.f == pytest.approx(ref.statistic, rel=1e-10) and ours.p == pytest.approx(ref.pvalue, rel=1e-8)
    assert (ours.df_between, ours.df_within) == (5, sum(len(g) for g in groups) - 6)


def test_anova_separated_groups_and_errors() -> None:
    assert one_way_anova([[1.0, 1.1, 0.9], [5.0, 5.1, 4.9]]).p < 1e-4
    assert one_way_anova([[1.0, 2.0], [1.0, 2.0]]).f == 0.0
    with pytest.raises(ValueError, match="two non-empty"):
        one_way_anova([[1.0, 2.0]])


@pytest.mark.parametrize("seed", range(3))
def test_paired_t_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(0.97, 0.004, 100)
    b = a - rng.normal(0.01, 0.006, 100)
    ours = paired_t_test(a, b)
    ref = stats.ttest_rel(a, b)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-10) and ours.p == pytest.approx(ref.pvalue, rel=1e-8)
    assert ours.df == 99 and ours.mean_difference == pytest.approx(float(np.mean(a - b)))
    # pairing matters: the unpaired test of the same numbers is far weaker
    assert ours.p < stats.ttest_ind(a, b).pvalue


def test_per_subject_and_table1() -> None:
    pred = [1, 1, 0, 0, 1, 0]
    target = [1, 0, 0, 0, 1, 1]
    subject = [7, 7, 3, 3, 9, 9]
    assert per_subject_accuracy(pred, target, subject) == {3: 1.0, 7: 0.5, 9: 0.5}
    assert per_subject_correct(pred, target, subject)[7].tolist() == [1.0, 0.0]
    s = spread({3: 1.0, 7: 0.5, 9: 0.5})
    assert s["mean"] == pytest.approx(2 / 3) and s["std"] == pytest.approx(math.sqrt(1 / 12)) and s["n"] == 3
    row = table1_row({"test/acc": 0.9757, "test/precision": 0.9858, "test/recall": 0.9598, "test/f1": 0.9801,
                      "test/specificity": 0.9745}, 14787)
    assert row == pytest.approx({"accuracy": 97.57, "precision": 98.58, "recall": 95.98, "specificity": 97.45,
                                 "f1": 98.01, "params": 14787.0})
    assert table1_row({"test/acc": 0.5}, None)["specificity"] is None
