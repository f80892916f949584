"""Summary columns of BioFormer's tables, as pure functions of per-cell results.

Cells are keyed ``(row, dataset, metric)`` with ``row`` any hashable (``biosig report`` uses
its ``Row(model, variant, experiment)``), values are means over seeds (:func:`gain_stability`,
:func:`rank_summary`) or the per-seed values themselves (:func:`welch_t_test`).

* :func:`gain_stability`: Table 3's **Pos. Rate** (percentage of settings with a positive
  change ``Delta > 0`` over the baseline) and **Worst Delta** (the minimum change), over all
  settings (dataset x metric x backbone) of a method; the caption: "Pos. Rate is the
  percentage of positive gains (Delta > 0), and Worst Delta is the minimum change".
* :func:`rank_summary`: Table 2's **Avg. Rank** (rank of each row within every
  (dataset, metric) cell, 1 = best, ties share the mean rank, averaged over all cells) and
  **Win** ("the number of datasets where a method achieves the best average score over the
  6 metrics"; tied best rows all win).
* :func:`welch_t_test`: Welch's unequal-variance t-test between two rows over seeds (Sec. 5.3,
  Fig. 5), two-sided.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import stats as sps

__all__ = ["GainSummary", "RankSummary", "WelchResult", "gain_stability", "rank_summary", "welch_t_test"]

# keys (row, dataset, metric); the row is any hashable label (Any: a Mapping is invariant in its keys)
Cells = Mapping[tuple[Any, str, str], float]


class GainSummary(NamedTuple):
    """Table 3's stability columns of one method: ``pos_rate`` in percent, ``worst_delta`` in the
    metric's units, over ``n_settings`` (dataset, metric[, backbone]) settings."""

    pos_rate: float
    worst_delta: float
    n_settings: int


class RankSummary(NamedTuple):
    """Table 2's columns of one row: mean rank over ``n_cells`` (dataset, metric) cells, and wins."""

    avg_rank: float
    wins: int
    n_cells: int


class WelchResult(NamedTuple):
    """Welch's t statistic (``mean(a) - mean(b)`` over its standard error), its degrees of freedom
    (Welch-Satterthwaite) and the two-sided p-value."""

    t: float
    df: float
    p: float


def gain_stability(
    cells: Cells,
    baseline: Hashable | Callable[[Hashable], Hashable],
    group: Callable[[Hashable], Hashable] | None = None,
) -> dict[Hashable, GainSummary]:
    """Pos. Rate and Worst Delta of every non-baseline row (or group of rows) against its baseline.

    ``baseline`` is the baseline row, or a function giving each row's own baseline row (Table 3:
    the same backbone without adaptation, e.g. ``lambda r: Row(r.model)``). ``group`` pools rows
    into one method (Table 3: by plug-in, ``lambda r: r.variant``, over all backbones); by
    default each row is its own group. Every (dataset, metric) cell of a row is one setting,
    ``Delta = value - baseline value``. A row with a cell that its baseline lacks is an error.
    """
    base_of = baseline if callable(baseline) else (lambda _row: baseline)
    by_row: dict[Hashable, dict[tuple[str, str], float]] = defaultdict(dict)
    for (row, dataset, metric), value in cells.items():
        by_row[row][(dataset, metric)] = float(value)
    deltas: dict[Hashable, list[float]] = defaultdict(list)
    for row, row_cells in by_row.items():
        base = base_of(row)
        if base == row:
            continue
        if base not in by_row:
            raise ValueError(f"baseline row {base!r} of {row!r} has no results")
        for cell, value in row_cells.items():
            if cell not in by_row[base]:
                raise ValueError(f"baseline row {base!r} has no result for {cell} (needed by {row!r})")
            deltas[row if group is None else group(row)].append(value - by_row[base][cell])
    if not deltas:
        raise ValueError("no rows other than the baseline")
    return {
        key: GainSummary(100.0 * float(np.mean(np.asarray(d) > 0)), float(min(d)), len(d))
        for key, d in deltas.items()
    }


def rank_summary(cells: Cells, higher_is_better: bool = True) -> dict[Hashable, RankSummary]:
    """Avg. Rank over all (dataset, metric) cells and Win over datasets, for every row.

    All rows must have every cell (Table 2 ranks complete rows); a missing cell is an error
    naming it. Ranks: 1 = best, ties share the mean of the ranks they span.
    """
    rows = sorted({r for r, _, _ in cells}, key=repr)
    grid = sorted({(d, m) for _, d, m in cells})
    for row in rows:
        for d, m in grid:
            if (row, d, m) not in cells:
                raise ValueError(f"row {row!r} has no result for dataset {d!r}, metric {m!r}")
    sign = -1.0 if higher_is_better else 1.0
    ranks: dict[Hashable, list[float]] = {row: [] for row in rows}
    for d, m in grid:
        values = np.array([sign * float(cells[(row, d, m)]) for row in rows])
        for row, rank in zip(rows, sps.rankdata(values, method="average"), strict=True):
            ranks[row].append(float(rank))
    wins = dict.fromkeys(rows, 0)
    for d in sorted({d for d, _ in grid}):
        metrics = [m for dd, m in grid if dd == d]
        means = {row: float(np.mean([cells[(row, d, m)] for m in metrics])) for row in rows}
        best = max(means.values()) if higher_is_better else min(means.values())
        for row, value in means.items():
            if math.isclose(value, best, rel_tol=1e-12, abs_tol=1e-12):
                wins[row] += 1
    return {row: RankSummary(float(np.mean(ranks[row])), wins[row], len(grid)) for row in rows}


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """Two-sided Welch t-test of ``mean(a) == mean(b)`` (e.g. one row's test F1 over seeds against another's),
    ``scipy.stats.ttest_ind(a, b, equal_var=False)``."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        raise ValueError(f"Welch's t-test needs at least two values per row, got {x.size} and {y.size}")
    if x.var(ddof=1) + y.var(ddof=1) == 0:
        raise ValueError("Welch's t-test is undefined when both rows have zero variance")
    res = sps.ttest_ind(x, y, equal_var=False)
    return WelchResult(float(res.statistic), float(res.df), float(res.pvalue))
