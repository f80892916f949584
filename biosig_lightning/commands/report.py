"""``biosig report``: a paper-style results table, its statistics and figures from many ``results.json`` files.

``biosig report DIR... [--format markdown|csv|latex] [--out FILE] [--metrics acc,f1,auroc,ece]
[--figures DIR] [--table1] [--per-subject] [--anova] [--anova-rows] [--ttest A B] [--welch A B]
[--baseline ROW] [--ranks]`` gathers every ``results.json`` below the given directories (e.g. the seed runs of
``biosig repeat``; a file reached through two of the given directories counts once) and groups
them into the table a paper prints:

* row: the backbone (``results["model"]``) plus its variant (``results["variant"]``: the override
  files that changed the base experiment, e.g. ``Medformer +mmd``), so one model on several corpora
  shares a row. Should two different experiments (``results["experiment"]`` up to its first ``+``)
  put the same model and variant on the same dataset, their rows are kept apart by that name in
  parentheses, never averaged together;
* column group: ``results["dataset"]``, one column per test metric (default: the runs' protocol's
  columns, :data:`PROTOCOL_METRICS`; SPDTransNet runs get Table 1's ``f1`` (MF1), ``macro_acc``
  (MAcc) and ``f1_n1`` (N1 F1); named in ``--metrics``, these two come from the saved test
  predictions of a run that did not log them, so another sleep task's runs share the columns);
* cell: ``mean ± std (n=k)`` over the k runs (seeds, or the folds of a ``biosig cv`` directory:
  ``biosig report runs/cv/NAME`` gives mean ± std over its folds, the numbers of its ``cv.json``);
  std is the sample standard deviation (ddof=1), and a single run shows ``mean (n=1)``. The best
  mean of each column is marked (bold in markdown/LaTeX, a ``best`` column in CSV) when at least two
  rows have a value; means are compared as displayed (``--digits``), so ties are all marked. For ``ece`` and ``loss`` lower is better.

CSV is for other programs: per metric separate ``mean``, ``std``, ``n`` and ``best`` columns (full
precision), and ``model`` and ``variant`` columns. Status lines go to stderr, so ``--format csv > t.csv``
holds the table only (plus the statistics blocks below, when asked for).

Statistics (the maths is :mod:`biosig_lightning.analysis.stats` and :mod:`~biosig_lightning.analysis.tables`,
the run reading :mod:`~biosig_lightning.analysis.run_stats`). ``--table1`` changes the table's columns;
every other option adds a section below the table, in this order, in the same format (markdown: a
title line and a table; LaTeX: a ``%`` title and a tabular; CSV: a block with its own header row, one
blank line between blocks; numbers at full precision):

* ``--table1``: Table 1 of the signed-graph paper (Yao et al.): accuracy, precision, recall,
  specificity and F1 in % and ``params`` (``results["num_params"]``, shown as an integer and never
  marked best); a binary run's precision, recall and F1 are those of class 1 (the paper's positive
  class), from its ``confusion_matrix``, not the macro means the run logs, ``mean ± std (n)`` over runs as above; a column a run lacks (specificity of a
  multiclass task) is ``–``.
* ``--per-subject``: the LOSO spread: per-subject test accuracy from each run's
  ``test_predictions.npz`` (``argmax(probs)`` against ``y``, grouped by ``subject``), each
  subject's windows pooled over the runs of the cell that tested it (seeds on one split: every run;
  LOSO folds: the one fold that held it out), shown as ``mean ± std [min, max] (n=subjects)``.
* ``--anova``: Table 9: per row × dataset a one-way ANOVA *between subjects* (the paper: "no
  significant differences between subjects"), F, p, df = (subjects - 1, N - subjects); a
  subject's observations are its per-run accuracies when every subject was tested at least twice,
  else its windows' 0/1 correctness. ``--anova-rows``: per dataset a one-way ANOVA *between rows*,
  each row's observations its per-subject accuracies.
* ``--ttest A B``: Table 8: two-sided paired t-test of the first metric between rows ``A`` and
  ``B`` (their labels as printed), runs paired by ``(split_id, seed)``, per dataset both have.
* ``--welch A B``: BioFormer Sec. 5.3: Welch's two-sided t-test of the first metric over seeds.
* ``--baseline ROW``: BioFormer Table 3: Pos. Rate (% of settings with Δ > 0) and Worst Δ of
  every other row against ``ROW``, a setting being each dataset × metric cell (means over seeds).
* ``--ranks``: BioFormer Table 2: average rank over dataset × metric cells (1 = best, ties share)
  and wins (datasets where the row has the best mean over the metrics; tied rows all win).
  ``--baseline`` and ``--ranks`` use the higher-is-better columns only (not ``ece``, ``loss`` or
  ``params``), and ``--ranks`` needs every row on every dataset.

Each problem is a one-line error: an unknown row label (the message lists the rows), a run without
``test_predictions.npz``, runs of ``A`` and ``B`` that do not pair (or pair twice), fewer than two
pairs or two runs per row, a single test subject for ``--anova``.

Figures (PNG, matplotlib Agg) go to ``--figures`` (default ``<FILE stem>_figures`` beside ``--out``,
else ``<first DIR>/report_figures``): per row × dataset the test confusion matrix summed over runs,
the reliability diagram pooled over runs (bin counts added, bin means count-weighted; its title
gives the ECE of the pooled bins, which can differ from the table's mean of per-run ECEs), and the
learning curves (train/loss_epoch and val/f1 per epoch from each run's ``metrics.csv``, one line per
seed); per dataset a strip+box plot of the per-seed spread of the first metric (``--spread-metric``
to choose) for every row.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from biosig_lightning.analysis.leaderboard import write_leaderboard
from biosig_lightning.analysis.run_stats import (
    SLEEP_TABLE1_DERIVED,
    TABLE1_METRICS,
    RunStatsError,
    metric_values,
    paired_values,
    run_key,
    sleep_table1_metrics,
    subject_accuracy,
    subject_anova,
    subject_outcomes,
    table1_metrics,
)
from biosig_lightning.analysis.stats import one_way_anova, paired_t_test, spread
from biosig_lightning.analysis.tables import gain_stability, rank_summary, welch_t_test

LOWER_IS_BETTER = {"ece", "loss"}
#: columns that are no score: never marked best, left out of --baseline and --ranks, shown as integers
NOT_SCORES = {"params"}
DEFAULT_METRICS = ("acc", "f1", "auroc", "ece")
#: the papers' own columns, the default when every run was evaluated that way (the first entry whose
#: marker metric every run has): seizure detection at the validation-chosen threshold (STDRO Tables 1,
#: 2, 4), seizure typing (Table 3), SPDTransNet's Table 1 (macro-F1, macro accuracy = mean per-class
#: recall, N1 F1; logged by ``SPDTransNetTask``, so a ``biosig cv`` directory of its folds gets them as
#: mean ± std over folds), sleep staging (``eval_metrics: sleep``, STDRO Table 5)
PROTOCOL_METRICS = (
    ("det_f1", ("auroc", "det_f1", "det_acc", "det_recall", "det_precision")),
    ("weighted_f1", ("weighted_f1", "acc")),
    ("f1_n1", ("f1", "macro_acc", "f1_n1")),
    ("macro_f1", ("macro_f1", "kappa", "acc")),
)


class ReportError(ValueError):
    """No results to report or bad ``biosig report`` arguments (one line)."""


class Row(NamedTuple):
    """One table row: a model, its variant, and (only when needed to keep them apart) its experiment."""

    model: str
    variant: str = ""
    experiment: str = ""

    @property
    def label(self) -> str:
        text = f"{self.model} +{self.variant}" if self.variant else self.model
        return f"{text} ({self.experiment})" if self.experiment else text


Groups = dict[tuple[Row, str], list[tuple[Path, dict[str, Any]]]]


def _warn(message: str) -> None:
    print(f"biosig report: {message}", file=sys.stderr)


# ---- gathering --------------------------------------------------------------------------------------
def find_results(dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``results.json`` below ``dirs`` (sorted, each file once), parsed; missing dirs or none found is an error."""
    if not dirs:
        raise ReportError("give at least one directory that holds results.json files")
    found: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise ReportError(f"{d} does not exist")
        paths = [d] if d.is_file() and d.name == "results.json" else sorted(d.rglob("results.json"))
        for p in paths:
            # `report runs runs/repeat` or `report D D` reach the same file twice: count it once
            if p.resolve() in seen:
                continue
            seen.add(p.resolve())
            try:
                found.append((p, json.loads(p.read_text())))
            except (OSError, json.JSONDecodeError) as err:
                raise ReportError(f"{p}: not a readable results.json ({err})") from None
    if not found:
        raise ReportError(f"no results.json below {', '.join(str(d) for d in dirs)} (run biosig fit / repeat first)")
    return found


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def run_variant(results: dict[str, Any]) -> str:
    """The run's variant: ``results["variant"]``, or for older results the ``+`` parts of its experiment name.

    In the fallback, parts the dataset or the model already name (``synthetic``) are left out.
    """
    if "variant" in results:
        return str(results["variant"] or "")
    model, dataset = str(results.get("model") or ""), str(results.get("dataset") or "")
    named = {_norm(t) for t in re.split(r"[-_]", dataset)} | {_norm(model)}
    parts = str(results.get("experiment") or "").split("+")[1:]
    return "+".join(p for p in parts if _norm(p) not in named)


