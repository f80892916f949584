"""Pyramid Convolutional Embedding with in-model augmentation (BioFormer Appendix B.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from biosig_lightning.models.modules.augment import augment_each, parse_augmentation
from biosig_lightning.models.modules.encodings import SinusoidalPositionalEncoding

__all__ = ["PyramidConvEmbedding"]

class PyramidConvEmbedding(nn.Module):
    """Token embedding + positions, then one strided Conv-BN-GELU stack per pyramid level.

    ``E = TokenEmbed(X) + PosEmbed`` (B.1): a bias-free ``Conv1d(C, D, 3)`` with circular
    padding (Kaiming-normal, as in the authors' code) plus the fixed sinusoidal table. The
    branch for factor ``f`` stacks ``log2 f`` blocks ``Conv1d(D, D, 3, stride 2, pad 1) ->
    BatchNorm1d -> GELU``, giving ``ceil(T / f)`` tokens; branches share no weights.

    Augmentation (B.1, and the authors' code): in training mode every branch draws one
    operator uniformly from ``augmentations`` (per forward pass, the whole batch gets the
    same operator) and applies it to the embedding ``E`` before its convolutions
    (:func:`~biosig_lightning.models.modules.augment.augment_each`: the draws stay on the
    device). Draws use torch's RNG, so ``seed_everything`` makes them reproducible. Eval
    mode never augments.

    Output: the branch token sequences laid end to end, ``(B, sum_j ceil(T / f_j), D)``;
    :attr:`seq_lens` gives the lengths.
    """

    def __init__(
        self,
        n_chans: int,
        n_times: int,
        d_model: int,
        factors: Sequence[int] = (2, 4, 8),
        augmentations: Sequence[str] = (),
    ) -> None:
        super().__init__()
        if any(f < 2 or f & (f - 1) for f in factors):
            raise ValueError(f"pyramid factors must be powers of two >= 2, got {list(factors)}")
        self.token = nn.Conv1d(n_chans, d_model, kernel_size=3, padding=1,
                               padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.token.weight, mode="fan_in", nonlinearity="leaky_relu")
        self.positions = SinusoidalPositionalEncoding(d_model, max_len=n_times)
        self.branches = nn.ModuleList(
            nn.Sequential(
                *[
                    layer
                    for _ in range(int(math.log2(f)))
                    for layer in (nn.Conv1d(d_model, d_model, 3, stride=2, padding=1),
                                  nn.BatchNorm1d(d_model), nn.GELU())
                ]
            )
            for f in factors
        )
        self.factors = [int(f) for f in factors]
        self.seq_lens = [_downsampled(n_times, f) for f in self.factors]
        self.augmentations = [parse_augmentation(a) for a in augmentations]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens ``(B, N, D)`` for ``x`` ``(B, C, T)``."""
        e = self.positions(self.token(x).transpose(1, 2)).transpose(1, 2)  # (B, D, T)
        if self.training and self.augmentations:
            inputs = augment_each(e, len(self.branches), self.augmentations).unbind(0)
        else:
            inputs = (e,) * len(self.branches)
        return torch.cat([branch(inp) for branch,
                          inp in zip(self.branches, inputs, strict=True)], dim=2).transpose(1, 2)


def _downsampled(n: int, factor: int) -> int:
    for _ in range(int(math.log2(factor))):
        n = (n - 1) // 2 + 1  # Conv1d(k=3, stride=2, pad=1)
    return n
