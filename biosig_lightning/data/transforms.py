"""Train-only augmentations and normalisation for batches of windows.

Augmentations act on a whole batch tensor ``(B, ..., C, T)`` on whatever device the batch
lives on, so they cost one vectorised op per batch instead of one per window. They draw
from torch's global generator, which ``seed_everything`` fixes: the same seed gives the
same augmented batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Normalization = Literal["window", "channel", "subject", "none"]


@dataclass
class Augment:
    """Strengths of the train-only augmentations (0 switches one off).

    Attributes:
        jitter: std of additive Gaussian noise, relative to each window-channel's std.
        scaling: std of a per-window, per-channel multiplicative factor drawn around 1.
        channel_dropout: probability that a channel of a window is zeroed.
    """

    jitter: float = 0.0
    scaling: float = 0.0
    channel_dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("jitter", "scaling", "channel_dropout"):
            if getattr(self, name) < 0:
                raise ValueError(f"augment.{name} must be >= 0, got {getattr(self, name)}")
        if self.channel_dropout >= 1:
            raise ValueError(f"augment.channel_dropout must be < 1, got {self.channel_dropout}")

    @property
    def active(self) -> bool:
        return bool(self.jitter or self.scaling or self.channel_dropout)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Return an augmented copy of ``x`` (..., C, T)."""
        if not self.active:
            return x
        stat_shape = x.shape[:-1] + (1,)
        if self.jitter:
            std = x.std(dim=-1, keepdim=True).clamp_min(1e-6)
            x = x + torch.randn_like(x) * (self.jitter * std)
        if self.scaling:
            x = x * (1.0 + self.scaling * torch.randn(stat_shape, device=x.device, dtype=x.dtype))
        if self.channel_dropout:
            keep = torch.rand(stat_shape, device=x.device) >= self.channel_dropout
            x = x * keep.to(x.dtype)
        return x


def channel_stats(signals: np.ndarray,
                  indices: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std over the windows ``indices`` of ``signals`` (N, C, T).

    Streams over chunks so a memory-mapped cache never has to fit in RAM; accumulates in
    float64 so long corpora do not lose precision.
    """
    c = signals.shape[1]
    total = np.zeros(c)
    total_sq = np.zeros(c)
    count = 0
    for lo in range(0, len(indices), chunk):
        idx = np.sort(indices[lo:lo + chunk])
        block = np.asarray(signals[idx], dtype=np.float64)
        total += block.sum(axis=(0, 2))
        total_sq += np.square(block).sum(axis=(0, 2))
        count += block.shape[0] * block.shape[2]
    if count == 0:
        raise ValueError("cannot fit channel statistics on zero windows")
    mean = total / count
    var = np.maximum(total_sq / count - mean**2, 0.0)
    return mean.astype(np.float32), np.sqrt(var).astype(np.float32) + np.float32(1e-6)
