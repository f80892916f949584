"""The eeg-gnn-ssl seizure baselines (LSTM, CNN-LSTM, Dense-CNN): sizes from the reference's definitions,
input layouts, detection's single logit."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models import catalog
from biosig_lightning.models.baselines import CNNLSTM, DenseCNN, SeizureLSTM


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def test_lstm_size_and_layout() -> None:
    m = SeizureLSTM(19, 2, 1200, 200.0, step_bins=100)
    # 4 gates x [(1900 + 64) x 64 + 2 x 64] + 4 x [(64 + 64) x 64 + 2 x 64] + (64 + 1)
    assert n_params(m) == 536_641 and m.lstm.input_size == 1900
    x = torch.randn(2, 19, 1200)
    x2 = x.clone()
    x2[:, :, 1100:] += 1.0  # the last step changes the output, an early-step change too
    assert not torch.allclose(m(x), m(x2))
    assert m(x)[:, 0].abs().sum() == 0  # (0, z)


def test_cnn_lstm_size_follows_the_reference_fc() -> None:
    m = CNNLSTM(19, 2, 1200, 200.0, step_bins=100)
    assert m.fc1.in_features == 32 * 48 * 7 and n_params(m) == 5_976_033
    assert CNNLSTM(18, 2, 256, 64.0)(torch.randn(2, 18, 256)).shape == (2, 2)


def test_dense_cnn_shapes_and_unused_blocks_left_out() -> None:
    assert DenseCNN(19, 4, 1200, 200.0).fc1.in_features == 19 * 360  # 10 base channels x 36
    m = DenseCNN(19, 4, 1200, 200.0, base_channels=2)  # small for the forward/backward check
    assert m(torch.randn(2, 19, 1200)).shape == (2, 4)
    assert not hasattr(m, "inc5") and not hasattr(m, "inc7")
    m(torch.randn(2, 19, 1200)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    with pytest.raises(ValueError, match="700"):
        DenseCNN(18, 2, 256, 64.0)


@pytest.mark.parametrize("name", ["SeizureLSTM", "CNNLSTM", "DenseCNN"])
def test_registered_with_tusz_shape(name: str) -> None:
    entry = catalog.get(name)
    assert entry.shapes["tusz"] == (19, 2, 1200, 200.0)
    small = entry.build("tusz", **entry.test_kwargs)
    assert small(torch.randn(2, 19, 1200)).shape == (2, 2)
