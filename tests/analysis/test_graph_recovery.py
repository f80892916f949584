"""Planted-graph recovery (analysis/graphs.edge_recovery): hand-made answers, and SD-Former's graph objective
recovering the planted couplings of a tiny stand-in (data/synthetic_coupling.py) far above a random graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biosig_lightning.analysis.graphs import edge_recovery, graph_node_names
from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.synthetic import SyntheticReader
from biosig_lightning.data.synthetic_coupling import truth_adjacency
from biosig_lightning.models.sdformer import SDFormer


def test_edge_recovery_on_a_hand_made_graph() -> None:
    truth = np.zeros((4, 4), dtype=bool)
    truth[1, 0] = truth[2, 1] = True  # 0 -> 1 -> 2
    frequency = np.zeros((4, 4))
    frequency[1, 0] = 0.9  # planted, found
    frequency[1, 2] = 0.8  # planted pair 1 -> 2, learned the wrong way round
    frequency[3, 0] = 0.6  # not planted
    probability = frequency + 0.01 * np.arange(16).reshape(4, 4)  # distinct scores, same order on the edges
    probability[2, 1] = 0.7  # the reversed planted edge ranks third
    rec = edge_recovery(frequency, probability, truth, seed=3)
    directed, skeleton = rec["directed"], rec["skeleton"]
    assert (directed["pairs"], directed["planted"], directed["edges"]) == (12, 2, 3)
    assert directed["learned"]["precision"] == pytest.approx(1 / 3)
    assert directed["learned"]["recall"] == pytest.approx(1 / 2)
    assert directed["learned"]["top_k_precision"] == pytest.approx(1 / 2)  # top 2: (1,0) and (1,2)
    # AUROC by ranks: (1,0) (0.94) beats all 10 other pairs, (2,1) (0.70) all but (1,2) (0.86) and (3,0)
    # (0.72)
    assert directed["learned"]["auroc"] == pytest.approx((10 + 8) / 20)
    assert directed["random_expected"] == {"precision": 2 / 12, "recall": 3 / 12, "top_k_precision": 2 / 12,
                                           "auroc": 0.5}
    # the skeleton counts the reversed edge: pairs {0,1}, {1,2} planted; learned {0,1}, {1,2}, {0,3}
    assert (skeleton["pairs"], skeleton["planted"], skeleton["edges"]) == (6, 2, 3)
    assert skeleton["learned"]["precision"] == pytest.approx(2 / 3)
    assert skeleton["learned"]["recall"] == 1.0
    assert skeleton["learned"]["top_k_precision"] == 1.0
    assert skeleton["learned"]["auroc"] == 1.0


# A stand-in small enough to train in seconds: 3 channels (15 channel-band nodes), 16 s windows at 100 Hz,
# 3 planted couplings. No class signal (class_separation 0), so what shapes the graph is the graph objective.
SPEC = CorpusSpec(name="tiny-coupled", ch_names=("A", "B", "C"), sfreq=100.0, n_times=1600,
                  classes=("a", "b"),
                  label_level="window")
READER = dict(n_subjects=4, windows_per_subject=60, kind="bands", class_separation=0.0)


def _learned_graph(coupling_edges: int) -> tuple[np.ndarray, np.ndarray, SDFormer]:
    """Train SD-Former's graph path on its phase-1 graph terms (0.1 dep + 0.5 dag + l1) for 8 epochs."""
    reader = SyntheticReader(SPEC, coupling_edges=coupling_edges, **READER)
    x = torch.tensor(np.concatenate([b.x for b in reader.iter_blocks()]))
    torch.manual_seed(0)
    model = SDFormer(n_chans=3, n_outputs=2, n_times=1600, sfreq=100.0, d_model=16, n_layers=1, n_heads=2,
                     d_ff=32,
                     stft_frames=24, token_hidden=8, encoder_ff=16, edge_hidden=16,
                     recon_hidden=16, dropout=0.0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    order = torch.Generator().manual_seed(0)
    for _ in range(8):
        for idx in torch.randperm(len(x), generator=order).split(16):
            out = model.forward_with_aux(x[idx])
            # the paper's dep and dag weights; l1 at 0.003 instead of 0.01 (at 0.01 the l1 push on all
            # 210 pairs empties the graph within an epoch: see docs/papers/sdformer.md)
            loss = 0.1 * out.dep + 0.5 * out.dag + 0.003 * out.sparse
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()
    with torch.no_grad():
        out = model.forward_with_aux(x)
    frequency = (out.adjacency > 0.5).double().mean(0).numpy()
    return frequency, out.edge_probs.double().mean(0).numpy(), model


@pytest.fixture(scope="module")
def planted() -> np.ndarray:
    reader = SyntheticReader(SPEC, coupling_edges=3, **READER)
    names = graph_node_names(SDFormer(n_chans=3, n_outputs=2, n_times=1600, sfreq=100.0, stft_frames=4,
                                      d_model=8, n_heads=2, n_layers=1), list(SPEC.ch_names))
    return truth_adjacency(reader.config()["coupling"], list(SPEC.ch_names), names)


@pytest.mark.parametrize("coupled", [True, False], ids=["planted", "coupling_removed"])
def test_sdformer_graph_objective_recovers_planted_edges(planted: np.ndarray, coupled: bool) -> None:
    """Measured: planted, AUROC 0.98 directed / 0.95 skeleton, 3 edges above 0.5 of which 1 planted (random:
    0.014 / 0.029 precision); coupling removed, AUROC 0.34 / 0.40; truths shuffled over nodes, 0.19-0.77."""
    frequency, probability, _ = _learned_graph(3 if coupled else 0)
    rec = edge_recovery(frequency, probability, planted)
    if not coupled:
        # the same windows without the couplings: the planted pairs rank no higher than chance puts them
        assert rec["directed"]["learned"]["auroc"] < 0.75 and rec["skeleton"]["learned"]["auroc"] < 0.75
        return
    for view in ("directed", "skeleton"):
        learned, random = rec[view]["learned"], rec[view]["random_expected"]
        assert learned["auroc"] > 0.9 > random["auroc"] + 0.35
        assert learned["top_k_precision"] >= 1 / 3 > 10 * random["top_k_precision"]
    # scored against shuffled truths (as many planted pairs, on permuted nodes) the same graph is at chance
    shuffled = []
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(len(planted))
        shuffled.append(edge_recovery(frequency, probability,
                                      planted[np.ix_(perm, perm)])["directed"]["learned"]["auroc"])
    assert np.mean(shuffled) < 0.75
