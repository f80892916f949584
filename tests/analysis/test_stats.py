"""Report statistics (Yao et al. Tables 1, 8, 9) against scipy and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score, precision_score, recall_score

from biosig_lightning.analysis.run_stats import table1_metrics
from biosig_lightning.analysis.stats import (
    one_way_anova,
    paired_t_test,
    per_subject_accuracy,
    per_subject_correct,
    spread,
    table1_row,
)

# the hand-written ANOVA and paired t-test these functions replaced by scipy.stats gave these numbers on
# these inputs (computed once with the old code); the scipy-backed functions must give them too
GROUPS = [[0.91, 0.88, 0.95, 0.90], [0.85, 0.80, 0.83], [0.97, 0.93, 0.99, 0.96, 0.94]]
A = [0.97, 0.95, 0.96, 0.98, 0.94, 0.97]
B = [0.95, 0.94, 0.96, 0.95, 0.92, 0.96]


def test_anova_keeps_the_hand_written_numbers() -> None:
    res = one_way_anova(GROUPS)
    assert res.f == pytest.approx(23.679907809110617, rel=1e-12)
    assert res.p == pytest.approx(0.00025985331172173956, rel=1e-9)
    assert (res.df_between, res.df_within) == (2, 9)
    # constant groups: F infinite with p = 0 when they differ, NaN when they are equal
    assert (one_way_anova([[1.0, 1.0], [2.0, 2.0]]).f,
            one_way_anova([[1.0, 1.0], [2.0, 2.0]]).p) == (math.inf, 0.0)
    assert math.isnan(one_way_anova([[1.0, 1.0], [1.0, 1.0]]).f)


def test_anova_separated_groups_and_errors() -> None:
    assert one_way_anova([[1.0, 1.1, 0.9], [5.0, 5.1, 4.9]]).p < 1e-4
    assert one_way_anova([[1.0, 2.0], [1.0, 2.0]]).f == 0.0
    with pytest.raises(ValueError, match="two non-empty"):
        one_way_anova([[1.0, 2.0]])
    with pytest.raises(ValueError, match="more observations"):
        one_way_anova([[1.0], [2.0]])


def test_paired_t_keeps_the_hand_written_numbers() -> None:
    res = paired_t_test(A, B)
    assert res.t == pytest.approx(3.503245248726852, rel=1e-12)
    assert res.p == pytest.approx(0.0172245496803414, rel=1e-9)
    assert res.df == 5 and res.mean_difference == pytest.approx(0.015, rel=1e-12)
    # pairing matters: the unpaired test of the same numbers is far weaker
    assert res.p < stats.ttest_ind(A, B).pvalue
    # one constant non-zero difference: t infinite, p = 0; no difference at all: NaN
    assert (paired_t_test([1.0, 2.0], [0.5, 1.5]).t,
            paired_t_test([1.0, 2.0], [0.5, 1.5]).p) == (math.inf, 0.0)
    assert math.isnan(paired_t_test([1.0, 2.0], [1.0, 2.0]).t)
    with pytest.raises(ValueError, match="one length"):
        paired_t_test([1.0, 2.0], [1.0, 2.0, 3.0])


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


def test_table1_binary_precision_recall_f1_are_of_class_1() -> None:
    # Table 1 (EEGNet: recall 53.25, specificity 93.11, F1 = 2PR/(P+R)) reports the positive class;
    # the logged precision/recall/f1 are macro means, which differ whenever the classes do
    target = np.array([0] * 18 + [1] * 6)
    pred = np.array([0] * 12 + [1] * 6 + [1] * 5 + [0] * 1)
    cm = np.zeros((2, 2), dtype=int)
    np.add.at(cm, (target, pred), 1)
    macro = {f"test/{k}": float(f(target, pred, average="macro")) for k, f in
             (("precision", precision_score), ("recall", recall_score), ("f1", f1_score))}
    results = {"metrics": {"test/acc": float((pred == target).mean()), "test/specificity": 12 / 18, **macro},
               "num_params": 498, "confusion_matrix": cm.tolist()}
    row = table1_metrics(results)
    assert (
        row["table1/precision"]
        == pytest.approx(100 * precision_score(target, pred))
        == pytest.approx(500 / 11)
    )
    assert row["table1/recall"] == pytest.approx(100 * recall_score(target, pred)) == pytest.approx(250 / 3)
    assert row["table1/f1"] == pytest.approx(100 * f1_score(target, pred)) == pytest.approx(1000 / 17)
    assert 100 * macro["test/recall"] == pytest.approx(75.0)  # what the column showed before
    assert row["table1/specificity"] == pytest.approx(200 / 3) and row["table1/accuracy"] == pytest.approx(
        100 * 17 / 24
    )
    # one class predicted throughout: precision 6 / 24, recall 1, F1 2*6 / (12 + 18); none predicted: 0
    always = table1_row({}, None, confusion=[[0, 18], [0, 6]])
    assert (
        always["precision"] == pytest.approx(25.0)
        and always["recall"] == 100.0
        and always["f1"] == pytest.approx(40.0)
    )
    assert table1_row({}, None, confusion=[[18, 0], [6, 0]])["precision"] == 0.0
    # multiclass or no matrix: the logged metrics, unchanged
    three = table1_row({"test/precision": 0.5}, None, confusion=np.eye(3))
    assert three["precision"] == 50.0 and table1_row({"test/precision": 0.5}, None)["precision"] == 50.0