def base_experiment(results: dict[str, Any]) -> str:
    """The experiment a run varies: its experiment name up to the first ``+`` (``bioformer_apava``)."""
    return str(results.get("experiment") or "").split("+")[0]


def group_runs(found: list[tuple[Path, dict[str, Any]]]) -> Groups:
    """``(row, dataset) -> runs`` in first-seen order; warns (stderr) about a seed counted twice in a cell."""
    def key(res: dict[str, Any]) -> tuple[str, str]:
        return str(res.get("model") or "model"), run_variant(res)

    def dataset(res: dict[str, Any]) -> str:
        return str(res.get("dataset") or "data")

    bases: dict[tuple[tuple[str, str], str], set[str]] = defaultdict(set)
    for _, res in found:
        bases[(key(res), dataset(res))].add(base_experiment(res))
    # two experiments with one model+variant on one dataset: averaging them would mix two protocols
    split = {k for (k, _), b in bases.items() if len(b) > 1}
    for k in split:
        names = sorted({b for (kk, _), bs in bases.items() if kk == k for b in bs})
        _warn(f"note: {Row(*k).label!r} comes from several experiments ({', '.join(names)}) on one dataset; "
              "their rows are kept apart by experiment")
    groups: Groups = defaultdict(list)
    for path, res in found:
        k = key(res)
        row = Row(*k, base_experiment(res) if k in split else "")
        groups[(row, dataset(res))].append((path, res))
    for (row, ds), runs in groups.items():
        # keyed by split and seed: LOSO folds share a seed but test other subjects, so they are not copies
        by_seed: dict[Any, list[Path]] = defaultdict(list)
        for path, res in runs:
            by_seed[run_key(res)].append(path)
        for (_, seed), paths in by_seed.items():
            if len(paths) > 1:
                _warn(f"warning: {row.label} / {ds} holds seed {seed} {len(paths)} times "
                      f"({', '.join(str(p) for p in paths)}); copies of one run would inflate n")
    return dict(groups)


