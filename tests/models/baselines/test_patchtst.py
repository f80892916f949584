"""SD-Former's PatchTST and static-GNN baselines, and the montage graphs (features/montage.py)."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines.patchtst import PatchTST

# --------------------------------------------------------------------------- PatchTST


def test_patchtst_shapes_patching_and_head_split() -> None:
    torch.manual_seed(0)
    model = PatchTST(
        n_chans=3,
        n_outputs=4,
        n_times=100,
        sfreq=100.0,
        patch_len=16,
        stride=8,
        d_model=16,
        n_layers=2,
        n_heads=2,
        d_ff=32,
    )
    assert model.n_patches == (100 - 16) // 8 + 2
    x = torch.randn(5, 3, 100)
    patches = model.patches(x)
    assert patches.shape == (5, 3, model.n_patches, 16)
    # The last patch starts at 8 * 11 = 88: samples 88..99, then the end padding repeats sample 99.
    assert torch.equal(patches[:, :, -1, 12:], patches[:, :, -1, 11:12].expand(-1, -1, 4))
    assert not torch.equal(patches[:, :, -1, 10], patches[:, :, -1, 11])
    assert model(x).shape == (5, 4)
    assert model.feature_dim == 3 * model.n_patches * 16
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), model.head(model.forward_features(x)))
    mean_head = PatchTST(
        n_chans=3,
        n_outputs=4,
        n_times=100,
        sfreq=100.0,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
        head_type="mean",
    )
    assert mean_head.forward_features(x).shape == (5, 16)
    with pytest.raises(ValueError, match="n_chans=3"):
        model(torch.randn(5, 2, 100))


def test_patchtst_channels_are_encoded_independently() -> None:
    torch.manual_seed(0)
    model = PatchTST(
        n_chans=3, n_outputs=2, n_times=64, sfreq=100.0, d_model=16, n_layers=2, n_heads=2, d_ff=32
    )
    model.eval()  # BatchNorm statistics would otherwise couple the batch
    x = torch.randn(2, 3, 64)
    y = x.clone()
    y[:, 2] = torch.randn(2, 64) * 5
    with torch.no_grad():
        a, b = model.encode(x), model.encode(y)
    assert torch.allclose(a[:, :2], b[:, :2], atol=1e-6)
    assert not torch.allclose(a[:, 2], b[:, 2])


def test_patchtst_size_matches_table_5() -> None:
    model = PatchTST(n_chans=2, n_outputs=5, n_times=3000, sfreq=100.0)
    # Table 5 quotes 0.9 M (one decimal); the exact count is pinned in the catalog (tests/models)
    assert round(count_parameters(model) / 1e6, 1) == 0.9


