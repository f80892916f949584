"""The report's text: the mean ± std table and the statistics sections below it, as markdown, CSV or LaTeX.

A cell is ``mean ± std (n=k)`` over the k runs of a row on a dataset (std the sample standard
deviation, ddof 1; a single run shows ``mean (n=1)``). The best mean of each column is marked (bold in
markdown/LaTeX, a ``best`` column in CSV) when at least two rows have a value; means are compared as
displayed, so ties are all marked; for ``ece`` and ``loss`` lower is better. CSV gives every number at
full precision in its own column, for other programs.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from biosig_lightning.analysis.report.collect import (
    LOWER_IS_BETTER,
    NOT_SCORES,
    Groups,
    ReportError,
    Row,
    metric_key,
    short_name,
)
from biosig_lightning.analysis.run_stats import metric_values

Stats = dict[tuple[Row, str, str], tuple[float, float, int]]


def summarize(groups: Groups, metrics: list[str]) -> Stats:
    """``(row, dataset, metric) -> (mean, std, n)`` over the runs that report that metric (std NaN for
    n=1)."""
    out: Stats = {}
    for (row, ds), runs in groups.items():
        for m in metrics:
            vals = metric_values(runs, metric_key(m))
            if vals:
                arr = np.asarray(vals)
                out[(row, ds, m)] = (float(arr.mean()),
                                     float(arr.std(ddof=1)) if len(arr) > 1 else float("nan"),
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
        if len(vals) < 2 or short_name(m) in NOT_SCORES:
            continue
        pick = min if short_name(m) in LOWER_IS_BETTER else max
        target = pick(v for v, _ in vals)
        best |= {(row, ds, m) for v, row in vals if v == target}
    return best


def _digits(metric: str, digits: int) -> int:
    """Decimals shown for ``metric``: parameter counts are whole numbers."""
    return 0 if short_name(metric) in NOT_SCORES else digits


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
        lines = ["| model | " + " | ".join(f"{d}: {short_name(m)}" for d, m in cols) + " |",
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
                    *(f"{d}/{short_name(m)}/{part}" for d,
                      m in cols for part in ("mean", "std", "n", "best"))])
        for row in rows:
            fields: list[Any] = []
            for d, m in cols:
                stat = stats.get((row, d, m))
                if stat is None:
                    fields += ["", "", "", ""]
                    continue
                mean, std, n = stat
                fields += [repr(mean), repr(std) if math.isfinite(std) else "", n, int((row, d, m) in best)]
            w.writerow([row.model, row.variant, row.experiment, *fields])
        return buf.getvalue().rstrip("\n")
    if fmt == "latex":
        def esc(s: str) -> str:
            return re.sub(r"([&%$#_{}])", r"\\\1", s)

        lines = [
            r"\begin{tabular}{l" + "c" * len(cols) + "}",
            r"\toprule",
            " & "
            + " & ".join(rf"\multicolumn{{{len(metrics)}}}{{c}}{{{esc(d)}}}" for d in datasets)
            + r" \\",
        ]
        lines.append(" ".join(rf"\cmidrule(lr){{{2 + i * len(metrics)}-{1 + (i + 1) * len(metrics)}}}"
                              for i in range(len(datasets))))
        lines.append("model & " + " & ".join(esc(short_name(m)) for _, m in cols) + r" \\")
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


class Section(NamedTuple):
    """A table printed below the main one: ``header``/``rows`` as shown (markdown, LaTeX), and
    ``csv_header``/``csv_rows`` with one number per column at full precision (CSV)."""

    title: str
    header: list[str]
    rows: list[list[str]]
    csv_header: list[str]
    csv_rows: list[list[Any]]


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


