"""Domain-generalisation blocks: gradient reversal, Deep CORAL and multi-kernel MMD against their
equations."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.domain import DEFAULT_MMD_SCALES, GradientReversal, coral_loss, mmd_loss


def test_gradient_reversal_is_the_identity_forward_and_negates_the_gradient_backward() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    out = GradientReversal(0.7)(x)
    torch.testing.assert_close(out, x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, -0.7))


def test_coral_is_the_scaled_squared_distance_of_the_unbiased_covariances() -> None:
    """Sun & Saenko (2016), Eq. 1: ``||C_a - C_b||_F^2 / (4 d^2)`` with covariances of Eq. 2."""
    torch.manual_seed(0)
    a, b = torch.randn(6, 5), 2.0 * torch.randn(9, 5) + 1.0
    expected = (torch.cov(a.T) - torch.cov(b.T)).pow(2).sum() / (4 * 5**2)
    torch.testing.assert_close(coral_loss(a, b), expected)


def test_mmd_is_the_biased_estimator_with_a_median_bandwidth_kernel_mix() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 3), torch.randn(5, 3) + 0.5
    z = torch.cat([a, b]).double()
    d2 = torch.cdist(z, z).pow(2)
    h = d2[~torch.eye(9, dtype=torch.bool)].median()
    k = sum(torch.exp(-d2 / (s * h)) for s in DEFAULT_MMD_SCALES) / len(DEFAULT_MMD_SCALES)
    expected = k[:4, :4].mean() + k[4:, 4:].mean() - 2 * k[:4, 4:].mean()
    torch.testing.assert_close(mmd_loss(a, b).double(), expected, rtol=1e-5, atol=1e-6)
    assert mmd_loss(a, a).abs().item() < 1e-6
