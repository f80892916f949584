"""The grid runner: its progress line and the finished cells a changed grid line leaves stale."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState, create_trial

from biosig_lightning.benchmarking.grid import load_grid
from biosig_lightning.benchmarking.runner import _progress, stale_cells
from tests.conftest import EXPERIMENTS


def test_progress_counts_the_selected_cells_only() -> None:
    """``--only`` on a folder whose other cells are done says how many of *its* cells are done."""
    study = optuna.create_study(direction="maximize")
    for cell in ("apava/cnn1d/seed_1", "apava/cnn1d/seed_2", "apava/eegnet/seed_1"):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs={"cell": cell}))
    study.enqueue_trial({}, user_attrs={"cell": "apava/signed_graph/seed_1"})
    only = ["apava/signed_graph/seed_1", "apava/cnn1d/seed_1"]
    assert _progress(study, only) == "1/2 cells done, 0 running"
    assert _progress(study, ["apava/signed_graph/seed_1"]) == "0/1 cells done, 0 running"


def test_a_finished_cell_whose_grid_line_changed_is_named_stale(tmp_path: Path) -> None:
    grid = load_grid(EXPERIMENTS / "benchmarks" / "smoke.yaml")
    cells = {c.id: c for c in grid.cells()}
    same, changed, unrecorded = list(cells)[:3]
    study = optuna.create_study(direction="maximize")
    for cid, args in ((same, grid.cell_args(cells[same], tmp_path)),
                      (changed, [*grid.cell_args(cells[changed], tmp_path), "--trainer.max_epochs", "99"]),
                      (unrecorded, None)):
        attrs = {"cell": cid, **({"args": args} if args is not None else {})}
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs=attrs))
    assert stale_cells(study, grid, cells, tmp_path) == [changed]
    assert stale_cells(study, grid, {same: cells[same]}, tmp_path) == []  # --only leaves it out
