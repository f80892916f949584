"""Forward-FLOP counting that sees every matmul, fused attention kernels included.

``biosig profile`` reports FLOPs as ``torch.utils.flop_counter`` counts them (two per
multiply-add, attention matmuls included; docs/architecture.md). Two fast paths hide work
from that counter, so :func:`count_forward_flops` turns both off while it counts:

* in eval mode ``nn.MultiheadAttention`` / ``F.scaled_dot_product_attention`` dispatch to
  a fused CPU kernel with no FLOP formula, which drops the ``QK^T`` and ``AV`` products
  (a third of the TSLib Transformer's FLOPs at APAVA's shape);
* under ``no_grad`` ``nn.TransformerEncoder`` takes its fused fast path, which the counter
  cannot see at all.

Forcing the math SDPA backend with grad mode on gives the same numbers as the model's
training-mode forward, and the result does not depend on the device.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["count_forward_flops"]


def count_forward_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Forward FLOPs of ``model(x)`` (for one sample, pass a batch of one) as the torch counter counts
    them."""
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())
