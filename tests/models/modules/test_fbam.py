"""FBAM (BioFormer Sec. 4.2, Algorithm 1): with zero gain and zero phase it returns its input."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models.modules.alignment import FBAM


@pytest.mark.parametrize("use_phase", [False, True])
def test_fbam_with_zero_gain_and_phase_is_the_identity(use_phase: bool) -> None:
    """``band_attention="static"`` starts every head's raw output at zero, so ``g = tanh(0) = 0`` and
    ``beta = 0``: Eq. 6 gives ``A' = A`` and Eq. 7 ``P' = P``, so ``A' P' = Z`` up to Algorithm 1's ``eps``
    and the inverse rFFT returns the tokens unchanged (a spectrum scaled by ``A'`` instead of replaced
    by it would square every magnitude)."""
    torch.manual_seed(0)
    module = FBAM(8, 16, n_bands=3, band_attention="static", use_phase=use_phase, eps=1e-6).eval()
    x = 3.0 * torch.randn(2, 16, 8)
    torch.testing.assert_close(module(x), x, rtol=1e-4, atol=1e-4)