def _metric_key(name: str) -> str:
    return name if "/" in name else f"test/{name}"


def _short(name: str) -> str:
    return name.split("/", 1)[-1]


Stats = dict[tuple[Row, str, str], tuple[float, float, int]]


def summarize(groups: Groups, metrics: list[str]) -> Stats:
    """``(row, dataset, metric) -> (mean, std, n)`` over the runs that report that metric (std NaN for n=1)."""
    out: Stats = {}
    for (row, ds), runs in groups.items():
        for m in metrics:
            vals = [float(r["metrics"][_metric_key(m)]) for _, r in runs if _metric_key(m) in r.get("metrics", {})]
            vals = [v for v in vals if math.isfinite(v)]
            if vals:
                arr = np.asarray(vals)
                out[(row, ds, m)] = (float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else float("nan"),
                                     len(arr))
    return out


def best_cells(stats: Stats, digits: int = 3) -> set[tuple[Row, str, str]]:
    """The best mean per (dataset, metric) column, compared as displayed; ties are all marked.

    A column with a value in one row only has nothing to be best against and marks nothing.
    """
    columns: dict[tuple[str, str], list[tuple[float, Row]]] = defaultdict(list)
    for (row, ds, m), (mean, _, _) in stats.items():
        columns[(ds, m)].append((float(f"{mean:.{_digits(m, digits)}f}"), row))  # the number the reader sees
    best: set[tuple[Row, str, str]] = set()
    for (ds, m), vals in columns.items():
        if len(vals) < 2 or _short(m) in NOT_SCORES:
            continue
        pick = min if _short(m) in LOWER_IS_BETTER else max
        target = pick(v for v, _ in vals)
        best |= {(row, ds, m) for v, row in vals if v == target}
    return best


# ---- rendering --------------------------------------------------------------------------------------
def _digits(metric: str, digits: int) -> int:
    """Decimals shown for ``metric``: parameter counts are whole numbers."""
    return 0 if _short(metric) in NOT_SCORES else digits


def _cell(stat: tuple[float, float, int] | None, digits: int, pm: str) -> str:
    if stat is None:
        return "–"
    mean, std, n = stat
    if n == 1:
        return f"{mean:.{digits}f} (n=1)"
    return f"{mean:.{digits}f}{pm}{std:.{digits}f} (n={n})"


def render(groups: Groups, metrics: list[str], fmt: str, digits: int = 3) -> str:
    """The table as markdown, csv or latex text."""
    stats = summarize(groups, metrics)
    best = best_cells(stats, digits)
    rows = list(dict.fromkeys(r for r, _ in groups))
    datasets = list(dict.fromkeys(d for _, d in groups))
    cols = [(d, m) for d in datasets for m in metrics]

    def cell(row: Row, ds: str, m: str, pm: str) -> tuple[str, bool]:
        return _cell(stats.get((row, ds, m)), _digits(m, digits), pm), (row, ds, m) in best

    if fmt == "markdown":
        lines = ["| model | " + " | ".join(f"{d}: {_short(m)}" for d, m in cols) + " |",
                 "|---|" + "---|" * len(cols)]
        for row in rows:
            cells = []
            for d, m in cols:
                text, is_best = cell(row, d, m, " ± ")
                cells.append(f"**{text}**" if is_best else text)
            lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "variant", "experiment",
                    *(f"{d}/{_short(m)}/{part}" for d, m in cols for part in ("mean", "std", "n", "best"))])
        for row in rows:
            cells: list[Any] = []
            for d, m in cols:
                stat = stats.get((row, d, m))
                if stat is None:
                    cells += ["", "", "", ""]
                    continue
                mean, std, n = stat
                cells += [repr(mean), repr(std) if math.isfinite(std) else "", n, int((row, d, m) in best)]
            w.writerow([row.model, row.variant, row.experiment, *cells])
        return buf.getvalue().rstrip("\n")
    if fmt == "latex":
        def esc(s: str) -> str:
            return re.sub(r"([&%$#_{}])", r"\\\1", s)

        lines = [r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
                 " & " + " & ".join(rf"\multicolumn{{{len(metrics)}}}{{c}}{{{esc(d)}}}" for d in datasets) + r" \\"]
        lines.append(" ".join(rf"\cmidrule(lr){{{2 + i * len(metrics)}-{1 + (i + 1) * len(metrics)}}}"
                              for i in range(len(datasets))))
        lines.append("model & " + " & ".join(esc(_short(m)) for _, m in cols) + r" \\")
        lines.append(r"\midrule")
        for row in rows:
            cells = []
            for d, m in cols:
                text, is_best = cell(row, d, m, r" $\pm$ ")
                text = text.replace("–", "--")
                cells.append(rf"\textbf{{{text}}}" if is_best else text)
            lines.append(f"{esc(row.label)} & " + " & ".join(cells) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines)
    raise ReportError(f"--format must be markdown, csv or latex, got {fmt!r}")


