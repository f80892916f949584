"""SP-MHA (eq. 2) by plain autograd ops, the reference the fused computations are tested against."""

from __future__ import annotations

import math
from types import ModuleType

import torch

from biosig_lightning.models.spdtransnet import SPMultiheadAttention, recompute


def reference_sp_mha(att: SPMultiheadAttention, x: torch.Tensor, seed: int,
                     masks: ModuleType = recompute) -> torch.Tensor:
    """Eq. 2 with the h maps kept by autograd, and the dropout masks that a fused function draws from
    ``seed`` (``masks``: the module of that function, with its ``drop_mask`` and ``_chunks``)."""
    q, k = att._qk(x)
    maps = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
    drops = [masks.drop_mask((sl.stop - sl.start, *maps.shape[1:]), att.dropout, seed, c)
             for c, sl in enumerate(masks._chunks(x.shape[0], maps[0].numel()))]
    maps = maps.masked_fill(torch.cat(drops), 0.0) / (1 - att.dropout)
    return torch.einsum("h,bhij->bij", att.weights(), maps) @ x
