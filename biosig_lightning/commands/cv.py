"""``biosig cv``: one experiment over the folds of a cross-validation, resumable, with a mean +- std table.

``biosig cv --config X.yaml [--config ...] [--folds 0-30] [--out DIR] [--fold-key data.init_args.fold]
[--metrics test/f1,test/macro_acc,test/f1_n1] [any biosig fit argument ...]``

Fold ``k`` is ``biosig fit`` with ``--<fold-key> k`` (default ``data.init_args.fold``: for
:class:`~biosig_lightning.data.datamodules.MASSSS3DataModule` IITNet's 31 MASS SS3 folds), run in its own
process into ``DIR/fold_KK/`` (log ``DIR/fold_KK.log``; ``DIR`` defaults to ``runs/cv/<config stem>``).
Resumable: a fold with a ``results.json`` is skipped; one interrupted after a checkpoint resumes from its
``last.ckpt``; one without either starts again. Rerun the same command after a crash or to add folds.

At the end ``DIR/cv.json`` holds every finished fold's metrics and, per metric, the mean and standard
deviation (ddof = 1) over folds (SPDTransNet Table 1: macro-F1, macro accuracy, N1 F1), also printed;
``biosig report DIR`` (several such directories to compare models on the same folds) prints the same
mean +- std as a table with these columns.
Folds are independent runs, so ``--folds`` splits the work over machines: run disjoint ranges with the
same ``--out`` on a shared filesystem.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.runs.index_ranges import parse_index_ranges

__all__ = ["parse_folds", "run", "summarise"]

DEFAULT_METRICS = ("test/f1", "test/macro_acc", "test/f1_n1", "test/acc", "test/kappa")


class CVError(ValueError):
    """A bad ``biosig cv`` argument."""


def parse_folds(text: str) -> list[int]:
    """``"0-30"``, ``"0,3,5"`` or ``"0-3,7"`` -> sorted unique fold indices (at most ``MAX_INDICES``)."""
    return parse_index_ranges(text, "--folds", CVError)


def _fold_args(fit_args: list[str], out: Path, fold: int, fold_key: str, ckpt: Path | None) -> list[str]:
    resume = ["--ckpt_path", str(ckpt)] if ckpt is not None else []
    return [*fit_args, f"--{fold_key}", str(fold), "--run.save_dir", str(out.parent), "--run.name", out.name,
            "--run.version", f"fold_{fold:02d}", "--run.group", out.name, "--trainer.enable_progress_bar=false",
            *resume]


def summarise(out: Path, folds: list[int], metrics: tuple[str, ...] = DEFAULT_METRICS) -> dict[str, Any]:
    """Per-fold metrics of the finished folds under ``out`` and their mean and std (ddof=1)."""
    rows: dict[str, dict[str, float]] = {}
    for k in folds:
        path = out / f"fold_{k:02d}" / "results.json"
        if path.exists():
            got = json.loads(path.read_text()).get("metrics", {})
            rows[str(k)] = {m: float(got[m]) for m in metrics if isinstance(got.get(m), int | float)}
    summary: dict[str, Any] = {"folds": rows, "n_folds": len(rows), "missing": [k for k in folds if str(k) not in rows]}
    for m in metrics:
        vals = np.array([r[m] for r in rows.values() if m in r], dtype=np.float64)
        if len(vals):
            summary[m] = {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
                          "n": int(len(vals))}
    return summary


def run(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(prog="biosig cv", description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", default="0-30", help="fold indices, e.g. 0-30 or 0,3,5 (default 0-30)")
    parser.add_argument("--out", default=None, help="folder of the fold runs (default runs/cv/<config stem>)")
    parser.add_argument("--fold-key", default="data.init_args.fold", help="config key set to the fold index")
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="metrics summarised over folds")
    args, fit_args = parser.parse_known_args(argv)
    folds = parse_folds(args.folds)
    configs = [fit_args[i + 1] for i, a in enumerate(fit_args[:-1]) if a == "--config"]
    if not configs:
        raise CVError("biosig cv needs at least one --config experiment YAML")
    for arg in fit_args:
        if arg.split("=", 1)[0] in ("--run.version", "--ckpt_path", f"--{args.fold_key}"):
            raise CVError(f"{arg.split('=', 1)[0]} is set per fold by biosig cv; drop it")
    out = Path(args.out) if args.out else Path("runs") / "cv" / Path(configs[0]).stem
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for k in folds:
        run_dir = out / f"fold_{k:02d}"
        if (run_dir / "results.json").exists():
            print(f"fold {k}: {run_dir / 'results.json'} exists, skipped", flush=True)
            continue
        last = run_dir / "checkpoints" / "last.ckpt"
        ckpt = last if last.is_file() else None
        if ckpt is None and run_dir.exists():
            shutil.rmtree(run_dir)  # interrupted before its first checkpoint: start again
        log = out / f"fold_{k:02d}.log"
        print(f"fold {k}: {'resuming from ' + str(last) if ckpt else 'fitting'} into {run_dir}, log {log}", flush=True)
        with log.open("a" if ckpt else "w") as fh:
            code = subprocess.run([sys.executable, "-m", "biosig_lightning.cli", "fit",
                                   *_fold_args(fit_args, out, k, args.fold_key, ckpt)],
                                  stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ)).returncode
        if code != 0 or not (run_dir / "results.json").exists():
            print(f"fold {k}: FAILED (exit {code}), see {log}", flush=True)
            failed.append(k)
    summary = summarise(out, folds, tuple(m.strip() for m in args.metrics.split(",") if m.strip()))
    (out / "cv.json").write_text(json.dumps(summary, indent=1))
    for m, v in summary.items():
        if isinstance(v, dict) and "mean" in v:
            print(f"{m:16s} {100 * v['mean']:6.2f} +- {100 * v['std']:5.2f}  (n={v['n']} folds)")
    print(f"cv: {out / 'cv.json'}")
    if failed:
        raise SystemExit(f"biosig cv: fold(s) {failed} failed; rerun the same command to retry them")
    return out
