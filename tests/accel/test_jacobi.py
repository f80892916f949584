"""The batched Jacobi eigendecomposition (accel/jacobi.py) against torch.linalg.eigh, and its routing."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.accel import jacobi

pytest.importorskip("numba", reason="the kernel needs numba (the dev extra installs it)")


def _spd(batch: int, n: int, spread: float, seed: int = 0) -> torch.Tensor:
    """Random SPD matrices with eigenvalues over ``10**(+-spread)`` (random eigenbases)."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(batch, n, n, dtype=torch.float64, generator=gen))
    vals = 10.0 ** (spread * (2 * torch.rand(batch, n, dtype=torch.float64, generator=gen) - 1))
    return (q * vals.unsqueeze(-2)) @ q.transpose(-1, -2)


def _check(mats: torch.Tensor, vals: torch.Tensor, vecs: torch.Tensor, atol: float = 1e-13) -> None:
    ref_vals = torch.linalg.eigvalsh(mats)
    scale = mats.abs().amax((-2, -1), keepdim=True).clamp_min(1e-300)
    assert torch.all(vals[..., 1:] >= vals[..., :-1]), "eigenvalues not ascending"
    assert torch.allclose(vals / scale[..., 0], ref_vals / scale[..., 0], rtol=0, atol=atol)
    eye = torch.eye(mats.shape[-1], dtype=mats.dtype)
    assert torch.allclose(vecs.transpose(-1, -2) @ vecs, eye.expand_as(mats), rtol=0, atol=atol)
    sym = torch.tril(mats) + torch.tril(mats, -1).transpose(-1, -2)  # what UPLO='L' reads
    rebuilt = (vecs * vals.unsqueeze(-2)) @ vecs.transpose(-1, -2)
    assert torch.allclose(rebuilt / scale, sym / scale, rtol=0, atol=atol)


@pytest.mark.parametrize("n", [1, 2, 3, 9, jacobi.MAX_N])
@pytest.mark.parametrize("spread", [0.5, 4.0])
def test_matches_torch_eigh_on_spd_batches(n: int, spread: float) -> None:
    mats = _spd(300, n, spread, seed=n)  # 300: four full blocks of 64 and a partial one
    vals, vecs = jacobi.eigh(mats)
    _check(mats, vals, vecs)


def test_graded_matrices_keep_their_small_eigenvalues_to_relative_accuracy() -> None:
    """``H = D A D`` with ``A`` well conditioned and ``D`` spanning 1e-4..1e4 (eigenvalues 1e-8..1e8): the
    Jacobi eigenvalues match 40-digit ones each to 1e-12 of itself (Demmel & Veselic), where LAPACK's are
    only accurate relative to the largest."""
    mpmath = pytest.importorskip("mpmath")
    gen = torch.Generator().manual_seed(3)
    sym = torch.randn(64, 9, 9, dtype=torch.float64, generator=gen) * 0.05
    a = torch.eye(9, dtype=torch.float64) + sym + sym.transpose(-1, -2)
    d = 10.0 ** torch.linspace(-4, 4, 9, dtype=torch.float64)
    mats = d[:, None] * a * d[None, :]
    vals, _ = jacobi.eigh(mats)
    mpmath.mp.dps = 40
    worst_ours, worst_lapack = 0.0, 0.0
    lapack = torch.linalg.eigvalsh(mats)
    for i in range(8):
        exact = sorted(float(e) for e in mpmath.eigsy(mpmath.matrix(mats[i].tolist()), eigvals_only=True))
        exact_t = torch.tensor(exact, dtype=torch.float64)
        worst_ours = max(worst_ours, float(((vals[i] - exact_t) / exact_t).abs().max()))
        worst_lapack = max(worst_lapack, float(((lapack[i] - exact_t) / exact_t).abs().max()))
    assert worst_ours < 1e-12
    assert worst_lapack > 1e3 * worst_ours  # what the test tells apart: LAPACK loses the small ones


