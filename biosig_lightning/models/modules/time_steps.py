"""Input layout shared by the seizure models (DCRNN, LSTM, CNN-LSTM): 1-s steps of node features."""

from __future__ import annotations

import torch


def step_size(owner: str, n_times: int, sfreq: float, step_bins: int) -> int:
    """Features per step: ``step_bins`` for step-major features, ``sfreq`` samples for raw signals."""
    if step_bins < 0:
        raise ValueError(f"{owner}: step_bins must be >= 0, got {step_bins}")
    step = step_bins if step_bins > 0 else int(round(sfreq))
    if step_bins == 0 and abs(step - sfreq) > 1e-9:
        raise ValueError(f"{owner}: raw input is cut into 1-s steps, which needs an integer sfreq, got "
                         f"{sfreq}")
    if n_times % step:
        raise ValueError(f"{owner}: n_times={n_times} is not a whole number of steps of {step}")
    return step


def as_steps(x: torch.Tensor, step: int) -> torch.Tensor:
    """``(B, C, T * F)`` -> ``(B, T, C, F)``."""
    b, c, n = x.shape
    return x.reshape(b, c, n // step, step).transpose(1, 2)
