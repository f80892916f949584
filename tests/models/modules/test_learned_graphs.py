"""Graph operations of SD-Former and the Static GNN: NOTEARS's h(A), the GCN normalisation, random DAGs."""

from __future__ import annotations

import math

import torch

from biosig_lightning.models.modules.learned_graphs import (
    normalized_adjacency,
    notears_acyclicity,
    random_dag,
)


def test_notears_is_the_trace_of_the_exponential_of_the_squared_weights() -> None:
    """``h(A) = tr(exp(A o A)) - n`` (Zheng et al., 2018, Eq. 7): a 2-cycle of weights ``(1, -1)`` gives
    ``2 cosh(1) - 2`` (not ``2 cos(1) - 2``, which ``tr(exp(A))`` of the signed weights would give) and a
    DAG gives zero."""
    cycle = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    torch.testing.assert_close(notears_acyclicity(cycle), torch.tensor(2 * math.cosh(1.0) - 2))
    dag = torch.tensor([[0.0, 0.0, 0.0], [-2.0, 0.0, 0.0], [0.5, 3.0, 0.0]])
    assert notears_acyclicity(dag).item() == 0.0


def test_gcn_normalisation_adds_self_loops_then_scales_by_the_degrees() -> None:
    a = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 2.0], [0.0, 2.0, 0.0]])
    loops = a + torch.eye(3)
    deg = loops.sum(1)
    expected = loops / torch.sqrt(deg[:, None] * deg[None, :])
    torch.testing.assert_close(normalized_adjacency(a), expected)


def test_random_dag_has_the_exact_edge_count_no_self_loop_and_no_cycle() -> None:
    for seed in range(5):
        a = random_dag(7, 0.3, seed)
        assert int(a.sum()) == round(0.3 * 7 * 6)
        assert torch.diagonal(a).sum() == 0
        assert notears_acyclicity(a).item() == 0.0
