"""GIN (Xu et al. 2019, "How powerful are graph neural networks?") over an EEG channel graph.

A Table 1 LOSO baseline of Yao et al. (their [34]); written here. Nodes are channels with log band-power
features (as :class:`~biosig_lightning.models.baselines.dgcnn.DGCNN`); each window's graph joins every
channel to its ``k_neighbours`` channels of largest absolute correlation (symmetrised; a data-dependent
graph, as EEG GNN baselines build it, without parameters). ``n_layers`` GIN layers
``h' = MLP((1 + eps) h + sum_{j in N(i)} h_j)`` (two-layer MLPs with BatchNorm, learnable ``eps``), and the
sum readout of every layer's node states, concatenated, feeds a linear head (Xu et al., eq. 4.2).
Sizes are ours (the paper's 25,794 parameters do not come with a configuration).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from biosig_lightning.features.spectral import band_power
from biosig_lightning.models.base import BiosignalModel, check_positive_ints
from biosig_lightning.models.catalog import register_backbone

__all__ = ["GIN"]

_SHAPES = ["turkish_epilepsy", "tuab"]  # Table 1 LOSO baselines (catalog.CORPORA)


def correlation_graph(x: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, C, C)`` 0/1 adjacency: each channel joined to its ``k`` most |correlated| others, symmetrised."""
    xc = x - x.mean(-1, keepdim=True)
    xc = xc / xc.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    corr = (xc @ xc.transpose(-1, -2)).abs()
    corr = corr - 2 * torch.eye(x.shape[1], device=x.device)  # never pick itself
    idx = corr.topk(min(k, x.shape[1] - 1), dim=-1).indices
    adj = torch.zeros_like(corr).scatter_(-1, idx, 1.0)
    return ((adj + adj.transpose(-1, -2)) > 0).to(x.dtype)


@register_backbone("GIN", shapes=_SHAPES, test_kwargs={"hidden": 32, "dropout": 0.0})
class GIN(BiosignalModel):
    """Graph isomorphism network over a per-window correlation graph (see the module docstring)."""

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, hidden: int = 64, n_layers: int = 2,
                 k_neighbours: int = 4, dropout: float = 0.5) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        check_positive_ints("GIN", hidden=hidden, n_layers=n_layers, k_neighbours=k_neighbours)
        n_bands = band_power(torch.zeros(1, 1, n_times), sfreq).shape[-1]
        self.k = k_neighbours
        self.eps = nn.Parameter(torch.zeros(n_layers))
        widths = [n_bands] + [hidden] * n_layers
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(a, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU()) for a in widths[:-1])
        self.drop = nn.Dropout(dropout)
        self.feature_dim = hidden * n_layers
        self.head = nn.Linear(self.feature_dim, n_outputs)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        adj = correlation_graph(x, self.k)
        h = band_power(x, self.sfreq)
        h = (h - h.mean(dim=(1, 2), keepdim=True)) / h.std(dim=(1, 2), keepdim=True).clamp_min(1e-6)
        readouts = []
        for layer, mlp in enumerate(cast("Sequence[nn.Sequential]", self.mlps)):  # a ModuleList of them
            agg = (1 + self.eps[layer]) * h + adj @ h
            b, c, f = agg.shape
            h = mlp[0](agg)
            h = mlp[1](h.reshape(b * c, -1)).reshape(b, c, -1)
            for module in list(mlp)[2:]:
                h = module(h)
            readouts.append(h.sum(1))
        return self.drop(torch.cat(readouts, dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))
