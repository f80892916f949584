"""One experiment over seeds or over folds: the one-corpus, one-method grid of ``biosig repeat`` and ``biosig
cv``.

A sweep is the ``biosig fit`` arguments of one experiment and the values of the one thing that
varies: seeds (``DIR/seed_<s>/``, ``--seed_everything s``) or folds (``DIR/fold_KK/``, the fold key
set to ``k``). Each value is a :class:`~biosig_lightning.benchmarking.runner.Job` placed like a grid
cell (:func:`~biosig_lightning.benchmarking.grid.run_placement`, wandb group ``DIR``'s name) and run
by :func:`~biosig_lightning.benchmarking.runner.run_jobs`. :func:`summarise` gives the finished runs'
metrics with their mean and standard deviation (ddof = 1) over the values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.benchmarking.grid import FOLD_KEY, run_placement
from biosig_lightning.benchmarking.runner import Job
from biosig_lightning.runs.checks import SEED_MAX, SEED_MIN
from biosig_lightning.runs.index_ranges import parse_index_ranges

__all__ = ["SEED_MAX", "SweepError", "fold_jobs", "parse_folds", "parse_seeds", "seed_jobs", "summarise"]



class SweepError(ValueError):
    """A bad seed or fold list, or an argument the sweep sets itself (one line naming it)."""


def parse_seeds(text: str) -> list[int]:
    """``"41,42,43"`` -> ``[41, 42, 43]``; a non-integer, out-of-range or repeated seed is one clear error."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise SweepError(f"--seeds: expected comma-separated integers, got {text!r}")
    seeds: list[int] = []
    for item in items:
        try:
            seeds.append(int(item))
        except ValueError:
            raise SweepError(
                f"--seeds: {item!r} is not an integer (expected e.g. --seeds 41,42,43)"
            ) from None
        if (
            not SEED_MIN <= seeds[-1] <= SEED_MAX
        ):  # checked here: Lightning would fail after the directory exists
            raise SweepError(f"--seeds: {item} is out of range (seeds are integers {SEED_MIN}..{SEED_MAX})")
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise SweepError(f"--seeds: seed(s) {dup} given twice")
    return seeds


def parse_folds(text: str) -> list[int]:
    """``"0-30"``, ``"0,3,5"`` or ``"0-3,7"`` -> sorted unique fold indices, counted before any range is
    built."""
    return parse_index_ranges(text, "--folds", SweepError)


def _refuse(fit_args: list[str], own: tuple[str, ...], command: str, per: str) -> None:
    for arg in fit_args:
        if arg.split("=", 1)[0] in own:
            raise SweepError(f"{arg.split('=', 1)[0]} is set per {per} by biosig {command}; drop it")


def seed_jobs(fit_args: list[str], out: Path, seeds: list[int]) -> list[Job]:
    """One job per seed: ``out/seed_<s>/`` with ``--seed_everything s`` (log ``out/seed_<s>.log``)."""
    _refuse(fit_args,
            ("--seed_everything", "--trainer.logger.init_args.version", "--run.version", "--ckpt_path"),
            "repeat", "seed")
    return [Job(f"seed {s}", out / f"seed_{s}", (*fit_args, "--seed_everything", str(s),
                                                 *run_placement(out / f"seed_{s}", out.name)),
                out / f"seed_{s}.log") for s in seeds]


def fold_jobs(fit_args: list[str], out: Path, folds: list[int], key: str = FOLD_KEY) -> list[Job]:
    """One job per fold: ``out/fold_KK/`` with ``--<key> k`` (log ``out/fold_KK.log``)."""
    _refuse(fit_args, ("--run.version", "--ckpt_path", f"--{key}"), "cv", "fold")
    return [Job(f"fold {k}", out / f"fold_{k:02d}", (*fit_args, f"--{key}", str(k),
                                                     *run_placement(out / f"fold_{k:02d}", out.name)),
                out / f"fold_{k:02d}.log") for k in folds]


def summarise(runs: dict[str, Path], metrics: tuple[str, ...]) -> dict[str, Any]:
    """``{"folds": {name: {metric: value}}, "n_folds", "missing", metric: {"mean", "std", "n"}}`` over the
    runs (name -> run directory) that wrote ``results.json``; std with ddof = 1 (0 for one run)."""
    rows: dict[str, dict[str, float]] = {}
    for name, run_dir in runs.items():
        path = run_dir / "results.json"
        if path.is_file():
            got = json.loads(path.read_text()).get("metrics", {})
            rows[name] = {m: float(got[m]) for m in metrics if isinstance(got.get(m), int | float)}
    summary: dict[str, Any] = {"folds": rows, "n_folds": len(rows),
                               "missing": [n for n in runs if n not in rows]}
    for m in metrics:
        vals = np.array([r[m] for r in rows.values() if m in r], dtype=np.float64)
        if len(vals):
            summary[m] = {"mean": float(vals.mean()),
                          "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
                          "n": int(len(vals))}
    return summary
