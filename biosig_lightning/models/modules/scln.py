"""Sample-Conditional LayerNorm (BioFormer Sec. 4.3, Eqs. 10-11)."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

__all__ = ["SampleConditionalLayerNorm"]


class SampleConditionalLayerNorm(nn.Module):
    """LayerNorm whose scale and shift are blended with ones predicted from the sample itself.

    For tokens ``h`` ``(B, N, D)``: ``h_hat = LN(h)`` (with its own affine weights);
    ``[gamma, beta] = MLP(stopgrad(mean_t h))`` (Eq. 10, the mean over tokens is detached so
    the calibration branch cannot reshape the encoder through its input); and
    ``h_out = (1 - alpha) h_hat + alpha (gamma * h_hat + beta)`` (Eq. 11), computed as
    ``h_hat + alpha (gamma * h_hat + beta - h_hat)`` so that ``alpha = 0`` returns exactly
    ``LN(h)``.

    The MLP follows the authors' code: ``Linear(D, D/2) -> ReLU -> Linear(D/2, D) -> ReLU
    -> Linear(D, 2D)``; its last layer starts at zero weight with bias ``gamma = 1,
    beta = 0``, so the module equals LayerNorm at initialisation for every ``alpha``.
    With ``D = 128`` it holds 49,856 parameters.
    """

    def __init__(self, d_model: int, alpha: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"SCLN alpha must lie in [0, 1], got {alpha}")
        if d_model < 2:
            raise ValueError(f"SCLN needs d_model >= 2, got {d_model}")
        self.alpha = float(alpha)
        self.d_model = d_model
        self.norm = nn.LayerNorm(d_model, eps=eps)
        hidden = d_model // 2
        self.mlp = nn.Sequential(
            nn.Linear(d_model, hidden),
            nn.ReLU(),
            nn.Linear(hidden, d_model),
            nn.ReLU(),
            nn.Linear(d_model, 2 * d_model),
        )
        last = cast(nn.Linear, self.mlp[-1])
        nn.init.zeros_(last.weight)
        with torch.no_grad():
            last.bias.copy_(torch.cat([torch.ones(d_model), torch.zeros(d_model)]))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Normalised tokens ``(B, N, D)``."""
        h_hat = self.norm(h)
        gamma, beta = self.mlp(h.mean(dim=1).detach()).chunk(2, dim=-1)
        return h_hat + self.alpha * (gamma.unsqueeze(1) * h_hat + beta.unsqueeze(1) - h_hat)
