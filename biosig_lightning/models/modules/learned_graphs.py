"""Graph operations shared by the graph models (SD-Former, the Static GNN baseline, the signed-graph papers).

* :func:`normalized_adjacency`: the symmetric GCN normalisation ``D^-1/2 (A + I) D^-1/2``
  (Kipf & Welling, 2017, Eq. 2).
* :func:`notears_acyclicity`: NOTEARS's ``h(A) = tr(exp(A o A)) - n`` (Zheng et al., 2018, Eq. 7).
* :func:`random_dag`: a random DAG with an exact edge count (SD-Former's matched-sparsity control).
"""

from __future__ import annotations

import torch

__all__ = ["normalized_adjacency", "notears_acyclicity", "random_dag"]


def normalized_adjacency(adjacency: torch.Tensor) -> torch.Tensor:
    """``D^-1/2 (A + I) D^-1/2`` of a symmetric non-negative ``(n, n)`` adjacency (Kipf & Welling, 2017)."""
    with_loops = adjacency + torch.eye(adjacency.shape[0], dtype=adjacency.dtype)
    inv_sqrt_degree = with_loops.sum(dim=1).rsqrt()
    return inv_sqrt_degree[:, None] * with_loops * inv_sqrt_degree[None, :]


def notears_acyclicity(adjacency: torch.Tensor, square: bool = True) -> torch.Tensor:
    """NOTEARS acyclicity ``h(A) = tr(exp(A o A)) - n`` of ``(..., n, n)`` matrices -> ``(...)``.

    ``h(A) = 0`` iff the weighted graph ``A`` has no directed cycle, and grows with the
    (weighted) number of closed walks otherwise (Zheng et al., 2018, Eq. 7). Computed in
    float64 with autocast off, because ``exp`` of a dense 0/1 matrix quickly exceeds the
    range and precision of bfloat16; returned as float32.

    ``square=False`` computes ``tr(exp(A)) - n``, for 0/1 graphs with a straight-through
    gradient: there ``A o A = A``, so the value is the same, but the gradient is
    ``dh/da_ij = exp(A)_ji`` instead of ``2 a_ij exp(A)_ji``. NOTEARS squares to make signed
    weights count; on a binary graph the square only zeroes the gradient of every absent
    edge, so the penalty could remove a cycle's edges only after they were switched on.
    Without it an absent edge ``j -> i`` gets the gradient ``exp(A)_ji > 0`` exactly when a
    path ``i -> ... -> j`` exists, i.e. when switching it on would close a cycle, and the
    edges of a DAG get none.
    """
    n = adjacency.shape[-1]
    with torch.autocast(device_type=adjacency.device.type, enabled=False):
        a = adjacency.double()
        h = torch.linalg.matrix_exp(a * a if square else a).diagonal(dim1=-2, dim2=-1).sum(-1) - n
    return h.float()


def random_dag(n_nodes: int, density: float, seed: int) -> torch.Tensor:
    """A random DAG ``(n, n)`` with exactly ``round(density * n (n - 1))`` edges, no self-loops.

    A random topological order is drawn, then that many of the ``n (n - 1) / 2`` ordered
    pairs consistent with it are chosen uniformly; ``a_ij = 1`` makes ``j`` a parent of
    ``i``. Uses its own generator, so the global RNG is untouched.
    """
    if not 0.0 <= density <= 0.5:
        raise ValueError(
            f"graph_density must lie in [0, 0.5] for a DAG (at most half the ordered pairs), got {density}"
        )
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n_nodes, generator=generator)
    earlier, later = torch.triu_indices(n_nodes, n_nodes, offset=1)
    n_edges = round(density * n_nodes * (n_nodes - 1))
    chosen = torch.randperm(earlier.numel(), generator=generator)[:n_edges]
    adjacency = torch.zeros(n_nodes, n_nodes)
    adjacency[order[later[chosen]], order[earlier[chosen]]] = 1.0
    return adjacency