def test_degenerate_indefinite_and_diagonal_matrices() -> None:
    eye = torch.eye(9, dtype=torch.float64).expand(70, 9, 9).clone()
    repeated = torch.diag_embed(
        torch.tensor([2.0, 2.0, 2.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    ).expand(70, 9, 9)
    zeros = torch.zeros(70, 9, 9, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    sym = torch.randn(70, 9, 9, dtype=torch.float64, generator=gen)
    indefinite = sym + sym.transpose(-1, -2)
    low_rank = torch.randn(70, 9, 3, dtype=torch.float64, generator=gen)
    for mats in (eye, repeated, zeros, indefinite, low_rank @ low_rank.transpose(-1, -2)):
        vals, vecs = jacobi.eigh(mats)
        _check(mats, vals, vecs)


def test_reads_the_lower_triangle_like_torch() -> None:
    mats = _spd(100, 9, 1.0, seed=5)
    garbage = mats + torch.triu(torch.full_like(mats, 7.0), 1)  # upper triangle changed, lower kept
    vals, vecs = jacobi.eigh(garbage)
    ref_vals, _ = torch.linalg.eigh(garbage)
    assert torch.allclose(vals, ref_vals, rtol=0, atol=1e-12)
    _check(garbage, vals, vecs)


def test_leading_dimensions_and_thread_split_give_the_same_result() -> None:
    mats = _spd(7 * 2100, 9, 2.0, seed=6)  # 14,700 matrices: enough for the split over threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = jacobi.eigh(mats)
        torch.set_num_threads(2)
        two = jacobi.eigh(mats.view(7, 2100, 9, 9))
    finally:
        torch.set_num_threads(threads)
    assert two[0].shape == (7, 2100, 9) and two[1].shape == (7, 2100, 9, 9)
    assert torch.equal(one[0], two[0].reshape(-1, 9)) and torch.equal(one[1], two[1].reshape(-1, 9, 9))
    _check(mats, *one)


def test_unconverged_blocks_and_non_finite_batches_go_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    mats = _spd(200, 9, 2.0, seed=7)
    calls: list[int] = []
    real = torch.linalg.eigh

    def counted(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(x.reshape(-1, x.shape[-1], x.shape[-1]).shape[0])
        return real(x)

    monkeypatch.setattr(torch.linalg, "eigh", counted)
    monkeypatch.setattr(jacobi, "_MAX_SWEEPS", 1)  # one sweep: no block converges
    vals, vecs = jacobi.eigh(mats)
    assert calls == [200]
    _check(mats, vals, vecs)
    monkeypatch.setattr(jacobi, "_MAX_SWEEPS", 40)
    calls.clear()
    bad = mats.clone()
    bad[3, 2, 1] = float("nan")
    jacobi.eigh(mats)
    assert calls == []
    try:
        out = jacobi.eigh(bad)
    except RuntimeError:
        out = None
    assert calls == [200]  # the whole batch went to torch, which decides what a NaN gives
    if out is not None:
        assert torch.isnan(out[0][3]).any()


def test_routing_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    real = torch.linalg.eigh
    monkeypatch.setattr(torch.linalg, "eigh", lambda x: (used.append("torch"), real(x))[1])
    big = _spd(jacobi.MIN_BATCH, 9, 1.0)
    jacobi.eigh(big)
    assert used == []  # the kernel's case
    cases = {
        "small batch": big[: jacobi.MIN_BATCH - 1],
        "float32": big.float(),
        "wide": _spd(jacobi.MIN_BATCH, jacobi.MAX_N + 1, 1.0),
        "needs grad": big.clone().requires_grad_(True),
    }
    for name, mats in cases.items():
        used.clear()
        jacobi.eigh(mats)
        assert used == ["torch"], name
    used.clear()
    monkeypatch.setenv("BIOSIG_NUMBA", "0")
    assert not jacobi.available()
    jacobi.eigh(big)
    assert used == ["torch"]
    monkeypatch.delenv("BIOSIG_NUMBA")
    monkeypatch.setattr(jacobi, "_numba", None)
    used.clear()
    jacobi.eigh(big)
    assert used == ["torch"]


@pytest.mark.parametrize("kernel", [True, False])
def test_basis_start_gives_the_eigenpairs_of_the_matrix_it_expresses(kernel: bool,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``eigh(V^T W V, V)`` is the eigendecomposition of ``W`` (kernel path and torch path)."""
    if not kernel:
        monkeypatch.setenv("BIOSIG_NUMBA", "0")
    w = _spd(300, 9, 2.0, seed=8)
    _, near = torch.linalg.eigh(w + 1e-3 * _spd(300, 9, 0.5, seed=9))  # eigenvectors of nearby matrices
    inner = near.transpose(-1, -2) @ w @ near
    vals, vecs = jacobi.eigh(inner, near)
    _check(w, vals, vecs, atol=1e-12)
    with pytest.raises(ValueError, match="basis of shape"):
        jacobi.eigh(inner, near[:10])


def test_a_nearby_basis_saves_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 4 sweeps allowed, a start in a nearby eigenbasis converges in the kernel, a cold start does not
    (its blocks go to torch): the warm start is what the Karcher passes rely on for their speed."""
    w = _spd(256, 9, 2.0, seed=10)
    _, near = torch.linalg.eigh(w + 1e-4 * _spd(256, 9, 0.5, seed=11))
    inner = near.transpose(-1, -2) @ w @ near
    calls: list[int] = []
    real = torch.linalg.eigh
    monkeypatch.setattr(torch.linalg, "eigh", lambda x: (calls.append(len(x)), real(x))[1])
    monkeypatch.setattr(jacobi, "_MAX_SWEEPS", 4)
    _check(w, *jacobi.eigh(inner, near), atol=1e-12)
    assert calls == []
    jacobi.eigh(w)
    assert calls == [256]


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("warm", [False, True])
def test_congruent_matrices_are_decomposed_without_forming_them(kernel: bool, warm: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``eigh_congruent(X, C, V)`` is the eigendecomposition of ``C X C^T`` (``C`` not symmetric here, so
    a transposed product would show), with or without a start basis, in the kernel and in torch."""
    if not kernel:
        monkeypatch.setenv("BIOSIG_NUMBA", "0")
    x = _spd(300, 9, 1.5, seed=12)
    c = torch.eye(9, dtype=torch.float64) + 0.3 * torch.randn(9, 9, dtype=torch.float64,
                                                              generator=torch.Generator().manual_seed(13))
    w = c @ x @ c.T
    basis = torch.linalg.eigh(w + 1e-3 * _spd(300, 9, 0.5, seed=14))[1] if warm else None
    vals, vecs = jacobi.eigh_congruent(x, c, basis)
    _check(w, vals, vecs, atol=1e-12)
    with pytest.raises(ValueError, match="congruence of shape"):
        jacobi.eigh_congruent(x, c[:8, :8])
