"""Structure-preserving multi-head attention (SP-MHA, SPDTransNet eq. 2) and its encoder layer."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from biosig_lightning.models.spdtransnet.recompute import SPAttention, draw_seed

__all__ = ["Factors", "HeadWeights", "Impl", "SPEncoderLayer", "SPMultiheadAttention"]

HeadWeights = Literal["softmax", "free"]
Impl = Literal["auto", "sdpa", "fused", "recompute"]
# : ``(u, A, c)``: a layer input ``x = u A^T + c`` given through narrower tokens ``u``
# (:meth:`SPMultiheadAttention.forward`)
Factors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _project(x: torch.Tensor, weight: torch.Tensor,
             bias: torch.Tensor, factors: Factors | None) -> torch.Tensor:
    """``x W^T + b``, or ``u (W A)^T + (c W^T + b)`` from ``factors = (u, A, c)`` with ``x = u A^T + c``."""
    if factors is None:
        return F.linear(x, weight, bias)
    u, a, c = factors
    return F.linear(u, weight @ a) + F.linear(c, weight, bias)


class SPMultiheadAttention(nn.Module):
    """``MHA_SP(X) = C(sm(L_Q(X) L_K(X)^T / sqrt(d/h))) X`` (eq. 2): h attention maps, one combination, no V
    map.

    ``L_Q`` and ``L_K`` are banks of h linear maps ``R^d -> R^{d/h}`` (one ``d x d`` matrix plus bias
    each, split into heads); ``C`` combines the h post-softmax maps with learned weights ``w``; V is the
    unprojected input, so every output token is a linear combination of input tokens (Sec. 2.1).

    Computed in one of three ways (``impl``), equal up to round-off:

    * ``fused`` (``auto``'s choice in eager mode): :class:`~.recompute.SPAttention`, the combined map
      ``sum_h w_h A_h`` formed and applied to V once per chunk of sequences (one full-width product
      instead of h), keeping only ``q, k, x``, ``w`` and a dropout seed; backward recomputes the maps
      chunk by chunk. Of the three, the leanest in memory.
    * ``sdpa``: ``(sum_h w_h A_h) V = sum_h w_h (A_h V)``, so each head is an ordinary
      ``scaled_dot_product_attention`` with queries/keys of width ``d/h`` and the full-width value
      ``V`` (shared, expanded without a copy), and the h outputs are summed with ``w``. With a value
      width unlike the key width (351 against 39) torch falls back to its math kernel, which keeps the
      h maps and h full-width outputs for backward (more time and memory than ``fused`` on a GPU,
      docs/performance.md). ``auto``'s choice under ``torch.compile``: ``fused`` draws its dropout
      seed on the host (``.item()``), a graph break, while this is one graph that Inductor fuses.
    * ``recompute``: the combined map formed by plain autograd ops inside ``torch.utils.checkpoint``
      (the forward is run twice, so its dropout masks are drawn twice); kept as a reference.

    Attention dropout (``dropout``) acts on each head's probabilities before the combination, as in the
    authors' code.

    Args:
        d_model: token width ``d(m)``; must be divisible by ``heads``.
        heads: ``h``.
        dropout: dropout on the attention probabilities (training only).
        head_weights: ``softmax`` (default): ``w = softmax(theta)``, a convex combination, so each
            combined map is row-stochastic and every output token is a weighted log-Euclidean mean
            of the input tokens. ``free``: ``w = theta`` unconstrained (the authors' code, a
            ``Linear(h, 1, bias=False)`` whose weights may be negative and need not sum to one).
            Reading: the paper's "weighted linear combination of the h post-softmax attention maps"
            is read as a weighted average; both have h parameters.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, head_weights: HeadWeights = "softmax",
                 impl: Impl = "auto") -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"SP-MHA: d_model={d_model} is not divisible by heads={heads} (d(m)/h must be "
                             f"an integer)")
        if head_weights not in ("softmax", "free"):
            raise ValueError(f"SP-MHA: head_weights must be 'softmax' or 'free', got {head_weights!r}")
        if impl not in ("auto", "sdpa", "fused", "recompute"):
            raise ValueError(f"SP-MHA: impl must be 'auto', 'sdpa', 'fused' or 'recompute', got {impl!r}")
        self.d_model, self.heads, self.dropout, self.head_weights = d_model, heads, dropout, head_weights
        self.impl = impl
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        bound = 1.0 / math.sqrt(heads)  # the code's Linear(h, 1) Kaiming-uniform range
        self.theta = nn.Parameter(torch.empty(heads).uniform_(-bound, bound))

    def weights(self) -> torch.Tensor:
        """The h combination weights ``w``."""
        return self.theta.softmax(0) if self.head_weights == "softmax" else self.theta

    def _qk(self, x: torch.Tensor, factors: Factors | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q = _project(x, self.q.weight, self.q.bias, factors).view(b, t,
                                                                  self.heads, d // self.heads).transpose(1, 2)
        k = _project(x, self.k.weight, self.k.bias, factors).view(b, t,
                                                                  self.heads, d // self.heads).transpose(1, 2)
        return q, k

    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """The combined ``(B, T, T)`` map ``C(sm(...))`` (no dropout), for inspection and tests."""
        q, k = self._qk(x)
        maps = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
        return torch.einsum("h,bhij->bij", self.weights(), maps)

    def _combined(self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        maps = (q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5)).softmax(-1)
        if self.training and self.dropout > 0:
            maps = F.dropout(maps, self.dropout)
        return torch.einsum("h,bhij->bij", w, maps) @ x

    def _qk_heads(self, x: torch.Tensor, width: int, factors: Factors | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` (pre-scaled by ``(d/h)^-1/2``) and ``k`` as contiguous ``(B, h, T, width)`` heads from one
        product with the stacked weights ``[W_q / sqrt(d/h); W_k]``: the input is read (and under autocast
        cast to half precision) once, not twice. Columns past ``d/h`` are zero (``width >= d/h``)."""
        b, t, d = x.shape
        dh = d // self.heads
        scale = dh ** -0.5
        weight = torch.cat([self.q.weight * scale, self.k.weight])
        bias = torch.cat([self.q.bias * scale, self.k.bias])
        if width != dh:
            weight = F.pad(weight.view(2 * self.heads, dh, d), (0, 0, 0, width - dh)).reshape(
                2 * self.heads * width, d
            )
            bias = F.pad(bias.view(2 * self.heads, dh), (0, width - dh)).reshape(-1)
        qk = _project(x, weight, bias, factors).view(b, t, 2, self.heads, width)
        # unbind (not two index ops): its backward stacks dq and dk into one tensor
        q, k = qk.permute(2, 0, 3, 1, 4).contiguous().unbind(0)
        return q, k

    def _fused(self, x: torch.Tensor, factors: Factors | None, width: int) -> torch.Tensor:
        """The ``fused`` way, with heads of ``width >= d/h`` columns (zero past ``d/h``: same scores)."""
        q, k = self._qk_heads(x, width, factors)
        p = self.dropout if self.training else 0.0
        return SPAttention.apply(q, k, x.contiguous(), self.weights(), p, draw_seed() if p > 0 else 0)

    def forward(self, x: torch.Tensor, factors: Factors | None = None) -> torch.Tensor:
        """SP-MHA of ``x`` ``(B, T, d)``.

        ``factors``: optionally ``(u, A, c)`` with ``x = u A^T + c`` (``u`` of shape ``(B, T, r)``, ``A``
        ``(d, r)``, ``c`` ``(T, d)``), which the caller guarantees. The queries and keys are then computed
        as ``u (W A)^T + (c W^T + b)``, the same maps up to round-off, for r/d of the products' cost: the
        first intra-epoch layer's input is the embedding of 45-number tokens plus the positional
        encoding, so its q and k maps cost 45/351 of theirs in both passes.
        """
        if self.impl == "auto":
            impl = "sdpa" if torch.compiler.is_compiling() else "fused"
        else:
            impl = self.impl
        if impl == "fused":
            return self._fused(x, factors, x.shape[-1] // self.heads)
        q, k = self._qk(x, factors)
        w = self.weights()
        if impl == "recompute":
            if torch.is_grad_enabled():
                return checkpoint(self._combined, q, k, x, w, use_reentrant=False)
            return self._combined(q, k, x, w)
        v = x.unsqueeze(1).expand(-1, self.heads, -1, -1)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return torch.einsum("h,bhtd->btd", w, out)


class SPEncoderLayer(nn.Module):
    """Post-norm Transformer encoder layer with SP-MHA and a triangular feed-forward block.

    ``x = LN(x + Drop(SP-MHA(x)))``, ``x = LN(x + Drop(FF(x)))`` with
    ``FF = Linear(d, d_ff) -> ReLU -> Drop -> Linear(d_ff, d)``; ``d_ff`` is a triangular number, so
    both maps are triangular maps between Sym spaces (Sec. 2.2). Our own layer, not a subclass of
    ``nn.TransformerEncoderLayer``: torch's fused inference path would bypass SP-MHA (eval, no_grad, even head
    count).
    """

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1,
                 head_weights: HeadWeights = "softmax", impl: Impl = "auto") -> None:
        super().__init__()
        self.attn = SPMultiheadAttention(d_model, heads, dropout, head_weights, impl)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, factors: Factors | None = None) -> torch.Tensor:
        """The layer on ``x``; ``factors``: ``x`` as ``u A^T + c`` for SP-MHA's q and k (see its
        ``forward``)."""
        x = self.norm1(x + self.drop1(self.attn(x, factors)))
        return self.norm2(x + self.drop2(self.ff(x)))
