"""A logistic regression on log band powers: what a task asks, next to a deep model's score.

``make demo`` prints it beside BioFormer's test metrics on the same split, so a user sees
whether the task is learnable from band powers alone (the synthetic stand-ins plant their
class signal in band power, so there it should be near perfect) and how far the deep model
is from it.

Features: per window and channel, the log of the mean periodogram power (rFFT, Hann window)
in each band of :data:`EEG_BANDS` clipped to Nyquist, ``log(P + 1e-12)``; standardised on the
training windows; ``sklearn`` ``LogisticRegression`` (lbfgs, C = 1, up to 1000 iterations,
seeded). Scores: accuracy and macro F1, as in the task's test metrics.

``python -m biosig_lightning.analysis.band_power_baseline RUN_DIR`` (or a folder of runs: the
newest) rebuilds the run's
DataModule from its ``results.json`` (same corpus or stand-in, same split, same normalisation),
fits on the training windows, scores the test windows and prints the result next to the run's
own test accuracy and F1 (:func:`run_baseline`); ``make demo`` calls it after the fit.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

__all__ = ["EEG_BANDS", "band_power_baseline", "datamodule_baseline", "log_band_powers", "run_baseline"]

#: delta, theta, alpha, beta, gamma (Hz)
EEG_BANDS: tuple[tuple[float, float], ...] = ((0.5, 4.0), (4.0, 8.0), (8.0, 13.0), (13.0, 30.0), (30.0, 45.0))


def log_band_powers(x: np.ndarray, sfreq: float,
                    bands: Sequence[tuple[float, float]] = EEG_BANDS) -> np.ndarray:
    """``(N, C * n_bands)`` log mean power per channel and band of windows ``x`` ``(N, C, T)``.

    Bands beyond Nyquist or holding no frequency bin are dropped (one clear error if none is left).
    """
    if x.ndim != 3:
        raise ValueError(f"band-power baseline expects windows (N, C, T), got shape {x.shape}")
    n_times = x.shape[-1]
    freqs = np.fft.rfftfreq(n_times, 1.0 / sfreq)
    window = np.hanning(n_times)
    power = np.abs(np.fft.rfft((x - x.mean(-1, keepdims=True)) * window, axis=-1)) ** 2 / (window**2).sum()
    cols = []
    for lo, hi in bands:
        sel = (freqs >= lo) & (freqs < hi)
        if sel.any():
            cols.append(np.log(power[..., sel].mean(-1) + 1e-12))
    if not cols:
        raise ValueError(f"no band of {list(bands)} has a frequency bin at sfreq={sfreq}, n_times={n_times}")
    return np.stack(cols, -1).reshape(len(x), -1)


def band_power_baseline(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, sfreq: float,
    bands: Sequence[tuple[float, float]] = EEG_BANDS, seed: int = 0,
) -> dict[str, float]:
    """Fit on the training windows, score on the test windows: ``{"acc": ..., "f1": ...}`` (macro F1), and
    ``"auroc"`` of the positive class's probability for a two-class task whose test windows hold both."""
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))
    clf.fit(log_band_powers(x_train, sfreq, bands), y_train)
    features = log_band_powers(x_test, sfreq, bands)
    pred = clf.predict(features)
    out = {"acc": float(accuracy_score(y_test, pred)), "f1": float(f1_score(y_test, pred, average="macro"))}
    if len(clf.classes_) == 2 and len(np.unique(y_test)) == 2:
        out["auroc"] = float(roc_auc_score(y_test, clf.predict_proba(features)[:, 1]))
    return out


def _split_arrays(datamodule: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
    """All windows ``(N, C, T)`` and labels of one split, normalised as the model saw them."""
    ds = datamodule.datasets[split]
    batch = ds.__getitems__(np.arange(len(ds)))
    return batch["x"].numpy(), batch["y"].numpy()


def datamodule_baseline(datamodule: Any, split: str = "test", seed: int = 0) -> dict[str, float]:
    """The baseline on a (set-up or not) :class:`~biosig_lightning.data.module.BiosignalDataModule`:
    fit on its ``train`` windows, score its ``split`` windows (the model's split and normalisation)."""
    datamodule.setup("fit")
    x_train, y_train = _split_arrays(datamodule, "train")
    x_eval, y_eval = _split_arrays(datamodule, split)
    return band_power_baseline(x_train, y_train, x_eval, y_eval, float(datamodule.sfreq), seed=seed)


def newest_run(path: str | Path) -> Path:
    """``path`` itself when it holds ``results.json``, else the run below it whose results.json is newest."""
    path = Path(path)
    if (path / "results.json").is_file():
        return path
    found = sorted(path.rglob("results.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"{path}: no results.json in or below it (give a run directory that biosig fit "
                         f"printed)")
    return found[-1].parent


def run_baseline(run_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """Print the baseline beside the test metrics of the run in ``run_dir``; returns the baseline's scores."""
    from biosig_lightning.runs.load import load_run

    loaded = load_run(run_dir)
    scores = datamodule_baseline(loaded.datamodule, "test", seed=seed)
    metrics = loaded.results.get("metrics", {})
    title = f"same test windows: {loaded.results.get('model')} vs log band-power logistic regression"
    print(title)
    print("-" * len(title))
    print(f"  {'':<10} {'model':>8} {'band LR':>8}")
    for key in ("acc", "f1"):
        model = metrics.get(f"test/{key}")
        print(f"  {key:<10} {'' if model is None else f'{model:.4f}':>8} {scores[key]:>8.4f}")
    return scores


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m biosig_lightning.analysis.band_power_baseline RUN_DIR [--seed N]``."""
    parser = argparse.ArgumentParser(prog="python -m biosig_lightning.analysis.band_power_baseline",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("run_dir",
                        help="a run directory holding results.json (what biosig fit printed), or a "
                                        "folder of runs: its newest results.json below it is taken")
    parser.add_argument("--seed", type=int, default=0, help="the logistic regression's random_state")
    args = parser.parse_args(argv)
    from biosig_lightning.runs.errors import quiet_environment

    quiet_environment()  # load_run hands LightningCLI the run's config: the same warnings biosig silences
    run_baseline(newest_run(args.run_dir), seed=args.seed)


if __name__ == "__main__":
    main()
