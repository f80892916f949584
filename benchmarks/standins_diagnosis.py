"""Why a stand-in cannot rank, or a method trails on it: ``docs/results/benchmark_standins_diagnosis.json``.

Two kinds of evidence, both under the stand-in grid's protocol (experiments/benchmarks/standins.yaml: its
DataModules, its subject split, the models' normalisation):

* the log band-power logistic regression (:mod:`biosig_lightning.analysis.band_power_baseline`) on the
  train, validation and test subjects of each stand-in, at the grid's settings and at one changed option
  (generator kind, subject drift, number of subjects, split seed, volume conduction): which part of the
  stand-in sets its ceiling and its validation/test gap; beside it, the same regression on the channels'
  pairwise correlations, the structure a graph over the channels can read;
* finished runs of diagnosis grids (``biosig benchmark`` folders given with ``--runs``: the same cells with
  one corpus or budget option changed), each run's test and best validation score and its last training
  accuracy, beside the regression on the same split::

    python benchmarks/standins_diagnosis.py --runs DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.atomic_io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "experiments" / "benchmarks" / "standins.yaml"
#: (corpus, what changed, synthetic options over the grid's, split seed); split seed 0 is the grid's
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("chbmit", "the grid's stand-in", {}, 0),
    ("chbmit", "spike-and-wave bursts (kind spikes), the earlier stand-in", {"kind": "spikes"}, 0),
    ("chbmit", "spikes at 0.4x class separation", {"kind": "spikes", "class_separation": 0.4}, 0),
    ("sleepedf", "the grid's stand-in", {}, 0),
    *[("sleepedf", f"split seed {s}", {}, s) for s in range(1, 6)],
    ("sleepedf", "no subject drift", {"subject_drift": 0.0}, 0),
    ("sleepedf", "half the subject drift", {"subject_drift": 0.5}, 0),
    ("sleepedf", "half the band-gain drift", {"band_gain_drift": 0.5}, 0),
    ("sleepedf", "32 subjects (16 training)", {"n_subjects": 32}, 0),
    ("apava", "the grid's stand-in", {}, 0),
    ("apava", "no volume conduction (the earlier stand-in)", {"volume_conduction": 0.0}, 0),
    ("chbmit", "no volume conduction (the earlier stand-in)", {"volume_conduction": 0.0}, 0),
    ("apava", "no subject drift", {"subject_drift": 0.0}, 0),
    *[(c, f"volume conduction {w:g} (the grid's: 0.5)", {"volume_conduction": w}, 0)
      for c in ("apava", "chbmit") for w in (1.0, 2.0)],
]


def _corpus_datamodule(corpus: str, options: dict[str, Any], split_seed: int) -> Any:
    """The grid corpus's DataModule on its stand-in, with ``options`` over the grid's synthetic options."""
    from biosig_lightning.benchmarking.grid import load_grid
    from biosig_lightning.data import datamodules
    from biosig_lightning.data.splits import SplitConfig
    from biosig_lightning.yaml_io import load_yaml

    grid = load_grid(GRID)
    c = grid.corpora[corpus]
    data = load_yaml(c.configs[0], "config", ValueError)["data"]
    cls = getattr(datamodules, data["class_path"].rsplit(".", 1)[1])
    kwargs = {k: v for k, v in (data.get("init_args") or {}).items() if k not in ("root", "batch_size")}
    synthetic = {**c.overrides.get("data.init_args.synthetic_options", {}), **options}
    split = dict(c.split or {})
    split["seed"] = split_seed
    split["ratios"] = tuple(split["ratios"])
    return cls(synthetic=True, synthetic_options=synthetic,
               split=SplitConfig(**split), **kwargs), c.metrics[0]


def probe_doc(title: str, script: str, started: float, items: list[dict[str, Any]],
              **extra: Any) -> dict[str, Any]:
    """The Benchmark page's results file of a probe script run here since ``started`` (the docs hook's
    format: ``docs/hooks/results.py``)."""
    import sys

    return {"title": title, "page": "benchmark",
            "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs; Python "
                       f"{platform.python_version()}",
            "dates": [time.strftime("%Y-%m-%d")],
            "command": " ".join([f"python benchmarks/{script}", *sys.argv[1:]])
                       + f"  ({time.time() - started:.0f} s)",
            "items": items, **extra}


def channel_correlations(x: np.ndarray) -> np.ndarray:
    """``(N, C (C - 1) / 2)`` Pearson correlations of every channel pair within each window ``(N, C, T)``."""
    xc = x - x.mean(-1, keepdims=True)
    xc = xc / np.maximum(np.linalg.norm(xc, axis=-1, keepdims=True), 1e-12)
    iu = np.triu_indices(x.shape[1], 1)
    return np.einsum("nct,ndt->ncd", xc, xc)[:, iu[0], iu[1]]


def band_power_case(corpus: str, options: dict[str, Any], split_seed: int) -> dict[str, Any]:
    """The regression's first metric of the grid corpus on its train, val and test subjects, and on the
    test subjects from the channel correlations (``corr_test``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from biosig_lightning.analysis.band_power_baseline import _split_arrays, log_band_powers

    dm, metric = _corpus_datamodule(corpus, options, split_seed)
    dm.setup("fit")
    data = {s: _split_arrays(dm, s) for s in ("train", "val", "test")}
    out: dict[str, Any] = {"metric": metric}
    featurisers = (("", lambda x: log_band_powers(x, float(dm.sfreq))), ("corr_", channel_correlations))
    for prefix, featurise in featurisers:
        feats = {s: featurise(x) for s, (x, _) in data.items()}
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=0))
        clf.fit(feats["train"], data["train"][1])
        for s, (_, y) in data.items():
            if prefix and s != "test":
                continue
            if metric == "auroc":
                out[prefix + s] = float(roc_auc_score(y, clf.predict_proba(feats[s])[:, 1]))
            else:
                out[prefix + s] = float(f1_score(y, clf.predict(feats[s]), average="macro"))
    return out


