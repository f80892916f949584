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
described in :func:`run`'s docstring.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biosig_lightning.analysis.leaderboard import write_leaderboard
from biosig_lightning.analysis.report import DEFAULT_METRICS, PROTOCOL_METRICS, ReportError, report


def run(argv: list[str]) -> str:
    """Entry point of ``biosig report`` (argv without the command word).

    Statistics: ``--table1`` changes the table's columns; every other option adds a section below the
    table, in this order, in the same format (markdown: a title line and a table; LaTeX: a ``%`` title and
    a tabular; CSV: a block with its own header row, one blank line between blocks; numbers at full
    precision):

    * ``--table1``: Table 1 of the signed-graph paper (Yao et al.): accuracy, precision, recall,
      specificity and F1 in % and ``params`` (``results["num_params"]``, shown as an integer and never
      marked best); a binary run's precision, recall and F1 are those of class 1 (the paper's positive
      class), from its ``confusion_matrix``, not the macro means the run logs, ``mean ± std (n)`` over runs as
      above; a column a run lacks (specificity of a
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

    A ``results.json`` that cannot be read (truncated, a JSON list) is skipped with a warning naming it;
    runs with a checkpoint but no ``results.json`` (interrupted fits) are listed on stderr, apart from the
    table, each with the ``biosig fit`` command that resumes it (``biosig tune`` trials are not listed).

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