# ---- statistics sections (--per-subject, --anova, --ttest, --welch, --baseline, --ranks) ------------
class Section(NamedTuple):
    """A table printed below the main one: ``header``/``rows`` as shown (markdown, LaTeX), and
    ``csv_header``/``csv_rows`` with one number per column at full precision (CSV)."""

    title: str
    header: list[str]
    rows: list[list[str]]
    csv_header: list[str]
    csv_rows: list[list[Any]]


def _num(value: float | None, digits: int) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    """p-values at three significant digits (``2.31e-05``), as the papers' tables give them."""
    return "–" if not math.isfinite(value) else f"{value:.3g}"


def _raw(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return "" if value is None else value


def render_section(section: Section, fmt: str) -> str:
    """One section as markdown (title line + table), csv (header + rows) or latex (``%`` title + tabular)."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(section.csv_header)
        w.writerows([[_raw(v) for v in r] for r in section.csv_rows])
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        return "\n".join([section.title, "", "| " + " | ".join(section.header) + " |",
                          "|" + "---|" * len(section.header),
                          *("| " + " | ".join(r) + " |" for r in section.rows)])

    def esc(s: str) -> str:
        return (re.sub(r"([&%$#_{}])", r"\\\1", s).replace(" ± ", r" $\pm$ ").replace("–", "--")
                .replace("Δ", r"$\Delta$"))

    return "\n".join([f"% {section.title}", r"\begin{tabular}{l" + "c" * (len(section.header) - 1) + "}",
                      r"\toprule", " & ".join(esc(h) for h in section.header) + r" \\", r"\midrule",
                      *(" & ".join(esc(c) for c in r) + r" \\" for r in section.rows),
                      r"\bottomrule", r"\end{tabular}"])


def _row_of(groups: Groups, label: str, option: str) -> Row:
    rows = list(dict.fromkeys(r for r, _ in groups))
    for row in rows:
        if row.label == label:
            return row
    raise ReportError(f"{option}: no row {label!r} (rows: {', '.join(repr(r.label) for r in rows)})")


class _Subjects:
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


def per_subject_section(groups: Groups, subjects: _Subjects, scale: float, digits: int) -> Section:
    """Per-subject test accuracy per row x dataset: mean ± std (ddof 1), min, max over subjects, n subjects."""
    rows = list(dict.fromkeys(r for r, _ in groups))
    datasets = list(dict.fromkeys(d for _, d in groups))
    shown, raw = [], []
    for row in rows:
        cells, nums = [], []
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
    return Section(f"Per-subject test accuracy{unit}: mean ± std [min, max] over subjects (n subjects); "
                   "each subject's windows pooled over the runs that tested it",
                   ["model", *(f"{d}: per-subject acc" for d in datasets)], shown,
                   ["model", "variant", "experiment",
                    *(f"{d}/subject_acc/{part}" for d in datasets for part in ("mean", "std", "min", "max", "n"))], raw)


def anova_subjects_section(groups: Groups, subjects: _Subjects, scale: float, digits: int) -> Section:
    """Table 9 per row x dataset: one-way ANOVA between the subjects' accuracies (are some subjects worse?)."""
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
        raw.append([row.model, row.variant, row.experiment, ds, sp["mean"], sp["std"], int(sp["n"]), res.f, res.p,
                    res.df_between, res.df_within, unit])
    return Section("One-way ANOVA between subjects of each row (signed-graph paper, Table 9): groups are the "
                   "subjects, observations their per-run accuracies (runs) or their windows' 0/1 correctness "
                   "(windows)", ["model", "dataset", "per-subject acc", "F", "p", "df", "observations"], shown,
                   ["model", "variant", "experiment", "dataset", "mean", "std", "n_subjects", "F", "p", "df_between",
                    "df_within", "observations"], raw)


def anova_rows_section(groups: Groups, subjects: _Subjects) -> Section:
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
        shown.append([ds, str(len(rows)), str(n), _num(res.f, 3), _p(res.p), f"({res.df_between}, {res.df_within})"])
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
    arr = np.asarray(values)
    return f"{arr.mean():.{digits}f} ± {arr.std(ddof=1):.{digits}f}" if arr.size > 1 else f"{arr.mean():.{digits}f}"


def ttest_section(groups: Groups, labels: list[str], metric: str, digits: int) -> Section:
    """Table 8: paired two-sided t-test of ``metric`` between two rows, runs paired by (split, seed), per dataset."""
    a, b, datasets = _two_rows(groups, labels, "--ttest")
    key = _metric_key(metric)
    shown, raw = [], []
    for ds in datasets:
        try:
            _, xa, xb = paired_values(groups[(a, ds)], groups[(b, ds)], key, (a.label, b.label))
        except RunStatsError as err:
            raise ReportError(f"--ttest: {ds}: {err}") from None
        res = paired_t_test(xa, xb)
        shown.append([ds, _ms(xa, digits), _ms(xb, digits), _num(res.mean_difference, digits), _num(res.t, 3),
                      str(res.df), _p(res.p), str(len(xa))])
        raw.append([ds, float(np.mean(xa)), float(np.mean(xb)), res.mean_difference, res.t, res.df, res.p, len(xa)])
    return Section(f"Paired t-test of {_short(metric)}, {a.label} vs {b.label}, runs paired by seed and split "
                   "(signed-graph paper, Table 8; two-sided)",
                   ["dataset", a.label, b.label, "mean Δ", "t", "df", "p", "pairs"], shown,
                   ["dataset", "mean_a", "mean_b", "mean_difference", "t", "df", "p", "pairs"], raw)


def welch_section(groups: Groups, labels: list[str], metric: str, digits: int) -> Section:
    """BioFormer Sec. 5.3: Welch's two-sided t-test of ``metric`` between two rows over their seeds, per dataset."""
    a, b, datasets = _two_rows(groups, labels, "--welch")
    key = _metric_key(metric)
    shown, raw = [], []
    for ds in datasets:
        xa, xb = metric_values(groups[(a, ds)], key), metric_values(groups[(b, ds)], key)
        try:
            res = welch_t_test(xa, xb)
        except ValueError as err:
            raise ReportError(f"--welch: {ds}: {err} ({a.label}: {len(xa)} runs, {b.label}: {len(xb)} runs)") from None
        diff = float(np.mean(xa) - np.mean(xb))
        shown.append([ds, _ms(xa, digits), _ms(xb, digits), _num(diff, digits), _num(res.t, 3), _num(res.df, 2),
                      _p(res.p), f"{len(xa)} + {len(xb)}"])
        raw.append([ds, float(np.mean(xa)), float(np.mean(xb)), diff, res.t, res.df, res.p, len(xa), len(xb)])
    return Section(f"Welch t-test of {_short(metric)}, {a.label} vs {b.label}, over seeds (BioFormer Sec. 5.3; "
                   "two-sided, unequal variances)",
                   ["dataset", a.label, b.label, "mean Δ", "t", "df", "p", "runs"], shown,
                   ["dataset", "mean_a", "mean_b", "mean_difference", "t", "df", "p", "n_a", "n_b"], raw)


def _score_cells(groups: Groups, metrics: list[str]) -> tuple[dict[tuple[str, str, str], float], list[str]]:
    """Mean per (row label, dataset, metric) over the higher-is-better score columns: Tables 2 and 3 rank
    scores only (ECE, loss and parameter counts are left out). Keyed by label so errors name rows as shown."""
    scores = [m for m in metrics if _short(m) not in LOWER_IS_BETTER | NOT_SCORES]
    if not scores:
        raise ReportError(f"--baseline / --ranks need a higher-is-better metric among {[_short(m) for m in metrics]}")
    stats = summarize(groups, scores)
    return {(row.label, ds, _short(m)): mean for (row, ds, m), (mean, _, _) in stats.items()}, scores


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
    return Section(f"Gain over {base.label} in each dataset x metric setting ({', '.join(_short(m) for m in scores)}; "
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
    shown = [[r.label, _num(k.avg_rank, 3), str(k.wins), str(k.n_cells)] for r in rows for k in [ranks[r.label]]]
    raw = [[r.model, r.variant, r.experiment, k.avg_rank, k.wins, k.n_cells] for r in rows for k in [ranks[r.label]]]
    return Section(f"Average rank over dataset x metric cells ({', '.join(_short(m) for m in scores)}; 1 = best, "
                   "ties share the mean rank) and wins = datasets where the row has the best mean of those metrics "
                   "(BioFormer Table 2)", ["model", "Avg. Rank", "Wins", "cells"], shown,
                   ["model", "variant", "experiment", "avg_rank", "wins", "cells"], raw)


# ---- figures ----------------------------------------------------------------------------------------
def _slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p).strip("-") for p in parts)


