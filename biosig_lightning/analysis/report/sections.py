"""The statistics sections ``biosig report`` prints below its table, one function per option.

The maths lives in :mod:`biosig_lightning.analysis.stats` and :mod:`~biosig_lightning.analysis.tables`,
the reading of runs in :mod:`~biosig_lightning.analysis.run_stats`; here each option's numbers are
gathered per row and dataset and laid out as a :class:`~.render.Section`:

* ``--per-subject``: the LOSO spread of per-subject test accuracy, ``mean ± std [min, max] (n=subjects)``.
* ``--anova``: Table 9 of the signed-graph paper (Yao et al.), a one-way ANOVA between the subjects of
  each row; ``--anova-rows``: between the rows of each dataset.
* ``--ttest A B``: Table 8, a paired two-sided t-test, runs paired by ``(split_id, seed)``.
* ``--welch A B``: BioFormer Sec. 5.3, Welch's two-sided t-test over seeds.
* ``--baseline ROW``: BioFormer Table 3, Pos. Rate and Worst Δ against ``ROW``.
* ``--ranks``: BioFormer Table 2, average rank and wins.

Each problem is a one-line :class:`~.collect.ReportError` naming the row, dataset or option.
"""

from __future__ import annotations

import math

import numpy as np

from biosig_lightning.analysis.report.collect import (
    Groups,
    ReportError,
    Row,
    is_score,
    metric_key,
    short_name,
)
from biosig_lightning.analysis.report.render import Section, summarize
from biosig_lightning.analysis.run_stats import (
    RunStatsError,
    metric_values,
    paired_values,
    subject_accuracy,
    subject_anova,
    subject_outcomes,
)
from biosig_lightning.analysis.stats import one_way_anova, paired_t_test, spread
from biosig_lightning.analysis.tables import gain_stability, rank_summary, welch_t_test


def _num(value: float | None, digits: int) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    """p-values at three significant digits (``2.31e-05``), as the papers' tables give them."""
    return "–" if not math.isfinite(value) else f"{value:.3g}"



def _row_of(groups: Groups, label: str, option: str) -> Row:
    rows = list(dict.fromkeys(r for r, _ in groups))
    for row in rows:
        if row.label == label:
            return row
    raise ReportError(f"{option}: no row {label!r} (rows: {', '.join(repr(r.label) for r in rows)})")


class Subjects:
    """Per-subject test outcomes of each (row, dataset) cell, read from the runs' predictions once."""

    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        self._cache: dict[tuple[Row, str], dict[int, list[np.ndarray]]] = {}

    def outcomes(self, row: Row, ds: str) -> dict[int, list[np.ndarray]]:
        if (row, ds) not in self._cache:
            try:
                self._cache[(row, ds)] = subject_outcomes(self.groups[(row, ds)])
            except RunStatsError as err:
                raise ReportError(f"{row.label} / {ds}: {err}") from None
        return self._cache[(row, ds)]

    def accuracy(self, row: Row, ds: str, scale: float) -> dict[int, float]:
        return {s: scale * a for s, a in subject_accuracy(self.outcomes(row, ds)).items()}


def per_subject_section(groups: Groups, subjects: Subjects, scale: float, digits: int) -> Section:
    """Per-subject test accuracy per row x dataset: mean ± std (ddof 1), min, max over subjects, n
    subjects."""
    rows = list(dict.fromkeys(r for r, _ in groups))
    datasets = list(dict.fromkeys(d for _, d in groups))
    shown, raw = [], []
    for row in rows:
        cells: list[str] = []
        nums: list[float | None] = []
        for ds in datasets:
            if (row, ds) not in groups:
                cells.append("–")
                nums += [None] * 5
                continue
            sp = spread(subjects.accuracy(row, ds, scale))
            cells.append(f"{sp['mean']:.{digits}f} ± {sp['std']:.{digits}f} "
                         f"[{sp['min']:.{digits}f}, {sp['max']:.{digits}f}] (n={int(sp['n'])})")
            nums += [sp["mean"], sp["std"], sp["min"], sp["max"], int(sp["n"])]
        shown.append([row.label, *cells])
        raw.append([row.model, row.variant, row.experiment, *nums])
    unit = " (%)" if scale == 100 else ""
    return Section(
        f"Per-subject test accuracy{unit}: mean ± std [min, max] over subjects (n subjects); "
        "each subject's windows pooled over the runs that tested it",
        ["model", *(f"{d}: per-subject acc" for d in datasets)],
        shown,
        [
            "model",
            "variant",
            "experiment",
            *(f"{d}/subject_acc/{part}" for d in datasets for part in ("mean", "std", "min", "max", "n")),
        ],
        raw,
    )


