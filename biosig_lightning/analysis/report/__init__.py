"""``biosig report`` as a library: a paper-style results table, its statistics and figures from many runs.

* :mod:`.collect` finds the ``results.json`` files and groups the runs into rows and datasets;
* :mod:`.render` lays out the mean ± std table and the sections as markdown, CSV or LaTeX;
* :mod:`.sections` computes the statistics sections (the maths is :mod:`biosig_lightning.analysis.stats`
  and :mod:`~biosig_lightning.analysis.tables`, the run reading :mod:`~biosig_lightning.analysis.run_stats`);
* :mod:`.figures` draws the PNG figures;
* :mod:`.build` ties them together in :func:`report`.
"""

from biosig_lightning.analysis.report.build import choose_columns, report
from biosig_lightning.analysis.report.collect import (
    DEFAULT_METRICS,
    PROTOCOL_METRICS,
    ReportError,
    Row,
    find_results,
    group_runs,
)
from biosig_lightning.analysis.report.render import best_cells, render, summarize

__all__ = ["DEFAULT_METRICS", "PROTOCOL_METRICS", "ReportError", "Row", "best_cells", "choose_columns",
           "find_results", "group_runs", "render", "report", "summarize"]
