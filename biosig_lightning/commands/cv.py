"""``biosig cv``: one experiment over the folds of a cross-validation, resumable, with a mean +- std table.

``biosig cv --config X.yaml [--config ...] [--folds 0-30] [--out DIR] [--fold-key KEY]
[--metrics test/f1,test/macro_acc,test/f1_n1] [any biosig fit argument ...]``

Fold ``k`` is ``biosig fit`` with ``--<fold-key> k`` (default ``data.init_args.fold``: the test fold of
a loso or kfold split; for :class:`~biosig_lightning.data.datamodules.MASSSS3DataModule` IITNet's 31
MASS SS3 folds; the older ``data.init_args.split.fold`` still works, with one deprecation line), run as its
own process into ``DIR/fold_KK/`` (log ``DIR/fold_KK.log``; ``DIR`` defaults to ``runs/cv/<config
stem>``): a one-method sweep over folds (:func:`~biosig_lightning.benchmarking.sweep.fold_jobs`) run
by the benchmarking runner (:func:`~biosig_lightning.benchmarking.runner.run_jobs`), resumable as
``biosig repeat`` is. At the end ``DIR/cv.json`` holds the metrics of every finished fold under
``DIR`` (those of other processes sharing it too) and, per metric, the mean and standard deviation
(ddof = 1) over folds (SPDTransNet Table 1: macro-F1, macro accuracy, N1 F1), also printed; ``biosig
report DIR`` prints the same as a table. Folds are independent runs, so ``--folds`` splits the work
over machines sharing ``--out``: each fold directory is claimed by one process, a process finding a
fold held by another waits for it, and ``cv.json`` is written atomically and in turn
(:func:`write_summary`), so the last one written holds every fold finished by then. Before any fold
starts, fold 0's experiment is built once and its corpus opened
(:func:`~biosig_lightning.runs.preflight.check_data_source`): a missing corpus ends there, in one line.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
from pathlib import Path
from typing import Any

from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.benchmarking import sweep
from biosig_lightning.benchmarking.grid import FOLD_KEY, fold_key
from biosig_lightning.benchmarking.runner import FAILED, describe_failures, run_jobs
from biosig_lightning.benchmarking.sweep import SweepError, fold_jobs, parse_folds
from biosig_lightning.runs.preflight import check_data_source

__all__ = ["parse_folds", "run", "summarise", "write_summary"]

DEFAULT_METRICS = ("test/f1", "test/macro_acc", "test/f1_n1", "test/acc", "test/kappa")
CVError = SweepError


def _finished_folds(out: Path) -> set[int]:
    """The folds under ``out`` (``fold_KK/``, as :func:`~biosig_lightning.benchmarking.sweep.fold_jobs`
    names them) that hold ``results.json``."""
    found = set()
    for path in out.glob("fold_*") if out.is_dir() else []:
        match = re.fullmatch(r"fold_(\d+)", path.name)
        if match and path.name == f"fold_{int(match.group(1)):02d}" and (path / "results.json").is_file():
            found.add(int(match.group(1)))
    return found


def summarise(out: Path, folds: list[int], metrics: tuple[str, ...] = DEFAULT_METRICS) -> dict[str, Any]:
    """Per-fold metrics of the finished folds under ``out`` (``folds`` and any other fold finished there,
    by another process sharing ``out``) and their mean and std (ddof=1); ``missing``: the ``folds``
    without ``results.json``."""
    every = sorted(set(folds) | _finished_folds(out))
    summary = sweep.summarise({str(k): out / f"fold_{k:02d}" for k in every}, metrics)
    return {**summary, "missing": [int(k) for k in summary["missing"]]}


def write_summary(out: Path, folds: list[int], metrics: tuple[str, ...] = DEFAULT_METRICS) -> dict[str, Any]:
    """:func:`summarise` into ``out/cv.json``, atomically, holding an exclusive ``flock`` on ``out``:
    processes sharing ``out`` summarise and write in turn, so none replaces a later summary with an
    older one."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        summary = summarise(out, folds, metrics)
        atomic_write_json(out / "cv.json", summary)
    finally:
        os.close(fd)  # drops the lock
    return summary


def run(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(prog="biosig cv", description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", default="0-30", help="fold indices, e.g. 0-30 or 0,3,5 (default 0-30)")
    parser.add_argument("--out", default=None, help="folder of the fold runs (default runs/cv/<config stem>)")
    parser.add_argument("--fold-key", default=FOLD_KEY,
                        help=f"config key set to the fold index (default {FOLD_KEY})")
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="metrics summarised over folds")
    args, fit_args = parser.parse_known_args(argv)
    folds = parse_folds(args.folds)
    configs = [fit_args[i + 1] for i, a in enumerate(fit_args[:-1]) if a == "--config"]
    if not configs:
        raise CVError("biosig cv needs at least one --config experiment YAML")
    out = Path(args.out) if args.out else Path("runs") / "cv" / Path(configs[0]).stem
    jobs = fold_jobs(fit_args, out, folds, fold_key(args.fold_key))
    check_data_source([*fit_args, f"--{fold_key(args.fold_key)}", str(folds[0])])
    reasons: dict[str, str] = {}
    outcome = run_jobs(jobs, reasons=reasons)
    summary = write_summary(out, folds, tuple(m.strip() for m in args.metrics.split(",") if m.strip()))
    for m, v in summary.items():
        if isinstance(v, dict) and "mean" in v:
            print(f"{m:16s} {100 * v['mean']:6.2f} +- {100 * v['std']:5.2f}  (n={v['n']} folds)")
    print(f"cv: {out / 'cv.json'}")
    failed = [j.label for j in jobs if outcome.get(j.label, FAILED) == FAILED]
    if failed:
        raise SystemExit(f"biosig cv: {len(failed)} fold(s) did not finish "
                         f"({describe_failures(failed, reasons)}); rerun the same command to resume them")
    return out
