"""The spatiotemporal transport cost of STDRO (paper eq. 1-3) and its feasible set.

Notation (paper Sec. 3.2.1): an input ``X`` has ``C`` channels and ``T`` time positions; it
is cut into ``N`` contiguous periods ``P_1..P_N`` of ``L = T / N`` positions. Each period
has a fixed channel graph ``W_t`` (``C x C``) and a learnable ``M_t`` (initialised to ``I``);
the covariate weight of the period is ``A_t = W_t M_t``. The cost of moving ``z = (X, y)`` to
``z' = (X', y')`` is eq. 2::

    c_w(z, z') = sum_t sum_{s in P_t} (X_s - X'_s)^T A_t (X_s - X'_s) + inf * 1[y != y']

Reading (shapes): the cost is computed on *whatever tensor the backbone takes*; the channel
axis is ``-2`` and the time axis ``-1`` (``(B, C, T)`` windows; extra leading axes after the
batch are treated as more independent columns). When the input is a step-major feature
layout (``T = n_steps * step_bins``, e.g. log|FFT| with 100 bins per 1-s step) the periods
are cut on step boundaries, so every bin of a step falls in the same period (the Kronecker
``I_{T/N}`` of eq. 1 then also runs over the bins). When ``n_steps`` is not a multiple of
``N`` the periods follow :func:`torch.tensor_split` (the first ones one step longer).

Reading (label part): the ``+1`` coordinate of ``z`` is the label with an infinite weight
(eq. 2): the adversary never changes ``y``; :func:`transport_cost` returns ``inf`` for any
pair whose labels differ, and the inner maximisation only ever moves ``X``.

Reading (W_t, Sec. 3.2.1): "the absolute value of the normalised cross-correlation between
the preprocessed signals of electrodes j and k among all EEG signals at the t-th period".
We take the zero-lag normalised cross-correlation over *all training windows* (as DCRNN's
reference computes its correlation graph per clip, scipy ``correlate(..., "valid")`` on
equal-length vectors: ``sum x_j x_k / sqrt(sum x_j^2 sum x_k^2)``, not mean-centred), i.e. the
Gram matrix ``G_t = sum_windows X_t X_t^T`` normalised to unit diagonal, then ``|.|``.
``G_t`` is positive semi-definite, but the absolute value can break that; so each ``W_t`` is
finally projected onto ``{W : W = W^T, W >= mu I}`` (eigenvalues clipped at ``mu``), which
keeps ``M_t = I`` feasible (see :func:`project_m`) and ``W_t`` invertible.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch

__all__ = [
    "Projection",
    "clip_spd",
    "correlation_graphs",
    "cost_gradient",
    "in_feasible_set",
    "period_columns",
    "period_bounds",
    "project_m",
    "smoothness",
    "transport_cost",
]

Projection = Literal["psd", "diag"]


def period_bounds(n_times: int, n_periods: int, step_bins: int = 0) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the ``n_periods`` periods along an axis of ``n_times`` positions.

    ``step_bins > 0`` says the axis is ``n_steps`` blocks of ``step_bins`` (step-major
    features); periods are then whole steps. ``step_bins = 0`` cuts raw samples.
    """
    unit = step_bins if step_bins > 0 else 1
    if n_times % unit:
        raise ValueError(f"STDRO: the time axis has {n_times} positions, not a multiple of "
                         f"step_bins={step_bins}")
    n_steps = n_times // unit
    if not 1 <= n_periods <= n_steps:
        raise ValueError(f"STDRO: n_periods={n_periods} needs 1 <= N <= {n_steps} (steps in the input)")
    chunks = torch.tensor_split(torch.arange(n_steps), n_periods)
    return [(int(c[0]) * unit, (int(c[-1]) + 1) * unit) for c in chunks]


