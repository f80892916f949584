"""``biosig repeat``: the same experiment once per seed, each seed in its own run directory.

``biosig repeat --config X.yaml [--config more.yaml] --seeds 41,42,43 [--out DIR] [--workers N]
[--key value ...]`` runs ``biosig fit`` with ``--seed_everything s`` for every seed and puts the
run in ``DIR/seed_<s>/`` (default ``DIR = runs/repeat/<experiment>``). The experiment name is the
logger ``name`` the configs give plus ``+<stem>`` for each later override file (see
:func:`experiment_name`), so variants of one experiment never share a directory.

The run directory is chosen through ``biosig fit``'s ``--run.*`` placement, which applies to every
configured logger: ``save_dir = DIR.parent``, ``name = DIR.name``, ``version = seed_<s>``; wandb runs
are named ``<experiment>/seed_<s>`` and grouped under ``<experiment>``. So every ``results.json``
carries ``experiment = DIR.name`` (which ``biosig report`` uses to label rows).

Resumable: a seed whose ``results.json`` exists is skipped; a seed directory without one (a run
that died) is removed and that seed starts again from scratch, since a CSV logger reopening the
directory would overwrite its learning curves anyway.

``--workers N`` (N > 1) runs seeds in parallel worker processes (``python -m biosig_lightning.cli
fit ...``, output in ``DIR/seed_<s>.log``); serial mode runs the fits in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

SUMMARY_METRICS = ("test/acc", "test/f1", "test/auroc")


class RepeatError(ValueError):
    """Bad ``biosig repeat`` arguments (one line, names the offending value)."""


def parse_seeds(text: str) -> list[int]:
    """``"41,42,43"`` -> ``[41, 42, 43]``; any non-integer item is one clear error."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise RepeatError(f"--seeds: expected comma-separated integers, got {text!r}")
    seeds: list[int] = []
    for item in items:
        try:
            seeds.append(int(item))
        except ValueError:
            raise RepeatError(f"--seeds: {item!r} is not an integer (expected e.g. --seeds 41,42,43)") from None
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise RepeatError(f"--seeds: seed(s) {dup} given twice")
    return seeds


def experiment_name(fit_args: list[str]) -> str:
    """The experiment's name: the logger name the configs give, plus ``+<stem>`` per later override file.

    ``--config sdformer_sleepedf.yaml --config ablations/no_dep.yaml`` gives
    ``sdformer_sleepedf+no_dep``, so a variant never shares (and never skips the seeds of) the base
    experiment's directory. A ``--trainer.logger.init_args.name`` / ``--run.name`` on the command line
    names the experiment outright. Without any logger name, the config stems are joined.
    """
    name: str | None = None
    suffix: list[str] = []
    explicit: str | None = None
    i = 0
    while i < len(fit_args):
        arg = fit_args[i]
        key, eq, value = arg.partition("=")
        if not eq and i + 1 < len(fit_args):
            value = fit_args[i + 1]
        if key == "--config":
            path = Path(value)
            found = _logger_name(path)
            if found is not None:
                name, suffix = found, []
            elif name is None and not suffix:
                name = path.stem
            else:
                suffix.append(path.stem)
        elif key in ("--trainer.logger.init_args.name", "--run.name") and value != "auto":
            explicit = value
        i += 1 if eq else 2 if key.startswith("--") else 1
    if explicit:
        return explicit
    return "+".join([name or "experiment", *suffix])


def _logger_name(path: Path) -> str | None:
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # the fit itself reports an unreadable config, with jsonargparse's message
    logger = (cfg.get("trainer") or {}).get("logger") if isinstance(cfg, dict) else None
    loggers = [logger] if isinstance(logger, dict) else logger if isinstance(logger, list) else []
    for lg in loggers:  # the first file logger names the experiment (wandb names runs, not folders)
        if isinstance(lg, dict) and not str(lg.get("class_path", "")).endswith("WandbLogger"):
            name = (lg.get("init_args") or {}).get("name")
            return str(name) if name not in (None, "auto") else None
    return None