def anova_subjects_section(groups: Groups, subjects: Subjects, scale: float, digits: int) -> Section:
    """Table 9 per row x dataset: one-way ANOVA between the subjects' accuracies (are some subjects
    worse?)."""
    shown, raw = [], []
    for row, ds in groups:
        outcomes = subjects.outcomes(row, ds)
        try:
            res, unit = subject_anova(outcomes)
        except RunStatsError as err:
            raise ReportError(f"--anova: {row.label} / {ds}: {err}") from None
        sp = spread(subjects.accuracy(row, ds, scale))
        shown.append([row.label, ds, f"{sp['mean']:.{digits}f} ± {sp['std']:.{digits}f} (n={int(sp['n'])})",
                      _num(res.f, 3), _p(res.p), f"({res.df_between}, {res.df_within})", unit])
        raw.append([row.model, row.variant, row.experiment, ds, sp["mean"], sp["std"], int(sp["n"]), res.f,
                    res.p,
                    res.df_between, res.df_within, unit])
    return Section("One-way ANOVA between subjects of each row (signed-graph paper, Table 9): groups are the "
                   "subjects, observations their per-run accuracies (runs) or their windows' 0/1 correctness "
                   "(windows)", ["model", "dataset", "per-subject acc", "F", "p", "df", "observations"],
                   shown,
                   ["model", "variant", "experiment", "dataset", "mean", "std", "n_subjects", "F", "p",
                    "df_between",
                    "df_within", "observations"], raw)


def anova_rows_section(groups: Groups, subjects: Subjects) -> Section:
    """Per dataset: one-way ANOVA between the rows, each row's observations its per-subject accuracies."""
    shown, raw = [], []
    for ds in dict.fromkeys(d for _, d in groups):
        rows = [r for r, d in groups if d == ds]
        if len(rows) < 2:
            continue
        values = [list(subjects.accuracy(r, ds, 1.0).values()) for r in rows]
        try:
            res = one_way_anova(values)
        except ValueError as err:
            raise ReportError(f"--anova-rows: {ds}: {err}") from None
        n = sum(len(v) for v in values)
        shown.append([ds, str(len(rows)), str(n), _num(res.f, 3), _p(res.p),
                      f"({res.df_between}, {res.df_within})"])
        raw.append([ds, len(rows), n, res.f, res.p, res.df_between, res.df_within])
    if not shown:
        raise ReportError("--anova-rows: no dataset has two rows to compare")
    return Section("One-way ANOVA between the rows of each dataset: groups are the rows, observations their "
                   "per-subject test accuracies", ["dataset", "rows", "observations", "F", "p", "df"], shown,
                   ["dataset", "rows", "observations", "F", "p", "df_between", "df_within"], raw)


def _two_rows(groups: Groups, labels: list[str], option: str) -> tuple[Row, Row, list[str]]:
    a, b = (_row_of(groups, label, option) for label in labels)
    if a == b:
        raise ReportError(f"{option}: name two different rows, got {labels[0]!r} twice")
    datasets = [d for d in dict.fromkeys(d for _, d in groups) if (a, d) in groups and (b, d) in groups]
    if not datasets:
        raise ReportError(f"{option}: {a.label!r} and {b.label!r} share no dataset")
    return a, b, datasets


def _ms(values: list[float], digits: int) -> str:
    """``mean ± std`` (ddof 1) of a row's per-run values; the mean alone for one run."""
    sp = spread(values)
    return f"{sp['mean']:.{digits}f} ± {sp['std']:.{digits}f}" if sp["n"] > 1 else f"{sp['mean']:.{digits}f}"


def ttest_section(groups: Groups, labels: list[str], metric: str, digits: int) -> Section:
    """Table 8: paired two-sided t-test of ``metric`` between two rows, runs paired by (split, seed), per
    dataset."""
    a, b, datasets = _two_rows(groups, labels, "--ttest")
    key = metric_key(metric)
    shown, raw = [], []
    for ds in datasets:
        try:
            _, xa, xb = paired_values(groups[(a, ds)], groups[(b, ds)], key, (a.label, b.label))
        except RunStatsError as err:
            raise ReportError(f"--ttest: {ds}: {err}") from None
        res = paired_t_test(xa, xb)
        shown.append([ds, _ms(xa, digits), _ms(xb, digits), _num(res.mean_difference, digits), _num(res.t, 3),
                      str(res.df), _p(res.p), str(len(xa))])
        raw.append([ds, float(np.mean(xa)), float(np.mean(xb)), res.mean_difference,
                    res.t, res.df, res.p, len(xa)])
    return Section(f"Paired t-test of {short_name(metric)}, {a.label} vs {b.label}, runs paired by seed and "
                   f"split "
                   "(signed-graph paper, Table 8; two-sided)",
                   ["dataset", a.label, b.label, "mean Δ", "t", "df", "p", "pairs"], shown,
                   ["dataset", "mean_a", "mean_b", "mean_difference", "t", "df", "p", "pairs"], raw)


