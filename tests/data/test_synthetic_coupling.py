"""The planted directed graph of the synthetic stand-ins (data/synthetic_coupling.py and its hook in
synthetic.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biosig_lightning.data.corpora.chb_mit import SYNTHETIC_DEFAULTS as CHB_DEFAULTS
from biosig_lightning.data.corpora.ptbxl_wfdb import SYNTHETIC_DEFAULTS as PTBXL_DEFAULTS
from biosig_lightning.data.corpora.sleep_edf import SYNTHETIC_DEFAULTS as SLEEP_DEFAULTS
from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.synthetic import SyntheticReader
from biosig_lightning.data.synthetic_coupling import COUPLING_BANDS, plant_coupling, truth_adjacency
from biosig_lightning.features.spectral import ShortTimeBandPower

SPEC = CorpusSpec(name="coupled", ch_names=("A", "B", "C", "D", "E"), sfreq=100.0, n_times=1600,
                  classes=("a", "b"),
                  label_level="window")
BANDS = ("delta", "theta", "alpha", "beta", "gamma")


def test_planted_graph_is_a_seeded_dag_with_one_parent_per_child_and_band() -> None:
    edges = plant_coupling(12, 6, seed=3, nyquist=50.0)
    assert edges == plant_coupling(12, 6, seed=3, nyquist=50.0) != plant_coupling(12, 6, seed=4, nyquist=50.0)
    assert len(edges) == 6 and len({(e.child, e.band) for e in edges}) == 6
    assert len({e.child for e in edges}) == 6  # enough channels: every edge has its own child
    assert {e.band for e in edges} <= {name for name, _, _ in COUPLING_BANDS}
    adjacency = np.zeros((12, 12))
    for e in edges:
        adjacency[e.child, e.parent] = 1.0
        assert 0.02 <= e.lag <= 0.1
    # a DAG: the adjacency is nilpotent
    assert not np.linalg.matrix_power(adjacency, 12).any()
    # edges come in causal order: a parent's own input is listed before its outputs
    for i, e in enumerate(edges):
        assert all(later.child != e.parent for later in edges[i + 1:])
    # two channels (Sleep-EDF): one pair in both bands; three couplings cannot fit
    assert [(e.parent, e.child) for e in plant_coupling(2, 2, seed=0, nyquist=50.0)] in (
        [(1, 0)] * 2,
        [(0, 1)] * 2,
    )
    with pytest.raises(ValueError, match="exceeds"):
        plant_coupling(2, 3, seed=0, nyquist=50.0)
    with pytest.raises(ValueError, match="Nyquist"):
        plant_coupling(4, 1, seed=0, nyquist=8.0)
    assert plant_coupling(4, 0, seed=0) == []


def _trajectories(reader: SyntheticReader) -> torch.Tensor:
    x = torch.tensor(np.concatenate([b.x for b in reader.iter_blocks()]))
    log_power = ShortTimeBandPower(sfreq=SPEC.sfreq, n_times=SPEC.n_times, n_frames=24)(x)  # (n, C, 5, F)
    centred = log_power - log_power.mean(-1, keepdim=True)
    return centred / centred.square().mean(-1, keepdim=True).sqrt()


def test_coupling_shows_in_the_child_band_power_and_only_there() -> None:
    coupled = SyntheticReader(SPEC, n_subjects=3, windows_per_subject=40, coupling_edges=2)
    plain = SyntheticReader(SPEC, n_subjects=3, windows_per_subject=40)
    z, z0 = _trajectories(coupled), _trajectories(plain)
    planted = {(e.parent, e.child, BANDS.index(e.band)) for e in coupled.coupling}
    for parent, child, band in planted:
        # per-window correlation of the parent's and the child's log-power trajectories in the coupled band
        r = (z[:, parent, band] * z[:, child, band]).mean(-1).mean()
        r0 = (z0[:, parent, band] * z0[:, child, band]).mean(-1).mean()
        assert r > 0.5 and abs(r0) < 0.15, (parent, child, band, float(r), float(r0))
    # channels not joined by couplings (directly, through a chain or a shared parent; in any band, since a
    # coupling's 1 Hz ramps reach into the neighbouring band) stay far less related in every band (not
    # independent: each subject's channel mixing, near the identity, spreads a strong child band a little)
    group = list(range(5))
    for p, c, _ in planted:
        old, new = group[c], group[p]
        group = [new if g == old else g for g in group]
    separate = [(a, b) for a in range(5) for b in range(a + 1, 5) if group[a] != group[b]]
    assert separate  # the check below is not empty
    for a, b in separate:
        for band in range(5):
            assert abs(float((z[:, a, band] * z[:, b, band]).mean(-1).mean())) < 0.25, (a, b, band)


def test_the_truth_is_recorded_in_the_config_and_other_stand_ins_keep_their_keys() -> None:
    coupled = SyntheticReader(SPEC, n_subjects=2, windows_per_subject=4, coupling_edges=2)
    plain = SyntheticReader(SPEC, n_subjects=2, windows_per_subject=4)
    assert coupled.config()["coupling"] == [e.to_dict() for e in coupled.coupling]
    assert "coupling" not in plain.config()  # stand-ins without couplings keep their cache keys
    # the planted graph is the stand-in's, not a subject's: more subjects, same edges
    assert SyntheticReader(SPEC, n_subjects=5,
                           windows_per_subject=4, coupling_edges=2).coupling == coupled.coupling
    # SD-Former's three stand-ins plant a graph by default
    assert CHB_DEFAULTS["coupling_edges"] == 11 and PTBXL_DEFAULTS["coupling_edges"] == 6
    assert SLEEP_DEFAULTS["coupling_edges"] == 2


def test_truth_on_channel_and_channel_band_nodes() -> None:
    edges = [{"parent": 2, "child": 0, "band": "alpha"}, {"parent": 0, "child": 1, "band": "theta"}]
    channels = ["A", "B", "C"]
    truth = truth_adjacency(edges, channels, channels)
    assert truth.tolist() == [
        [False, False, True],
        [True, False, False],
        [False, False, False],
    ]  # a_ij: j -> i
    nodes = [f"{c}/{b}" for c in channels for b in BANDS]
    truth = truth_adjacency(edges, channels, nodes)
    assert truth.sum() == 2
    assert (
        truth[nodes.index("A/alpha"), nodes.index("C/alpha")]
        and truth[nodes.index("B/theta"), nodes.index("A/theta")]
    )
    with pytest.raises(ValueError, match="no node"):
        truth_adjacency(edges, channels, ["A/alpha", "B/alpha"])
