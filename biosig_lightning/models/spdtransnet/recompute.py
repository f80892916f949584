"""SP-MHA's combination ``sum_h w_h D_h(softmax(q_h k_h^T)) x`` (eq. 2) with its maps recomputed in backward.

Autograd through the plain expression keeps, for every sequence, the h dense ``T x T`` softmax maps,
their dropout masks and the combined map: at the published size (T = 210 tokens, h = 9) these dominate
the memory of a step. :class:`SPAttention` keeps only its inputs ``q, k, x, w`` and one dropout seed,
and its backward forms the maps again, chunk by chunk, with the same masks (drawn again from the seed).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["SPAttention", "draw_seed", "drop_mask", "keep_mask"]

#: attention-map elements (sequences x heads x T x T) formed at once: bounds the transient of both passes
#: (1 GiB per float32 map tensor; the published size at batch 32 is one chunk, 672 x 9 x 210 x 210)
MAP_CHUNK = 1 << 28
_GOLDEN = 0x9E3779B97F4A7C15  # spreads the streams' seeds apart


def draw_seed() -> int:
    """One seed drawn from torch's default generator (what ``torch.manual_seed`` controls, and what
    activation checkpointing restores, so a recomputed layer draws the same masks)."""
    return int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())


def keep_mask(shape: tuple[int, ...], p: float, seed: int, stream: int = 0,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """``bool`` mask of ``shape``, True (kept) with probability ``1 - p``, fixed by ``(seed, stream)``."""
    gen = torch.Generator(device=device).manual_seed((seed + _GOLDEN * stream) % 2**63)
    return torch.rand(shape, generator=gen, device=device) >= p


def drop_mask(shape: tuple[int, ...], p: float, seed: int, stream: int = 0,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """The complement of :func:`keep_mask`: True (dropped) with probability ``p``."""
    return ~keep_mask(shape, p, seed, stream, device)


def _chunks(b: int, per_item: int) -> list[slice]:
    step = max(1, MAP_CHUNK // max(per_item, 1))
    return [slice(i, min(i + step, b)) for i in range(0, b, step)]


def _compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The promoted dtype of the inputs, at least float32 (half-precision inputs come from autocast)."""
    dtype = dtypes[0]
    for d in dtypes[1:]:
        dtype = torch.promote_types(dtype, d)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = a @ b`` with ``a`` cast to ``b``'s dtype (``out`` float32 when ``b`` is half)."""
    if a.dtype == b.dtype == out.dtype:
        return torch.bmm(a, b, out=out)
    return out.copy_(torch.bmm(a.to(b.dtype), b))


def _kept_maps(q: torch.Tensor, k: torch.Tensor,
               p: float, seed: int, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax maps ``P_h`` of one chunk and ``M_h P_h`` (``P_h`` itself without dropout). The mask
    multiplies, as ``F.dropout`` does, so a NaN stays NaN where it is dropped."""
    probs = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    if p == 0:
        return probs, probs
    return probs, probs * keep_mask(tuple(probs.shape), p, seed, stream, probs.device)


class SPAttention(torch.autograd.Function):
    """``out = sum_h w_h D_h(softmax(q_h k_h^T)) x`` (SP-MHA, eq. 2), without autograd's h stored maps.

    ``q`` and ``k`` are ``(B, h, T, d/h)`` with ``q`` already scaled by ``sqrt(d/h)^-1``; ``x`` is
    ``(B, T, d)`` (the unprojected values); ``w`` the h combination weights; ``D_h`` inverted dropout
    with rate ``p`` on each head's probabilities (masks from ``seed``, one stream per chunk).

    Backward, per chunk, with ``P_h`` the maps, ``M_h`` the keep masks, ``s = 1 / (1 - p)``,
    ``A = sum_h w_h s M_h P_h`` and ``G = dout x^T``: ``dx = A^T dout``,
    ``dw_h = s <M_h P_h, G>``, ``dP_h = w_h s M_h G``, ``dS_h = P_h (dP_h - rowsum(dP_h P_h))``
    ``= w_h s (E_h - P_h rowsum(E_h))`` with ``E_h = M_h P_h G`` (one product serves ``dw`` and ``dS``),
    ``dq_h = dS_h k_h``, ``dk_h = dS_h^T q_h``.

    Under autocast, ``q`` and ``k`` arrive in half precision: the scores, the softmax, the dropout and
    the combination stay in float32, while the three products with ``x`` (``A x``, ``dout x^T``,
    ``A^T dout``) take half-precision operands, as autocast runs ``bmm``. The output and ``dx`` are float32.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor,  # noqa: PLR0913
                p: float, seed: int) -> torch.Tensor:
        ctx.dtypes = tuple(t.dtype for t in (q, k, x, w))
        low = ctx.dtypes[0] if ctx.dtypes[0] in (torch.bfloat16, torch.float16) else None
        compute = _compute_dtype(*ctx.dtypes)
        with torch.autocast(device_type=q.device.type, enabled=False):
            q, k, x, w = (t.to(compute) for t in (q, k, x, w))
            xl = x.to(low) if low else x
            b, h, t, _ = q.shape
            out = torch.empty_like(x)
            ws = (w * (1.0 / (1.0 - p))).view(1, 1, h)
            for c, sl in enumerate(_chunks(b, h * t * t)):
                kept = _kept_maps(q[sl], k[sl], p, seed, c)[1]
                comb = (ws @ kept.reshape(kept.shape[0], h, t * t)).view(-1, t, t)
                _bmm(comb, xl[sl], out[sl])
        ctx.save_for_backward(q, k, x, w)
        ctx.p, ctx.seed, ctx.low = p, seed, low
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        with torch.autocast(device_type=dout.device.type, enabled=False):
            q, k, x, w = ctx.saved_tensors
            dout = dout.to(x.dtype).contiguous()
            p, scale = ctx.p, 1.0 / (1.0 - ctx.p)
            b, h, t, _ = q.shape
            ws = w * scale
            dq, dk, dx = torch.empty_like(q), torch.empty_like(k), torch.empty_like(x)
            dw = torch.zeros(h, dtype=q.dtype, device=q.device)
            xl, dl = (x.to(ctx.low), dout.to(ctx.low)) if ctx.low else (x, dout)
            for c, sl in enumerate(_chunks(b, h * t * t)):
                n = dout[sl].shape[0]
                probs, kept = _kept_maps(q[sl], k[sl], p, ctx.seed, c)
                comb = (ws.view(1, 1, h) @ kept.reshape(n, h, t * t)).view(n, t, t)
                _bmm(comb.transpose(1, 2), dl[sl], dx[sl])
                g = torch.bmm(dl[sl], xl[sl].transpose(1, 2)).to(x.dtype)  # (n, t, t)
                # e_h = M_h P_h G, r_h = rowsum(e_h): dw_h = s sum(r_h), dS_h = w_h s (e_h - P_h r_h)
                e = kept * g.unsqueeze(1)
                r = e.sum(-1, keepdim=True)
                dw += r.sum((0, 2, 3)) * scale
                ds = (e - probs * r) * ws.view(1, h, 1, 1)
                torch.matmul(ds, k[sl], out=dq[sl])
                torch.matmul(ds.transpose(-1, -2), q[sl], out=dk[sl])
        grads = (dq, dk, dx, dw)
        return (*(g.to(dt) for g, dt in zip(grads, ctx.dtypes, strict=True)), None, None)
