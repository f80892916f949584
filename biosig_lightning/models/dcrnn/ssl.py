"""DCRNN's self-supervised pre-training model: predict the next clip (Tang et al., ICLR 2022, Sec. 3.3).

A DCGRU encoder (the same layers as :class:`~biosig_lightning.models.dcrnn.DCRNN`) reads the
current clip; a DCGRU decoder, started from the encoder's last states and a zero "go" input,
emits the next clip's steps one at a time, each step's prediction (a linear projection of the
top decoder state, after dropout) being the next step's input (no teacher forcing, the
reference's default). The loss is the mean absolute error of the predicted features.

Reading (data): the reference pairs each clip with the one that follows it in the recording.
Our DataModules serve independent windows, so pre-training runs on windows of two clips'
length (e.g. TUSZ ``clip_seconds: 24`` for 12-s clips): the first half is the input, the
second half the target (:meth:`DCRNNNextClip.split`).

As in the reference, decoder layers 2..L share one DCGRU cell (the reference builds a single
cell object for them); the first decoder layer takes the step features (``output_dim`` =
``input_dim`` = e.g. 100 FFT bins).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.dcrnn.model import DCRNN, DCGRUCell, dcgru_encode

__all__ = ["DCRNNNextClip"]


class DCRNNNextClip(BiosignalModel):
    """Encoder-decoder DCRNN predicting the second half of a window from its first half.

    Args: as :class:`DCRNN` (``n_times`` is the whole two-clip window); ``num_rnn_layers`` 3 in
    the reference's pre-training.
    """

    outputs_logits = False  # a pretext model: not a classification backbone, so not in the catalog

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None,
                 graph: Literal["distance", "correlation"] = "distance",
                 step_bins: int = 0, ch_names: Sequence[str] | None = None,
                 adj: Sequence[Sequence[float]] | None = None, rnn_units: int = 64, num_rnn_layers: int = 3,
                 max_diffusion_step: int = 2, top_k: int = 3, dropout: float = 0.0,
                 activation: Literal["tanh", "relu"] = "tanh") -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        if n_times % 2:
            raise ValueError(f"DCRNNNextClip: the window ({n_times}) must be two clips of equal length")
        self.encoder = DCRNN(n_chans, 2, n_times // 2, sfreq, graph=graph, step_bins=step_bins,
                             ch_names=ch_names,
                             adj=adj, rnn_units=rnn_units, num_rnn_layers=num_rnn_layers,
                             max_diffusion_step=max_diffusion_step, top_k=top_k, activation=activation)
        self.encoder.head = None  # type: ignore[assignment]  # the encoder's classifier is not part of pre-training
        step, n_matrices = self.encoder.step, cast(DCGRUCell, self.encoder.cells[0]).n_matrices
        first = DCGRUCell(step, rnn_units, n_matrices, activation)
        first.n_matrices_k = max_diffusion_step
        cells = [first]
        if num_rnn_layers > 1:
            shared = DCGRUCell(rnn_units, rnn_units, n_matrices, activation)
            shared.n_matrices_k = max_diffusion_step
            cells += [shared] * (num_rnn_layers - 1)
        self.decoder_cells = nn.ModuleList(cells)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(rnn_units, step)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(first clip, next clip)``, each ``(B, C, n_times / 2)``."""
        self.check_input(x)
        half = self.n_times // 2
        return x[..., :half], x[..., half:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The predicted next clip ``(B, C, n_times / 2)`` from the first half of ``x``."""
        clip, _ = self.split(x)
        enc = self.encoder
        supports = enc.graph_supports(clip)
        states = enc.encode(clip, supports)
        b, n, step = clip.shape[0], self.n_chans, enc.step
        inp = clip.new_zeros(b, n, step)
        preds = []
        for _ in range(enc.n_steps):
            new_states = []
            layer_in = inp
            for cell, h in zip(self.decoder_cells, states, strict=True):
                finals, _ = dcgru_encode([cast(DCGRUCell, cell)], supports, layer_in.unsqueeze(0),
                                         initial=[h])
                layer_in = finals[0]
                new_states.append(layer_in)
            states = new_states
            inp = self.projection(self.dropout(layer_in))  # (B, N, step)
            preds.append(inp)
        return torch.stack(preds, dim=2).reshape(b, n, -1)
