"""The denoisers' spatial graph from the corpus's channel names, one denoiser per class."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.features.montage import spatial_graph_mask
from biosig_lightning.models.signed_graph import SignedGraphClassifier
from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask

NAMES = ["Fp1", "Fp2", "C3", "C4", "O1", "O2"]


def small(n_outputs: int) -> SignedGraphClassifier:
    torch.manual_seed(0)
    return SignedGraphClassifier(n_chans=6, n_outputs=n_outputs, n_times=32, sfreq=32.0, n_chunks=2, n_blocks=1,
                                 conv_layers=1, conv_width=2, feature_dim=4, n_metric_candidates=2, metric_rank=2,
                                 krylov_dim=2, filter_method="exact")


def test_montage_graph_replaces_the_full_graph_of_every_denoiser() -> None:
    task = DenoiserPairTask(small(3), n_outputs=3, spatial_graph="montage", restart_period=None, scheduler="none")
    x = torch.randn(4, 6, 32)
    full = task.backbone(x)
    assert task.use_channel_graph(NAMES) == "10-20 distance"
    want = torch.from_numpy(spatial_graph_mask(NAMES, 6)[0])
    assert len(task.backbone.denoisers) == 3  # one per class
    for den in task.backbone.denoisers:
        assert torch.equal(den.spatial_mask, want)
    assert not torch.allclose(task.backbone(x), full)  # the filters now run on the sparser graph
    assert task.use_channel_graph(None) == "ring over channel order"
    with pytest.raises(ValueError, match="'backbone' or 'montage'"):
        DenoiserPairTask(small(2), n_outputs=2, spatial_graph="knn", restart_period=None, scheduler="none")
