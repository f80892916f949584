"""The stand-in leaderboard as a docs result file: ``docs/results/benchmark_standins.json``.

Reads a finished ``biosig benchmark --grid experiments/benchmarks/standins.yaml --out DIR`` folder and
writes, for the Benchmark page: the leaderboard (:mod:`biosig_lightning.analysis.leaderboard`, the same
numbers as ``DIR/leaderboard.md``), every run with its training curve's end points, and, for each
corpus where a paper's method trails a baseline, both methods' runs side by side with their accuracy
on each test subject (and every method's accuracy per test subject, corpus by corpus), and the log
band-power regression on each corpus's same split (the floor every method should reach). A grid not run in
full is marked partial with the cells it lacks. The critical-difference diagram is copied next to the page,
the raw leaderboard files to ``--raw``::

    python benchmarks/standins_leaderboard.py DIR
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.analysis.leaderboard import (
    Leaderboard,
    build,
    corpus_rows,
    main_rows,
    mean_std,
    pairwise,
)
from biosig_lightning.atomic_io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
#: the grid's rows that are a paper's method; every other row is a baseline
PAPER_METHODS = {"bioformer": "BioFormer", "sdformer": "SD-Former", "stdro": "STDRO",
                 "spdtransnet": "SPDTransNet",
                 "signed_graph": "the signed-graph denoiser pair"}
COMMAND = ("biosig benchmark --grid experiments/benchmarks/standins.yaml --out DIR --workers 2 --inline; "
           "python benchmarks/standins_leaderboard.py DIR")


def _runs(out: Path, corpus: str, method: str) -> list[Path]:
    """The finished runs (those with a ``results.json``) of one cell row, by seed."""
    done = [p.parent for p in (out / corpus / method).glob("seed_*/results.json")]
    return sorted(done, key=lambda p: int(p.name.split("_")[1]))


def _seeds(out: Path) -> list[str]:
    return sorted({p.parent.name.removeprefix("seed_") for p in out.glob("*/*/seed_*/results.json")}, key=int)


def _curve(run: Path, metric: str) -> dict[str, Any]:
    """End points of a run's training curve from its ``metrics.csv``."""
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    train = [float(r["train/acc"]) for r in rows if r.get("train/acc")]
    val = [float(r[f"val/{metric}"]) for r in rows if r.get(f"val/{metric}")]
    return {"train_acc_last": train[-1] if train else None, "val_best": max(val) if val else None,
            "val_epochs": len(val)}


def _per_subject(run: Path) -> dict[int, float]:
    """Accuracy on each test subject, from the run's ``test_predictions.npz``."""
    with np.load(run / "test_predictions.npz", allow_pickle=False) as z:
        pred, y, subject = z["probs"].argmax(1), z["y"], z["subject"]
    return {int(s): float((pred[subject == s] == y[subject == s]).mean()) for s in np.unique(subject)}


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def band_power_items(out: Path, board: Leaderboard) -> list[dict[str, Any]]:
    """The band-power regression on each corpus's split (fitted on the training windows of a finished run's
    DataModule, rebuilt from its ``results.json``), and the methods whose mean stays below it."""
    from biosig_lightning.analysis.band_power_baseline import datamodule_baseline
    from biosig_lightning.runs.load import load_run

    rows = []
    for c in board.corpora:
        metric = board.primary(c)
        run = next((r for m in board.methods for r in _runs(out, c, m)), None)
        if run is None:
            continue
        score = datamodule_baseline(load_run(run).datamodule, "test").get(metric)
        if score is None:
            continue
        means = {m: board.mean(c, m, metric) for m in board.methods}
        below = sorted(m for m, v in means.items() if v is not None and round(v, 3) < round(score, 3))
        rows.append([c, metric, _f(score), ", ".join(below) or "none"])
    if not rows:
        return []
    return [{"text": "The log band-power logistic regression "
                     "(`biosig_lightning.analysis.band_power_baseline`) on "
                     "each corpus's split: fitted on the training subjects' windows, scored on the test "
                     "subjects' (the "
                     "methods' split and normalisation), and the methods whose mean is below it:"},
            {"table": {"columns": ["corpus", "metric", "band-power regression, test", "methods below it"],
                       "rows": rows}}]


def missing_cells(out: Path) -> list[str]:
    """Cells of the grid (``DIR/grid.json``: corpora, methods, seeds, n/a pairs) with no ``results.json``."""
    grid = json.loads((out / "grid.json").read_text())
    na = {(d["corpus"], d["method"]) for d in grid.get("not_applicable", [])}
    return [f"{c}/{m}/seed_{s}" for c in grid["corpora"] for m in grid["methods"] for s in grid["seeds"]
            if (c, m) not in na and not (out / c / m / f"seed_{s}" / "results.json").is_file()]


