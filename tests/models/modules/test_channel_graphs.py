"""Channel graphs of the seizure models: DCRNN's random walks and ChebNet's scaled Laplacian."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.channel_graphs import dual_random_walk, random_walk, scaled_laplacian


def test_scaled_laplacian_spectrum_spans_minus_one_to_one() -> None:
    """``2 L / lambda_max - I`` of ``L = I - D^-1/2 A D^-1/2``: its largest eigenvalue is exactly 1 and
    its smallest ``-1`` (``L`` has eigenvalue 0 for a connected graph), as Chebyshev filters need."""
    torch.manual_seed(0)
    a = torch.rand(6, 6)
    a = (a + a.T) / 2
    eig = torch.linalg.eigvalsh(scaled_laplacian(a).double())
    assert abs(eig.max().item() - 1.0) < 1e-5 and abs(eig.min().item() + 1.0) < 1e-5


def test_random_walks_are_row_normalised_and_zero_degree_rows_stay_zero() -> None:
    a = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(random_walk(a),
                               torch.tensor([[0.0, 0.5, 0.5], [0.25, 0.0, 0.75], [0.0, 0.0, 0.0]]))
    fwd, bwd = dual_random_walk(a)
    torch.testing.assert_close(fwd, random_walk(a).T)
    torch.testing.assert_close(bwd, random_walk(a.T).T)
