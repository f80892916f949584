"""A logistic regression on log band powers: what a task asks, next to a deep model's score.

``make demo`` prints it beside BioFormer's test metrics on the same split, so a user sees
whether the task is learnable from band powers alone (the synthetic stand-ins plant their
class signal in band power, so there it should be near perfect) and how far the deep model
is from it.

Features: per window and channel, the log of the mean periodogram power (rFFT, Hann window)
in each band of :data:`EEG_BANDS` clipped to Nyquist, ``log(P + 1e-12)``; standardised on the
training windows; ``sklearn`` ``LogisticRegression`` (lbfgs, C = 1, up to 1000 iterations,
seeded). Scores: accuracy and macro F1, as in the task's test metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

__all__ = ["EEG_BANDS", "band_power_baseline", "log_band_powers"]

#: delta, theta, alpha, beta, gamma (Hz)
EEG_BANDS: tuple[tuple[float, float], ...] = ((0.5, 4.0), (4.0, 8.0), (8.0, 13.0), (13.0, 30.0), (30.0, 45.0))


def log_band_powers(x: np.ndarray, sfreq: float, bands: Sequence[tuple[float, float]] = EEG_BANDS) -> np.ndarray:
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
    """Fit on the training windows, score on the test windows: ``{"acc": ..., "f1": ...}`` (macro F1)."""
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))
    clf.fit(log_band_powers(x_train, sfreq, bands), y_train)
    pred = clf.predict(log_band_powers(x_test, sfreq, bands))
    return {"acc": float(accuracy_score(y_test, pred)), "f1": float(f1_score(y_test, pred, average="macro"))}
