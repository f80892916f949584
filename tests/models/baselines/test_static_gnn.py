"""SD-Former's PatchTST and static-GNN baselines, and the montage graphs (features/montage.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biosig_lightning.features.montage import (
    channel_adjacency,
)
from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines.static_gnn import StaticGNN, normalized_adjacency
from tests.helpers import CHB_MIT, ECG

# --------------------------------------------------------------------------- Static GNN


def tiny_gnn(**overrides) -> StaticGNN:
    kwargs = dict(
        n_chans=23,
        n_outputs=2,
        n_times=64,
        sfreq=256.0,
        ch_names=CHB_MIT,
        width=8,
        encoder_blocks=1,
        dropout=0.0,
    )
    kwargs.update(overrides)
    return StaticGNN(**kwargs)


def test_gcn_normalisation() -> None:
    adjacency = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.5], [0.0, 0.5, 0.0]])
    norm = normalized_adjacency(adjacency)
    degree = torch.tensor([2.0, 2.5, 1.5])
    expected = (adjacency + torch.eye(3)) / torch.sqrt(degree[:, None] * degree[None, :])
    assert torch.allclose(norm, expected)


def test_static_gnn_forward_and_graph_locality() -> None:
    torch.manual_seed(0)
    model = tiny_gnn(n_layers=1)
    model.eval()
    x = torch.randn(3, 23, 64)
    assert model(x).shape == (3, 2)
    with torch.no_grad():
        assert torch.allclose(model(x), model.head(model.forward_features(x)))
    # One GCN layer: a channel outside node i's neighbourhood cannot change node i.
    graph = channel_adjacency(CHB_MIT)
    i = CHB_MIT.index("FP1-F7")
    far = int(np.flatnonzero(graph[i] == 0)[-1])
    near = int(np.flatnonzero(graph[i] > 0)[0])
    for j, should_change in ((far, False), (near, True)):
        y = x.clone()
        y[:, j] = torch.randn(3, 64)
        with torch.no_grad():
            changed = not torch.allclose(model.node_states(x)[:, i], model.node_states(y)[:, i])
        assert changed == should_change


def test_static_gnn_channel_name_errors_and_fallback() -> None:
    with pytest.raises(ValueError, match="ch_names"):
        tiny_gnn(ch_names=None)
    with pytest.raises(ValueError, match="BOGUS"):
        tiny_gnn(n_chans=2, ch_names=["Cz", "BOGUS"])
    with pytest.warns(UserWarning):
        model = tiny_gnn(n_chans=2, ch_names=None, fallback_full=True)
    assert torch.allclose(model.adjacency, torch.full((2, 2), 0.5))
    ecg = tiny_gnn(n_chans=12, ch_names=ECG)
    assert ecg(torch.randn(2, 12, 64)).shape == (2, 2)


def test_static_gnn_size_matches_table_5() -> None:
    model = StaticGNN(n_chans=2, n_outputs=5, n_times=3000, sfreq=100.0, ch_names=["EEG Fpz-Cz", "EEG Pz-Oz"])
    # Table 5 quotes 0.5 M (one decimal); the exact count is pinned in the catalog (tests/models)
    assert round(count_parameters(model) / 1e6, 1) == 0.5

