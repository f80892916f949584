"""Invariants of the balanced signed graph maths (Yao et al., Secs. 2-3, App. B, C, E)."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.features import signed_graph as sg


def _graph(seed: int, b: int = 3, c: int = 5, h: int = 3, k: int = 4, kind: sg.GraphKind = "balanced"):
    g = torch.Generator().manual_seed(seed)
    n = c * h
    f = torch.randn(b, n, k, generator=g, dtype=torch.float64)
    mask = sg.product_graph_mask(c, h)
    d = sg.normalise_distance(sg.pairwise_distance(f, "euclidean"), mask)
    beta = torch.where(torch.rand(b, c, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    node_beta = beta.repeat(1, h)
    w = sg.signed_weights(d, mask, kind, node_beta)
    return w, node_beta, mask


def test_product_graph_edges() -> None:
    mask = sg.product_graph_mask(3, 2)
    assert mask.shape == (6, 6) and torch.equal(mask, mask.T) and not mask.diagonal().any()
    # chunk 0 = nodes 0..2, chunk 1 = nodes 3..5: complete inside a chunk, one temporal edge per channel
    assert mask[0, 1] and mask[0, 2] and mask[0, 3] and not mask[0, 4] and not mask[0, 5]
    assert int(mask.sum()) == 2 * (2 * 3) + 2 * 3
    line = sg.line_graph_mask(["FP1-F7", "F7-T3", "T3-T5", "FP2-F8"])
    assert line[0, 1] and line[1, 2] and not line[0, 2] and not line[3].any()
    with pytest.raises(ValueError, match="EEG FP1"):
        sg.line_graph_mask(["EEG FP1"])


@pytest.mark.parametrize("seed", range(5))
def test_eq7_is_balanced_whatever_the_distances(seed: int) -> None:
    w, node_beta, mask = _graph(seed)
    assert bool((w != 0).eq(mask).all())  # every edge gets a non-zero weight (d < inf)
    # CHT: sign(w_ij) = beta_i beta_j on every edge (eq. 2) ...
    assert bool((torch.sign(w) == node_beta.unsqueeze(-1) * node_beta.unsqueeze(-2))[w != 0].all())
    # ... and, checked without the polarities, no cycle carries an odd number of negative edges
    assert sg.balance_violations(w) == 0
    assert sg.balance_violations(sg.normalize_weights(w)) == 0


def test_balance_checker_detects_odd_negative_cycles() -> None:
    # the unbalanced signed graph of eq. 28 has no polarity behind its signs: typically unbalanced
    w, _, _ = _graph(0, kind="unbalanced")
    assert (w < 0).any() and (w > 0).any()
    assert sg.balance_violations(w) == w.shape[0]
    tri = torch.tensor([[[0.0, 1, 1], [1, 0, -1], [1, -1, 0]]])  # one negative edge on a triangle
    assert sg.balance_violations(tri) == 1
    assert sg.balance_violations(-tri) == 0  # two negative edges: balanced


def test_paper_example_eq4() -> None:
    lb = torch.tensor([[2.0, 1, 1], [1, 3, -2], [1, -2, 3]])
    lp = sg.similarity_transform(lb, torch.tensor([-1.0, 1, 1]))
    assert torch.equal(lp, torch.tensor([[2.0, -1, -1], [-1, 3, -2], [-1, -2, 3]]))


@pytest.mark.parametrize("seed", range(3))
def test_balanced_and_positive_laplacians_share_spectrum(seed: int) -> None:
    w, node_beta, _ = _graph(seed)
    lap_b, _ = sg.gershgorin_shift(sg.combinatorial_laplacian(sg.normalize_weights(w)))
    lap_p = sg.similarity_transform(lap_b, node_beta)
    # L^+ is a positive graph's (generalised) Laplacian: non-positive off-diagonal
    off = lap_p - torch.diag_embed(torch.diagonal(lap_p, dim1=-2, dim2=-1))
    assert bool((off <= 1e-12).all())
    eb, vb = torch.linalg.eigh(lap_b)
    ep, vp = torch.linalg.eigh(lap_p)
    torch.testing.assert_close(eb, ep)
    # V^B = T V^+: T v^+_k is an eigenvector of L^B with the same eigenvalue
    tv = node_beta.unsqueeze(-1) * vp
    torch.testing.assert_close(lap_b @ tv, tv * ep.unsqueeze(-2))
    # and without T it is not (the graph has negative edges)
    assert not torch.allclose(lap_b @ vp, vp * ep.unsqueeze(-2), atol=1e-3)


@pytest.mark.parametrize("seed", range(3))
def test_gershgorin_shift_makes_psd(seed: int) -> None:
    w, _, _ = _graph(seed)
    lap = sg.combinatorial_laplacian(sg.normalize_weights(w))
    assert torch.linalg.eigvalsh(lap).min() < -1e-3  # negative edges: not PSD before eq. 9
    shifted, delta = sg.gershgorin_shift(lap)
    assert bool((delta > 0).all())
    assert torch.linalg.eigvalsh(shifted).min() >= -1e-10
    # shifted by delta I: same eigenvectors, eigenvalues + delta
    torch.testing.assert_close(torch.linalg.eigvalsh(shifted), torch.linalg.eigvalsh(lap) + delta[:, None])
    # a positive graph's Laplacian needs no shift
    wp, _, _ = _graph(seed, kind="positive")
    _, d0 = sg.gershgorin_shift(sg.combinatorial_laplacian(wp))
    assert bool((d0 < 1e-12).all())


def _positive_laplacian(seed: int, c: int = 6, h: int = 3) -> torch.Tensor:
    w, node_beta, _ = _graph(seed, c=c, h=h)
    lap_b, _ = sg.gershgorin_shift(sg.combinatorial_laplacian(sg.normalize_weights(w)))
    return sg.similarity_transform(lap_b, node_beta)


def test_lanczos_matches_exact_and_converges() -> None:
    lap = _positive_laplacian(1)
    n = lap.shape[-1]
    y = torch.randn(lap.shape[0], n, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    omega = torch.tensor(0.9, dtype=torch.float64)
    ref = sg.exact_filter(lap, y, omega)
    errs = []
    for m in (2, 4, 8, 12, n):
        out = sg.lanczos_filter(lap, y, omega, m)
        errs.append(float((out - ref).norm() / ref.norm()))
    assert errs[-1] < 1e-8  # full Krylov space: exact
    assert errs[-2] < 1e-2  # m = 12 of N = 18 already close
    assert errs[0] > 0.05  # a tiny Krylov space is not
    assert all(b <= a + 1e-9 for a, b in zip(errs[:-1], errs[1:], strict=True)), errs


def test_plain_three_term_recurrence_matches_exact() -> None:
    # the model's default (reorth_passes = 0): with no Gram-Schmidt to repair it, every term of the recurrence
    # beta_k v_{k+1} = L v_k - alpha_k v_k - beta_{k-1} v_{k-1} (App. B) must be right for eq. 25 to be
    # accurate
    lap = _positive_laplacian(1)
    y = torch.randn(lap.shape[0], lap.shape[-1], 4,
                    generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ref = sg.exact_filter(lap, y, 0.9)
    for m in (4, 12):
        plain = sg.lanczos_filter(lap, y, 0.9, m, reorth_passes=0)
        torch.testing.assert_close(plain,
                                   sg.lanczos_filter(lap, y, 0.9, m, reorth_passes=1), rtol=1e-6, atol=1e-8)
    assert float((plain - ref).norm() / ref.norm()) < 1e-2  # m = 12 of N = 18, as with re-orthogonalisation


def test_lanczos_ideal_cutoff_n_is_identity() -> None:
    lap = _positive_laplacian(2)
    n = lap.shape[-1]
    y = torch.randn(lap.shape[0], n, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    torch.testing.assert_close(sg.exact_filter(lap, y, n, "ideal"), y)
    for m in (3, 7, n):
        torch.testing.assert_close(sg.lanczos_filter(lap, y, n, m, "ideal"), y)
    # ideal cutoff omega < N removes the top of the spectrum: not the identity
    low = sg.exact_filter(lap, y, n // 2, "ideal")
    assert float((low - y).norm()) > 0.1 * float(y.norm())
    # sigmoid response (App. E.3) with the cutoff above the spectrum is the identity too
    top = float(torch.linalg.eigvalsh(lap).max())
    torch.testing.assert_close(sg.lanczos_filter(lap, y, top + 3.0, 6), y)


def test_ideal_exact_filter_is_projection_eq12() -> None:
    lap = _positive_laplacian(5)
    y = torch.randn(lap.shape[0], lap.shape[-1], 2,
                    generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = sg.exact_filter(lap, y, 5, "ideal")
    torch.testing.assert_close(sg.exact_filter(lap, x, 5, "ideal"), x)  # idempotent
    evecs = torch.linalg.eigh(lap).eigenvectors
    torch.testing.assert_close(evecs[..., 5:].transpose(-1, -2) @ x, torch.zeros_like(x[:, 5:]))


def test_lanczos_is_differentiable_in_graph_and_cutoff() -> None:
    lap = _positive_laplacian(6).float().requires_grad_(True)
    omega = torch.tensor(0.8, requires_grad=True)
    y = torch.randn(lap.shape[0], lap.shape[-1], 5)
    out = sg.lanczos_filter(lap, y, omega, lap.shape[-1] + 4)  # closes early: placeholders in H_m
    out.square().sum().backward()
    assert torch.isfinite(lap.grad).all() and lap.grad.abs().sum() > 0
    assert torch.isfinite(omega.grad) and omega.grad != 0


def test_polarity_search_lowers_glr_to_a_local_minimum() -> None:
    g = torch.Generator().manual_seed(0)
    c, h, d = 6, 2, 40
    base = torch.randn(1, 1, h * d, generator=g)
    sign = torch.tensor([1.0, -1, 1, -1, -1, 1])
    x = sign[None, :, None] * base + 0.1 * torch.randn(1, c, h * d, generator=g)  # anti-correlated sensors
    nodes = sg.chunk_nodes(x, h)
    mask = sg.product_graph_mask(c, h)
    dist = torch.full((1, c * h, c * h), 0.3)
    gap, sum_gap = sg.signal_gaps(nodes)
    torch.testing.assert_close(gap, torch.cdist(nodes, nodes).square(), atol=1e-3, rtol=1e-4)

    def glr(beta: torch.Tensor) -> float:  # sum |w_ij| (beta_i x_i - beta_j x_j)^2 on the positive twin
        tx = beta.repeat(1, h).unsqueeze(-1) * nodes
        w = sg.signed_weights(dist, mask, "balanced", beta.repeat(1, h))
        return float((w.abs() * torch.cdist(tx, tx).square()).sum() / 2)

    init = sg.covariance_polarity(x)
    assert torch.equal(init[0], sign)  # the covariance row of channel 0 recovers the sign pattern
    wrong = init.clone()
    wrong[0, 1:3] *= -1
    best = sg.refine_polarity(wrong, dist, gap, sum_gap, mask)
    assert torch.equal(best[0], sign)
    assert glr(best) < glr(wrong)
    for i in range(c):  # no single flip helps any more
        flipped = best.clone()
        flipped[0, i] *= -1
        assert glr(flipped) >= glr(best)
    # positively correlated sensors keep one polarity (the literal signed GLR would split them: max-cut)
    same = base.repeat(1, c, 1) + 0.1 * torch.randn(1, c, h * d, generator=g)
    n2 = sg.chunk_nodes(same, h)
    assert torch.equal(sg.refine_polarity(torch.ones(1, c), dist,
                                          *sg.signal_gaps(n2), mask), torch.ones(1, c))
    # pooled over windows: one polarity from the summed GLR
    both = torch.cat([x, x * 1.5])
    pooled = sg.refine_polarity(wrong[:1], dist.expand(2, -1, -1), *sg.signal_gaps(sg.chunk_nodes(both, h)),
                                mask,
                                pool=True)
    assert pooled.shape == (1, c) and torch.equal(pooled[0], sign)


def test_lanczos_krylov_space_closing_early_is_exact_and_differentiable() -> None:
    lap = _positive_laplacian(7)
    evecs = torch.linalg.eigh(lap).eigenvectors
    y = (evecs[..., 1:2] + 2 * evecs[..., 4:5]).contiguous()  # two eigen-components: K_m closes at m = 2
    omega = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    out = sg.lanczos_filter(lap, y, omega, 8)
    torch.testing.assert_close(out, sg.exact_filter(lap, y, omega))
    out.sum().backward()
    assert torch.isfinite(omega.grad)


def test_signed_laplacian_uses_the_absolute_degree_and_is_psd() -> None:
    """``L^s = diag(|W| 1) - W`` (eq. 27): positive semi-definite for any signed ``W`` (the signed degree
    would
    not be: a node with only negative edges gets a negative diagonal)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 6, generator=g, dtype=torch.float64)
    w = (w + w.T) / 2
    w.fill_diagonal_(0)
    lap = sg.signed_laplacian(w)
    torch.testing.assert_close(lap, torch.diag(w.abs().sum(1)) - w)
    assert torch.linalg.eigvalsh(lap).min() > -1e-10


def test_exact_filter_gradient_is_right_at_repeated_eigenvalues() -> None:
    # a complete graph with equal weights: eigenvalue 5 five times; eigh's own backward divides by zero there
    w = torch.ones(1, 6, 6, dtype=torch.float64) - torch.eye(6, dtype=torch.float64)
    lap = (torch.diag_embed(w.sum(-1)) - w).requires_grad_(True)
    y = torch.randn(1, 6, 9, dtype=torch.float64, requires_grad=True)
    omega = torch.tensor(4.8, dtype=torch.float64, requires_grad=True)

    def filt(lp: torch.Tensor, yy: torch.Tensor, om: torch.Tensor) -> torch.Tensor:
        return sg.exact_filter((lp + lp.transpose(-1, -2)) / 2, yy, om, "sigmoid", 3.0)

    assert torch.autograd.gradcheck(filt, (lap, y, omega))
    evals, evecs = torch.linalg.eigh(lap)
    naive = evecs @ (torch.sigmoid(3.0 * (omega - evals)).unsqueeze(-1) * (evecs.transpose(-1, -2) @ y))
    assert not torch.isfinite(torch.autograd.grad(naive.square().sum(), lap)[0]).all()
