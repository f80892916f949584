"""Attention helpers: head split/merge and scaled dot-product attention against torch's own."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from biosig_lightning.models.modules.attention import merge_heads, softmax_attention, split_heads


def test_split_heads_then_attention_then_merge_matches_torch_multihead_layout() -> None:
    """``softmax(q k^T / sqrt(dh)) v`` per head equals ``F.scaled_dot_product_attention``; head ``h`` of q
    holds columns ``h dh : (h + 1) dh`` of the q block, and merging puts them back there."""
    torch.manual_seed(0)
    b, n, heads, dh = 2, 5, 3, 4
    qkv = torch.randn(b, n, 3 * heads * dh)
    q, k, v = split_heads(qkv, heads)
    assert q.shape == (b, heads, n, dh)
    torch.testing.assert_close(q[:, 1], qkv[..., dh:2 * dh])
    torch.testing.assert_close(v[:, 2], qkv[..., 2 * heads * dh + 2 * dh:2 * heads * dh + 3 * dh])
    torch.testing.assert_close(softmax_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(merge_heads(q), qkv[..., :heads * dh])