def _wrap(title: str, width_in: float) -> str:
    """Wrap a title to the figure's width (about 12 characters per inch at font size 9)."""
    return "\n".join(textwrap.fill(line, width=max(16, int(width_in * 12))) for line in title.splitlines())


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _read_curves(path: Path) -> dict[str, dict[int, float]]:
    """``metric -> {epoch: value}`` from a CSVLogger metrics.csv (last non-empty value per epoch)."""
    curves: dict[str, dict[int, float]] = defaultdict(dict)
    if not path.exists():
        return curves
    with path.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            try:
                epoch = int(float(rec.get("epoch") or "nan"))
            except ValueError:
                continue
            for key in ("train/loss_epoch", "val/f1", "val/loss"):
                val = rec.get(key)
                if val not in (None, ""):
                    curves[key][epoch] = float(val)
    return curves


def write_figures(groups: Groups, fig_dir: Path, spread_metric: str) -> list[Path]:
    """Confusion, reliability, learning-curve and per-seed spread PNGs; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def figure(width: float, height: float, ncols: int = 1) -> tuple[Any, Any]:
        # constrained layout makes room for wrapped titles and rotated labels instead of clipping them
        return plt.subplots(1, ncols, figsize=(width, height), layout="constrained")

    def save(fig: Any, name: str) -> None:
        path = fig_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    for (row, ds), runs in groups.items():
        seeds = [r.get("seed") for _, r in runs]
        # confusion matrix summed over runs
        cms = [np.asarray(r["confusion_matrix"]) for _, r in runs if r.get("confusion_matrix")]
        cms = [c for c in cms if cms and c.shape == cms[0].shape]
        if cms:
            cm = np.sum(cms, axis=0)
            classes = next((r.get("classes") for _, r in runs if r.get("classes")), None) or list(range(len(cm)))
            width = max(3.4, 1.4 + 0.6 * len(cm))
            fig, ax = figure(width, max(3.2, 1.4 + 0.6 * len(cm)))
            ax.imshow(cm, cmap="Blues")
            for i in range(len(cm)):
                for j in range(len(cm)):
                    ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                            color="white" if cm[i, j] > cm.max() / 2 else "black", fontsize=8)
            ax.set_xticks(range(len(cm)), [str(c) for c in classes], rotation=45, ha="right")
            ax.set_yticks(range(len(cm)), [str(c) for c in classes])
            ax.set_xlabel("predicted")
            ax.set_ylabel("true")
            ax.set_title(_wrap(f"{row.label} / {ds}\n(test, summed over {_runs(len(cms))})", width), fontsize=9)
            save(fig, _slug("confusion", row.label, ds))
        # reliability diagram pooled over runs
        rels = [r["reliability"] for _, r in runs if r.get("reliability")]
        if rels:
            edges = np.asarray(rels[0]["edges"], dtype=float)
            count = np.zeros(len(edges) - 1)
            conf_sum = np.zeros_like(count)
            acc_sum = np.zeros_like(count)
            for rel in rels:
                if len(rel["edges"]) != len(edges):
                    continue
                c = np.asarray(rel["count"], dtype=float)
                conf = np.nan_to_num(np.asarray(rel["confidence"], dtype=float))  # JSON null = empty bin
                acc = np.nan_to_num(np.asarray(rel["accuracy"], dtype=float))
                count += c
                conf_sum += c * conf
                acc_sum += c * acc
            nz = count > 0
            conf_m = np.where(nz, conf_sum / np.maximum(count, 1), np.nan)
            acc_m = np.where(nz, acc_sum / np.maximum(count, 1), np.nan)
            ece = float(np.sum(count[nz] * np.abs(acc_m[nz] - conf_m[nz])) / max(count.sum(), 1))
            centers = (edges[:-1] + edges[1:]) / 2
            fig, ax = figure(4.2, 4.4)
            ax.bar(centers[nz], acc_m[nz], width=np.diff(edges)[nz], edgecolor="k", alpha=0.7, label="accuracy")
            ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
            ax.plot(conf_m[nz], acc_m[nz], "o", color="C3", ms=3, label="bin mean confidence")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("confidence")
            ax.set_ylabel("accuracy")
            # pooled over the runs' bins: not the table's mean of per-run ECEs, so say which it is
            ax.set_title(_wrap(f"{row.label} / {ds}\npooled ECE {ece:.3f} (test, {_runs(len(rels))})", 4.2),
                         fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
            save(fig, _slug("reliability", row.label, ds))
        # learning curves, one line per seed
        curves = [(seed, _read_curves(path.parent / "metrics.csv")) for seed, (path, _) in zip(seeds, runs, strict=True)]
        if any(c for _, c in curves):
            fig, axes = figure(8, 3.4, ncols=2)
            epochs = sorted({e for _, c in curves for per_epoch in c.values() for e in per_epoch})
            for ax, key in zip(axes, ("train/loss_epoch", "val/f1"), strict=True):
                for seed, c in curves:
                    if c.get(key):
                        ep = sorted(c[key])
                        ax.plot(ep, [c[key][e] for e in ep], marker=".", label=f"seed {seed}")
                ax.set_xlabel("epoch")
                # epochs are whole numbers, also for a run of one or two epochs (else ticks at -0.045 ...)
                ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
                if epochs[-1] - epochs[0] < 10:
                    ax.set_xticks(range(epochs[0], epochs[-1] + 1))
                else:
                    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_title(key, fontsize=9)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=7)
            fig.suptitle(_wrap(f"{row.label} / {ds}", 8), fontsize=9)
            save(fig, _slug("curves", row.label, ds))

    # per-seed spread of one metric, one box per row, per dataset
    key = _metric_key(spread_metric)
    for ds in dict.fromkeys(d for _, d in groups):
        rows = [(row, [float(r["metrics"][key]) for _, r in runs if key in r.get("metrics", {})])
                for (row, d), runs in groups.items() if d == ds]
        rows = [(row, v) for row, v in rows if v]
        if not rows:
            continue
        # one row per model, as in the table: labels stay whole and readable however many rows there are
        fig, ax = figure(6.5, 1.4 + 0.4 * len(rows))
        ax.boxplot([v for _, v in rows], widths=0.5, orientation="horizontal")
        for i, (_, v) in enumerate(rows, start=1):
            jitter = np.linspace(-0.08, 0.08, len(v)) if len(v) > 1 else np.zeros(1)
            ax.plot(v, i + jitter, "o", color="C1", ms=4)
        ax.set_yticks(range(1, len(rows) + 1), [r.label for r, _ in rows], fontsize=8)
        ax.invert_yaxis()  # first row on top, as in the table
        ax.set_xlabel(key)
        ax.set_title(_wrap(f"{ds}: per-seed {_short(key)} ({_runs(sum(len(v) for _, v in rows))})", 6.5),
                     fontsize=9)
        save(fig, _slug("spread", ds, _short(key)))
    return written


# ---- command ----------------------------------------------------------------------------------------
def _table1_groups(groups: Groups) -> Groups:
    """The runs with Table 1's columns (``table1/accuracy`` ... in %, ``table1/params``) added to their metrics."""
    return {k: [(p, {**r, "metrics": {**r.get("metrics", {}), **table1_metrics(r)}}) for p, r in runs]
            for k, runs in groups.items()}


