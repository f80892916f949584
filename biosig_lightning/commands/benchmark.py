"""``biosig benchmark --grid FILE --out DIR [--storage URL] [--workers N]``: every applicable cell of a
grid as a ``biosig fit`` run in ``DIR/<corpus>/<method>/seed_<s>[/fold_<k>]/``, then the leaderboard.

The grid file: :mod:`biosig_lightning.benchmarking.grid`. The queue (an Optuna study on
``--storage``, default ``sqlite:///DIR/benchmark.db``; the same URLs ``biosig tune`` takes):
:mod:`biosig_lightning.benchmarking.queue`. Running cells, resuming and skipping:
:mod:`biosig_lightning.benchmarking.runner`. The leaderboard:
:mod:`biosig_lightning.analysis.leaderboard` (also ``biosig report --leaderboard DIR``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import threading
from pathlib import Path

from biosig_lightning.analysis.leaderboard import GRID_FILE, write_leaderboard
from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.benchmarking.grid import GridError, load_grid
from biosig_lightning.benchmarking.launch import forwarding_signals, launch, stop_signal
from biosig_lightning.benchmarking.queue import default_storage
from biosig_lightning.benchmarking.runner import (
    describe_failures,
    fit_command,
    grid_failures,
    run_grid,
    select,
)
from biosig_lightning.tuning.errors import TuneError

USAGE = ("biosig benchmark --grid FILE --out DIR [--storage URL] [--workers N] [--inline] [--only GLOB ...] "
         "[--pair A B] [--print-commands]")


def run(argv: list[str]) -> int:
    """Entry point of ``biosig benchmark`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig benchmark", usage=USAGE, allow_abbrev=False,
                                 description="run a benchmark grid (experiments/benchmarks/*.yaml) and its "
                                             "leaderboard")
    ap.add_argument("--grid", required=True, type=Path,
                    help="grid file, e.g. experiments/benchmarks/smoke.yaml")
    ap.add_argument("--out", required=True, type=Path, help="folder of the cells' runs and the leaderboard")
    ap.add_argument("--storage", default=None,
                    help="SQLAlchemy URL of the shared queue (default sqlite:///DIR/"
                    "benchmark.db); workers on other machines give the same URL and the same --out")
    ap.add_argument("--workers", type=int, default=1, help="worker processes started here (default 1)")
    ap.add_argument("--inline", action="store_true", help="fit cells in the worker's process (single-device "
                    "cells only; default: one process per cell, so a cell may run DDP)")
    ap.add_argument("--grace-period", type=int, default=60,
                    help="seconds without heartbeat after which another machine's running cell is queued "
                         "again")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="also test method A against B (Welch per corpus, Wilcoxon across corpora)")
    ap.add_argument("--only", nargs="+", default=None, metavar="GLOB",
                    help="run only the cells whose id (<corpus>/<method>/seed_<s>[/fold_<k>]) matches a glob")
    ap.add_argument("--print-commands", action="store_true",
                    help="print each cell's `biosig fit` command and stop")
    a = ap.parse_args(argv)
    if a.workers < 1:
        raise SystemExit(f"biosig benchmark: error: --workers must be >= 1, got {a.workers}")
    try:
        grid = load_grid(a.grid)
        select(grid, a.only)  # an --only that matches no cell is refused before any worker starts
    except (GridError, ValueError) as err:
        raise SystemExit(f"biosig benchmark: error: {err}") from None
    if a.print_commands:
        for cell in select(grid, a.only).values():
            print(shlex.join(fit_command(grid, cell, a.out)))
        for na in grid.not_applicable():
            print(f"# n/a {na.corpus}/{na.method}: {na.reason}")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.out / GRID_FILE, {
        "name": grid.name, "grid": str(a.grid), "corpora": list(grid.corpora), "methods": list(grid.methods),
        "metrics": {c.name: list(c.metrics) for c in grid.corpora.values()}, "seeds": list(grid.seeds),
        "not_applicable": [na._asdict() for na in grid.not_applicable()]})
    storage = a.storage or default_storage(a.out)
    if a.workers == 1:
        try:
            failed = run_grid(grid, a.out, storage, inline=a.inline, grace=a.grace_period, only=a.only)
        except TuneError as err:  # the storage: a bad URL, a server that does not answer, a missing driver
            raise SystemExit(f"biosig benchmark: error: {err}") from None
    else:
        cmd = [sys.executable, "-m", "biosig_lightning.cli", "benchmark", "--grid", str(a.grid), "--out",
               str(a.out),
               "--storage", storage, "--grace-period", str(a.grace_period),
               *(["--inline"] if a.inline else []),
               *(["--only", *a.only] if a.only else [])]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // a.workers)))
        codes: list[int] = []
        with forwarding_signals():  # a preemption signal reaches every worker, and through them their cells
            pool = [threading.Thread(target=lambda: codes.append(launch(cmd, env)), daemon=True)
                    for _ in range(a.workers)]
            for t in pool:
                t.start()
            for t in pool:
                while t.is_alive():
                    t.join(0.2)
        failed = {}
        if any(codes):  # the workers said their cells' lines; the queue says which failed, and why
            try:
                failed = grid_failures(grid, a.out, storage, a.only) or {"(a worker)": "see its lines above"}
            except TuneError as err:
                raise SystemExit(f"biosig benchmark: error: {err}") from None
    if stop_signal():
        raise SystemExit(f"biosig benchmark: interrupted ({stop_signal()}); running cells were stopped and "
                         f"marked; "
                         "rerun the same command to resume them")
    _, written = write_leaderboard(a.out, [tuple(p) for p in a.pair])
    print(f"leaderboard: {', '.join(str(p) for p in written)}", flush=True)
    if failed:
        raise SystemExit(f"biosig benchmark: {len(failed)} cell(s) failed "
                         f"({describe_failures(list(failed), failed)}); rerun the same command to retry them")
    return 0

