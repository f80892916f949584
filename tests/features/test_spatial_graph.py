"""Spatial graphs of a corpus's own channels: 10-20 distances where the names are placed, a ring otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from biosig_lightning.features.montage import channel_adjacency, spatial_graph_mask


def test_placed_names_give_the_distance_graph_and_others_a_ring() -> None:
    names = ["Fp1", "Fp2", "C3", "C4", "O1", "O2"]
    mask, rule = spatial_graph_mask(names, 6)
    assert rule == "10-20 distance" and np.array_equal(mask, channel_adjacency(names) > 0)
    assert mask[0, 1] and not mask[0, 5]  # Fp1-Fp2 neighbours, Fp1-O2 across the head
    ring, rule = spatial_graph_mask(["a", "b", "c", "d"], 4)
    assert rule == "ring over channel order"
    assert ring.astype(int).tolist() == [[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
    assert spatial_graph_mask(None, 2)[0].astype(int).tolist() == [[0, 1], [1, 0]]
    assert not spatial_graph_mask(None, 1)[0].any()
    bipolar, rule = spatial_graph_mask(["EEG Fpz-Cz", "EEG Pz-Oz"], 2)
    assert rule == "10-20 distance" and bipolar.astype(int).tolist() == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match="3 channel names given for n_chans=4"):
        spatial_graph_mask(["Fp1", "Fp2", "C3"], 4)
