"""What SPDTransNet's tokens carry on the stand-ins (``docs/results/benchmark_standins_spd_probe.json``).

Under the stand-in grid's ``spdtransnet`` cells (experiments/benchmarks/standins.yaml: the cell's
``biosig fit`` arguments parsed by the CLI, so its DataModule, context, whitening, subwindows, synthetic
options and subject split are the grid's):

* a standardised logistic regression on the tokens exactly as the model is fed them (every token of the
  ``L`` context windows; the training set with the DataModule's class rebalancing), fitted on the training
  subjects and scored on the test subjects with the corpus's first grid metric, on four views of each
  token: all of it, its diagonal entries, its off-diagonal entries, and the off-diagonal entries between
  two electrodes; beside it, the log band-power regression on the same corpus split
  (:mod:`biosig_lightning.analysis.band_power_baseline`, the raw windows as the other methods see them);
* on APAVA's stand-in, the grid's cell trained by ``biosig fit`` (seeds 1 2 3) on the full tokens and on
  ``data.init_args.tokens=diagonal`` (the same tokens with every off-diagonal entry at 0), test F1.

What a token is (:mod:`biosig_lightning.features.spd`, Seraphim et al. Sec. 3.3): for each window, frequency
channel and subwindow, the ``n x n`` electrode covariance ``C`` is augmented to ``A = [[C + a a^T, a],
[a^T, 1]]`` (``a`` = alpha times each electrode's mean power), whitened by a reference ``G`` and scaled,
``X = log(beta G^{-1/2} A G^{-1/2})``, and the token is ``X``'s upper triangle, row-major, off-diagonal
entries times sqrt(2): ``(n+1)(n+2)/2`` numbers. Its diagonal entries (``X_ii``,
:func:`~biosig_lightning.data.spd_windows.diagonal_entries`) are, for ``i < n``, electrode ``i``'s log
power in that band relative to the reference (exactly so where ``G`` and ``A`` are diagonal; the
whitening mixes electrodes by as much as ``G`` is not), and ``X_nn`` the augmentation's corner. Its
off-diagonal entries are the between-electrode entries ``X_ij`` (``i < j < n``: the spatial
covariance structure) and the augmentation column ``X_in`` (which carries the powers ``a`` again).
``tokens=diagonal`` sets every off-diagonal entry to 0, the value the log of a diagonal matrix has
there, so the model reads band powers only::

    python benchmarks/standins_spd_probe.py [--corpora apava chbmit sleepedf] [--seeds 1 2 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.atomic_io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
METHOD = "spdtransnet"
#: token view -> which entries of the token it keeps (given the diagonal mask and the token's matrix size)
VIEWS = ("full", "diagonal", "off-diagonal", "between electrodes")


def view_masks(width: int) -> dict[str, np.ndarray]:
    """Each view's entries of a token of ``width = d(m)`` numbers (module docstring)."""
    import torch

    from biosig_lightning.data.spd_windows import diagonal_entries

    diag = diagonal_entries(width)
    m = int(diag.sum())
    r, c = torch.triu_indices(m, m).numpy()
    return {"full": np.ones(width, bool), "diagonal": diag, "off-diagonal": ~diag,
            "between electrodes": (r != c) & (c < m - 1)}


def cell_datamodule(corpus: str, extra: list[str] | None = None) -> tuple[Any, str]:
    """The grid cell's DataModule (set up) and the corpus's first grid metric, from the cell's own
    ``biosig fit`` arguments."""
    from standins_diagnosis import GRID

    from biosig_lightning.benchmarking.grid import Cell, load_grid
    from biosig_lightning.runs.biosig_cli import BiosigCLI

    grid = load_grid(GRID)
    seed = grid.seeds[0]  # the DataModule's class rebalancing draws with the cell's seed
    args = [*grid.base_args(Cell(corpus, METHOD, seed)), "--seed_everything", str(seed), *(extra or [])]
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = BiosigCLI(args=args, run=False, save_config_callback=None)
        cli.datamodule.setup("fit")
    return cli.datamodule, grid.corpora[corpus].metrics[0]


