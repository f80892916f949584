"""Dense-CNN seizure baseline as eeg-gnn-ssl defines it (Saab et al. 2020, dense inception;
``model/densecnn.py``).

The clip is a one-channel ``len x C`` image (``len = T * F``, time along the first axis);
inception blocks with three branches of ``(k, 1)`` convolutions (two of ``k_a``, three of
``k_b``, two of ``k_c``, each followed by ReLU, 'same' padding) are concatenated and densely
merged by ``1 x 1`` convolutions, with temporal max-pools of 7, 5, 5 and 4; then
``Linear(C * 36 * nc * (len // 700), 128)``, BatchNorm1d, ReLU, dropout 0.2 and
``Linear(128, n_classes)``. ``nc = 10`` base channels, no batch norm in the convolutions
(``params.json``: dense_inception, 5 inception layers, 10 channels, dropout 0.2, no batchnorm).

Reading (unused blocks): the reference constructs ``inception_5`` and ``inception_7`` but its
forward pass applies ``inception_4`` and ``inception_6`` twice each instead; we keep that
forward (weights shared between the two applications) and do not build the two unused
blocks, whose parameters never receive a gradient (so our count is lower than the
reference's printed count by exactly those two blocks). Reading (inputs): ``len`` must be at
least 700 positions (the four pools); the reference only runs it on TUSZ FFT clips
(12 s x 100 bins = 1200). Initialisation as the reference: convolutions ``N(0, 2 / (k_h k_w out))``,
linear biases 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.baselines.lstm import two_column
from biosig_lightning.models.catalog import register_backbone

__all__ = ["DenseCNN"]


class _Conv(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, (k, 1), padding=((k - 1) // 2, 0)), nn.ReLU())


class _Inception(nn.Module):
    """Three branches: 2 convs of ``k[0]``, 3 of ``k[1]``, 2 of ``k[2]`` (all ``(k, 1)``), concatenated."""

    def __init__(self, cin: int, width: int, k: tuple[int, int, int]) -> None:
        super().__init__()
        self.a = nn.Sequential(_Conv(cin, width, k[0]), _Conv(width, width, k[0]))
        self.b = nn.Sequential(_Conv(cin, width, k[1]), _Conv(width, width, k[1]), _Conv(width, width, k[1]))
        self.c = nn.Sequential(_Conv(cin, width, k[2]), _Conv(width, width, k[2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), self.b(x), self.c(x)], 1)


@register_backbone(
    "DenseCNN",
    shapes={"tusz": (19, 2, 1200, 200.0), "tusz_classification": (19, 4, 1200, 200.0)},
    test_kwargs={"base_channels": 2},
)
class DenseCNN(BiosignalModel):
    """Args: signal metadata; ``base_channels`` (``nc`` = 10); ``dropout`` 0.2; ``single_logit``."""

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, base_channels: int = 10,
                 dropout: float = 0.2,
                 single_logit: bool = True) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        if n_times < 700:
            raise ValueError(f"DenseCNN pools time by 7 * 5 * 5 * 4 = 700; n_times={n_times} is shorter")
        nc = base_channels
        self.inc0 = _Inception(1, nc, (9, 15, 21))
        self.inc1 = _Inception(3 * nc, 3 * nc, (9, 13, 17))
        self.mix10 = _Conv(12 * nc, 9 * nc)
        self.inc2 = _Inception(9 * nc, 9 * nc, (7, 11, 15))
        self.mix2 = _Conv(27 * nc, 18 * nc)
        self.inc3 = _Inception(18 * nc, 18 * nc, (5, 7, 9))
        self.mix3 = _Conv(54 * nc, 18 * nc)
        self.mix32 = _Conv(36 * nc, 18 * nc)
        self.inc4 = _Inception(18 * nc, 18 * nc, (3, 5, 7))
        self.mix4 = _Conv(54 * nc, 18 * nc)
        self.mix5 = _Conv(54 * nc, 27 * nc)
        self.mix54 = _Conv(45 * nc, 18 * nc)
        self.inc6 = _Inception(18 * nc, 18 * nc, (3, 5, 7))
        self.mix6 = _Conv(54 * nc, 18 * nc)
        self.mix7 = _Conv(54 * nc, 27 * nc)
        self.mix76 = _Conv(45 * nc, 36 * nc)
        self.fc1 = nn.Linear(n_chans * 36 * nc * (n_times // 700), 128)
        self.bn = nn.BatchNorm1d(128)
        self.drop = nn.Dropout(dropout)
        self.single = single_logit and n_outputs == 2
        self.fc2 = nn.Linear(128, 1 if self.single else n_outputs)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0,
                                      math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        s = x.transpose(1, 2).unsqueeze(1)  # (B, 1, len, C)
        s0 = self.inc0(s)
        s = F.max_pool2d(self.mix10(torch.cat([s0, self.inc1(s0)], 1)), (7, 1))
        s0 = self.mix2(self.inc2(s))
        s = F.max_pool2d(self.mix32(torch.cat([s0, self.mix3(self.inc3(s0))], 1)), (5, 1))
        s0 = self.mix4(self.inc4(s))
        s = F.max_pool2d(self.mix54(torch.cat([s0, self.mix5(self.inc4(s0))], 1)), (5, 1))
        s0 = self.mix6(self.inc6(s))
        s = F.max_pool2d(self.mix76(torch.cat([s0, self.mix7(self.inc6(s0))], 1)), (4, 1))
        h = self.drop(torch.relu(self.bn(self.fc1(s.flatten(1)))))
        return two_column(self.fc2(h), self.single)
