"""Multi-head attention helpers shared by the token models (BioFormer, Medformer, PatchTST, SD-Former).

* :func:`split_heads`: a fused ``(B, N, 3 D)`` q/k/v projection -> three ``(B, H, N, D / H)`` tensors.
* :func:`merge_heads`: ``(B, H, N, dh)`` -> ``(B, N, H dh)``, the inverse of the head split.
* :func:`softmax_attention`: ``softmax(q k^T / sqrt(dh)) v`` with an optional dropout on the
  attention weights, written out (matmul, softmax, dropout, matmul) rather than through
  ``scaled_dot_product_attention``: with attention dropout the CPU runs this same math path
  anyway, and ``torch.utils.flop_counter`` does not count the fused CPU kernel, which would
  hide the attention FLOPs from ``biosig profile``.
* :class:`PostNormLayer`: the post-norm residual + feed-forward half of a TSLib encoder layer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.modules.dropout import MaskDropout

__all__ = ["PostNormLayer", "merge_heads", "softmax_attention", "split_heads"]


def split_heads(qkv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(..., N, 3 D)`` (q, k, v concatenated on the last axis) -> q, k, v each ``(..., H, N, D / H)``."""
    *lead, n_tokens, width3 = qkv.shape
    d_head = width3 // (3 * n_heads)
    heads = qkv.view(*lead, n_tokens, 3, n_heads, d_head).movedim(-3, 0).transpose(-3, -2)
    return heads[0], heads[1], heads[2]


def merge_heads(out: torch.Tensor) -> torch.Tensor:
    """``(..., H, N, dh)`` -> ``(..., N, H dh)``."""
    return out.transpose(-3, -2).flatten(-2)


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: nn.Module | None = None
) -> torch.Tensor:
    """``Drop(softmax(q k^T / sqrt(dh))) v`` for ``(..., N, dh)`` queries, keys and values."""
    weights = torch.softmax((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1), dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v


class PostNormLayer(nn.Module):
    """Base of the TSLib-style post-norm encoder layers (BioFormer's, Medformer's).

    A subclass registers its attention parameters, then calls :meth:`build_post_norm`, which
    adds ``ff1``, ``ff2``, ``norm1``, ``norm2``, ``dropout`` and ``attn_dropout`` as its own
    attributes (so parameter names, order and initialisation are those of a layer that
    declares them itself). :meth:`post_norm` then returns
    ``LN2(r + Drop(W2 Drop(GELU(W1 y))))`` with ``a = x + Drop(attn)``, ``y = LN1(a)`` and the
    residual ``r = y`` (``"normed"``: the standard post-norm layer of Vaswani et al. and
    TSLib/Medformer) or ``r = a`` (``"raw"``: BioFormer's authors' code, which adds the FFN
    to the un-normalised ``a``). ``attn_dropout`` (same rate) is for the attention weights.
    """

    def build_post_norm(self, d_model: int, d_ff: int, dropout: float, residual: str = "normed") -> None:
        if residual not in ("normed", "raw"):
            raise ValueError(f"ffn_residual must be 'normed' or 'raw', got {residual!r}")
        self.ffn_residual = residual
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = MaskDropout(dropout)
        self.attn_dropout = MaskDropout(dropout)

    def post_norm(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        a = x + self.dropout(attn)
        y = self.norm1(a)
        f = self.dropout(self.ff2(self.dropout(F.gelu(self.ff1(y)))))
        return self.norm2((y if self.ffn_residual == "normed" else a) + f)