def welch_section(groups: Groups, labels: list[str], metric: str, digits: int) -> Section:
    """BioFormer Sec. 5.3: Welch's two-sided t-test of ``metric`` between two rows over their seeds, per
    dataset."""
    a, b, datasets = _two_rows(groups, labels, "--welch")
    key = metric_key(metric)
    shown, raw = [], []
    for ds in datasets:
        xa, xb = metric_values(groups[(a, ds)], key), metric_values(groups[(b, ds)], key)
        try:
            res = welch_t_test(xa, xb)
        except ValueError as err:
            raise ReportError(
                f"--welch: {ds}: {err} ({a.label}: {len(xa)} runs, {b.label}: {len(xb)} runs)"
            ) from None
        diff = float(np.mean(xa) - np.mean(xb))
        shown.append([ds, _ms(xa, digits), _ms(xb, digits), _num(diff, digits), _num(res.t, 3),
                      _num(res.df, 2),
                      _p(res.p), f"{len(xa)} + {len(xb)}"])
        raw.append([ds, float(np.mean(xa)), float(np.mean(xb)), diff, res.t, res.df, res.p, len(xa), len(xb)])
    return Section(f"Welch t-test of {short_name(metric)}, {a.label} vs {b.label}, over seeds (BioFormer "
                   f"Sec. 5.3; "
                   "two-sided, unequal variances)",
                   ["dataset", a.label, b.label, "mean Δ", "t", "df", "p", "runs"], shown,
                   ["dataset", "mean_a", "mean_b", "mean_difference", "t", "df", "p", "n_a", "n_b"], raw)


def _score_cells(groups: Groups, metrics: list[str]) -> tuple[dict[tuple[str, str, str], float], list[str]]:
    """Mean per (row label, dataset, metric) over the higher-is-better score columns: Tables 2 and 3 rank
    scores only (ECE, loss and parameter counts are left out). Keyed by label so errors name rows as shown."""
    scores = [m for m in metrics if is_score(m)]
    if not scores:
        raise ReportError(f"--baseline / --ranks need a higher-is-better metric among "
                          f"{[short_name(m) for m in metrics]}")
    stats = summarize(groups, scores)
    return {(row.label, ds, short_name(m)): mean for (row, ds, m), (mean, _, _) in stats.items()}, scores


def gains_section(groups: Groups, metrics: list[str], label: str, digits: int) -> Section:
    """BioFormer Table 3: Pos. Rate and Worst Δ of every other row against the baseline row."""
    base = _row_of(groups, label, "--baseline")
    cells, scores = _score_cells(groups, metrics)
    try:
        gains = gain_stability(cells, base.label)
    except ValueError as err:
        raise ReportError(f"--baseline {label!r}: {err}") from None
    rows = [r for r in dict.fromkeys(r for r, _ in groups) if r.label in gains]
    shown = [[r.label, _num(g.pos_rate, 1), _num(g.worst_delta, digits), str(g.n_settings)]
             for r in rows for g in [gains[r.label]]]
    raw = [[r.model, r.variant, r.experiment, g.pos_rate, g.worst_delta, g.n_settings]
           for r in rows for g in [gains[r.label]]]
    return Section(f"Gain over {base.label} in each dataset x metric setting "
                   f"({', '.join(short_name(m) for m in scores)}; "
                   "BioFormer Table 3): Pos. Rate = % of settings with Δ > 0, Worst Δ = the smallest Δ",
                   ["model", "Pos. Rate (%)", "Worst Δ", "settings"], shown,
                   ["model", "variant", "experiment", "pos_rate", "worst_delta", "settings"], raw)


def ranks_section(groups: Groups, metrics: list[str]) -> Section:
    """BioFormer Table 2: average rank over dataset x metric cells (1 = best) and wins over datasets."""
    cells, scores = _score_cells(groups, metrics)
    try:
        ranks = rank_summary(cells)
    except ValueError as err:
        raise ReportError(f"--ranks: {err}; Table 2 ranks complete rows") from None
    rows = list(dict.fromkeys(r for r, _ in groups))
    shown = [[r.label, _num(k.avg_rank, 3),
              str(k.wins), str(k.n_cells)] for r in rows for k in [ranks[r.label]]]
    raw = [[r.model, r.variant, r.experiment,
            k.avg_rank, k.wins, k.n_cells] for r in rows for k in [ranks[r.label]]]
    return Section(f"Average rank over dataset x metric cells ({', '.join(short_name(m) for m in scores)}; 1 "
                   f"= best, "
                   "ties share the mean rank) and wins = datasets where the row has the best mean of those "
                   "metrics "
                   "(BioFormer Table 2)", ["model", "Avg. Rank", "Wins", "cells"], shown,
                   ["model", "variant", "experiment", "avg_rank", "wins", "cells"], raw)


