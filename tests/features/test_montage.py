"""SD-Former's PatchTST and static-GNN baselines, and the montage graphs (features/montage.py)."""

from __future__ import annotations

import numpy as np
import pytest

from biosig_lightning.features.montage import (
    channel_adjacency,
    ecg_lead_adjacency,
    electrode_positions,
    gaussian_distance_adjacency,
)
from tests.helpers import CHB_MIT, ECG

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


