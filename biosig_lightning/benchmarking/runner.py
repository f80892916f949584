"""Running many fits: a sweep's jobs on local workers, or a benchmark grid's cells from the shared queue.

Every fit is an ordinary ``biosig fit`` into a named run directory (:class:`Job`), started by the one
launcher (:mod:`~biosig_lightning.benchmarking.launch`): as its own process by default (output in
its log, so a cell may itself train with DDP), or in this process (``inline``).

Before a job's directory is looked at, it is claimed exclusively
(:func:`~biosig_lightning.runs.rundir.try_claim`): a second runner on the same output folder never
shares, resumes or removes a directory a living process holds. :func:`run_jobs` (``biosig repeat``,
``biosig cv``) moves on to other jobs and comes back to a held one until its holder is gone; a
benchmark cell held outside its queue fails that attempt. Then the one resume plan
(:func:`~biosig_lightning.runs.resume.resume_plan`): a job whose ``results.json`` exists is not run
again, one that stopped after a checkpoint (killed, Ctrl-C, preempted) continues from its
``checkpoints/last.ckpt``, one that died earlier starts again.

A benchmark grid's cells (:meth:`~biosig_lightning.benchmarking.grid.Grid.cell_args`, in
``DIR/<corpus>/<method>/seed_<s>[/fold_<k>]/``) come from the queue
(:mod:`~biosig_lightning.benchmarking.queue`), which decides who runs which cell; any number of
``biosig benchmark`` processes, on one machine or several sharing ``DIR`` and ``--storage``, are
workers of the same grid.
"""

from __future__ import annotations

import fnmatch
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from biosig_lightning.benchmarking.grid import Cell, Grid
from biosig_lightning.benchmarking.launch import fit_inline, forwarding_signals, launch_fit, stop_signal
from biosig_lightning.benchmarking.queue import claim_is_first, enqueue_missing, open_study, trials_by_cell
from biosig_lightning.runs.resume import resume_plan
from biosig_lightning.runs.rundir import INTERRUPTED, RunDirError, claim_holder, try_claim
from biosig_lightning.tuning.coordination import fail_dead_trials, worker_identity

__all__ = ["Job", "describe_failures", "failed_cells", "fit_command", "grid_failures", "run_cell", "run_grid",
           "run_job", "run_jobs", "study_name"]

POLL_SECONDS = 1.0
#: what :func:`run_job` found: the job ran (or had run) to its results, failed, or was held elsewhere
DONE, FAILED, HELD = "done", "failed", "held"


@dataclass(frozen=True)
class Job:
    """One fit of many: ``label`` names it in messages (``seed 3``, ``fold 0``, a cell id), ``args`` are
    its ``biosig fit`` arguments (run placement included, no ``--ckpt_path``), ``log`` its output file,
    ``metric`` the test metric its end line shows."""

    label: str
    run_dir: Path
    args: tuple[str, ...]
    log: Path
    metric: str = "test/f1"

    @property
    def results(self) -> Path:
        return self.run_dir / "results.json"


def _finished_line(job: Job, seconds: float) -> str:
    value = json.loads(job.results.read_text()).get("metrics", {}).get(job.metric)
    score = f"{job.metric} {value:.4f}" if isinstance(value, float) else f"no {job.metric}"
    return f"{job.label}: done in {seconds:.0f} s, {score}, results {job.results}"


def run_job(job: Job, inline: bool = False, threads: int | None = None,
            say: Callable[[str], None] = print, reasons: dict[str, str] | None = None) -> str:
    """Claim, plan and fit one job; :data:`DONE`, :data:`FAILED` or :data:`HELD` (another process has it).

    A failed job's error line (its one-line refusal, else its log's last exception line, else "see LOG")
    goes into ``reasons[job.label]`` when ``reasons`` is given. An interrupted inline fit
    (:class:`~biosig_lightning.runs.interrupt.Interrupted`) propagates.
    """
    claim = try_claim(job.run_dir)
    if claim is None:
        return HELD
    try:
        existed = job.run_dir.exists()
        try:
            plan, last = resume_plan(job.run_dir)
        except RunDirError:  # a `biosig fit` started by hand trains in it: held as well
            return HELD
        if plan == "finished":
            say(f"{job.label}: {job.results} exists, skipped")
            return DONE
        if last is None and existed:
            say(f"{job.label}: {job.run_dir} had no results.json and no last.ckpt (an interrupted run), "
                "starting it again")
        args = [*job.args, *(["--ckpt_path", str(last)] if last is not None else [])]
        how = f"resuming from {last}" if last is not None else "fitting"
        say(f"{job.label}: {how} into {job.run_dir}" + ("" if inline else f", log {job.log}"))
        started = time.perf_counter()
        refusal: list[str] = []
        code = fit_inline(args, refusal) if inline else launch_fit(args, job.log, threads)
        if code == 0 and job.results.is_file():
            say(_finished_line(job, time.perf_counter() - started))
            return DONE
        reason = (f": {refusal[-1]}" if refusal else "") if inline else failure_reason(job.log)
        where = reason if inline else f"{reason}, see {job.log}"
        if reasons is not None:
            reasons[job.label] = reason.removeprefix(": ") or (
                "no error line" if inline else f"see {job.log}")
        if (job.run_dir / INTERRUPTED).is_file():
            say(f"{job.label}: interrupted (exit {code}), marked {job.run_dir / INTERRUPTED}{where}; "
                "rerun to resume it")
        else:
            say(f"{job.label}: FAILED (exit {code}){where}")
        return FAILED
    finally:
        claim.release()


