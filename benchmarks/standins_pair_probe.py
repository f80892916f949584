"""What the signed-graph pair's errors carry on the stand-ins (``benchmark_standins_pair_probe.json``).

The pair classifies a window by which class's denoiser reconstructs it with the smaller error (Yao et al.,
eq. 22). This probe trains the stand-in grid's pair cell (experiments/benchmarks/standins.yaml: its
DataModule, subject split, model size, the task's eq. 23 objective, AdamW at the grid's learning rate,
gradient clipping at the trainer's 4, polarities re-estimated from 32 training windows per class every
epoch) in a plain loop, and reads the held-out test subjects four ways at the grid's epoch budget and at
three times it:

* eq. 22 (the product's prediction);
* a logistic regression on the two log errors, fitted on the training windows (how much of the class the
  errors carry when their scales are calibrated);
* the same on each denoiser's per-channel log residual energies;
* the log band-power regression on the same split (the floor every method should reach).

Beside them: each denoiser's own-class denoising MSE against ``sigma_n^2`` (what returning the noisy window
scores) and the cutoffs. One variant moves the cutoffs thirty times faster (their own learning rate),
since Adam moves a scalar by at most about its learning rate per step, and a third halves eq. 23's margin
``rho``; the grid's cell runs both (``margin: 0.5``, ``cutoff_lr``)::

    python benchmarks/standins_pair_probe.py [--corpora apava chbmit] [--seeds 1 2 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.atomic_io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
#: name -> (the cutoffs' learning rate over the grid's, eq. 23's margin rho)
VARIANTS = {"rho 1, cutoffs at lr (the paper's)": (1.0, 1.0), "rho 1, cutoffs 30x lr": (30.0, 1.0),
            "rho 0.5, cutoffs at lr": (1.0, 0.5), "rho 0.5, cutoffs 30x lr (the grid's)": (30.0, 0.5)}
POLARITY_WINDOWS = 32


def _score(metric: str, y: np.ndarray, score: np.ndarray, pred: np.ndarray) -> float:
    from sklearn.metrics import f1_score, roc_auc_score

    return float(roc_auc_score(y, score) if metric == "auroc" else f1_score(y, pred, average="macro"))


def _readouts(model: Any, data: dict[str, tuple[Any, np.ndarray]], metric: str) -> dict[str, float]:
    """Eq. 22 and the two regressions on the errors, on the test windows."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model.eval()
    feats: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with torch.no_grad():
        for split, (x, _) in data.items():
            errs, chans = [], []
            for i in range(0, len(x), 64):
                xb = x[i:i + 64]
                res = [xb - den(xb) for den in model.denoisers]
                errs.append(torch.stack([r.square().sum((1, 2)) for r in res], 1))
                chans.append(torch.cat([r.square().mean(2) for r in res], 1))
            feats[split] = (torch.cat(errs).log().numpy(), torch.cat(chans).log().numpy())
    y_train, y_test = data["train"][1], data["test"][1]
    err, _ = feats["test"]
    out = {"eq22": _score(metric, y_test, err[:, 0] - err[:, 1], err.argmin(1))}
    for key, k in (("errors_lr", 0), ("residuals_lr", 1)):
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=0))
        clf.fit(feats["train"][k], y_train)
        test = feats["test"][k]
        out[key] = _score(metric, y_test, clf.predict_proba(test)[:, 1], clf.predict(test))
    return out