def _score(metric: str, clf: Any, x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import f1_score, roc_auc_score

    if metric == "auroc":
        return float(roc_auc_score(y, clf.predict_proba(x)[:, 1]))
    return float(f1_score(y, clf.predict(x), average="macro"))


def token_regressions(corpus: str) -> dict[str, Any]:
    """The regression on each token view and the band-power regression, on the grid cell's split."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from standins_diagnosis import _corpus_datamodule

    from biosig_lightning.analysis.band_power_baseline import _split_arrays, band_power_baseline

    dm, metric = cell_datamodule(corpus)
    data = {s: _split_arrays(dm, s) for s in ("train", "test")}
    raw, _ = _corpus_datamodule(corpus, {}, int(dm.split_config.seed))
    raw.setup("fit")
    if any(sorted(raw.subjects[s]) != sorted(dm.subjects[s]) for s in ("train", "val", "test")):
        raise RuntimeError(f"{corpus}: the SPD cell's subjects {dm.subjects} are not the corpus's "
                           f"{raw.subjects}")
    band = band_power_baseline(*_split_arrays(raw, "train"), *_split_arrays(raw, "test"), float(raw.sfreq),
                               seed=0)[metric]
    out: dict[str, Any] = {"corpus": corpus, "metric": metric, "band_power": band,
                           "test_subjects": sorted(int(s) for s in dm.subjects["test"]),
                           "windows": {s: int(len(y)) for s, (_, y) in data.items()},
                           "tokens": list(data["train"][0].shape[1:])}
    for view, keep in view_masks(data["train"][0].shape[-1]).items():
        x = {s: xs[..., keep].reshape(len(xs), -1) for s, (xs, _) in data.items()}
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=0))
        clf.fit(x["train"], data["train"][1])
        out[view] = {"features": int(x["train"].shape[1]),
                     "train": _score(metric, clf, x["train"], data["train"][1]),
                     "test": _score(metric, clf, x["test"], data["test"][1])}
    print(json.dumps(out), flush=True)
    return out


def fit_cell(seed: int, tokens: str, out: Path) -> dict[str, Any]:
    """APAVA's grid cell trained by ``biosig fit`` on ``tokens``; its training, validation and test
    scores."""
    from standins_diagnosis import GRID, _train_acc

    from biosig_lightning.benchmarking.grid import Cell, load_grid
    from biosig_lightning.benchmarking.launch import launch_fit

    grid = load_grid(GRID)
    cell = Cell("apava", METHOD, seed)
    run = out / tokens
    args = [*grid.cell_args(cell, run), f"--data.init_args.tokens={tokens}"]
    rc = launch_fit(args, run / "fit.log", threads=1)
    res_path = cell.run_dir(run) / "results.json"
    if rc or not res_path.exists():
        raise RuntimeError(f"biosig fit of apava/{METHOD} seed {seed} tokens={tokens} failed (exit {rc}); "
                           f"see {run / 'fit.log'}")
    res = json.loads(res_path.read_text())
    pred = np.load(res_path.parent / "test_predictions.npz")
    right = pred["probs"].argmax(1) == pred["y"]
    row = {"tokens": tokens, "seed": seed, "epochs": res.get("epochs"),
           "train_acc": _train_acc(res_path.parent), "best_val": res.get("best_val"),
           **{k: float(res["metrics"][f"test/{k}"]) for k in ("f1", "acc", "auroc") if f"test/{k}" in
              res["metrics"]},
           "per_subject_acc": {int(s): float(right[pred["subject"] == s].mean())
                               for s in np.unique(pred["subject"])}}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["apava", "chbmit", "sleepedf"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="APAVA fits' seeds")
    parser.add_argument("--workers", type=int, default=2, help="biosig fit processes at once")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "standins_spd_probe",
                        help="where the fits' run directories go")
    parser.add_argument("--results", type=Path,
                        default=ROOT / "docs" / "results" / "benchmark_standins_spd_probe.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    started = time.time()
    regressions = [token_regressions(c) for c in args.corpora]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jobs = [(s, t) for t in ("full", "diagonal") for s in args.seeds]
    with ThreadPoolExecutor(args.workers) as pool:
        fits = list(pool.map(lambda j: fit_cell(j[0], j[1], args.out / stamp), jobs))
    reg_rows = [[r["corpus"], r["metric"], " ".join(map(str, r["test_subjects"])), f"{r['band_power']:.3f}",
                 *(f"{r[v]['test']:.3f} ({r[v]['train']:.2f})" for v in VIEWS)] for r in regressions]
    fit_rows = [[f["tokens"], str(f["seed"]), str(f["epochs"]),
                 *(f"{f[k]:.3f}" for k in ("train_acc", "best_val", "f1", "acc", "auroc")),
                 " / ".join(f"{s}: {a:.2f}" for s, a in f["per_subject_acc"].items())]
                for f in fits]
    items = [
            {"text": "A standardised logistic regression on the SPD tokens of the stand-in grid's "
                     "`spdtransnet` cells, exactly as the model is fed them (the cell's DataModule, "
                     "context and subject split; whitened per recording on CHB-MIT's and Sleep-EDF's "
                     "stand-ins, from the training recordings on APAVA's, as in the grid), fitted on the "
                     "training subjects and scored on the test subjects with the corpus's first grid "
                     "metric (training-subject score in brackets), on four views of each token: *full*; "
                     "*diagonal*, each log-whitened matrix's diagonal (the electrodes' band powers "
                     "relative to the whitening reference, and the augmentation's corner); *off-diagonal*,"
                     " the rest; *between electrodes*, the off-diagonal entries without the augmentation "
                     "column (which carries the powers again). Beside them the log band-power regression "
                     "on the raw windows of the same split (the module docstring of "
                     "`benchmarks/standins_spd_probe.py` states the token layout):"},
            {"table": {"columns": ["corpus", "metric", "test subjects", "band-power regression",
                                   *(f"tokens, {v}" for v in VIEWS)],
                       "rows": reg_rows,
                       "align": ["left", "left", "left", "right", "right", "right", "right", "right"]}},
            {"text": "APAVA's `spdtransnet` cell of the grid trained with `biosig fit` (its model, "
                     "optimiser, learning rate, epochs and batch), once on the full tokens and once with "
                     "`data.init_args.tokens=diagonal` (every token's off-diagonal entries at 0, the log "
                     "of a diagonal matrix: the model reads band powers only); the training accuracy "
                     "at the last epoch, the best validation F1, the test F1, accuracy and AUROC of the "
                     "best-validation checkpoint, and the share of each test subject's "
                     "windows it classifies right (subject: share; every APAVA subject is one class):"},
            {"table": {"columns": ["tokens", "seed", "epochs", "train acc, last epoch", "best val F1",
                                   "test F1", "test acc", "test AUROC", "windows right per test subject"],
                       "rows": fit_rows,
                       "align": ["left", "right", "right", "right", "right", "right", "right", "right",
                                 "left"]}},
    ]
    from standins_diagnosis import probe_doc

    doc = probe_doc("SPDTransNet on the stand-ins: what its tokens carry", "standins_spd_probe.py", started,
                    items, regressions=regressions, fits=fits)
    atomic_write_json(args.results, doc)
    print(args.results)


if __name__ == "__main__":
    main()
