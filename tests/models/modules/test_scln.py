"""SCLN (BioFormer Sec. 4.3): ``h_hat + alpha (gamma h_hat + beta - h_hat)``, conditioned on the token
mean."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.scln import SampleConditionalLayerNorm as SCLN


def test_scln_interpolates_layernorm_and_its_modulation_by_the_token_mean() -> None:
    """At initialisation it is LayerNorm; after its MLP's last layer moves, the output is the equation
    evaluated directly with ``gamma, beta = MLP(mean over tokens of h)``."""
    torch.manual_seed(0)
    d, alpha = 8, 0.3
    scln = SCLN(d, alpha=alpha).eval()
    h = torch.randn(3, 5, d) + torch.arange(5.0)[None, :, None]  # tokens differ, so mean != first token
    torch.testing.assert_close(scln(h), scln.norm(h))
    with torch.no_grad():
        scln.mlp[-1].weight.normal_()
        scln.mlp[-1].bias.normal_()
    h_hat = torch.nn.functional.layer_norm(h, (d,), eps=1e-5)
    gamma, beta = scln.mlp(h.mean(dim=1)).chunk(2, dim=-1)
    expected = (1 - alpha) * h_hat + alpha * (gamma[:, None] * h_hat + beta[:, None])
    torch.testing.assert_close(scln(h), expected)
