"""Fixed sinusoidal positional encodings (Transformer baseline, BioFormer, Medformer).

:func:`sinusoidal_positions` / :class:`SinusoidalPositionalEncoding`: the fixed sine/cosine
position table of Vaswani et al. (2017), Sec. 3.5, ``PE[p, 2i] = sin(p / 10000^(2i/d))`` and
``PE[p, 2i+1] = cos(p / 10000^(2i/d))``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["SinusoidalPositionalEncoding", "sinusoidal_positions"]


def sinusoidal_positions(n_positions: int, d_model: int) -> torch.Tensor:
    """Return the fixed sinusoidal position table of shape ``(n_positions, d_model)``.

    Even columns hold ``sin(p * w_i)``, odd columns ``cos(p * w_i)`` with
    ``w_i = 10000^(-2i/d_model)`` (Vaswani et al., 2017, Sec. 3.5). An odd ``d_model``
    is allowed: the last (sine) column simply has no cosine partner.
    """
    if n_positions < 1 or d_model < 1:
        raise ValueError(
            f"sinusoidal_positions needs n_positions >= 1 and d_model >= 1, got {n_positions}, {d_model}"
        )
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    # Frequencies are computed in float64 so long tables (thousands of steps) keep full
    # float32 precision after the cast.
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.to(torch.float32)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal position table to token embeddings, then applies dropout.

    Input and output are ``(batch, tokens, d_model)``. The table is a non-persistent
    buffer: it is rebuilt from ``max_len`` and ``d_model`` on construction, so it never
    enters checkpoints and follows the module across devices and dtypes.
    """

    pe: torch.Tensor  # buffer (max_len, d_model)

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("pe", sinusoidal_positions(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_tokens = x.shape[1]
        if n_tokens > self.pe.shape[0]:
            raise ValueError(
                f"SinusoidalPositionalEncoding built for at most {self.pe.shape[0]} tokens, got {n_tokens}"
            )
        return self.dropout(x + self.pe[:n_tokens].to(dtype=x.dtype))