def probe(corpus: str, seed: int, variant: str) -> list[dict[str, Any]]:
    """Train one pair; its readouts at the grid's epoch budget and at three times it."""
    import torch
    from standins_diagnosis import GRID, _corpus_datamodule

    from biosig_lightning.analysis.band_power_baseline import _split_arrays, band_power_baseline
    from biosig_lightning.benchmarking.grid import load_grid
    from biosig_lightning.models.signed_graph import SignedGraphClassifier
    from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    grid = load_grid(GRID)
    cell, method = grid.corpora[corpus], grid.methods["signed_graph"]
    dm, metric = _corpus_datamodule(corpus, {}, int(cell.split.get("seed", 0)))
    dm.setup("fit")
    arrays = {s: _split_arrays(dm, s) for s in ("train", "test")}
    data = {s: (torch.from_numpy(x), y) for s, (x, y) in arrays.items()}
    floor = band_power_baseline(*arrays["train"], *arrays["test"], float(dm.sfreq), seed=0)[metric]
    x, y = data["train"][0], torch.from_numpy(data["train"][1]).long()
    n_cls = int(y.max()) + 1
    kwargs = dict(method.backbone["init_args"])
    kwargs["n_chunks"] = method.corpus_overrides[corpus]["model.init_args.backbone.init_args.n_chunks"]
    model = SignedGraphClassifier(n_chans=x.shape[1], n_outputs=n_cls, n_times=x.shape[2],
                                  sfreq=float(dm.sfreq), **kwargs)
    cutoff_scale, margin = VARIANTS[variant]
    task = DenoiserPairTask(model, n_outputs=n_cls, spatial_graph="montage", optimizer="adamw",
                            scheduler="none", margin=margin)
    task.use_channel_graph(dm.ch_names)
    lr = float(cell.overrides["model.init_args.lr"])
    batch = int(cell.overrides["data.init_args.batch_size"])
    cutoffs = [p for n, p in model.named_parameters() if n.endswith("cutoffs")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("cutoffs")]
    opt = torch.optim.AdamW([{"params": cutoffs, "lr": lr * cutoff_scale}, {"params": rest, "lr": lr}],
                            weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    per_epoch = -(-len(y) // batch)
    epochs = int(cell.overrides["trainer.max_epochs"])
    rows, sigma = [], float(model.noise_std)
    for epoch in range(3 * epochs):
        order = torch.randperm(len(y), generator=gen)
        pick = torch.cat([order[y[order] == c][:POLARITY_WINDOWS] for c in range(n_cls)])
        model.fit_polarity(x[pick], y[pick])
        model.train()
        for step in range(per_epoch):
            idx = order[step * batch:(step + 1) * batch]
            loss, _, terms = task.denoising_loss(x[idx], y[idx], torch.randn(x[idx].shape, generator=gen))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 4.0)
            opt.step()
        if epoch + 1 in (epochs, 3 * epochs):
            own_mse = []
            with torch.no_grad():
                model.eval()
                xs = x[:512]
                noisy = xs + sigma * torch.randn(xs.shape, generator=gen)
                for c, den in enumerate(model.denoisers):
                    own = y[:512] == c
                    own_mse.append(float((den(noisy[own]) - xs[own]).square().mean()))
            rows.append({"corpus": corpus, "seed": seed, "variant": variant, "epochs": epoch + 1,
                         "steps": (epoch + 1) * per_epoch, "metric": metric, "band_power": float(floor),
                         **_readouts(model, data, metric), "own_mse": own_mse, "sigma2": sigma ** 2,
                         "cutoffs": [round(float(c), 3) for den in model.denoisers for c in den.cutoffs]})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["apava", "chbmit"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--results", type=Path,
                        default=ROOT / "docs" / "results" / "benchmark_standins_pair_probe.json")
    args = parser.parse_args()
    jobs = [(c, s, v) for c in args.corpora for v in args.variants for s in args.seeds]
    started = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [r for rs in pool.map(probe, *zip(*jobs, strict=True)) for r in rs]
    table = [[r["corpus"], r["variant"], str(r["seed"]), f"{r['epochs']} ({r['steps']})", r["metric"],
              f"{r['band_power']:.3f}", f"{r['eq22']:.3f}", f"{r['errors_lr']:.3f}",
              f"{r['residuals_lr']:.3f}",
              " / ".join(f"{m:.2f}" for m in r["own_mse"]), f"{r['sigma2']:.2f}",
              " ".join(f"{c:.2f}" for c in r["cutoffs"])] for r in rows]
    items = [
            {"text": "The stand-in grid's pair cell trained in a plain loop with the task's objective "
                     "(the module docstring of `benchmarks/standins_pair_probe.py` lists what it "
                     "shares with the grid), read on the held-out test subjects at the grid's epoch "
                     "budget and at three times it. *eq. 22*: the pair's own prediction; *errors, "
                     "regression*: a logistic regression on the two log reconstruction errors fitted "
                     "on the training windows; *residuals, regression*: the same on each denoiser's "
                     "per-channel residual energies; *own-class MSE*: each denoiser's MSE on noisy "
                     "windows of its own class against the clean ones, beside sigma_n^2 (what "
                     "returning the noisy window scores); *cutoffs*: per denoiser and block."},
            {"table": {"columns": ["corpus", "variant", "seed", "epochs (steps)", "metric",
                                   "band-power regression", "eq. 22", "errors, regression",
                                   "residuals, regression", "own-class MSE (per denoiser)", "sigma_n^2",
                                   "cutoffs"],
                       "rows": table}},
    ]
    from standins_diagnosis import probe_doc

    doc = probe_doc("The signed-graph pair on the stand-ins: what its reconstruction errors carry",
                    "standins_pair_probe.py", started, items, rows=rows)
    atomic_write_json(args.results, doc)
    print(args.results)


if __name__ == "__main__":
    main()