def runs_table(out: Path, board: Leaderboard) -> dict[str, Any]:
    rows = []
    for c in board.corpora:
        metric = board.primary(c)
        for m in board.methods:
            for run in _runs(out, c, m):
                res = json.loads((run / "results.json").read_text())
                curve = _curve(run, metric)
                best = Path(res.get("best_checkpoint") or "").stem.removeprefix("best-epoch")
                rows.append([c, m, str(res["seed"]), _f(res["metrics"].get(f"test/{metric}")),
                             str(res.get("epochs", "-")), str(int(best)) if best.isdigit() else "-",
                             _f(curve["train_acc_last"]), _f(curve["val_best"]),
                             f"{res.get('fit_seconds', 0):.0f}"])
    return {"columns": ["corpus", "method", "seed", "test (first metric)", "epochs", "best epoch",
                        "train acc, last epoch", "best val (first metric)", "fit s"],
            "rows": rows,
            "align": ["left", "left", "right", "right", "right", "right", "right", "right", "right"]}


def trailing(out: Path, board: Leaderboard) -> list[dict[str, Any]]:
    """Items for each corpus where a paper's method scores below the best baseline."""
    items: list[dict[str, Any]] = []
    for c in board.corpora:
        metric = board.primary(c)
        baselines = {m: board.mean(c, m, metric) for m in board.methods if m not in PAPER_METHODS}
        baselines = {m: v for m, v in baselines.items() if v is not None}
        if not baselines:
            continue
        best = max(baselines, key=lambda m: baselines[m])
        for m, label in PAPER_METHODS.items():
            mean = board.mean(c, m, metric)
            if mean is None or round(mean, 3) >= round(
                baselines[best], 3
            ):  # below it as the table prints them
                continue
            test = pairwise(board, m, best)["per_corpus"].get(c, {})
            p = f"Welch p = {test['welch_p']:.3g}" if "welch_p" in test else test.get("welch", "")
            below = sorted(b for b, v in baselines.items() if v > mean)
            items.append({"text": f"**{label} trails on {c}'s stand-in**: test {metric} {mean:.3f} against "
                                  f"{best}'s {baselines[best]:.3f} ({p}); baselines above it: "
                                  f"{', '.join(below)}. "
                                  "Its runs and the best baseline's, and each run's accuracy per test "
                                  "subject:"})
            subjects: list[int] = []
            rows = []
            for who in (m, best):
                for run in _runs(out, c, who):
                    res = json.loads((run / "results.json").read_text())
                    acc = _per_subject(run)
                    subjects = subjects or sorted(acc)
                    curve = _curve(run, metric)
                    rows.append([who, str(res["seed"]), _f(res["metrics"].get(f"test/{metric}")),
                                 _f(curve["train_acc_last"]), _f(curve["val_best"]),
                                 *[_f(acc.get(s), 2) for s in subjects]])
            items.append({"table": {"columns": ["method", "seed", f"test {metric}", "train acc, last epoch",
                                                f"best val {metric}", *[f"subject {s}" for s in subjects]],
                                    "rows": rows}})
    return items


def _cpu() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def subjects_table(out: Path, board: Leaderboard, corpus: str) -> dict[str, Any] | None:
    """Accuracy on each test subject, mean over a method's seeds (every method shares the split)."""
    rows, subjects = [], []
    for m in board.methods:
        accs = [_per_subject(run) for run in _runs(out, corpus, m)]
        if accs:
            subjects = subjects or sorted(accs[0])
            rows.append([m, *[_f(float(np.mean([a[s] for a in accs])), 2) for s in subjects]])
    if not rows:
        return None
    return {"columns": ["method", *[f"subject {s}" for s in subjects]], "rows": rows}