def _train_acc(run: Path) -> float | None:
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    acc = [float(r["train/acc"]) for r in rows if r.get("train/acc")]
    return acc[-1] if acc else None


def runs_rows(folders: list[Path], notes: dict[str, str]) -> list[list[str]]:
    """One row per finished run of the diagnosis grids (``notes``: ``FOLDER/CORPUS`` -> what else
    differed)."""
    rows = []
    for folder in folders:
        for res_path in sorted(folder.glob("*/*/seed_*/results.json")):
            run = res_path.parent
            res = json.loads(res_path.read_text())
            corpus, method = run.parent.parent.name, run.parent.name
            metric = res.get("monitor", "val/f1").removeprefix("val/")
            if f"test/{metric}" not in res["metrics"]:  # a run selected on a loss (the pair's denoise loss)
                metric = "f1"
            options = res["config"].get("data", {}).get("init_args", {}).get("synthetic_options", {})
            opt = res["config"].get("model", {}).get("init_args", {})
            train = _train_acc(run)
            where = f"{folder.name}/{corpus}"
            note = f"; {notes[where]}" if where in notes else ""
            rows.append([where, method, str(res["seed"]), json.dumps(options, sort_keys=True) + note,
                         f"{opt.get('optimizer', '-')} {opt.get('lr', '-')}", str(res.get("epochs", "-")),
                         f"{res['metrics'].get(f'test/{metric}', float('nan')):.3f} ({metric})",
                         f"{res.get('best_val', float('nan')):.3f}",
                         "-" if train is None else f"{train:.3f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="finished diagnosis grid folders")
    parser.add_argument("--note", action="append", default=[], metavar="FOLDER/CORPUS=TEXT",
                        help="what else differed in a diagnosis corpus's runs (e.g. the generator kind of "
                             "the time)")
    parser.add_argument("--keep-runs", action="store_true",
                        help="keep the run rows (and command) of the results file there, adding the new ones")
    parser.add_argument("--results", type=Path,
                        default=ROOT / "docs" / "results" / "benchmark_standins_diagnosis.json")
    args = parser.parse_args()
    rows = []
    for corpus, label, options, split_seed in CASES:
        r = band_power_case(corpus, options, split_seed)
        rows.append([corpus, label, json.dumps(options, sort_keys=True) if options else "-", str(split_seed),
                     r["metric"], f"{r['train']:.3f}", f"{r['val']:.3f}", f"{r['test']:.3f}",
                     f"{r['corr_test']:.3f}"])
        print(" | ".join(rows[-1]), flush=True)
    items: list[dict[str, Any]] = [
        {"text": "The log band-power logistic regression on each stand-in's training, validation and test "
                 "subjects, under the grid's DataModule, subject split (ratio 0.5 / 0.25 / 0.25; split seed "
                 "0 is the "
                 "grid's) and normalisation, with one option of the stand-in changed per row; the last "
                 "column is the same regression on the channels' pairwise correlations in each window:"},
        {"table": {"columns": ["corpus", "stand-in", "options over the grid's", "split seed", "metric",
                               "train", "val", "test", "test, correlations"], "rows": rows,
                   "align": ["left", "left", "left", "right", "left", "right", "right", "right", "right"]}},
    ]
    kept: list[list[str]] = []
    command = "python benchmarks/standins_diagnosis.py"
    if args.keep_runs and args.results.exists():
        old = json.loads(args.results.read_text())
        tables = [i["table"] for i in old.get("items", []) if "table" in i]
        kept = tables[1]["rows"] if len(tables) > 1 else []
        command = old.get("command", command) + " (kept) + python benchmarks/standins_diagnosis.py"
    run_rows = kept + runs_rows(args.runs, dict(n.split("=", 1) for n in args.note))
    if run_rows:
        items.append({"text": "Diagnosis runs: cells of the stand-in grid with one corpus or budget option "
                              "changed "
                              "(`biosig benchmark` on a copy of the grid), each run's test score, its best "
                              "validation "
                              "score and its training accuracy at the last epoch:"})
        items.append({"table": {"columns": ["grid/corpus", "method", "seed", "synthetic options", "optimiser",
                                            "epochs", "test",
                                            "best val", "train acc, last epoch"], "rows": run_rows}})
    stamps = [p.stat().st_mtime for f in args.runs for p in f.glob("*/*/seed_*/results.json")] or [
        time.time()
    ]
    doc = {
        "title": "Diagnosing the stand-ins and the trailing methods",
        "page": "benchmark",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs; Python "
                   f"{platform.python_version()}",
        "dates": sorted({time.strftime("%Y-%m-%d", time.gmtime(t)) for t in [*stamps, time.time()]}),
        "command": command + " --runs " + " ".join(str(f) for f in args.runs)
                   + "".join(f" --note '{n}'" for n in args.note),
        "items": items,
    }
    atomic_write_json(args.results, doc)
    print(args.results)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
