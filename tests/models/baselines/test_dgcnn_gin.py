"""DGCNN and GIN baselines (Yao et al. Table 1): shapes, gradients, memorisation, the graphs they use."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biosig_lightning.models.baselines.dgcnn import DGCNN
from biosig_lightning.models.baselines.gin import GIN, correlation_graph


@pytest.mark.parametrize("cls", [DGCNN, GIN])
def test_shape_gradients_and_memorisation(cls: type) -> None:
    torch.manual_seed(0)
    model = cls(n_chans=6, n_outputs=2, n_times=400, sfreq=100.0, hidden=8, dropout=0.0)
    x = torch.randn(8, 6, 400)
    y = torch.tensor([0, 1] * 4)
    assert model(x).shape == (8, 2)
    F.cross_entropy(model(x), y).backward()
    assert all(p.grad is not None and bool(p.grad.ne(0).any()) for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(60):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    assert bool((model(x).argmax(1) == y).all())
    torch.testing.assert_close(model.head(model.forward_features(x)), model(x))


def test_correlation_graph_joins_the_most_correlated_channels() -> None:
    base = torch.randn(1, 1, 200)
    x = torch.cat([base, -base + 0.01 * torch.randn(1, 1, 200), torch.randn(1, 2, 200)], dim=1)
    adj = correlation_graph(x, 1)
    assert adj[0, 0, 1] == 1 and adj[0, 1, 0] == 1  # anti-correlated counts (|corr|)
    assert torch.equal(adj, adj.transpose(-1, -2)) and adj.diagonal(dim1=-2, dim2=-1).sum() == 0
