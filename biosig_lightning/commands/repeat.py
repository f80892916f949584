"""``biosig repeat``: the same experiment once per seed, each seed in its own run directory.

``biosig repeat --config X.yaml [--config more.yaml] --seeds 41,42,43 [--out DIR] [--workers N]
[--key value ...]`` runs ``biosig fit`` with ``--seed_everything s`` for every seed and puts the
run in ``DIR/seed_<s>/`` (default ``DIR = runs/repeat/<experiment>``). The experiment name is the
logger ``name`` the configs give plus ``+<stem>`` for each later override file that changes results
(see :func:`~biosig_lightning.runs.naming.experiment_name`), so variants of one experiment never share a directory, while an
overlay that only adds a dashboard (``wandb.yaml``, ``tensorboard.yaml``; see :func:`~biosig_lightning.runs.naming.is_overlay`)
leaves the name, and so the resumable directory, alone.

The run directory is chosen through ``biosig fit``'s ``--run.*`` placement, which applies to every
configured logger: ``save_dir = DIR.parent``, ``name = DIR.name``, ``version = seed_<s>``; wandb runs
are named ``<experiment>/seed_<s>`` and grouped under ``<experiment>`` (or the user's
``--wandb.group``). Every ``results.json`` carries ``experiment = DIR.name`` and a ``variant`` (see
:func:`~biosig_lightning.runs.naming.variant_of`), which ``biosig report`` uses to label rows.

Resumable: a seed whose ``results.json`` exists is skipped; a seed directory without one (a run
that died) continues from its ``checkpoints/last.ckpt`` (written at the end of every training
epoch), keeping the learning curve of the epochs before (:mod:`biosig_lightning.runs.csv_history`);
one without that checkpoint (died in its first epoch) is removed and starts again. (A run that
had already stopped early and lost only its ``results.json`` trains one more epoch when resumed,
since early stopping is checked again at the end of the next epoch.)

``--workers N`` (N > 1) runs seeds in parallel worker processes (``python -m biosig_lightning.cli
fit ...``, output in ``DIR/seed_<s>.log``, without progress bars); serial mode runs the fits in this
process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.runs.biosig_cli import run_lightning
from biosig_lightning.runs.naming import experiment_name
from biosig_lightning.runs.resume import resume_plan

SUMMARY_METRICS = ("test/acc", "test/f1", "test/auroc")
#: the seed range every library seeded by ``seed_everything`` accepts (numpy: 32-bit unsigned)
SEED_MIN, SEED_MAX = 0, 2**32 - 1


class RepeatError(ValueError):
    """Bad ``biosig repeat`` arguments (one line, names the offending value)."""


def parse_seeds(text: str) -> list[int]:
    """``"41,42,43"`` -> ``[41, 42, 43]``; a non-integer, out-of-range or repeated seed is one clear error."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise RepeatError(f"--seeds: expected comma-separated integers, got {text!r}")
    seeds: list[int] = []
    for item in items:
        try:
            seeds.append(int(item))
        except ValueError:
            raise RepeatError(f"--seeds: {item!r} is not an integer (expected e.g. --seeds 41,42,43)") from None
        if not SEED_MIN <= seeds[-1] <= SEED_MAX:
            # checked here: Lightning would only fail after the run directory exists
            raise RepeatError(f"--seeds: {item} is out of range (seeds are integers {SEED_MIN}..{SEED_MAX})")
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise RepeatError(f"--seeds: seed(s) {dup} given twice")
    return seeds


# ---- running the seeds ------------------------------------------------------------------------------
def seed_args(fit_args: list[str], out: Path, seed: int, ckpt: Path | None = None) -> list[str]:
    """The ``biosig fit`` arguments that run ``seed`` into ``out/seed_<seed>`` (every logger; wandb
    runs of the seeds share the group ``out.name`` unless the user gave ``--wandb.group``), resuming
    from ``ckpt`` when given."""
    resume = ["--ckpt_path", str(ckpt)] if ckpt is not None else []
    return [*fit_args, "--seed_everything", str(seed), "--run.save_dir", str(out.parent), "--run.name", out.name,
            "--run.version", f"seed_{seed}", "--run.group", out.name, *resume]


def _fit_in_process(args: list[str]) -> None:
    run_lightning(["fit", *args])


def _fit_subprocess(args: list[str], log: Path, threads: int, append: bool = False) -> int:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))  # N workers must not each grab every core
    if not any(a.split("=", 1)[0] == "--trainer.enable_progress_bar" for a in args):
        # a log file is no terminal: progress bars would only fill it with \r lines
        args = [*args, "--trainer.enable_progress_bar=false"]
    with log.open("a" if append else "w") as fh:  # a resumed seed keeps the log of its first part
        proc = subprocess.run([sys.executable, "-m", "biosig_lightning.cli", "fit", *args],
                              stdout=fh, stderr=subprocess.STDOUT, env=env)
    return proc.returncode


def _finished_line(out: Path, seed: int, seconds: float) -> str:
    path = out / f"seed_{seed}" / "results.json"
    if not path.exists():
        return f"seed {seed}: finished in {seconds:.0f} s but wrote no {path}"
    f1 = json.loads(path.read_text()).get("metrics", {}).get("test/f1")
    score = f"test/f1 {f1:.4f}" if isinstance(f1, float) else "no test/f1"
    return f"seed {seed}: done in {seconds:.0f} s, {score}, results {path}"


