"""LSTM seizure baseline as eeg-gnn-ssl defines it (Tang et al. 2022, ``model/lstm.py``).

Each 1-s step's features of all channels are concatenated (``C * F`` inputs, channel-major);
a 2-layer LSTM with 64 units runs over the steps; its last output goes through dropout, ReLU
and ``Linear(64, n_classes)``. With ``n_outputs == 2`` and ``single_logit`` the reference's one
detection logit ``z`` is returned as ``(0, z)`` (cross-entropy on it is BCEWithLogits; see
:class:`~biosig_lightning.models.dcrnn.DCRNN`). 536,641 parameters for TUSZ 12-s detection
(19 x 100 FFT bins per step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.time_steps import as_steps, step_size

__all__ = ["SeizureLSTM"]


def two_column(logits: torch.Tensor, single: bool) -> torch.Tensor:
    """``(0, z)`` for one detection logit, the logits unchanged otherwise."""
    return torch.cat([torch.zeros_like(logits), logits], dim=-1) if single else logits


@register_backbone(
    "SeizureLSTM",
    shapes={"tusz": (19, 2, 1200, 200.0), "tusz_classification": (19, 4, 1200, 200.0),
            "chbmit_stdro": (18, 2, 128, 64.0), "dodh": (16, 5, 7500, 250.0)},
    kwargs={"chbmit_stdro": {"step_bins": 32}, "tusz": {"step_bins": 100},
            "tusz_classification": {"step_bins": 100, "dropout": 0.5}},
    # 8 units memorised 8 random-label windows too slowly (7/8 after 60 Adam steps at 576-4000 inputs
    # per step); 32 units in one layer memorise them in <= 15 steps
    test_kwargs={"rnn_units": 32, "num_rnn_layers": 1},
)
class SeizureLSTM(BiosignalModel):
    """Args: signal metadata; ``step_bins`` (0: raw 1-s steps); ``rnn_units`` 64; ``num_rnn_layers`` 2;
    ``dropout`` (0 detection, 0.5 classification); ``single_logit``."""

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, step_bins: int = 0, rnn_units: int = 64,
                 num_rnn_layers: int = 2, dropout: float = 0.0, single_logit: bool = True) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        self.step = step_size(type(self).__name__, n_times, sfreq, step_bins)
        self.lstm = nn.LSTM(n_chans * self.step, rnn_units, num_rnn_layers, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.single = single_logit and n_outputs == 2
        self.fc = nn.Linear(rnn_units, 1 if self.single else n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        steps = as_steps(x, self.step)
        out, _ = self.lstm(steps.flatten(2))
        return two_column(self.fc(torch.relu(self.dropout(out[:, -1]))), self.single)
