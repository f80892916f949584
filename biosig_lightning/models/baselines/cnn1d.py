"""Raw-waveform 1D convolutional classifier.

SD-Former's "Raw Waveform 1D-CNN" baseline (Sec. 6, Baselines: "5 convolutional blocks,
width 128"; Table 5: about 1.2 M parameters on Sleep-EDF).

Our reading of "block". Five blocks of a single ``128 x 128 x 7`` convolution hold only
0.46 M parameters, far from the 1.2 M of Table 5. A VGG-style block of *two*
convolutions (each Conv1d -> BatchNorm -> activation) followed by a stride-2 max-pool
gives 1.04 M at Sleep-EDF's shape (2 channels, 5 classes), the closest reading to the
table with kernel 7, so ``convs_per_block=2`` is the default (``kernel_size=8`` would
give 1.18 M); ``convs_per_block=1`` gives the single-conv reading.
After the last block, global average pooling over time gives a ``width``-dimensional
embedding, then dropout and a linear head.

Pooling uses ``ceil_mode`` so that short or odd-length windows never shrink to zero
length; a block whose input is already a single step skips its pooling. The receptive
field of one output step after five blocks of two kernel-7 convolutions is 404 samples
(4 s at 100 Hz), so the global average pools over overlapping multi-second views.

``forward(x) == head(forward_features(x))`` holds exactly, so feature-level
domain-generalisation losses (MMD, CORAL, DANN) can use the two halves separately.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel, check_dropout, check_positive_ints
from biosig_lightning.models.catalog import register_backbone

__all__ = ["CNN1D"]

Activation = Literal["gelu", "relu"]


@register_backbone(
    # experiments/sdformer/baselines/cnn1d_*.yaml (the class defaults) and experiments/overlays/demo.yaml (a
    # small CNN)
    shapes=["sleepedf", "chbmit", "ptbxl", "synthetic"],
    kwargs={"synthetic": {"width": 32, "n_blocks": 4, "convs_per_block": 1}},
    # SD-Former Table 5 gives "1.2 M" (rounded; no public code) for its Raw Waveform 1D-CNN; this is
    # the exact count of our reading of "5 blocks, width 128" (module docstring): 10 bias-free
    # convolutions (2*128*7 + 9 * 128*128*7), 10 BatchNorms (2*128 each), head 128*5 + 5.
    param_pins={"sleepedf": 2 * 128 * 7 + 9 * 128 * 128 * 7 + 10 * 2 * 128 + 128 * 5 + 5},
    test_kwargs={"width": 16, "n_blocks": 3},
)
class CNN1D(BiosignalModel):
    """Stack of convolution blocks over raw signals, global average pooling, linear head.

    Args:
        n_chans: input channels ``C``.
        n_outputs: number of classes.
        n_times: samples per window ``T`` (decides which blocks still pool).
        sfreq: sampling rate in Hz (recorded only; the model does not depend on it).
        width: channels of every convolution (SD-Former: 128).
        n_blocks: number of blocks, each ending in a stride-2 max-pool (SD-Former: 5).
        kernel_size: temporal kernel of every convolution ("same" padding).
        convs_per_block: Conv1d-BatchNorm-activation units per block (see module docstring).
        dropout: dropout on the pooled features before the head.
        activation: ``"gelu"`` or ``"relu"``.

    Shapes: ``x`` is ``(batch, n_chans, n_times)``; ``forward`` returns logits
    ``(batch, n_outputs)`` and ``forward_features`` returns ``(batch, width)``.

    ``style_site`` / ``style_channel_dim`` tell :class:`biosig_lightning.robust.DGTask`
    where MixStyle/DSU act: the ``(B, width, T')`` output of the first block (its max-pool,
    or its last activation when it does not pool), as BioFormer C.4 does for EEGNet. The
    site's index in :attr:`blocks` depends on ``convs_per_block``, so it is set per instance.
    """

    style_site: str
    style_channel_dim: int = 1

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        width: int = 128, n_blocks: int = 5, kernel_size: int = 7, convs_per_block: int = 2,
        dropout: float = 0.1, activation: Activation = "gelu",
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("CNN1D", width=width, n_blocks=n_blocks, kernel_size=kernel_size,
                            convs_per_block=convs_per_block)
        check_dropout("CNN1D", dropout=dropout)
        if activation not in ("gelu", "relu"):
            raise ValueError(f"activation must be 'gelu' or 'relu', got {activation!r}")

        layers: list[nn.Module] = []
        in_ch, length = n_chans, n_times
        for block in range(n_blocks):
            for _ in range(convs_per_block):
                # No conv bias: the following BatchNorm's shift makes it redundant.
                layers.append(nn.Conv1d(in_ch, width, kernel_size, padding="same", bias=False))
                layers.append(nn.BatchNorm1d(width))
                layers.append(nn.GELU() if activation == "gelu" else nn.ReLU())
                in_ch = width
            if length > 1:
                layers.append(nn.MaxPool1d(kernel_size=2, stride=2, ceil_mode=True))
                length = math.ceil(length / 2)
            if block == 0:
                self.style_site = f"blocks.{len(layers) - 1}"
        self.blocks = nn.Sequential(*layers)
        self.feature_dropout = nn.Dropout(dropout)
        self.feature_dim = width
        self.head = nn.Linear(width, n_outputs)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Globally averaged embedding ``(batch, width)`` that :attr:`head` maps to logits."""
        self.check_input(x)
        return self.feature_dropout(self.blocks(x).mean(dim=-1))
