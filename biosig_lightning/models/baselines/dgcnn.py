"""DGCNN (Song et al. 2018, "EEG emotion recognition using dynamical graph convolutional neural networks").

A Table 1 LOSO baseline of Yao et al. (their [33]); written here (TorchEEG is not a dependency). Per-channel
log band powers (delta, theta, alpha, beta, gamma; the paper's differential entropy of a band-limited
Gaussian signal is its log power up to a constant) are the node features; the adjacency ``A`` (channels x
channels) is a learned parameter, made non-negative (ReLU) and symmetric; ``K`` Chebyshev terms of the scaled
normalised Laplacian ``2 L / lambda_max - I`` with ``lambda_max = 2`` (the bound of a normalised Laplacian,
as the DGCNN reference implementations use) propagate the features; then ReLU, a 1x1 (per-node) linear
layer, flattening and a linear head. Sizes (``hidden``, ``K``) are ours: the Yao et al. count (149,466) does
not say which were used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from biosig_lightning.features.spectral import band_power
from biosig_lightning.models.base import BiosignalModel, check_positive_ints
from biosig_lightning.models.catalog import register_backbone

__all__ = ["DGCNN"]

_SHAPES = ["turkish_epilepsy", "tuab"]  # Table 1 LOSO baselines (catalog.CORPORA)


@register_backbone("DGCNN", shapes=_SHAPES, test_kwargs={"hidden": 8})
class DGCNN(BiosignalModel):
    """Dynamical graph CNN on band-power node features (see the module docstring)."""

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, hidden: int = 64, cheb_order: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        check_positive_ints("DGCNN", hidden=hidden, cheb_order=cheb_order)
        n_bands = band_power(torch.zeros(1, 1, n_times), sfreq).shape[-1]
        self.adjacency = nn.Parameter(torch.rand(n_chans, n_chans) * 0.1)
        self.theta = nn.Parameter(torch.randn(cheb_order, n_bands, hidden) / n_bands ** 0.5)
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.node_mix = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(n_chans * hidden, n_outputs)
        self.feature_dim = n_chans * hidden

    def laplacian_scaled(self) -> torch.Tensor:
        a = torch.relu(self.adjacency)
        a = (a + a.T) / 2
        dinv = a.sum(-1).clamp_min(1e-6).rsqrt()
        lap = torch.eye(a.shape[0], device=a.device) - dinv[:, None] * a * dinv[None]
        return lap - torch.eye(a.shape[0], device=a.device)  # 2 L / lambda_max - I with lambda_max = 2

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        h = band_power(x, self.sfreq)  # (B, C, bands)
        h = (h - h.mean(dim=(1, 2), keepdim=True)) / h.std(dim=(1, 2), keepdim=True).clamp_min(1e-6)
        lap = self.laplacian_scaled()
        t_prev, t_cur = h, lap @ h
        out = t_prev @ self.theta[0]
        if self.theta.shape[0] > 1:
            out = out + t_cur @ self.theta[1]
        for k in range(2, self.theta.shape[0]):
            t_prev, t_cur = t_cur, 2 * lap @ t_cur - t_prev
            out = out + t_cur @ self.theta[k]
        out = torch.relu(self.node_mix(torch.relu(out + self.bias)))
        return self.drop(out.flatten(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))