def period_columns(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """``x[..., :, start:stop]`` as ``(B, C, columns)``: every non-channel position of the period."""
    part = x[..., start:stop]
    c = part.shape[-2]
    return part.reshape(part.shape[0], -1, c, part.shape[-1]).transpose(1, 2).reshape(part.shape[0], c, -1)


def _periods_side_by_side(delta: torch.Tensor, bounds: list[tuple[int, int]],
                          n_mats: int) -> torch.Tensor | None:
    """``delta`` ``(..., C, T)`` as ``(..., N, C, L)`` when its ``N`` periods are of one length ``L`` and tile
    ``T`` (the usual case, e.g. 12 steps in 4 periods) and there is one matrix per period; else ``None``
    (:func:`period_bounds` with ``n_steps % N != 0``: the callers take the periods one by one)."""
    n, t = len(bounds), delta.shape[-1]
    if len({stop - start for start, stop in bounds}) == 1 and bounds[0][0] == 0 and bounds[-1][1] == t \
            and n_mats == n:
        return delta.unflatten(-1, (n, t // n)).movedim(-2, -3)
    return None


def transport_cost(x_new: torch.Tensor, x: torch.Tensor, a: torch.Tensor, bounds: list[tuple[int, int]],
                   y_new: torch.Tensor | None = None, y: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample cost ``c_w`` of eq. 2, shape ``(B,)``; ``a`` is ``(N, C, C)`` (``A_t = W_t M_t``): the sum
    over periods ``t`` and their columns ``s`` of ``delta_s^T A_t delta_s``, all periods in one batched
    product where they are of one length (:func:`_periods_side_by_side`).

    Labels, when given, enter with infinite weight: a changed label costs ``inf``.
    """
    delta = x_new - x
    d = _periods_side_by_side(delta, bounds, a.shape[0])
    if d is not None:
        cost = (d * (a @ d)).flatten(1).sum(1)
    else:
        cost = delta.new_zeros(delta.shape[0])
        for t, (start, stop) in enumerate(bounds):
            part = period_columns(delta, start, stop)  # (B, C, L')
            cost = cost + torch.einsum("bcl,cd,bdl->b", part, a[t], part)
    if y_new is not None and y is not None:
        cost = torch.where(y_new != y, torch.full_like(cost, float("inf")), cost)
    return cost


def cost_gradient(delta: torch.Tensor, sym: torch.Tensor, bounds: list[tuple[int, int]]) -> torch.Tensor:
    """``d c_w / d X~`` of eq. 2 at ``X~ = X + delta``: ``(A_t + A_t^T) delta_s`` on every column ``s`` of
    period ``t``; ``sym`` is ``(N, C, C)``, ``A_t + A_t^T``. Labels do not move, so this is the whole
    gradient of the cost the inner maximisation (eq. 4) subtracts.

    Periods of one length are one batched matmul (:func:`_periods_side_by_side`); unequal ones one matmul
    each. Each output column is the same ``C``-term product either way.
    """
    d = _periods_side_by_side(delta, bounds, sym.shape[0])
    if d is not None:
        return (sym @ d).movedim(-3, -2).flatten(-2)
    out = torch.empty_like(delta)
    for k, (start, stop) in enumerate(bounds):
        out[..., start:stop] = sym[k] @ delta[..., start:stop]
    return out


def smoothness(a: torch.Tensor, squared: bool = True) -> torch.Tensor:
    """Temporal continuity ``sum_t ||A_{t+1} - A_t||_F^(2)`` (eq. 3 / Algorithm 1 squared, eq. 5 not)."""
    if a.shape[0] < 2:
        return a.new_zeros(())
    diff = (a[1:] - a[:-1]).flatten(1)
    norms = (diff * diff).sum(-1)
    return norms.sum() if squared else norms.clamp_min(1e-24).sqrt().sum()


def clip_spd(s: torch.Tensor, floor: float) -> torch.Tensor:
    """Symmetric ``s`` with its eigenvalues raised to at least ``floor`` (nearest point in Frobenius norm)."""
    s = 0.5 * (s + s.transpose(-1, -2))
    vals, vecs = torch.linalg.eigh(s.double())
    out = (vecs * vals.clamp_min(floor).unsqueeze(-2)) @ vecs.transpose(-1, -2)
    return (0.5 * (out + out.transpose(-1, -2))).to(s.dtype)


@torch.no_grad()
def correlation_graphs(windows: Iterable[torch.Tensor], bounds: list[tuple[int, int]], floor: float = 1e-3,
                       ) -> torch.Tensor:
    """``W_t`` of Sec. 3.2.1 from an iterable of training batches ``(B, ..., C, T)``: ``(N, C, C)``.

    Zero-lag normalised cross-correlation over all windows of each period, absolute value,
    then projected onto ``W >= floor * I`` (module docstring).
    """
    gram: torch.Tensor | None = None
    for xb in windows:
        xb = xb.double()
        # one Gram matrix per period (periods may differ in length when N does not divide the steps)
        cols = [period_columns(xb, s, e).transpose(0, 1).reshape(xb.shape[-2], -1) for s, e in bounds]
        g = torch.stack([c @ c.T for c in cols])  # (N, C, C)
        gram = g if gram is None else gram + g
    if gram is None:
        raise ValueError("STDRO: no training windows to build the period graphs W_t from")
    diag = torch.diagonal(gram, dim1=-2, dim2=-1).clamp_min(1e-12).sqrt()
    w = (gram / (diag.unsqueeze(-1) * diag.unsqueeze(-2))).abs()
    return clip_spd(w, floor).float()


def project_m(m: torch.Tensor, w: torch.Tensor,
              kind: Projection = "psd", floor: float = 1e-3) -> torch.Tensor:
    """``Proj_M`` of Algorithm 1 for ``M`` and ``W`` of shape ``(N, C, C)``; returns the projected ``M``.

    * ``"diag"``: the exact Euclidean projection onto the paper's set (eq. 3)
      ``{M : diag(W_t M_t) >= 0}``. The ``i``-th constraint reads ``<W_t[i, :], M_t[:, i]> >= 0``
      and involves only column ``i`` of ``M_t``, so the constraints are separable and the
      projection is one closed-form half-space projection per column:
      ``m_i <- m_i - min(0, <w_i, m_i>) / ||w_i||^2 * w_i``.
    * ``"psd"`` (default): projection onto the well-posed subset
      ``{M : sym(W_t M_t) >= floor * I}`` of that set (a PSD matrix has a non-negative
      diagonal, so the paper's constraint holds too), in the metric of ``A_t = W_t M_t``.
      Why: ``diag(A_t) >= 0`` alone allows an indefinite ``A_t``; the quadratic form of eq. 2
      only sees ``sym(A_t)``, and along a negative eigen-direction the Lagrangian
      ``l - lambda c_w`` of eq. 4 grows without bound (the cost would pay the adversary),
      so the inner supremum is infinite and ``c_w`` is no transport cost. How: the nearest
      ``A'`` (Frobenius) with ``sym(A') >= floor I`` keeps the skew part of ``A`` and clips the
      eigenvalues of its symmetric part (sym and skew parts are orthogonal; Higham 1988);
      then ``M' = W^{-1} A'`` (``W_t`` is invertible, see :func:`correlation_graphs`).
      Clipping only raises eigenvalues, so ``diag(A') >= diag(A)``.
    """
    if kind == "diag":
        a = w @ m
        viol = torch.diagonal(a, dim1=-2, dim2=-1).clamp_max(0.0)  # (N, C): <w_i, m_i> where negative
        norm2 = (w * w).sum(-1).clamp_min(1e-12)  # ||W[i, :]||^2
        # column i of M moves along W[i, :]^T
        return m - (viol / norm2).unsqueeze(-2) * w.transpose(-1, -2)
    if kind != "psd":
        raise ValueError(f"STDRO: projection must be 'psd' or 'diag', got {kind!r}")
    a = w @ m
    skew = 0.5 * (a - a.transpose(-1, -2))
    a_new = clip_spd(a, floor) + skew
    return torch.linalg.solve(w.double(), a_new.double()).to(m.dtype)


def in_feasible_set(m: torch.Tensor, w: torch.Tensor, kind: Projection = "psd", floor: float = 1e-3,
                    tol: float = 1e-5) -> bool:
    """Whether ``M`` lies in the set :func:`project_m` projects onto (up to ``tol``)."""
    a = w.double() @ m.double()
    if kind == "diag":
        return bool((torch.diagonal(a, dim1=-2, dim2=-1) >= -tol).all())
    sym = 0.5 * (a + a.transpose(-1, -2))
    return bool((torch.linalg.eigvalsh(sym) >= floor - tol).all())
