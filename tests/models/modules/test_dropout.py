"""MaskDropout: inverted dropout, each entry kept with probability 1 - p and scaled by 1 / (1 - p)."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.dropout import MaskDropout


def test_mask_dropout_keeps_1_minus_p_scaled_and_is_the_identity_in_eval() -> None:
    torch.manual_seed(0)
    p = 0.3
    module = MaskDropout(p)
    x = torch.full((200_000,), 2.0)
    out = module(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # binomial sd ~0.001
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 2.0 / (1 - p)))
    assert module.eval()(x) is x
