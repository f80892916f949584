"""SD-Former's PatchTST and static-GNN baselines, and the montage graphs (features/montage.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biosig_lightning.features.montage import (
    channel_adjacency,
    ecg_lead_adjacency,
    electrode_positions,
    gaussian_distance_adjacency,
)
from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines.patchtst import PatchTST
from biosig_lightning.models.baselines.static_gnn import StaticGNN, normalized_adjacency

CHB_MIT = [
    "FP1-F7",
    "F7-T7",
    "T7-P7",
    "P7-O1",
    "FP1-F3",
    "F3-C3",
    "C3-P3",
    "P3-O1",
    "FP2-F4",
    "F4-C4",
    "C4-P4",
    "P4-O2",
    "FP2-F8",
    "F8-T8",
    "T8-P8-0",
    "P8-O2",
    "FZ-CZ",
    "CZ-PZ",
    "P7-T7",
    "T7-FT9",
    "FT9-FT10",
    "FT10-T8",
    "T8-P8-1",
]
ECG = ["I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6"]


# --------------------------------------------------------------------------- montage


def test_bipolar_channels_sit_at_the_midpoint_of_their_electrodes() -> None:
    fp1, f7, cz = electrode_positions(["Fp1", "F7", "Cz"])
    bipolar = electrode_positions(["FP1-F7", "EEG Fp1-F7", "fp1-f7-0", "Cz-REF", "EEG CZ-LE"])
    assert np.allclose(bipolar[:3], (fp1 + f7) / 2)
    assert np.allclose(bipolar[3:], cz)


def test_unknown_channel_names_are_listed_in_the_error() -> None:
    with pytest.raises(ValueError, match=r"XYZ.*EMG submental"):
        electrode_positions(["Cz", "XYZ", "EMG submental"])
    with pytest.raises(ValueError, match="EOG horizontal"):
        channel_adjacency(["EEG Fpz-Cz", "EOG horizontal"])
    with pytest.raises(ValueError, match="ch_names"):
        channel_adjacency(None, n_chans=3)
    with pytest.raises(ValueError, match="n_chans=3"):
        channel_adjacency(["Cz", "Pz"], n_chans=3)
    with pytest.warns(UserWarning, match="fully connected"):
        full = channel_adjacency(["Cz", "XYZ"], fallback_full=True)
    assert np.array_equal(full, np.ones((2, 2)) - np.eye(2))


def test_chb_mit_distance_graph_is_local_symmetric_and_connected() -> None:
    adjacency = channel_adjacency(CHB_MIT)
    assert adjacency.shape == (23, 23)
    assert np.allclose(adjacency, adjacency.T) and np.all(np.diag(adjacency) == 0)
    assert np.all((adjacency > 0).sum(axis=1) >= 1)
    idx = {name: i for i, name in enumerate(CHB_MIT)}
    assert adjacency[idx["FP1-F7"], idx["F7-T7"]] > 0  # neighbours on the left temporal chain
    assert adjacency[idx["FP1-F7"], idx["P8-O2"]] == 0  # opposite corners of the head
    assert adjacency[idx["T7-P7"], idx["P7-T7"]] == pytest.approx(1.0)  # same pair, reversed polarity
    assert adjacency[idx["T8-P8-0"], idx["T8-P8-1"]] == pytest.approx(1.0)
    # Kernel weights decrease with distance.
    positions = electrode_positions(CHB_MIT)
    dist = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    nz = adjacency > 0
    order = np.argsort(dist[nz])
    assert np.all(np.diff(adjacency[nz][order]) <= 1e-12)


def test_gaussian_threshold_and_nearest_neighbour_rule() -> None:
    points = np.array([[0.0, 0, 0], [1.0, 0, 0], [3.0, 0, 0], [10.0, 0, 0]])
    adjacency = gaussian_distance_adjacency(points, threshold=0.5)
    sigma = np.median([1, 3, 10, 2, 9, 7])
    assert adjacency[0, 1] == pytest.approx(np.exp(-1 / sigma**2))
    assert adjacency[0, 3] == 0
    assert adjacency[3, 2] == pytest.approx(np.exp(-49 / sigma**2))  # below threshold, kept as nearest
    assert np.count_nonzero(gaussian_distance_adjacency(points, threshold=0.5, connect_nearest=False)[3]) == 0
    sleep_edf = channel_adjacency(["EEG Fpz-Cz", "EEG Pz-Oz"])
    assert sleep_edf[0, 1] == pytest.approx(np.exp(-1.0))


def test_ecg_lead_graph() -> None:
    adjacency = ecg_lead_adjacency(ECG)
    i = {lead.upper(): k for k, lead in enumerate(ECG)}
    assert np.array_equal(adjacency, adjacency.T)
    limb = [i[lead] for lead in ("I", "II", "III", "AVR", "AVL", "AVF")]
    assert adjacency[np.ix_(limb, limb)].sum() == 30  # complete graph on the six limb leads
    for k in range(1, 6):
        assert adjacency[i[f"V{k}"], i[f"V{k + 1}"]] == 1
    assert adjacency[i["V1"], i["V3"]] == 0
    assert adjacency[i["I"], i["V6"]] == adjacency[i["AVL"], i["V5"]] == 1
    assert adjacency[i["II"], i["V6"]] == adjacency[i["AVR"], i["V1"]] == 0
    assert int(adjacency.sum()) == 2 * (15 + 5 + 4)
    # Any order or subset, and the dispatcher recognises the lead set.
    sub = ["V6", "ECG I", "v5"]
    assert np.array_equal(channel_adjacency(sub), np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=float))
    with pytest.raises(ValueError, match="duplicated"):
        ecg_lead_adjacency(["I", "i"])


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
