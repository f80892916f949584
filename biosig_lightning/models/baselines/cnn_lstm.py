"""CNN-LSTM seizure baseline as eeg-gnn-ssl defines it (Ahmedt-Aristizabal et al. 2020; ``model/cnnlstm.py``).

Every 1-s step is a one-channel ``C x F`` image: ``Conv2d(1, 32, 3)``, ``Conv2d(32, 32, 3)`` (no
activation between them, as in the reference), ``MaxPool2d(2)``, flattened into
``Linear(32 * ((C-4)//2) * ((F-4)//2), 512)`` (``32 * 7 * 48`` for 19 x 100); the step embeddings
feed a 2-layer LSTM with 128 units whose last output goes to ``Linear(128, n_classes)``.
5,976,033 parameters for TUSZ 12-s detection with the single detection logit (see
:class:`~biosig_lightning.models.baselines.lstm.SeizureLSTM`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.baselines.lstm import two_column
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.time_steps import as_steps, step_size

__all__ = ["CNNLSTM"]


@register_backbone(
    "CNNLSTM",
    shapes={"tusz": (19, 2, 1200, 200.0), "tusz_classification": (19, 4, 1200, 200.0),
            "chbmit_stdro": (18, 2, 128, 64.0)},
    kwargs={"chbmit_stdro": {"step_bins": 32}, "tusz": {"step_bins": 100},
            "tusz_classification": {"step_bins": 100}},
    # conv1 -> conv2 -> fc1 is linear (no activation, as in the reference), so under the contract's Adam
    # at lr 1e-2 the step embeddings grow roughly cubically (std ~500 after 30 steps) and saturate the
    # LSTM gates (zero gradient below them): a narrow 2-layer LSTM collapses to the majority class
    # before it memorises. One wide layer (the paper's 128 units) memorises first.
    test_kwargs={"embed_dim": 16, "rnn_units": 128, "num_rnn_layers": 1},
)
class CNNLSTM(BiosignalModel):
    """Args: signal metadata; ``step_bins`` (0: raw 1-s steps); ``embed_dim`` 512; ``rnn_units`` 128;
    ``num_rnn_layers`` 2; ``single_logit``."""

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, step_bins: int = 0, embed_dim: int = 512,
                 rnn_units: int = 128, num_rnn_layers: int = 2, single_logit: bool = True) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        self.step = step_size(type(self).__name__, n_times, sfreq, step_bins)
        if n_chans < 6 or self.step < 6:
            raise ValueError(f"CNNLSTM needs at least 6 channels and 6 features per step, got {n_chans} x "
                             f"{self.step}")
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 32, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * ((n_chans - 4) // 2) * ((self.step - 4) // 2), embed_dim)
        self.lstm = nn.LSTM(embed_dim, rnn_units, num_rnn_layers, batch_first=True)
        self.single = single_logit and n_outputs == 2
        self.fc2 = nn.Linear(rnn_units, 1 if self.single else n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        steps = as_steps(x, self.step)  # (B, T, C, F)
        b, t = steps.shape[:2]
        img = steps.reshape(b * t, 1, *steps.shape[2:])
        emb = self.fc1(self.pool(self.conv2(self.conv1(img))).flatten(1)).reshape(b, t, -1)
        out, _ = self.lstm(emb)
        return two_column(self.fc2(out[:, -1]), self.single)