def _sleep_table1_groups(groups: Groups, keys: list[str]) -> Groups:
    """Runs that lack SPDTransNet Table 1's ``macro_acc`` / ``f1_n1`` asked for in ``keys`` get them from
    their saved test predictions (:func:`~biosig_lightning.analysis.run_stats.sleep_table1_metrics`), so a
    sleep baseline trained by another task shares those columns; logged values are never replaced."""
    wanted = [k for k in keys if k in SLEEP_TABLE1_DERIVED]
    if not wanted:
        return groups
    out: Groups = {}
    for k, runs in groups.items():
        out[k] = []
        for path, res in runs:
            metrics = res.get("metrics", {})
            if any(w not in metrics for w in wanted):
                try:
                    derived = sleep_table1_metrics(path, res)
                except RunStatsError as err:
                    raise ReportError(str(err)) from None
                res = {**res, "metrics": {**derived, **metrics}}
            out[k].append((path, res))
    return out


def default_metrics(groups: Groups) -> tuple[str, ...]:
    """The columns when ``--metrics`` is not given: a protocol's own (:data:`PROTOCOL_METRICS`) when every
    run has its marker key, else :data:`DEFAULT_METRICS`."""
    runs = [r for rs in groups.values() for _, r in rs]
    for marker, columns in PROTOCOL_METRICS:
        if runs and all(_metric_key(marker) in r.get("metrics", {}) for r in runs):
            return columns
    return DEFAULT_METRICS


