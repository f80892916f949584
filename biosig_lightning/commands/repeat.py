"""``biosig repeat``: the same experiment once per seed, each seed in its own run directory.

``biosig repeat --config X.yaml [--config more.yaml] --seeds 41,42,43 [--out DIR] [--workers N]
[--key value ...]`` runs ``biosig fit`` with ``--seed_everything s`` into ``DIR/seed_<s>/`` for every
seed (default ``DIR = runs/repeat/<experiment>``, :func:`~biosig_lightning.runs.naming.experiment_name`:
the logger name plus ``+<stem>`` for each later override file that changes results, while a
dashboard overlay leaves it alone). A one-method sweep over seeds
(:func:`~biosig_lightning.benchmarking.sweep.seed_jobs`) run by the benchmarking runner
(:func:`~biosig_lightning.benchmarking.runner.run_jobs`): each seed directory is claimed exclusively,
a finished seed is skipped, an interrupted one resumes from its ``last.ckpt`` with its learning
curve, one that died in its first epoch starts again. ``--workers N`` (N > 1) runs seeds as child
processes (logs ``DIR/seed_<s>.log``, no progress bars); one worker fits in this process.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from biosig_lightning.benchmarking.runner import FAILED, describe_failures, run_jobs
from biosig_lightning.benchmarking.sweep import SEED_MAX, SweepError, parse_seeds, seed_jobs, summarise
from biosig_lightning.runs.naming import experiment_name

SUMMARY_METRICS = ("test/acc", "test/f1", "test/auroc")
USAGE = ("biosig repeat --config X.yaml [--config MORE.yaml] --seeds 41,42,43 [--out DIR] [--workers N] "
         "[--key value ...]")
EPILOG = """Every other option goes to `biosig fit` unchanged: --config files (one or more; later ones
override earlier ones) and any --key value of `biosig fit --help`, e.g. --trainer.max_epochs 5. Each seed runs
into DIR/seed_<s>/; a seed whose results.json exists is skipped, so rerunning the command resumes."""


def repeat(fit_args: list[str], seeds: list[int], out: Path | None = None, workers: int = 1) -> Path:
    """Fit once per seed under ``out`` (see the module docstring); returns ``out``."""
    if workers < 1:
        raise SweepError(f"--workers must be >= 1, got {workers}")
    out = Path(out) if out is not None else Path("runs") / "repeat" / experiment_name(fit_args)
    jobs = seed_jobs(fit_args, out, seeds)
    reasons: dict[str, str] = {}
    outcome = run_jobs(jobs, workers, inline=workers == 1, reasons=reasons)
    summary = summarise({str(s): j.run_dir for s, j in zip(seeds, jobs, strict=True)}, SUMMARY_METRICS)
    keys = [k for k in SUMMARY_METRICS if k in summary]
    header = f"{'seed':>8} " + " ".join(f"{k.split('/', 1)[-1]:>16}" for k in keys)
    print(f"{header}\n{'-' * len(header)}")
    for seed, m in summary["folds"].items():
        print(f"{seed:>8} " + " ".join(f"{m.get(k, float('nan')):>16.4f}" for k in keys))
    if summary["folds"]:
        cells = [f"{summary[k]['mean']:.4f} ± {summary[k]['std']:.4f}" for k in keys]
        print(f"{'mean±std':>8} " + " ".join(f"{c:>16}" for c in cells))
    print(f"repeat: {summary['n_folds']}/{len(seeds)} seeds finished under {out}")
    failed = [j.label for j in jobs if outcome.get(j.label, FAILED) == FAILED]
    if failed:
        raise SystemExit(f"biosig repeat: {len(failed)} seed(s) did not finish "
                         f"({describe_failures(failed, reasons)}); rerun the same command to resume them")
    return out


def run(argv: list[str]) -> Path:
    """Entry point of ``biosig repeat`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig repeat", allow_abbrev=False, usage=USAGE, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description="one biosig fit per seed, each in its own run directory")
    ap.add_argument("--seeds", required=True,
                    help=f"comma-separated integer seeds in 0..{SEED_MAX}, e.g. 41,42,43")
    ap.add_argument("--out", type=Path, default=None, help="parent dir (default runs/repeat/<experiment>)")
    ap.add_argument("--workers", type=int, default=1, help="parallel fit processes (default 1: in-process)")
    own, rest = ap.parse_known_args(argv)
    try:
        return repeat(rest, parse_seeds(own.seeds), own.out, own.workers)
    except SweepError as err:
        raise SystemExit(f"biosig repeat: error: {err}") from None