def failure_reason(log: Path) -> str:
    """``": <the error line>"`` of a failed fit's log (the one line ``biosig`` prints for bad input or
    config, else a Python exception's last line), or ``""``: so a failed job says why where it is named."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - 16384))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("biosig") and ": error: " in line:
            return f": {line}"
    last = lines[-1] if lines else ""
    return f": {last}" if last.split(":", 1)[0].endswith(("Error", "Exception")) else ""


def describe_failures(failed: Sequence[str], reasons: Mapping[str, str], shown: int = 3) -> str:
    """The failed jobs grouped by their error line, most common first, a few names per group:
    ``"fold 0, fold 1, fold 2 and 28 more: biosig fit: error: ..."`` (``"; "`` between groups), so thirty
    jobs that failed on one bad path read as one line."""
    groups: dict[str, list[str]] = {}
    for label in failed:
        groups.setdefault(reasons.get(label, "no error line recorded"), []).append(label)
    parts = []
    for reason, labels in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
        names = ", ".join(labels[:shown]) + more
        parts.append(f"{names}: {reason}")
    return "; ".join(parts)


def run_jobs(jobs: Sequence[Job], workers: int = 1, inline: bool = False,
             say: Callable[[str], None] = print, reasons: dict[str, str] | None = None) -> dict[str, str]:
    """Run ``jobs`` on ``workers`` local workers (threads, each starting one fit at a time); the outcome
    of each job by label: :data:`DONE` or :data:`FAILED` (a failed one's error line into ``reasons``).

    A job another process holds is passed over and taken up again once its holder is gone (then
    usually found finished); preemption signals reach the running fits and stop the rest.
    """
    pending = list(jobs)
    outcome: dict[str, str] = {}
    lock = threading.Lock()
    said_held: set[str] = set()
    threads = max(1, (os.cpu_count() or 1) // max(1, min(workers, len(pending))))

    def speak(text: str) -> None:
        with lock:
            say(text)

    def worker() -> None:
        while not stop_signal():
            with lock:
                if not pending:
                    return
                job = pending.pop(0)
            result = run_job(job, inline, threads, speak, reasons)
            with lock:
                if result == HELD:
                    pending.append(job)
                    if job.label not in said_held:
                        said_held.add(job.label)
                        holder = claim_holder(job.run_dir)
                        say(f"{job.label}: {job.run_dir} is held by another process "
                            f"({'a biosig fit training in it' if holder == '?' else holder}); "
                            "taking it up when that process lets it go")
                    every_held = all(j.label in said_held for j in pending)
                else:
                    outcome[job.label] = result
                    every_held = False
            if every_held:
                time.sleep(POLL_SECONDS)

    with forwarding_signals():
        if workers == 1:
            worker()
        else:
            pool = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
            for t in pool:
                t.start()
            for t in pool:
                while t.is_alive():
                    t.join(0.2)  # the main thread stays free for the signal handlers
    return outcome


def study_name(grid: Grid, out: Path) -> str:
    """The queue's study: one per grid and output folder, so two benchmarks never share cells."""
    return f"benchmark:{grid.name}:{Path(out).resolve()}"


def fit_command(grid: Grid, cell: Cell, out: Path) -> list[str]:
    """``biosig fit ...``: the plain command that gives this cell's run."""
    return ["biosig", "fit", *grid.cell_args(cell, out)]


def _say(text: str) -> None:
    print(f"benchmark [{worker_identity()['worker']}] {text}", flush=True)


def cell_job(grid: Grid, cell: Cell, out: Path) -> Job:
    """The :class:`Job` of one grid cell (its log beside its run directory)."""
    run_dir = cell.run_dir(out)
    return Job(cell.id, run_dir, tuple(grid.cell_args(cell, out)), run_dir.parent / f"{run_dir.name}.log",
               f"test/{grid.corpora[cell.corpus].metrics[0]}")


def run_cell(grid: Grid, cell: Cell, out: Path, inline: bool = False,
             reasons: dict[str, str] | None = None) -> Path | None:
    """Fit one cell (resuming it where it stopped); returns its ``results.json``, ``None`` if it failed
    (its error line then in ``reasons[cell.id]``)."""
    job = cell_job(grid, cell, out)
    result = run_job(job, inline, say=_say, reasons=reasons)
    if result == HELD:
        _say(f"{cell.id}: {job.run_dir} is held by {claim_holder(job.run_dir)} outside this queue; not run")
    return job.results if result == DONE else None


def _progress(study: optuna.Study, cells: Collection[str]) -> str:
    """``done/total cells done, n running`` over ``cells`` (those --only selects, not the whole study)."""
    held = trials_by_cell(study)
    mine = [held.get(cid, []) for cid in cells]
    done = sum(any(t.state == TrialState.COMPLETE for t in ts) for ts in mine)
    running = sum(any(t.state == TrialState.RUNNING for t in ts) for ts in mine)
    return f"{done}/{len(cells)} cells done, {running} running"


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
        trial.set_user_attr("args", grid.cell_args(cell, out))  # what stale_cells compares later
        reasons: dict[str, str] = {}
        results = run_cell(grid, cell, out, inline, reasons)
        if results is None:
            trial.set_user_attr("failure", reasons.get(cid, "wrote no results.json"))
            raise RuntimeError(f"cell {cid} wrote no results.json")
        metrics = json.loads(results.read_text()).get("metrics", {})
        score = float(metrics.get(f"test/{grid.corpora[cell.corpus].metrics[0]}", float("nan")))
        return score if score == score else 0.0

    return objective


def select(grid: Grid, only: list[str] | None = None) -> dict[str, Cell]:
    """The grid's cells by id, those matching one of the ``only`` globs (e.g. ``*/*/seed_1``) when given."""
    cells = {c.id: c for c in grid.cells()}
    if only:
        cells = {cid: c for cid, c in cells.items() if any(fnmatch.fnmatchcase(cid, pat) for pat in only)}
        if not cells:
            raise ValueError(f"--only {' '.join(only)}: no cell of grid {grid.name} matches (cell ids look "
                             f"like "
                             f"{next(iter(grid.cells())).id})")
    return cells


def stale_cells(study: optuna.Study, grid: Grid, cells: dict[str, Cell], out: Path) -> list[str]:
    """The finished cells whose fit ran with other arguments than the grid's lines give them now (a grid
    line changed after they ran); their results are kept, not rerun."""
    stale = []
    for cid, trials in trials_by_cell(study).items():
        done = [t for t in trials if t.state == TrialState.COMPLETE and "args" in t.user_attrs]
        if cid in cells and done and done[0].user_attrs["args"] != grid.cell_args(cells[cid], out):
            stale.append(cid)
    return sorted(stale)


def run_grid(grid: Grid, out: Path, storage: str, inline: bool = False, grace: int = 60,
             heartbeat: int | None = 10, only: list[str] | None = None) -> dict[str, str]:
    """One worker: enqueue the grid's missing cells (those ``only`` selects), then run cells until none is
    waiting or running. Returns the selected cells without a COMPLETE trial at the end (failed), each with
    its error line (:func:`failed_cells`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cells = select(grid, only)
    study = open_study(storage, study_name(grid, out), heartbeat=heartbeat, grace=grace)
    fail_dead_trials(study)
    added = enqueue_missing(study, list(cells))
    _say(f"grid {grid.name}: {len(cells)} cells ({len(added)} queued now), "
         f"{len(grid.not_applicable())} n/a pairs; {_progress(study, cells)}")
    stale = stale_cells(study, grid, cells, out)
    if stale:
        more = ", ..." if len(stale) > 3 else ""
        _say(f"{len(stale)} finished cell(s) ran with other settings than the grid's lines give now "
             f"({', '.join(stale[:3])}{more}): their results are kept; a new --out runs them as the grid "
             f"is now")
    objective = _objective(grid, cells, out, inline, study)
    with forwarding_signals():
        _work(study, objective, cells)
    failed = failed_cells(study, cells)
    _say(f"grid {grid.name}: {_progress(study, cells)}" + (f"; {len(failed)} failed" if failed else ""))
    return failed


def failed_cells(study: optuna.Study, cells: Collection[str]) -> dict[str, str]:
    """The ``cells`` without a COMPLETE trial, each with the error line of its latest failed attempt."""
    held = trials_by_cell(study)
    failed = {}
    for cid in cells:
        trials = held.get(cid, [])
        if not any(t.state == TrialState.COMPLETE for t in trials):
            attempts = [t.user_attrs["failure"] for t in trials if "failure" in t.user_attrs]
            failed[cid] = attempts[-1] if attempts else "no error line recorded (see the lines above)"
    return failed


def grid_failures(grid: Grid, out: Path, storage: str, only: list[str] | None = None) -> dict[str, str]:
    """The selected cells of ``grid`` that have no result in the queue at ``storage``, each with its error
    line (:func:`failed_cells`): what a parent of several worker processes reports once they have ended."""
    study = open_study(storage, study_name(grid, out))
    return failed_cells(study, select(grid, only))


def _work(study: optuna.Study, objective: Callable[[optuna.Trial], float], cells: Collection[str]) -> None:
    """Pop and run cells until none is waiting or running, or a preemption signal came."""
    while not stop_signal():
        fail_dead_trials(study)
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if waiting:
            study.optimize(objective, n_trials=1, catch=(Exception,))
            _say(_progress(study, cells))
            continue
        if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            break
        time.sleep(POLL_SECONDS)