def report(dirs: list[Path], fmt: str = "markdown", out: Path | None = None, metrics: list[str] | None = None,
           figures: Path | None = None, spread_metric: str | None = None, digits: int = 3, *,
           table1: bool = False, per_subject: bool = False, anova: bool = False, anova_rows: bool = False,
           ttest: list[str] | None = None, welch: list[str] | None = None, baseline: str | None = None,
           ranks: bool = False) -> tuple[str, list[Path]]:
    """Build the table and the statistics sections below it (all written to ``out`` if given) and the
    figures; returns ``(text, figure paths)``.

    ``metrics=None`` reports those of :func:`default_metrics` that any run has; named metrics must
    all be in some run. ``table1`` swaps them for Table 1's columns. The sections, in this order:
    ``per_subject``, ``anova`` (between subjects), ``anova_rows``, ``ttest`` and ``welch`` (two row
    labels; the first metric), ``baseline`` (a row label), ``ranks`` (see the module docstring).
    """
    if fmt not in ("markdown", "csv", "latex"):
        raise ReportError(f"--format must be markdown, csv or latex, got {fmt!r}")
    groups = group_runs(find_results([Path(d) for d in dirs]))
    if table1:
        if metrics is not None:
            raise ReportError("--table1 sets the columns itself (accuracy ... params); drop --metrics")
        groups = _table1_groups(groups)
        if not any(m in r["metrics"] for runs in groups.values() for _, r in runs for m in TABLE1_METRICS):
            raise ReportError("--table1: no run has any of test/acc, precision, recall, specificity, f1 or num_params")
        metrics = list(TABLE1_METRICS)
    if metrics is not None:
        groups = _sleep_table1_groups(groups, [_metric_key(m) for m in metrics])
    known = {k for runs in groups.values() for _, r in runs for k in r.get("metrics", {})}
    if metrics is None:
        metrics = [m for m in default_metrics(groups) if _metric_key(m) in known]
        if not metrics:
            raise ReportError(f"no run has any of the test metrics {list(default_metrics(groups))} "
                              f"(have: {sorted(known)})")
    if not metrics:
        raise ReportError("--metrics: name at least one test metric, e.g. --metrics acc,f1")
    unknown = [m for m in metrics if _metric_key(m) not in known]
    if unknown and not table1:  # Table 1 keeps its six columns; a column no run has shows "–"
        raise ReportError(f"--metrics: {unknown} not in any run's test metrics (have: {sorted(known)})")
    metrics = list(metrics)
    sections: list[Section] = []
    subjects = _Subjects(groups)
    scale = 100.0 if table1 else 1.0  # per-subject accuracy in the unit of the table's accuracy column
    if per_subject:
        sections.append(per_subject_section(groups, subjects, scale, digits))
    if anova:
        sections.append(anova_subjects_section(groups, subjects, scale, digits))
    if anova_rows:
        sections.append(anova_rows_section(groups, subjects))
    if ttest:
        sections.append(ttest_section(groups, ttest, metrics[0], digits))
    if welch:
        sections.append(welch_section(groups, welch, metrics[0], digits))
    if baseline is not None:
        sections.append(gains_section(groups, metrics, baseline, digits))
    if ranks:
        sections.append(ranks_section(groups, metrics))
    # one blank line between blocks: for CSV each block starts with its own header row
    table = "\n\n".join([render(groups, metrics, fmt, digits), *(render_section(s, fmt) for s in sections)])
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(table + "\n")
    if figures is None:
        figures = out.parent / f"{out.stem}_figures" if out is not None else Path(dirs[0]) / "report_figures"
    written = write_figures(groups, Path(figures), spread_metric or metrics[0])
    return table, written


