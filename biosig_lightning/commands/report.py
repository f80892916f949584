"""``biosig report``: a paper-style results table, its statistics and figures from many ``results.json``
files.

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
  rows have a value; means are compared as displayed (``--digits``), so ties are all marked. For ``ece`` and
  ``loss`` lower is better.

CSV is for other programs: per metric separate ``mean``, ``std``, ``n`` and ``best`` columns (full
precision), and ``model`` and ``variant`` columns. Status lines go to stderr, so ``--format csv > t.csv``
holds the table only (plus the statistics blocks below, when asked for).

This module parses the command line; the work is :func:`biosig_lightning.analysis.report.report`.

Statistics (``--table1``, ``--per-subject``, ``--anova``, ``--anova-rows``, ``--ttest``, ``--welch``,
``--baseline``, ``--ranks``), unreadable and unfinished runs, the one-line errors and the figures are
described in :func:`~biosig_lightning.analysis.report.build.report`'s docstring.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biosig_lightning.analysis.leaderboard import write_leaderboard
from biosig_lightning.analysis.report import DEFAULT_METRICS, PROTOCOL_METRICS, ReportError, report


def run(argv: list[str]) -> str:
    """Entry point of ``biosig report`` (argv without the command word); the statistics, figures and
    one-line errors are :func:`~biosig_lightning.analysis.report.build.report`'s."""
    ap = argparse.ArgumentParser(prog="biosig report", allow_abbrev=False,
                                 description="mean ± std table, statistics and figures over results.json "
                                             "files")
    ap.add_argument("dirs", nargs="*", type=Path, help="directories searched recursively for results.json")
    ap.add_argument("--leaderboard", type=Path, default=None, metavar="DIR",
                    help="(re)write and print the leaderboard of a `biosig benchmark` folder instead")
    ap.add_argument("--format", default="markdown", choices=("markdown", "csv", "latex"))
    ap.add_argument("--out", type=Path, default=None, help="write the table (and sections) here too")
    ap.add_argument("--metrics", default=None,
                    help=f"comma-separated test metrics (default: those of {','.join(DEFAULT_METRICS)} the "
                         f"runs have, or "
                         "the protocol's own columns when every run has them: "
                         f"{'; '.join(','.join(c) for _, c in PROTOCOL_METRICS)}); "
                         "the first is the one --ttest and --welch test")
    ap.add_argument("--figures", type=Path, default=None, help="figure directory")
    ap.add_argument("--spread-metric", default=None,
                    help="metric of the per-seed spread plot (default: first)")
    ap.add_argument("--digits", type=int, default=3,
                    help="decimals shown; best cells are compared at this precision")
    st = ap.add_argument_group("statistics",
                               "--table1 changes the columns; the others add a section below the table. "
                               "ROW: a row label as printed in the first column (quote it: 'Medformer +mmd')")
    st.add_argument("--table1", action="store_true",
                    help="Table 1 columns (signed-graph paper): accuracy, precision, recall, specificity, F1 "
                         "in %%, "
                         "params (num_params)")
    st.add_argument("--per-subject", action="store_true",
                    help="per-subject test accuracy from each run's test_predictions.npz: mean ± std [min, "
                         "max] "
                         "over subjects (n) per row x dataset (the LOSO spread)")
    st.add_argument("--anova", action="store_true",
                    help="one-way ANOVA between the subjects of each row x dataset (Table 9: does accuracy "
                         "differ "
                         "between subjects?)")
    st.add_argument("--anova-rows", action="store_true",
                    help="one-way ANOVA between the rows of each dataset, over their per-subject accuracies")
    st.add_argument("--ttest", nargs=2, metavar=("ROW_A", "ROW_B"), default=None,
                    help="paired t-test of the first metric (accuracy with --table1) between two rows, runs "
                         "paired by seed and split (Table 8)")
    st.add_argument("--welch", nargs=2, metavar=("ROW_A", "ROW_B"), default=None,
                    help="Welch t-test of the first metric between two rows over seeds (BioFormer Sec. 5.3)")
    st.add_argument("--baseline", metavar="ROW", default=None,
                    help="Pos. Rate and Worst Δ of every other row against this row (BioFormer Table 3)")
    st.add_argument("--ranks", action="store_true",
                    help="average rank and wins across datasets (BioFormer Table 2)")
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
                             table1=a.table1, per_subject=a.per_subject, anova=a.anova,
                             anova_rows=a.anova_rows,
                             ttest=a.ttest, welch=a.welch,
                             baseline=a.baseline, ranks=a.ranks)
    except ReportError as err:
        raise SystemExit(f"biosig report: error: {err}") from None
    print(table, flush=True)
    # status on stderr: stdout is the table (and the asked-for sections) alone, so `--format csv > table.csv`
    # is clean
    if a.out is not None:
        print(f"table: {a.out}", file=sys.stderr)
    where = sorted({str(p.parent) for p in figs})
    print(f"figures: {len(figs)} PNG files in {', '.join(where) if where else '(none)'}", file=sys.stderr)
    return table