def repeat(fit_args: list[str], seeds: list[int], out: Path | None = None, workers: int = 1) -> Path:
    """Fit once per seed under ``out`` (see the module docstring); returns ``out``."""
    if workers < 1:
        raise RepeatError(f"--workers must be >= 1, got {workers}")
    for arg in fit_args:
        if arg.split("=", 1)[0] in ("--seed_everything", "--trainer.logger.init_args.version", "--run.version",
                                    "--ckpt_path"):
            raise RepeatError(f"{arg.split('=', 1)[0]} is set per seed by biosig repeat; drop it")
    out = Path(out) if out is not None else Path("runs") / "repeat" / experiment_name(fit_args)
    todo: list[int] = []
    resume: dict[int, Path] = {}
    for seed in seeds:
        run_dir = out / f"seed_{seed}"
        existed = run_dir.exists()
        plan, last = resume_plan(run_dir)
        if plan == "finished":
            print(f"seed {seed}: {run_dir / 'results.json'} exists, skipped")
            continue
        if last is not None:
            print(f"seed {seed}: {run_dir} has no results.json (an interrupted run), resuming from {last}")
            resume[seed] = last
        elif existed:
            print(f"seed {seed}: {run_dir} had no results.json and no last.ckpt (an interrupted run), "
                  "starting it again")
        todo.append(seed)
    out.mkdir(parents=True, exist_ok=True)
    failed: list[int] = []
    if workers == 1:
        for seed in todo:
            print(f"seed {seed}: fitting into {out / f'seed_{seed}'}", flush=True)
            started = time.perf_counter()
            _fit_in_process(seed_args(fit_args, out, seed, resume.get(seed)))
            print(_finished_line(out, seed, time.perf_counter() - started), flush=True)
    else:
        threads = max(1, (os.cpu_count() or 1) // min(workers, max(len(todo), 1)))
        lock = threading.Lock()

        def one(seed: int) -> int:
            log = out / f"seed_{seed}.log"
            with lock:
                print(f"seed {seed}: started, log {log}", flush=True)
            started = time.perf_counter()
            code = _fit_subprocess(seed_args(fit_args, out, seed, resume.get(seed)), log, threads,
                                   append=seed in resume)
            with lock:  # said here, as the seed ends, before this thread takes the next seed
                if code == 0:
                    print(_finished_line(out, seed, time.perf_counter() - started), flush=True)
                else:
                    print(f"seed {seed}: FAILED (exit {code}), see {log}", flush=True)
                    failed.append(seed)
            return code

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, todo))
    print_summary(out, seeds)
    if failed:
        raise SystemExit(f"biosig repeat: seed(s) {sorted(failed)} failed; rerun the same command to retry them")
    return out


def print_summary(out: Path, seeds: list[int]) -> None:
    """Per-seed test metrics and their mean ± std (ddof=1) over the seeds that finished."""
    rows: list[tuple[int, dict[str, Any]]] = []
    for seed in seeds:
        path = out / f"seed_{seed}" / "results.json"
        if path.exists():
            rows.append((seed, json.loads(path.read_text()).get("metrics", {})))
    keys = [k for k in SUMMARY_METRICS if any(k in m for _, m in rows)]
    header = f"{'seed':>8} " + " ".join(f"{k.split('/', 1)[-1]:>16}" for k in keys)
    print(header)
    print("-" * len(header))
    for seed, m in rows:
        print(f"{seed:>8} " + " ".join(f"{m.get(k, float('nan')):>16.4f}" for k in keys))
    if rows:
        cells = []
        for k in keys:
            vals = np.array([m[k] for _, m in rows if k in m], dtype=float)
            std = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
            cells.append(f"{f'{vals.mean():.4f} ± {std:.4f}':>16}")
        print(f"{'mean±std':>8} " + " ".join(cells))
    print(f"repeat: {len(rows)}/{len(seeds)} seeds finished under {out}")


USAGE = "biosig repeat --config X.yaml [--config MORE.yaml] --seeds 41,42,43 [--out DIR] [--workers N] [--key value ...]"
EPILOG = """Every other option goes to `biosig fit` unchanged: --config files (one or more; later ones override
earlier ones) and any --key value of `biosig fit --help`, e.g. --trainer.max_epochs 5. Each seed runs
into DIR/seed_<s>/; a seed whose results.json exists is skipped, so rerunning the command resumes."""


def run(argv: list[str]) -> Path:
    """Entry point of ``biosig repeat`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig repeat", allow_abbrev=False, usage=USAGE, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description="one biosig fit per seed, each in its own run directory")
    ap.add_argument("--seeds", required=True, help=f"comma-separated integer seeds in {SEED_MIN}..{SEED_MAX}, "
                                                   "e.g. 41,42,43")
    ap.add_argument("--out", type=Path, default=None, help="parent dir (default runs/repeat/<experiment>)")
    ap.add_argument("--workers", type=int, default=1, help="parallel fit processes (default 1: in-process)")
    own, rest = ap.parse_known_args(argv)
    try:
        return repeat(rest, parse_seeds(own.seeds), own.out, own.workers)
    except RepeatError as err:
        raise SystemExit(f"biosig repeat: error: {err}") from None
