"""How far the pair's denoiser family could get on the stand-ins (``benchmark_standins_pair_oracle.json``).

The signed-graph pair denoises with an ideal low-pass filter on a graph over its nodes (Yao et al., eq. 12:
the filter keeps the graph frequencies below the cutoff, i.e. it projects each node signal onto the span of
the Laplacian eigenvectors it keeps) and classifies a window by which class's denoiser leaves the smaller
error (eq. 22). Whatever graph it learns, such a filter is an orthogonal projection, and for a window ``x``
plus white noise of variance ``sigma_n^2`` the projection of rank ``k`` with the smallest expected error
projects onto the top ``k`` eigenvectors of the signals' covariance (the error is the signal energy outside
the subspace plus ``k sigma_n^2`` per sample). This probe computes that bound from each stand-in's own
training windows, under the stand-in grid's DataModule, split and normalisation:

* *denoising*: the MSE of returning the noisy window (``sigma_n^2``), of the best projection over the
  channels and over the product graph's ``C x H`` nodes (the grid's chunks), and of the linear minimum-MSE
  (Wiener) filter over the channels, which shrinks each direction instead of keeping or dropping it;
* *eq. 22 with the best denoisers of the family on a fixed graph*: one projection per class (its covariance
  and rank from that class's training windows, the rank the one with the smallest own-class error), each
  class's own and other-class error, and the test subjects classified by the smaller error of the clean
  window, beside the log band-power regression on the same split (the floor). The pair's graphs are
  learned per window (from the window's own node features), so they are not bound by one fixed graph per
  class; this is the reference for a fixed one.

No training and no gradients: covariances and eigendecompositions of the training windows::

    python benchmarks/standins_pair_oracle.py [--corpora apava chbmit sleepedf]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.atomic_io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
SIGMA = 0.5  # the pair's noise_std (SignedGraphClassifier's default, the grid's)


def node_rows(x: np.ndarray, chunks: int) -> np.ndarray:
    """Windows ``(N, C, T)`` -> one row per window and within-chunk sample: the ``C x H`` node values the
    product graph's filter mixes (the same mixing for each of the ``T / H`` positions)."""
    n, c, t = x.shape
    d = t // chunks
    return x[:, :, :chunks * d].reshape(n, c, chunks, d).transpose(0, 3, 2, 1).reshape(n * d, chunks * c)


def best_projection(cov: np.ndarray, sigma2: float) -> tuple[np.ndarray, float]:
    """The rank-``k`` projection onto ``cov``'s top eigenvectors with the smallest expected denoising error
    per value (``sum of the dropped eigenvalues + k sigma2``, over the dimension), and that error."""
    ev, vec = np.linalg.eigh(cov)
    ev, vec = ev[::-1], vec[:, ::-1]
    dim = len(ev)
    errors = [(ev[k:].sum() + k * sigma2) / dim for k in range(dim + 1)]
    k = int(np.argmin(errors))
    return vec[:, :k] @ vec[:, :k].T, float(errors[k])


def _mse(rows: np.ndarray, noisy: np.ndarray, op: np.ndarray) -> float:
    return float(np.mean((noisy @ op.T - rows) ** 2))


