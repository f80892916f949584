"""The grid runner: its progress line and the finished cells a changed grid line leaves stale."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
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


def test_a_failed_fit_is_named_with_its_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty folds of a missing corpus each say why on the line that names them, not only in a log."""
    from biosig_lightning.benchmarking import runner

    def failing_fit(args: list[str], log: Path, threads: int) -> int:
        log.write_text("Seed set to 0\nsome warning\nbiosig fit: error: mass_ss3: corpus root /nowhere "
                       "does not exist (data.init_args.root)\n")
        return 1

    monkeypatch.setattr(runner, "launch_fit", failing_fit)
    job = runner.Job("fold 0", tmp_path / "fold_00", ("--config", "x.yaml"), tmp_path / "fold_00.log")
    said: list[str] = []
    assert runner.run_job(job, say=said.append) == runner.FAILED
    assert said[-1] == ("fold 0: FAILED (exit 1): biosig fit: error: mass_ss3: corpus root /nowhere does "
                        f"not exist (data.init_args.root), see {job.log}")
    (tmp_path / "crash.log").write_text("Traceback (most recent call last):\n  ...\nRuntimeError: CUDA oom\n")
    assert runner.failure_reason(tmp_path / "crash.log") == ": RuntimeError: CUDA oom"
    (tmp_path / "quiet.log").write_text("Epoch 3\n")
    assert runner.failure_reason(tmp_path / "quiet.log") == ""
    assert runner.failure_reason(tmp_path / "missing.log") == ""


def test_failed_jobs_are_grouped_by_their_error_line() -> None:
    from biosig_lightning.benchmarking.runner import describe_failures

    failed = [f"fold {k}" for k in range(6)]
    reasons = {**{f"fold {k}": "biosig fit: error: root /x does not exist" for k in range(5)},
               "fold 5": "RuntimeError: out of memory"}
    assert describe_failures(failed, reasons) == (
        "fold 0, fold 1, fold 2 and 2 more: biosig fit: error: root /x does not exist; "
        "fold 5: RuntimeError: out of memory")
    assert describe_failures(["seed 1"], {}) == "seed 1: no error line recorded"


def test_an_inline_fit_refusal_is_its_jobs_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.benchmarking import runner

    def refusing_fit(args: list[str], refusal: list[str] | None = None) -> int:
        assert refusal is not None
        refusal.append("biosig fit: error: bids: /d is not a BIDS root (data.init_args.root)")
        return 1

    monkeypatch.setattr(runner, "fit_inline", refusing_fit)
    job = runner.Job("seed 1", tmp_path / "seed_1", ("--config", "x.yaml"), tmp_path / "seed_1.log")
    said: list[str] = []
    reasons: dict[str, str] = {}
    line = "biosig fit: error: bids: /d is not a BIDS root (data.init_args.root)"
    assert runner.run_job(job, inline=True, say=said.append, reasons=reasons) == runner.FAILED
    assert said[-1] == f"seed 1: FAILED (exit 1): {line}"
    assert reasons == {"seed 1": line}