def run(argv: list[str]) -> str:
    """Entry point of ``biosig report`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig report", allow_abbrev=False,
                                 description="mean ± std table, statistics and figures over results.json files")
    ap.add_argument("dirs", nargs="*", type=Path, help="directories searched recursively for results.json")
    ap.add_argument("--leaderboard", type=Path, default=None, metavar="DIR",
                    help="(re)write and print the leaderboard of a `biosig benchmark` folder instead")
    ap.add_argument("--format", default="markdown", choices=("markdown", "csv", "latex"))
    ap.add_argument("--out", type=Path, default=None, help="write the table (and sections) here too")
    ap.add_argument("--metrics", default=None,
                    help=f"comma-separated test metrics (default: those of {','.join(DEFAULT_METRICS)} the runs have, or "
                         "the protocol's own columns when every run has them: "
                         f"{'; '.join(','.join(c) for _, c in PROTOCOL_METRICS)}); "
                         "the first is the one --ttest and --welch test")
    ap.add_argument("--figures", type=Path, default=None, help="figure directory")
    ap.add_argument("--spread-metric", default=None, help="metric of the per-seed spread plot (default: first)")
    ap.add_argument("--digits", type=int, default=3, help="decimals shown; best cells are compared at this precision")
    st = ap.add_argument_group("statistics", "--table1 changes the columns; the others add a section below the table. "
                               "ROW: a row label as printed in the first column (quote it: 'Medformer +mmd')")
    st.add_argument("--table1", action="store_true",
                    help="Table 1 columns (signed-graph paper): accuracy, precision, recall, specificity, F1 in %%, "
                         "params (num_params)")
    st.add_argument("--per-subject", action="store_true",
                    help="per-subject test accuracy from each run's test_predictions.npz: mean ± std [min, max] "
                         "over subjects (n) per row x dataset (the LOSO spread)")
    st.add_argument("--anova", action="store_true",
                    help="one-way ANOVA between the subjects of each row x dataset (Table 9: does accuracy differ "
                         "between subjects?)")
    st.add_argument("--anova-rows", action="store_true",
                    help="one-way ANOVA between the rows of each dataset, over their per-subject accuracies")
    st.add_argument("--ttest", nargs=2, metavar=("ROW_A", "ROW_B"), default=None,
                    help="paired t-test of the first metric (accuracy with --table1) between two rows, runs paired by seed and split (Table 8)")
    st.add_argument("--welch", nargs=2, metavar=("ROW_A", "ROW_B"), default=None,
                    help="Welch t-test of the first metric between two rows over seeds (BioFormer Sec. 5.3)")
    st.add_argument("--baseline", metavar="ROW", default=None,
                    help="Pos. Rate and Worst Δ of every other row against this row (BioFormer Table 3)")
    st.add_argument("--ranks", action="store_true", help="average rank and wins across datasets (BioFormer Table 2)")
    a = ap.parse_args(argv)
    if a.leaderboard is not None:
        table = write_leaderboard(a.leaderboard)[0]
        print(table, flush=True)
        return table
    if not a.dirs:
        ap.error("the following arguments are required: dirs")
    metrics = [m.strip() for m in a.metrics.split(",") if m.strip()] if a.metrics is not None else None
    try:
        table, figs = report(a.dirs, a.format, a.out, metrics, a.figures, a.spread_metric, a.digits,
                             table1=a.table1, per_subject=a.per_subject, anova=a.anova, anova_rows=a.anova_rows,
                             ttest=a.ttest, welch=a.welch,
                             baseline=a.baseline, ranks=a.ranks)
    except ReportError as err:
        raise SystemExit(f"biosig report: error: {err}") from None
    print(table, flush=True)
    # status on stderr: stdout is the table (and the asked-for sections) alone, so `--format csv > table.csv` is clean
    if a.out is not None:
        print(f"table: {a.out}", file=sys.stderr)
    where = sorted({str(p.parent) for p in figs})
    print(f"figures: {len(figs)} PNG files in {', '.join(where) if where else '(none)'}", file=sys.stderr)
    return table
