"""Attention + feed-forward half of a BioFormer hybrid encoder layer (Sec. 4.1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from biosig_lightning.models.base import check_heads
from biosig_lightning.models.modules.attention import (
    PostNormLayer,
    merge_heads,
    softmax_attention,
    split_heads,
)

__all__ = ["SegmentedEncoderLayer"]

FfnResidual = Literal["normed", "raw"]


class SegmentedEncoderLayer(PostNormLayer):
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
        check_heads("SegmentedEncoderLayer", d_model, n_heads)
        self.n_heads = n_heads
        self.seq_lens = [int(n) for n in seq_lens]
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.build_post_norm(d_model, d_ff, dropout, ffn_residual)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention computed separately within each token sequence
        (:func:`~biosig_lightning.models.modules.attention.softmax_attention`, written out so
        the FLOP counter sees it)."""
        q, k, v = split_heads(self.qkv(x), self.n_heads)
        parts = [
            softmax_attention(qs, ks, vs, self.attn_dropout)
            for qs, ks,
            vs in zip(q.split(self.seq_lens, 2), k.split(self.seq_lens, 2), v.split(self.seq_lens, 2),
                                  strict=True)
        ]
        return self.out(merge_heads(torch.cat(parts, dim=2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post_norm(x, self.attention(x))
