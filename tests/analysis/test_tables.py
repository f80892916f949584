"""Table summary columns (analysis/tables.py) on hand-made results with answers worked out by hand."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from biosig_lightning.analysis.tables import gain_stability, rank_summary, welch_t_test


def _table3() -> dict:
    # rows are (backbone, plug-in); "" = the backbone without adaptation (Table 3's "None")
    values = {
        ("T", ""): (70.0, 72.0, 80.0), ("T", "fbam"): (74.0, 71.0, 81.0), ("T", "grl"): (70.0, 73.0, 80.0),
        ("M", ""): (60.0, 60.0, 90.0), ("M", "fbam"): (65.0, 60.0, 89.5),
    }
    cells = {}
    for row, (apava_f1, apava_acc, ptb_f1) in values.items():
        cells[(row, "APAVA", "f1")] = apava_f1
        cells[(row, "APAVA", "acc")] = apava_acc
        cells[(row, "PTB", "f1")] = ptb_f1
    return cells


def test_pos_rate_and_worst_delta_per_plugin_over_backbones() -> None:
    out = gain_stability(_table3(), baseline=lambda r: (r[0], ""), group=lambda r: r[1])
    # fbam deltas: T: +4, -1, +1; M: +5, 0, -0.5 -> 3 of 6 positive (0 is not a gain), worst -1
    assert out["fbam"] == (50.0, -1.0, 6)
    # grl (T only): 0, +1, 0 -> 1 of 3 positive, worst 0
    assert out["grl"].n_settings == 3
    assert math.isclose(out["grl"].pos_rate, 100 / 3) and out["grl"].worst_delta == 0.0


def test_pos_rate_against_one_named_row_and_errors() -> None:
    cells = {k: v for k, v in _table3().items() if k[0][0] == "T"}
    out = gain_stability(cells, baseline=("T", ""))
    assert set(out) == {("T", "fbam"), ("T", "grl")}
    fbam = out[("T", "fbam")]  # +4, -1, +1
    assert math.isclose(fbam.pos_rate, 200 / 3) and fbam[1:] == (-1.0, 3)
    with pytest.raises(ValueError, match="no results"):
        gain_stability(cells, baseline=("X", ""))
    cells[(("T", "fbam"), "ADFTD", "f1")] = 50.0
    with pytest.raises(ValueError, match="ADFTD"):
        gain_stability(cells, baseline=("T", ""))


def _table2() -> dict:
    scores = {
        ("d1", "f1"): {"A": 0.9, "B": 0.8, "C": 0.8},
        ("d1", "acc"): {"A": 0.7, "B": 0.9, "C": 0.6},
        ("d2", "f1"): {"A": 0.5, "B": 0.6, "C": 0.7},
        ("d2", "acc"): {"A": 0.5, "B": 0.6, "C": 0.7},
    }
    return {(row, d, m): v for (d, m), per_row in scores.items() for row, v in per_row.items()}


def test_average_rank_with_ties_and_wins() -> None:
    out = rank_summary(_table2())
    # ranks: A 1, 2, 3, 3; B 2.5, 1, 2, 2; C 2.5, 3, 1, 1 (B and C tie on d1/f1)
    assert out["A"] == (2.25, 0, 4)
    # d1 means: A .80, B .85, C .70 -> B wins; d2: C wins
    assert out["B"] == (1.875, 1, 4)
    assert out["C"] == (1.875, 1, 4)
    low = rank_summary(_table2(), higher_is_better=False)
    assert low["A"].avg_rank == 4 - 2.25 and low["A"].wins == 1  # lowest d2 mean


def test_tied_best_rows_both_win_and_missing_cells_are_named() -> None:
    cells = {("A", "d", "f1"): 0.5, ("B", "d", "f1"): 0.5, ("C", "d", "f1"): 0.1}
    out = rank_summary(cells)
    assert out["A"] == out["B"] == (1.5, 1, 1)
    assert out["C"] == (3.0, 0, 1)
    cells[("A", "e", "f1")] = cells[("B", "e", "f1")] = 0.3  # C lacks dataset e
    with pytest.raises(ValueError, match="'C'.*'e'"):
        rank_summary(cells)


def test_welch_t_test_hand_computed() -> None:
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]
    res = welch_t_test(a, b)
    # var(a)/3 = 1/3, var(b)/4 = (5/3)/4 = 5/12; se^2 = 3/4
    assert math.isclose(res.t, -3.5 / math.sqrt(0.75), rel_tol=1e-12)
    assert math.isclose(res.df, 0.75**2 / ((1 / 3) ** 2 / 2 + (5 / 12) ** 2 / 3), rel_tol=1e-12)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert math.isclose(res.p, ref.pvalue, rel_tol=1e-9)
    # the numbers the hand-written test it replaced gave on these seeds (computed once with the old code)
    pinned = welch_t_test([0.81, 0.84, 0.79, 0.86], [0.74, 0.78, 0.70])
    assert math.isclose(pinned.t, 3.053290134455175, rel_tol=1e-12)
    assert math.isclose(pinned.df, 3.714674302075872, rel_tol=1e-12)
    assert math.isclose(pinned.p, 0.04177899177189587, rel_tol=1e-9)
    assert welch_t_test(b, a).t == -res.t and math.isclose(welch_t_test(b, a).p, res.p)
    with pytest.raises(ValueError, match="two values"):
        welch_t_test([1.0], b)
    with pytest.raises(ValueError, match="zero variance"):
        welch_t_test([1.0, 1.0], [2.0, 2.0])