def corpus_case(corpus: str, max_windows: int = 4000) -> dict[str, Any]:
    """The bounds for one stand-in (module docstring)."""
    from sklearn.metrics import f1_score, roc_auc_score
    from standins_diagnosis import GRID, _corpus_datamodule

    from biosig_lightning.analysis.band_power_baseline import _split_arrays, band_power_baseline
    from biosig_lightning.benchmarking.grid import load_grid

    grid = load_grid(GRID)
    cell, method = grid.corpora[corpus], grid.methods["signed_graph"]
    chunks = int(method.corpus_overrides[corpus]["model.init_args.backbone.init_args.n_chunks"])
    dm, metric = _corpus_datamodule(corpus, {}, int(cell.split.get("seed", 0)))
    dm.setup("fit")
    (x, y), (xt, yt) = (_split_arrays(dm, s) for s in ("train", "test"))
    floor = float(band_power_baseline(x, y, xt, yt, float(dm.sfreq), seed=0)[metric])
    rng = np.random.default_rng(0)
    pick = rng.permutation(len(y))[:max_windows]
    x, y = x[pick].astype(np.float64), y[pick]
    noisy = x + SIGMA * rng.standard_normal(x.shape)
    sigma2 = SIGMA ** 2
    chans = node_rows(x, 1)
    chans_noisy = node_rows(noisy, 1)
    cov = chans.T @ chans / len(chans)
    wiener = cov @ np.linalg.inv(cov + sigma2 * np.eye(len(cov)))
    proj, _ = best_projection(cov, sigma2)
    nodes, nodes_noisy = node_rows(x, chunks), node_rows(noisy, chunks)
    node_proj, _ = best_projection(nodes.T @ nodes / len(nodes), sigma2)
    out: dict[str, Any] = {
        "corpus": corpus, "metric": metric, "chunks": chunks, "band_power": floor, "sigma2": sigma2,
        "wiener": _mse(chans, chans_noisy, wiener), "projection": _mse(chans, chans_noisy, proj),
        "node_projection": _mse(nodes, nodes_noisy, node_proj),
    }
    classes = np.unique(y)
    per_class = []
    for c in classes:
        rows = node_rows(x[y == c], chunks)
        per_class.append(best_projection(rows.T @ rows / len(rows), sigma2)[0])
    own, other = [], []
    for c, op in zip(classes, per_class, strict=True):
        own.append(_mse(node_rows(x[y == c], chunks), node_rows(noisy[y == c], chunks), op))
        other.append(_mse(node_rows(x[y != c], chunks), node_rows(noisy[y != c], chunks), op))
    # eq. 22 on the clean test windows: each class's error, the smaller one wins
    xt = xt.astype(np.float64)
    n_t, d = len(yt), xt.shape[2] // chunks
    errors = np.stack([((node_rows(xt, chunks) @ op.T - node_rows(xt, chunks)) ** 2)
                       .reshape(n_t, d, -1).sum((1, 2)) for op in per_class], 1)
    pred = classes[errors.argmin(1)]
    score = (roc_auc_score(yt, errors[:, 0] - errors[:, 1]) if metric == "auroc" and len(classes) == 2
             else f1_score(yt, pred, average="macro"))
    # where every class's best projection keeps everything (no rank below the full one denoises), every
    # clean window has error 0 under every denoiser: eq. 22 has nothing to compare
    ties = all(np.allclose(op, np.eye(len(op))) for op in per_class)
    out.update({"own": own, "other": other, "eq22": None if ties else float(score)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["apava", "chbmit", "sleepedf"])
    parser.add_argument("--results", type=Path,
                        default=ROOT / "docs" / "results" / "benchmark_standins_pair_oracle.json")
    args = parser.parse_args()
    from standins_diagnosis import probe_doc

    started = time.time()
    cases = [corpus_case(c) for c in args.corpora]
    rows = [[c["corpus"], str(c["chunks"]), f"{c['sigma2']:.3f}", f"{c['wiener']:.3f}",
             f"{c['projection']:.3f}", f"{c['node_projection']:.3f}",
             " / ".join(f"{v:.3f}" for v in c["own"]), " / ".join(f"{v:.3f}" for v in c["other"]),
             c["metric"],
             "every window ties" if c["eq22"] is None else f"{c['eq22']:.3f}", f"{c['band_power']:.3f}"]
            for c in cases]
    for r in rows:
        print(" | ".join(r), flush=True)
    items = [
        {"text": "Per stand-in, from its training windows under the grid's split and normalisation (no "
                 "training): the denoising MSE of returning the noisy window (sigma_n^2), of the linear "
                 "minimum-MSE (Wiener) filter over the channels, and of the best ideal low-pass filter any "
                 "graph could give (the best projection) over the channels and over the grid's C x H nodes; "
                 "then one best projection per class (class order 0 / 1 / ...), its MSE on its own class "
                 "and on the others, and eq. 22 with these denoisers on the test subjects beside the log "
                 "band-power regression:"},
        {"table": {"columns": ["corpus", "chunks H", "sigma_n^2", "Wiener, channels", "best projection, "
                               "channels", "best projection, nodes", "per-class projection, own class",
                               "per-class projection, other classes", "metric", "eq. 22 with them",
                               "band-power regression"], "rows": rows,
                   "align": ["left", "right", "right", "right", "right", "right", "right", "right", "left",
                             "right", "right"]}},
    ]
    atomic_write_json(args.results, probe_doc("What any denoiser of the pair's family could reach on the "
                                              "stand-ins", "standins_pair_oracle.py", started, items))
    print(args.results)


if __name__ == "__main__":
    main()
