"""Attention + feed-forward half of a BioFormer hybrid encoder layer (Sec. 4.1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MaskDropout", "SegmentedEncoderLayer"]

FfnResidual = Literal["normed", "raw"]


class MaskDropout(nn.Module):
    """Inverted dropout whose mask is drawn as ``rand_like(x) >= p``.

    Same distribution and scaling as :class:`torch.nn.Dropout` (keep each entry with
    probability ``1 - p``, scale kept entries by ``1 / (1 - p)``), but about twice as fast
    on CPU, where ``bernoulli_`` is markedly slower than ``uniform_``. BioFormer draws
    ~55 M dropout entries per APAVA training step (mostly on attention weights), so this
    matters for the step time. Identity in eval mode or with ``p = 0``.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return x * (torch.rand_like(x) >= self.p) * (1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class SegmentedEncoderLayer(nn.Module):
    """Post-norm Transformer layer applied to several token sequences with shared weights.

    BioFormer runs the same layer on each pyramid branch separately (no cross-branch
    attention). Here the branches are laid end to end on the token axis: projections,
    feed-forward and norms act token-wise, so they run once on all tokens; only the
    attention itself is computed per sequence, which is exactly the per-branch layer.

    ``a = x + Drop(MHA(x))``, ``y = LN1(a)``, ``f = Drop(W2 Drop(GELU(W1 y)))``, then
    ``LN2(y + f)`` for ``ffn_residual="normed"`` (Vaswani et al. / TSLib post-norm layer,
    the paper's "standard" Transformer) or ``LN2(a + f)`` for ``"raw"`` (the authors'
    BioFormer code adds the FFN to the un-normalised ``a``). Attention has ``n_heads``
    heads with biased q/k/v/o projections and dropout on the attention weights.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        seq_lens: Sequence[int],
        ffn_residual: FfnResidual = "normed",
    ) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if ffn_residual not in ("normed", "raw"):
            raise ValueError(f"ffn_residual must be 'normed' or 'raw', got {ffn_residual!r}")
        self.n_heads = n_heads
        self.seq_lens = [int(n) for n in seq_lens]
        self.ffn_residual = ffn_residual
        self.scale = (d_model // n_heads) ** -0.5
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = MaskDropout(dropout)
        self.attn_dropout = MaskDropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention computed separately within each token sequence.

        Written out (matmul, softmax, dropout, matmul) rather than through
        ``scaled_dot_product_attention``: with attention dropout the CPU runs this same
        math path anyway, and ``torch.utils.flop_counter`` does not count the fused CPU
        kernel, which would hide the attention FLOPs from ``biosig profile``.
        """
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q = q * self.scale
        parts = []
        start = 0
        for length in self.seq_lens:
            sl = slice(start, start + length)
            weights = self.attn_dropout(torch.softmax(q[:, :, sl] @ k[:, :, sl].transpose(-2, -1), dim=-1))
            parts.append(weights @ v[:, :, sl])
            start += length
        return self.out(torch.cat(parts, dim=2).transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x + self.dropout(self.attention(x))
        y = self.norm1(a)
        f = self.dropout(self.ff2(self.dropout(F.gelu(self.ff1(y)))))
        return self.norm2((y if self.ffn_residual == "normed" else a) + f)
