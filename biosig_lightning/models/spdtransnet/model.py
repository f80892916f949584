"""SPDTransNet (Seraphim et al., Sec. 3.2, Fig. 2): two SP-MHA encoders over tokens of SPD matrices.

Input layout (the data side is :class:`biosig_lightning.data.spd.SPDDataModule`): ``x`` of shape
``(B, n_chans, n_times)`` with ``n_chans = L * C * S`` tokens and ``n_times = d(n)`` numbers per token
(45 for SPD(9)): the ``L`` epochs one after another, each as its ``C`` frequency channels of ``S``
subwindow tokens (channel 1's S tokens, then channel 2's, ...; Sec. 3.2). ``L`` is
``n_chans / (C * S)`` (odd); ``C`` = ``n_bands`` (7) and ``S`` = ``n_subwindows`` (30).

Forward pass:

1. a triangular map Sym(n) -> Sym(m), ``Linear(d(n), d(m))`` with bias, on every token;
2. intra-epoch: positional encoding over the ``C * S`` tokens, ``intra_layers`` SP-MHA layers
   (:class:`~.attention.SPEncoderLayer`), then the ``C * S`` tokens averaged in ``t`` groups of
   ``C * S / t`` consecutive tokens (with t = 10 a group of 21 spans two frequency channels, as in the
   authors' code; t = 7 keeps one group per channel);
3. inter-epoch: positional encoding over the ``L * t`` tokens and ``inter_layers`` SP-MHA layers;
4. the ``t`` tokens of the central epoch flattened and passed through two FC blocks (Linear, ReLU,
   dropout) and a final Linear to the classes.

Positional encodings (``pe``): ``sinusoidal`` (default; the paper: a fixed table added to the tokens,
a linear operation); ``learnable``: a ``Linear -> GELU -> Linear`` (d x d each) applied to the table,
whose output is added to the tokens (learnable sinusoidal PE of Wang et al. 2022), so the tokens
still only get a translation; ``learnable_tokens``: the authors' code, the same MLP applied to
``tokens + table`` (a nonlinear per-token map that the paper omits and that breaks the linear
log-Euclidean structure). The two learnable forms have the same parameters; the authors' published
model counts them (14,009,912 parameters receiving gradients at L=21, d=351, t=10, h=9/3, 5/4 layers),
so the catalog pins the published best with ``pe: learnable``.

The feature interface: :meth:`forward_features` returns the flattened central tokens (``t * d``),
``head`` the FC blocks and classifier.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from biosig_lightning.models.base import BiosignalModel, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.spdtransnet.attention import Factors, HeadWeights, Impl, SPEncoderLayer

__all__ = ["D_FF", "PositionalEncoding", "SPDTransNet", "sinusoidal_table"]

PE = Literal["sinusoidal", "learnable", "learnable_tokens"]
#: the authors' triangular feed-forward width for each token width d(m) (d_ff = d(m'))
D_FF = {325: 990, 351: 1035, 378: 1128, 406: 1225, 435: 1326}

_PUBLISHED_BEST = {"d_model": 351, "tokens_per_epoch": 10, "intra_heads": 9, "intra_layers": 5,
                   "inter_heads": 3,
                   "inter_layers": 4, "d_ff": 1035, "fc_width": 1035, "dropout": 0.1, "pe": "learnable"}


def sinusoidal_table(length: int, d: int) -> torch.Tensor:
    """``(length, d)`` sine/cosine table of Vaswani et al.; odd ``d``: computed for ``d + 1``, last column
    dropped."""
    width = d + (d % 2)
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table[:, :d]


class PositionalEncoding(nn.Module):
    """Adds a positional encoding over ``length`` positions (``pe``: see the module docstring)."""

    table: torch.Tensor  # buffer (length, d)

    def __init__(self, length: int, d: int, pe: PE = "sinusoidal") -> None:
        super().__init__()
        if pe not in ("sinusoidal", "learnable", "learnable_tokens"):
            raise ValueError(f"pe must be sinusoidal, learnable or learnable_tokens, got {pe!r}")
        self.pe = pe
        self.register_buffer("table", sinusoidal_table(length, d), persistent=False)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)) if pe != "sinusoidal" else None

    def offset(self) -> torch.Tensor | None:
        """The ``(length, d)`` term added to the tokens; ``None`` for ``learnable_tokens``, which is not
        additive."""
        if self.mlp is None:
            return self.table
        return self.mlp(self.table) if self.pe == "learnable" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offset = self.offset()
        return cast(nn.Module, self.mlp)(x + self.table) if offset is None else x + offset  # learnable_tokens


@register_backbone(
    "SPDTransNet",
    shapes=["mass_ss3", "sleep_edf_spd"],
    kwargs={"mass_ss3": _PUBLISHED_BEST, "sleep_edf_spd": _PUBLISHED_BEST},
    param_pins={"mass_ss3": 14_009_912},
    test_kwargs={"d_model": 21, "tokens_per_epoch": 7, "intra_heads": 3, "intra_layers": 1, "inter_heads": 3,
                 "inter_layers": 1, "d_ff": 28, "fc_width": 28, "dropout": 0.0},
)
class SPDTransNet(BiosignalModel):
    """SPDTransNet (see the module docstring for the input layout and the forward pass).

    Args:
        n_chans: ``L * n_bands * n_subwindows`` tokens per sequence.
        n_outputs: classes (5 stages).
        n_times: token width ``d(n)`` of the input SPD(n) tokens (45 for n = 9).
        sfreq: the EEG's sampling rate (informational).
        n_bands: ``C`` frequency channels (7).
        n_subwindows: ``S`` subwindows per epoch (30).
        d_model: ``d(m)``, the token width after the first map (351 or 378); must be triangular.
        tokens_per_epoch: ``t`` (1, 3, 5, 7, 10); must divide ``C * S``.
        intra_heads, intra_layers, inter_heads, inter_layers: the two encoders (h must divide d(m)).
        d_ff: feed-forward width (triangular; default from :data:`D_FF`).
        fc_width: width F of the two FC blocks (253, 528, 1035, 2016).
        dropout: everywhere (0.1 in the paper's runs).
        pe: positional encoding (``sinusoidal``, ``learnable``, ``learnable_tokens``).
        head_weights: SP-MHA head combination (``softmax`` convex, ``free`` authors').
        attention_impl: how SP-MHA is computed (``auto``, ``sdpa``, ``fused``, ``recompute``; same result).
        checkpoint_layers: keep only each encoder layer's input for backward and recompute the layer
            (activation checkpointing): the feed-forward activations (d_ff = 1035 per token) dominate
            memory, so this cuts it several-fold for about a third more compute. Same result.

    The first intra-epoch layer's queries and keys are computed from the 45-number input tokens
    (:meth:`~.attention.SPMultiheadAttention.forward`'s ``factors``) when the positional encoding is
    additive (``sinusoidal``, ``learnable``): the same maps up to round-off, for 45/351 of those
    products (about 24 of the step's 620 GFLOP at the published size). ``factor_first_layer = False``
    computes them from the embedded tokens instead (tests compare the two).
    """

    factor_first_layer: bool = True

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float, n_bands: int = 7,
                 n_subwindows: int = 30, d_model: int = 351, tokens_per_epoch: int = 10, intra_heads: int = 9,
                 intra_layers: int = 5, inter_heads: int = 3, inter_layers: int = 4, d_ff: int | None = None,
                 fc_width: int = 1035, dropout: float = 0.1, pe: PE = "sinusoidal",
                 head_weights: HeadWeights = "softmax", attention_impl: Impl = "auto",
                 checkpoint_layers: bool = False,
                 chs_info: Any = None) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        check_positive_ints("SPDTransNet", n_bands=n_bands, n_subwindows=n_subwindows, d_model=d_model,
                            tokens_per_epoch=tokens_per_epoch, intra_layers=intra_layers,
                            inter_layers=inter_layers,
                            fc_width=fc_width)
        grid = n_bands * n_subwindows
        if n_chans % grid or (n_chans // grid) % 2 == 0:
            raise ValueError(f"SPDTransNet: n_chans={n_chans} must be L * n_bands * n_subwindows = L * "
                             f"{grid} "
                             f"tokens with L odd")
        if grid % tokens_per_epoch:
            raise ValueError(f"SPDTransNet: tokens_per_epoch={tokens_per_epoch} must divide n_bands * "
                             f"n_subwindows = {grid}")
        for name, d in (("n_times", n_times), ("d_model", d_model)):
            m = (math.isqrt(8 * d + 1) - 1) // 2
            if m * (m + 1) // 2 != d:
                raise ValueError(f"SPDTransNet: {name}={d} is not a triangular number d(m) = m(m+1)/2")
        if d_ff is None:
            if d_model not in D_FF:
                raise ValueError(f"SPDTransNet: give d_ff for d_model={d_model} (known: {D_FF})")
            d_ff = D_FF[d_model]
        self.checkpoint_layers = checkpoint_layers
        self.seq_len = n_chans // grid
        self.grid, self.t, self.d_model = grid, tokens_per_epoch, d_model
        self.embed = nn.Linear(n_times, d_model)
        self.intra_pe = PositionalEncoding(grid, d_model, pe)
        self.intra = nn.Sequential(*[SPEncoderLayer(d_model, intra_heads, d_ff, dropout,
                                                    head_weights, attention_impl)
                                     for _ in range(intra_layers)])
        self.inter_pe = PositionalEncoding(self.seq_len * tokens_per_epoch, d_model, pe)
        self.inter = nn.Sequential(*[SPEncoderLayer(d_model, inter_heads, d_ff, dropout,
                                                    head_weights, attention_impl)
                                     for _ in range(inter_layers)])
        self.feature_dim = tokens_per_epoch * d_model
        self.head = nn.Sequential(nn.Linear(self.feature_dim, fc_width), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(fc_width, fc_width), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(fc_width, n_outputs))

    def epoch_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L*C*S, d(n))`` -> the inter-epoch encoder's output ``(B, L*t, d(m))``."""
        self.check_input(x)
        b = x.shape[0]
        u = x.reshape(b * self.seq_len, self.grid, self.n_times)
        offset = self.intra_pe.offset() if self.factor_first_layer else None
        if offset is None:
            z, factors = self.intra_pe(self.embed(u)), None
        else:  # z = u W^T + (b + PE): the first layer's q and k maps are computed from u (45 numbers)
            c = self.embed.bias + offset
            z, factors = F.linear(u, self.embed.weight) + c, (u, self.embed.weight, c)
        z = self._encode(self.intra, z, factors)
        z = z.reshape(b * self.seq_len, self.t, self.grid // self.t, self.d_model).mean(2)  # t groups
        z = z.reshape(b, self.seq_len * self.t, self.d_model)
        return self._encode(self.inter, self.inter_pe(z))

    def _encode(self, layers: nn.Sequential, z: torch.Tensor, factors: Factors | None = None) -> torch.Tensor:
        ckpt = self.checkpoint_layers and torch.is_grad_enabled()
        for i, layer in enumerate(layers):
            f = factors if i == 0 else None
            z = checkpoint(layer, z, f, use_reentrant=False) if ckpt else layer(z, f)
        return z

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        z = self.epoch_tokens(x)
        centre = (self.seq_len // 2) * self.t
        return z[:, centre: centre + self.t].flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))
