"""``report()``: the table, its statistics sections and its figures from the runs below some directories."""

from __future__ import annotations

from pathlib import Path

from biosig_lightning.analysis.report.collect import (
    Groups,
    ReportError,
    default_metrics,
    find_results,
    group_runs,
    metric_key,
    sleep_table1_groups,
    table1_groups,
    warn_unfinished,
)
from biosig_lightning.analysis.report.figures import write_figures
from biosig_lightning.analysis.report.render import Section, render, render_section
from biosig_lightning.analysis.report.sections import (
    Subjects,
    anova_rows_section,
    anova_subjects_section,
    gains_section,
    per_subject_section,
    ranks_section,
    ttest_section,
    welch_section,
)
from biosig_lightning.analysis.run_stats import TABLE1_METRICS
from biosig_lightning.atomic_io import atomic_write_bytes


def choose_columns(groups: Groups, metrics: list[str] | None, table1: bool) -> tuple[Groups, list[str]]:
    """The table's metric columns, and the runs with any derived metric those need added.

    ``metrics=None`` takes those of :func:`~.collect.default_metrics` that any run has; named metrics
    must all be in some run. ``table1`` swaps them for Table 1's columns (a column no run has shows ``–``).
    """
    if table1:
        if metrics is not None:
            raise ReportError("--table1 sets the columns itself (accuracy ... params); drop --metrics")
        groups = table1_groups(groups)
        if not any(m in r["metrics"] for runs in groups.values() for _, r in runs for m in TABLE1_METRICS):
            raise ReportError("--table1: no run has any of test/acc, precision, recall, specificity, f1 or "
                              "num_params")
        metrics = list(TABLE1_METRICS)
    if metrics is not None:
        groups = sleep_table1_groups(groups, [metric_key(m) for m in metrics])
    known = {k for runs in groups.values() for _, r in runs for k in r.get("metrics", {})}
    if metrics is None:
        metrics = [m for m in default_metrics(groups) if metric_key(m) in known]
        if not metrics:
            raise ReportError(f"no run has any of the test metrics {list(default_metrics(groups))} "
                              f"(have: {sorted(known)})")
    if not metrics:
        raise ReportError("--metrics: name at least one test metric, e.g. --metrics acc,f1")
    unknown = [m for m in metrics if metric_key(m) not in known]
    if unknown and not table1:  # Table 1 keeps its six columns; a column no run has shows "–"
        raise ReportError(f"--metrics: {unknown} not in any run's test metrics (have: {sorted(known)})")
    return groups, list(metrics)


def report(dirs: list[Path], fmt: str = "markdown", out: Path | None = None, metrics: list[str] | None = None,
           figures: Path | None = None, spread_metric: str | None = None, digits: int = 3, *,
           table1: bool = False, per_subject: bool = False, anova: bool = False, anova_rows: bool = False,
           ttest: list[str] | None = None, welch: list[str] | None = None, baseline: str | None = None,
           ranks: bool = False) -> tuple[str, list[Path]]:
    """Build the table and the statistics sections below it (all written to ``out`` if given) and the
    figures; returns ``(text, figure paths)``.

    The columns are :func:`choose_columns`'. The sections, in this order: ``per_subject``, ``anova``
    (between subjects), ``anova_rows``, ``ttest`` and ``welch`` (two row labels; the first metric),
    ``baseline`` (a row label), ``ranks`` (see :mod:`.sections`). As ``biosig report``'s options:
    ``--table1`` changes the table's columns; every other option adds a section below the table, in this
    order, in the same format (markdown: a title line and a table; LaTeX: a ``%`` title and a tabular;
    CSV: a block with its own header row, one blank line between blocks; numbers at full precision):

    * ``--table1``: Table 1 of the signed-graph paper (Yao et al.): accuracy, precision, recall,
      specificity and F1 in % and ``params`` (``results["num_params"]``, shown as an integer and never
      marked best); a binary run's precision, recall and F1 are those of class 1 (the paper's positive
      class), from its ``confusion_matrix``, not the macro means the run logs, ``mean ± std (n)`` over
      runs as in the table; a column a run lacks (specificity of a multiclass task) is ``–``.
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
    if fmt not in ("markdown", "csv", "latex"):
        raise ReportError(f"--format must be markdown, csv or latex, got {fmt!r}")
    warn_unfinished([Path(d) for d in dirs])
    groups, metrics = choose_columns(group_runs(find_results([Path(d) for d in dirs])), metrics, table1)
    sections: list[Section] = []
    subjects = Subjects(groups)
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
        atomic_write_bytes(out, (table + "\n").encode())
    if figures is None:
        figures = out.parent / f"{out.stem}_figures" if out is not None else Path(dirs[0]) / "report_figures"
    written = write_figures(groups, Path(figures), spread_metric or metrics[0])
    return table, written