def variants_table(variants: list[str], board: Leaderboard) -> list[dict[str, Any]]:
    """``LABEL=CORPUS/METHOD=DIR``: the same cells rerun with one switch (``DIR/<method>/seed_<s>/``), beside
    the grid's runs of that method."""
    items: list[dict[str, Any]] = []
    rows = []
    for spec in variants:
        label, cell, folder = spec.split("=", 2)
        corpus, method = cell.split("/")
        metric = board.primary(corpus)
        seeds = _runs(Path(folder), ".", method)
        vals = [json.loads((r / "results.json").read_text())["metrics"][f"test/{metric}"] for r in seeds]
        base = board.runs[corpus][method][metric]
        if not rows:
            rows.append([f"{method} (the grid's run)", corpus, *[_f(v) for v in base], mean_std(base)])
        rows.append([label, corpus, *[_f(v) for v in vals], mean_std(vals)])
    if rows:
        width = max(len(r) for r in rows)
        items.append({"text": "The same cells rerun with one switch of the method: each cell's `biosig "
                              "benchmark "
                              "--print-commands` line with the switch added (e.g. "
                              "`--model.init_args.backbone.init_args."
                              "mixer=none`) and `--run.save_dir DIR`, then `--variant "
                              "LABEL=CORPUS/METHOD=DIR` here. "
                              "Test score per seed:"})
        items.append({"table": {"columns": ["variant", "corpus", *[f"seed {i + 1}" for i in range(width - 3)],
                                            "mean ± std"], "rows": rows}})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path, help="the benchmark folder (biosig benchmark --out)")
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results" / "benchmark_standins.json")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=CORPUS/METHOD=DIR",
                        help="cells of one method rerun with one switch into DIR/<method>/seed_<s>/")
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "assets" / "benchmark_standins_cd.png")
    parser.add_argument("--raw", type=Path, default=ROOT / "docs" / "results" / "benchmarks" / "standins",
                        help="where the run's leaderboard.md/.csv/.tex/.json and cd_diagram.png/.pdf are "
                             "copied")
    args = parser.parse_args()
    board = build(args.out)
    header, rows = main_rows(board)
    fr = board.friedman
    missing = missing_cells(args.out)
    items: list[dict[str, Any]] = []
    if missing:
        items.append({"text": f"**Partial**: the grid did not finish; {len(missing)} of its cells have no "
                              f"run yet "
                              f"(every number below is from the cells that finished): {', '.join(missing)}."})
    items += [
        {"text": f"Mean ± std over the seeds ({', '.join(_seeds(args.out))}) of each corpus's first metric "
                 f"on its "
                 "held-out test subjects; average rank over the corpora (1 = best); wins = corpora ranked "
                 "first."},
        {"table": {"columns": header, "rows": rows}},
        {"text": "n/a (listed by the grid, not run):\n\n" + "\n".join(
            f"- {m} on {c}: {r}" for (c, m), r in sorted(board.not_applicable.items()))
            if board.not_applicable else "n/a: none (every method ran on every corpus)."},
    ]
    if "skipped" in fr:
        items.append({"text": f"Friedman test skipped: {fr['skipped']}."})
    else:
        docs = ROOT / "docs"
        figure = (
            args.figure.resolve().relative_to(docs)
            if args.figure.resolve().is_relative_to(docs)
            else args.figure
        )
        shutil.copyfile(args.out / "cd_diagram.png", args.figure)
        items.append({"text": f"Friedman test over {len(fr['corpora'])} corpora x {len(fr['methods'])} "
                              f"methods "
                              f"(scipy): chi² = {fr['statistic']:.3f}, p = {fr['p_value']:.4g}; Nemenyi "
                              f"critical "
                              f"difference (scikit-posthocs, alpha {fr['alpha']}): "
                              f"{fr['critical_difference']:.3f} "
                              f"ranks.\n\n![critical-difference diagram]({figure.as_posix()})"})
    for c in board.corpora:
        header_c, rows_c = corpus_rows(board, c)
        if rows_c:
            items.append({"text": f"**{c}**: every metric (test, mean ± std over seeds), trainable "
                                  f"parameters and "
                                  "seconds per fit"})
            items.append({"table": {"columns": header_c, "rows": rows_c}})
            subjects = subjects_table(args.out, board, c)
            if subjects:
                items.append({"text": f"{c}: accuracy on each held-out test subject, mean over the seeds"})
                items.append({"table": subjects})
    items += band_power_items(args.out, board)
    items += trailing(args.out, board)
    items += variants_table(args.variant, board)
    seconds = [v for c in board.runs.values() for m in c.values() for v in m["fit_seconds"]]
    items.append({"text": f"Every run (`DIR/<corpus>/<method>/seed_<s>/`), {len(seconds)} fits taking "
                          f"{sum(seconds) / 60:.0f} minutes in all (one torch thread each): its test score, "
                          f"how long it trained, "
                          "the epoch its checkpoint comes from, and where its curves ended"})
    items.append({"table": runs_table(args.out, board)})
    stamps = [p.stat().st_mtime for p in args.out.glob("*/*/seed_*/results.json")]
    dates = sorted({time.strftime("%Y-%m-%d", time.gmtime(t)) for t in stamps})
    doc = {
        "title": "The stand-in leaderboard (experiments/benchmarks/standins.yaml)"
        + (" (partial)" if missing else ""),
        "page": "benchmark",
        "machine": f"{_cpu()}, {os.cpu_count()} cores, two workers with one torch thread each; "
        f"Python {platform.python_version()}",
        "dates": dates,
        "command": COMMAND
        + "".join(
            f" --variant '{v.rsplit('=', 1)[0]}=VARIANT_DIR_{i + 1}'" for i, v in enumerate(args.variant)
        ),
        "items": items,
    }
    atomic_write_json(args.results, doc)
    args.raw.mkdir(parents=True, exist_ok=True)
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.tex", "leaderboard.json", "cd_diagram.png",
                 "cd_diagram.pdf"):
        if (args.out / name).is_file():
            shutil.copyfile(args.out / name, args.raw / name)
    print(args.results)


if __name__ == "__main__":
    main()
