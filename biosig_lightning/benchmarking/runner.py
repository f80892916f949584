"""Running a benchmark grid: workers pull cells from the shared queue and fit each into its directory.

Each cell is an ordinary ``biosig fit`` (:meth:`~biosig_lightning.benchmarking.grid.Grid.cell_args`)
into ``DIR/<corpus>/<method>/seed_<s>[/fold_<k>]/``. By default it runs as its own process
(``python -m biosig_lightning.cli fit ...``, output in ``<run dir>.log``), so a cell may itself
train with DDP (Lightning relaunches that process, not the worker); ``inline=True`` fits in the
worker's process instead (single-device cells; what the tests use, without a second interpreter
start per cell).

Resumable as ``biosig repeat`` is (:func:`~biosig_lightning.runs.resume.resume_plan`): a cell
whose ``results.json`` exists is not run again, one that died after an epoch continues from its
``checkpoints/last.ckpt``, one that died earlier starts again. The queue
(:mod:`~biosig_lightning.benchmarking.queue`) decides who runs which cell; any number of
``biosig benchmark`` processes, on one machine or several sharing ``DIR`` and ``--storage``, are
workers of the same grid.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from biosig_lightning.benchmarking.grid import Cell, Grid
from biosig_lightning.benchmarking.queue import claim_is_first, enqueue_missing, open_study, trials_by_cell
from biosig_lightning.runs.biosig_cli import run_lightning
from biosig_lightning.runs.resume import resume_plan
from biosig_lightning.tuning.coordination import fail_dead_trials, worker_identity

__all__ = ["fit_command", "run_cell", "run_grid", "study_name"]

POLL_SECONDS = 1.0


def study_name(grid: Grid, out: Path) -> str:
    """The queue's study: one per grid and output folder, so two benchmarks never share cells."""
    return f"benchmark:{grid.name}:{Path(out).resolve()}"


def fit_command(grid: Grid, cell: Cell, out: Path) -> list[str]:
    """``biosig fit ...``: the plain command that gives this cell's run."""
    return ["biosig", "fit", *grid.cell_args(cell, out)]


def _say(text: str) -> None:
    print(f"benchmark [{worker_identity()['worker']}] {text}", flush=True)


def run_cell(grid: Grid, cell: Cell, out: Path, inline: bool = False) -> Path | None:
    """Fit one cell (resuming it where it stopped); returns its ``results.json``, ``None`` if it failed."""
    run_dir = cell.run_dir(out)
    plan, ckpt = resume_plan(run_dir)
    results = run_dir / "results.json"
    if plan == "finished":
        return results
    args = grid.cell_args(cell, out) + (["--ckpt_path", str(ckpt)] if ckpt is not None else [])
    _say(f"{cell.id}: {'resuming from ' + str(ckpt) if ckpt else 'fitting'} into {run_dir}")
    if inline:
        try:
            run_lightning(["fit", *args])
        except SystemExit as exc:  # biosig fit's one-line refusal: this cell failed, the worker goes on
            if exc.code not in (0, None):
                _say(f"{cell.id}: FAILED: {exc.code}")
                return None
    else:
        log = run_dir.parent / f"{run_dir.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if not any(a.startswith("--trainer.enable_progress_bar") for a in args):
            args.append("--trainer.enable_progress_bar=false")  # a log file is no terminal
        with log.open("a" if ckpt else "w") as fh:
            code = subprocess.run([sys.executable, "-m", "biosig_lightning.cli", "fit", *args], stdout=fh,
                                  stderr=subprocess.STDOUT, env=dict(os.environ)).returncode
        if code != 0:
            _say(f"{cell.id}: FAILED (exit {code}), see {log}")
            return None
    return results if results.is_file() else None


def _progress(study: optuna.Study, total: int) -> str:
    held = trials_by_cell(study)
    done = sum(any(t.state == TrialState.COMPLETE for t in ts) for ts in held.values())
    running = sum(any(t.state == TrialState.RUNNING for t in ts) for ts in held.values())
    return f"{done}/{total} cells done, {running} running"


def _objective(grid: Grid, cells: dict[str, Cell], out: Path, inline: bool,
               study: optuna.Study) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        cid = trial.user_attrs.get("cell")
        if cid not in cells:
            # a fresh trial (another worker popped the last waiting cell first), or a cell outside --only:
            # closed without running; a later run without --only queues the cell again
            trial.set_user_attr("skipped", "no waiting cell" if cid is None else "not selected by --only")
            raise optuna.TrialPruned("skipped")
        for key, value in worker_identity().items():  # host:pid and the process's start time
            trial.set_user_attr(key, value)
        if not claim_is_first(study, trial, cid):
            trial.set_user_attr("duplicate", cid)
            raise optuna.TrialPruned(f"{cid} is held by an earlier trial")
        cell = cells[cid]
        started = time.perf_counter()
        results = run_cell(grid, cell, out, inline)
        if results is None:
            raise RuntimeError(f"cell {cid} wrote no results.json")
        metrics = json.loads(results.read_text()).get("metrics", {})
        key = f"test/{grid.corpora[cell.corpus].metrics[0]}"
        value = float(metrics.get(key, float("nan")))
        _say(f"{cid}: done in {time.perf_counter() - started:.0f} s, {key} {value:.4f}; {results}")
        return value if value == value else 0.0

    return objective


def select(grid: Grid, only: list[str] | None = None) -> dict[str, Cell]:
    """The grid's cells by id, those matching one of the ``only`` globs (e.g. ``*/*/seed_1``) when given."""
    cells = {c.id: c for c in grid.cells()}
    if only:
        cells = {cid: c for cid, c in cells.items() if any(fnmatch.fnmatchcase(cid, pat) for pat in only)}
        if not cells:
            raise ValueError(f"--only {' '.join(only)}: no cell of grid {grid.name} matches (cell ids look like "
                             f"{next(iter(grid.cells())).id})")
    return cells


def run_grid(grid: Grid, out: Path, storage: str, inline: bool = False, grace: int = 60,
             heartbeat: int | None = 10, only: list[str] | None = None) -> list[str]:
    """One worker: enqueue the grid's missing cells (those ``only`` selects), then run cells until none is
    waiting or running. Returns the ids of selected cells without a COMPLETE trial at the end (failed).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cells = select(grid, only)
    study = open_study(storage, study_name(grid, out), heartbeat=heartbeat, grace=grace)
    fail_dead_trials(study)
    added = enqueue_missing(study, list(cells))
    _say(f"grid {grid.name}: {len(cells)} cells ({len(added)} queued now), "
         f"{len(grid.not_applicable())} n/a pairs; {_progress(study, len(cells))}")
    objective = _objective(grid, cells, out, inline, study)
    while True:
        fail_dead_trials(study)
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if waiting:
            study.optimize(objective, n_trials=1, catch=(Exception,))
            _say(_progress(study, len(cells)))
            continue
        if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            break
        time.sleep(POLL_SECONDS)
    held = trials_by_cell(study)
    failed = [cid for cid in cells if not any(t.state == TrialState.COMPLETE for t in held.get(cid, []))]
    _say(f"grid {grid.name}: {_progress(study, len(cells))}" + (f"; failed: {failed}" if failed else ""))
    return failed