def seed_args(fit_args: list[str], out: Path, seed: int) -> list[str]:
    """The ``biosig fit`` arguments that run ``seed`` into ``out/seed_<seed>`` (every logger; wandb
    runs of the seeds share the group ``out.name``)."""
    return [*fit_args, "--seed_everything", str(seed), "--run.save_dir", str(out.parent), "--run.name", out.name,
            "--run.version", f"seed_{seed}", "--run.group", out.name]


def _fit_in_process(args: list[str]) -> None:
    import warnings

    from biosig_lightning.cli import main as cli_main

    # biosig's own argv is not LightningCLI's: the args it gets are the complete fit arguments
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    cli_main(["fit", *args])


def _fit_subprocess(args: list[str], log: Path, threads: int) -> int:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))  # N workers must not each grab every core
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, "-m", "biosig_lightning.cli", "fit", *args],
                              stdout=fh, stderr=subprocess.STDOUT, env=env)
    return proc.returncode


def repeat(fit_args: list[str], seeds: list[int], out: Path | None = None, workers: int = 1) -> Path:
    """Fit once per seed under ``out`` (see the module docstring); returns ``out``."""
    if workers < 1:
        raise RepeatError(f"--workers must be >= 1, got {workers}")
    for arg in fit_args:
        if arg.split("=", 1)[0] in ("--seed_everything", "--trainer.logger.init_args.version", "--run.version"):
            raise RepeatError(f"{arg.split('=', 1)[0]} is set per seed by biosig repeat; drop it")
    out = Path(out) if out is not None else Path("runs") / "repeat" / experiment_name(fit_args)
    todo: list[int] = []
    for seed in seeds:
        run_dir = out / f"seed_{seed}"
        if (run_dir / "results.json").exists():
            print(f"seed {seed}: {run_dir / 'results.json'} exists, skipped")
            continue
        if run_dir.exists():
            print(f"seed {seed}: {run_dir} has no results.json (an interrupted run), starting it again")
            shutil.rmtree(run_dir)
        todo.append(seed)
    out.mkdir(parents=True, exist_ok=True)
    failed: list[int] = []
    if workers == 1:
        for seed in todo:
            print(f"seed {seed}: fitting into {out / f'seed_{seed}'}", flush=True)
            _fit_in_process(seed_args(fit_args, out, seed))
    else:
        threads = max(1, (os.cpu_count() or 1) // min(workers, max(len(todo), 1)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            codes = dict(zip(todo, pool.map(
                lambda s: _fit_subprocess(seed_args(fit_args, out, s), out / f"seed_{s}.log", threads), todo), strict=True))
        for seed, code in codes.items():
            status = "done" if code == 0 else f"FAILED (exit {code}), see {out / f'seed_{seed}.log'}"
            print(f"seed {seed}: {status}")
            if code != 0:
                failed.append(seed)
    print_summary(out, seeds)
    if failed:
        raise SystemExit(f"biosig repeat: seed(s) {failed} failed; rerun the same command to retry them")
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


def run(argv: list[str]) -> Path:
    """Entry point of ``biosig repeat`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig repeat", allow_abbrev=False,
                                 description="one biosig fit per seed; other options go to fit")
    ap.add_argument("--seeds", required=True, help="comma-separated integer seeds, e.g. 41,42,43")
    ap.add_argument("--out", type=Path, default=None, help="parent dir (default runs/repeat/<experiment>)")
    ap.add_argument("--workers", type=int, default=1, help="parallel fit processes (default 1: in-process)")
    own, rest = ap.parse_known_args(argv)
    try:
        return repeat(rest, parse_seeds(own.seeds), own.out, own.workers)
    except RepeatError as err:
        raise SystemExit(f"biosig repeat: error: {err}") from None
