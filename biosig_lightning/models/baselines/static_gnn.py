"""Static GNN: a two-layer GCN over a fixed, geometry-derived channel graph.

The "Static GNN" baseline of SD-Former (Sec. 6: "uses a fixed adjacency matrix derived
from electrode distance (2-layer graph convolutional network, width 128)"); Table 5
gives it ~0.5 M parameters on Sleep-EDF. The paper says nothing else, so:

* **Graph.** :func:`biosig_lightning.features.montage.channel_adjacency`: a thresholded
  Gaussian kernel on distances between channel positions on the standard 10-20 template
  (bipolar channels at the midpoint of their electrodes) for EEG, and a fixed lead graph
  for 12-lead ECG (limb leads fully connected, precordial chain, lateral-territory links);
  see that module for the reasoning. Unknown channel names are an error naming them; a
  fully connected graph is used instead only when ``fallback_full=True``.
* **Propagation.** Kipf & Welling (2017), Eq. 2: ``H' = GELU(D^-1/2 (A + I) D^-1/2 H W)``
  with the kernel weights as edge weights and ``D`` the weighted degree of ``A + I``;
  dropout between layers.
* **Node features.** A per-channel temporal convolutional encoder, shared by all
  channels: a stem convolution (1 -> 128, kernel 15, stride 2) and four blocks
  (128 -> 128, kernel 7, stride 2), each with BatchNorm and GELU, then the mean over
  time. We chose it over per-channel band powers because band powers (5 numbers per
  node) would leave a 2-channel Sleep-EDF GNN with ~35 k parameters, far from the
  paper's 0.5 M, and with almost nothing to propagate; the encoder's 0.46 M parameters
  bring the model to 0.50 M (495,621 with 2 channels and 5 classes). Its receptive
  field is 195 samples (about 2 s at 100 Hz), after which the mean pools over time.
* **Readout.** Mean over nodes, then a linear head (``feature_dim = width``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from biosig_lightning.features.montage import channel_adjacency
from biosig_lightning.models.base import BiosignalModel, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.learned_graphs import normalized_adjacency

__all__ = [
    "StaticGNN",
    "normalized_adjacency",
]  # normalized_adjacency: re-exported from models.modules.learned_graphs


def _conv_block(in_channels: int, out_channels: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(in_channels, out_channels, kernel, stride=2, padding=kernel // 2, bias=False),
        nn.BatchNorm1d(out_channels),
        nn.GELU(),
    )


@register_backbone(
    # experiments/sdformer/baselines/static_gnn_*.yaml: each names its corpus's channels
    shapes=["sleepedf", "chbmit", "ptbxl"],
    kwargs={
        "sleepedf": {"ch_names": ["EEG Fpz-Cz", "EEG Pz-Oz"]},
        "chbmit": {"ch_names": ["FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP1-F3", "F3-C3", "C3-P3", "P3-O1",
                                "FP2-F4",
                                "F4-C4", "C4-P4", "P4-O2", "FP2-F8", "F8-T8", "T8-P8", "P8-O2", "FZ-CZ",
                                "CZ-PZ",
                                "P7-T7", "T7-FT9", "FT9-FT10", "FT10-T8", "T8-P8-1"]},
        "ptbxl": {"ch_names": ["I", "II", "III", "AVR", "AVL", "AVF", "V1", "V2", "V3", "V4", "V5", "V6"]},
    },
    # Exact count of this implementation at Sleep-EDF (module docstring); SD-Former Table 5 gives
    # "0.5 M" (rounded; no public code).
    param_pins={"sleepedf": 495_621},
    test_kwargs={"width": 32},
)
class StaticGNN(BiosignalModel):
    """Two-layer GCN on a fixed channel graph over per-channel convolutional node features.

    Args:
        n_chans, n_outputs, n_times, sfreq: input shape and classes (braindecode names;
            ``n_times`` and ``sfreq`` are recorded only).
        ch_names: channel names in input order (needed for the distance graph).
        width: node feature and GCN width (paper: 128).
        n_layers: GCN layers (paper: 2).
        encoder_blocks: stride-2 convolution blocks after the stem.
        dropout: dropout on node features before every GCN layer and on the readout.
        threshold: Gaussian-kernel threshold of the EEG distance graph.
        fallback_full: use a fully connected graph when ``ch_names`` is missing or holds
            unknown names (otherwise that is an error).

    ``forward(x)`` maps ``(batch, n_chans, n_times)`` to logits and equals
    ``head(forward_features(x))``. The normalised adjacency is the buffer ``adjacency``.
    """

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        ch_names: Sequence[str] | None = None,
        width: int = 128, n_layers: int = 2, encoder_blocks: int = 4, dropout: float = 0.1,
        threshold: float = 0.5, fallback_full: bool = False,
    ) -> None:
        chs_info = [{"ch_name": str(name)} for name in ch_names] if ch_names is not None else None
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        check_positive_ints("StaticGNN", width=width, n_layers=n_layers)
        graph = channel_adjacency(ch_names, n_chans=n_chans, threshold=threshold, fallback_full=fallback_full)
        self.register_buffer("adjacency", normalized_adjacency(torch.as_tensor(graph, dtype=torch.float32)))

        self.encoder = nn.Sequential(
            _conv_block(1, width, 15),
            *(_conv_block(width, width, 7) for _ in range(encoder_blocks)),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
        )
        self.gcn = nn.ModuleList(nn.Linear(width, width) for _ in range(n_layers))
        self.activation = nn.GELU()
        self.dropout = nn.Dropout(dropout)
        self.feature_dim = width
        self.head = nn.Linear(width, n_outputs)

    def node_states(self, x: torch.Tensor) -> torch.Tensor:
        """Node states ``(batch, n_chans, width)`` after the GCN layers."""
        self.check_input(x)
        batch = x.shape[0]
        h = self.encoder(x.reshape(batch * self.n_chans, 1, self.n_times)).view(batch, self.n_chans, -1)
        for layer in self.gcn:
            h = self.activation(self.adjacency.to(h.dtype) @ layer(self.dropout(h)))
        return h

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over nodes ``(batch, width)``."""
        return self.dropout(self.node_states(x).mean(dim=1))
