"""Vanilla Transformer encoder classifier on raw multichannel signals.

The "Transformer" / "Vanilla Transformer" baseline of two of the reproduced papers:

* SD-Former, Sec. 6 (Baselines): "a Vanilla Transformer with the same depth and width as
  SD-Former's backbone (6 layers, 4 heads, width 128)"; Sec. 4 gives that backbone as a
  *pre-norm* Transformer with feed-forward width 512. These are this class's defaults.
* BioFormer, Table 2 / Appendix C.2-C.3: "Transformer (Vaswani et al., 2017)" run through
  the Medformer/Time-Series-Library code, with 6 layers, ``D = 128``, ``D_ff = 256``.
  Every time step is a token, embedded by a circular ``kernel 3`` convolution over the
  channels; layers are post-norm with 8 heads; the head flattens all tokens. Set
  ``embedding="circular_conv", n_heads=8, d_ff=256, norm_first=False, pooling="flatten"``
  to get that network (866,818 parameters at APAVA's 16 x 256 input with 2 classes; the
  authors' code reports 867,330 because it also holds an unused 4 x 128 calendar-feature
  embedding).

Tokenisation (time steps or patches), the parameter count against the papers', the +FBAM/+TSAM
variants, the domain-generalisation sites and implementation notes: :class:`TransformerClassifier`.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel, check_dropout, check_heads, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.alignment import (
    FBAM,
    TSAM,
    HostKernelMode,
    aligned_layers,
    eval_is_batch_independent,
    fbam_options,
)
from biosig_lightning.models.modules.encodings import SinusoidalPositionalEncoding

__all__ = ["TransformerClassifier"]

Pooling = Literal["mean", "flatten"]
Embedding = Literal["linear", "circular_conv"]
Activation = Literal["gelu", "relu"]


#: BioFormer Table 3 / Table 2's TSLib vanilla Transformer (experiments/bioformer/baselines/transformer.yaml)
_TSLIB = {"n_heads": 8, "d_ff": 256, "embedding": "circular_conv", "norm_first": False, "pooling": "flatten"}
#: SD-Former's Vanilla Transformer (experiments/sdformer/baselines/transformer_*.yaml)
_SDFORMER = {"patch_len": 16, "norm_first": True}


@register_backbone(
    shapes=["apava", "adftd", "ptbxl_medformer", "sleepedf", "chbmit", "ptbxl"],
    kwargs={"apava": _TSLIB, "adftd": _TSLIB, "ptbxl_medformer": _TSLIB,
            "sleepedf": _SDFORMER, "chbmit": _SDFORMER, "ptbxl": _SDFORMER},
    param_pins={
        # BioFormer's authors' code (github NKU-EmbeddedSystem/BioFormer) reports 867,330 at APAVA; 512 of
        # those are
        # an unused 4 x 128 calendar-feature embedding, which this class does not build.
        "apava": 867_330 - 512,
        # SD-Former Table 5 gives "1.4 M" (rounded; no public code). Exact count of this class at the
        # paper's sizes (class docstring, "Parameter count"): encoder 6 x 198,272 + final LayerNorm 256, patch
        # embedding 2*16*128 + 128, head 128*5 + 5.
        "sleepedf": 6 * 198_272 + 256 + (2 * 16 * 128 + 128) + (128 * 5 + 5),
    },
    test_kwargs={"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32},
)
class TransformerClassifier(BiosignalModel):
    """Transformer encoder over time-step (or patch) tokens, pooled, then a linear head.

    Tokenisation, our reading. Neither paper tokenises the raw signal for this baseline in
    words. We follow the Medformer/TSLib convention (a token is one time step, the
    ``n_chans`` values at that step mapped to ``d_model``), and add the option of
    non-overlapping *patches* of ``patch_len`` steps (a token is a ``n_chans x patch_len``
    block, linearly embedded). Patching is needed for long windows: Sleep-EDF's 3000-sample
    epochs would otherwise give 3000 tokens and a 3000 x 3000 attention map per head and
    layer. A window whose length is not a multiple of ``patch_len`` is zero-padded on the
    right (after per-window normalisation zero is the neutral value), so no samples are lost.

    Parameter count. With the SD-Former defaults the encoder alone holds 1.19 M parameters
    (6 x 198,272 + final LayerNorm); SD-Former's Table 5 quotes 1.4 M for its Vanilla
    Transformer, and the 0.2 M difference matches SD-Former's own spectral tokenizer and
    token encoder (Sec. 4), which a raw-signal baseline does not have.

    "+FBAM" (BioFormer Table 3, Appendix C.4). ``fbam=True`` inserts one
    :class:`~biosig_lightning.models.modules.FBAM` over the ``(B, N, D)`` tokens before
    every encoder layer ("FreqBandDrift blocks are inserted between successive encoder
    layers"), replacing its input as in BioFormer; ``fbam_bands`` uniform bands over the
    non-DC bins of the token axis (paper: 6) and ``fbam_kernel_mode`` ``"sample"`` (binary
    tasks) or ``"batch"`` (multi-class tasks, Appendix C.3); ``"auto"`` (default) picks by ``n_outputs``. The
    default ``fbam=False`` builds
    exactly the plain network. ``fbam_kwargs`` are further FBAM options (e.g. the authors'
    operator set, ``AUTHORS_FBAM``). ``tsam=True`` inserts BioFormer's time-domain control TSAM
    (Appendix B.2) at the same places instead, with the same bands, kernel mode and options: the
    FBAM-vs-TSAM comparison inside the Transformer of Fig. 5.

    Domain-generalisation style site. ``style_site = "embed"`` and ``style_channel_dim = 1``
    tell :class:`biosig_lightning.robust.DGTask` to apply MixStyle/DSU to the token
    embedding's output ``(B, d_model, N)``, per embedding channel over the tokens (BioFormer
    C.4: "immediately after the embedding layer"). The site is the embedding itself, before
    the positional table is added, so the perturbation changes the signal's statistics and
    leaves the (sample-independent) positions intact. ``align_site = "encoder.norm"`` with
    ``align_channel_dim = -1`` points DGTask's MMD/CORAL/GRL at the encoder output
    ``(B, N, D)``, which it averages over the tokens (C.4: "temporally averaging the encoder
    outputs"), whatever the pooling of the classification head.

    Implementation notes. The encoder is :class:`torch.nn.TransformerEncoder`, batch first,
    so attention runs through ``scaled_dot_product_attention`` (fused kernels where the
    device has them). Positions are the fixed sinusoidal table (Vaswani et al., 2017,
    Sec. 3.5). ``forward(x) == head(forward_features(x))`` holds exactly, so feature-level
    domain-generalisation losses (MMD, CORAL, DANN) can use the two halves separately.

    Args:
        n_chans: input channels ``C``.
        n_outputs: number of classes.
        n_times: samples per window ``T``; fixes the token count and the position table.
        sfreq: sampling rate in Hz (recorded only; the model does not depend on it).
        d_model: token width (SD-Former: 128).
        n_layers: encoder layers (SD-Former: 6).
        n_heads: attention heads (SD-Former: 4; BioFormer's TSLib baseline: 8).
        d_ff: feed-forward width (SD-Former: 512; BioFormer: 256).
        dropout: dropout on the embedded tokens, inside every layer (attention weights
            and feed-forward) and on the pooled features.
        patch_len: ``None`` for one token per time step, otherwise the length of the
            non-overlapping patches that become tokens (``ceil(T / patch_len)`` tokens).
        pooling: ``"mean"`` averages the tokens (``feature_dim = d_model``); ``"flatten"``
            applies the activation and concatenates all tokens as TSLib does
            (``feature_dim = tokens * d_model``).
        embedding: ``"linear"`` embeds each token (a time step or a patch) with one
            affine map; ``"circular_conv"`` is TSLib's token embedding, a bias-free
            convolution with kernel 3 and circular padding over the time axis
            (time-step tokens only).
        norm_first: pre-norm layers (SD-Former) when true, post-norm (TSLib) when false.
            A final LayerNorm follows the last layer in both cases.
        activation: feed-forward activation.
        fbam: insert an FBAM before every encoder layer (BioFormer Table 3, "+FBAM").
        fbam_bands: FBAM bands per token sequence (paper: 6).
        fbam_kernel_mode: FBAM kernels per sample (``"sample"``), shared by the batch
            (``"batch"``), or ``"auto"``: batch-shared for more than two classes (Appendix C.3).
        fbam_kwargs: further FBAM (or TSAM) keyword arguments.
        tsam: insert a TSAM before every encoder layer instead (Fig. 5); excludes ``fbam``.

    Shapes: ``x`` is ``(batch, n_chans, n_times)``; ``forward`` returns logits
    ``(batch, n_outputs)`` and ``forward_features`` returns ``(batch, feature_dim)``.
    """

    #: where DGTask's MixStyle/DSU act: the token embedding's ``(B, d_model, N)`` output
    style_site: str = "embed"
    style_channel_dim: int = 1
    #: where DGTask's feature alignment reads: the encoder output ``(B, N, d_model)``
    align_site: str = "encoder.norm"
    align_channel_dim: int = -1

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        d_model: int = 128, n_layers: int = 6, n_heads: int = 4, d_ff: int = 512, dropout: float = 0.1,
        patch_len: int | None = None, pooling: Pooling = "mean", embedding: Embedding = "linear",
        norm_first: bool = True, activation: Activation = "gelu",
        fbam: bool = False, fbam_bands: int = 6, fbam_kernel_mode: HostKernelMode = "auto",
        fbam_kwargs: dict[str, Any] | None = None, tsam: bool = False,
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("TransformerClassifier", d_model=d_model, n_layers=n_layers,
                            n_heads=n_heads, d_ff=d_ff)
        if patch_len is not None:
            check_positive_ints("TransformerClassifier", patch_len=patch_len)
            if patch_len > n_times:
                raise ValueError(f"patch_len ({patch_len}) must not exceed n_times ({n_times})")
        check_heads("TransformerClassifier", d_model, n_heads)
        check_dropout("TransformerClassifier", dropout=dropout)
        if pooling not in ("mean", "flatten"):
            raise ValueError(f"pooling must be 'mean' or 'flatten', got {pooling!r}")
        if embedding not in ("linear", "circular_conv"):
            raise ValueError(f"embedding must be 'linear' or 'circular_conv', got {embedding!r}")
        if embedding == "circular_conv" and patch_len not in (None, 1):
            raise ValueError("embedding='circular_conv' embeds single time steps; use patch_len=None with it")
        if activation not in ("gelu", "relu"):
            raise ValueError(f"activation must be 'gelu' or 'relu', got {activation!r}")

        self.patch_len = 1 if patch_len is None else patch_len
        self.n_tokens = math.ceil(n_times / self.patch_len)
        self.pooling = pooling

        if embedding == "circular_conv":
            self.embed = nn.Conv1d(
                n_chans, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False
            )
            nn.init.kaiming_normal_(self.embed.weight, mode="fan_in", nonlinearity="leaky_relu")
        else:
            # A strided convolution with kernel == stride is exactly a linear map of each
            # flattened (n_chans x patch_len) patch, and of each time step when patch_len=1.
            self.embed = nn.Conv1d(n_chans, d_model, kernel_size=self.patch_len, stride=self.patch_len)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len=self.n_tokens, dropout=dropout)

        layer = nn.TransformerEncoderLayer(
            d_model=d_model,
            nhead=n_heads,
            dim_feedforward=d_ff,
            dropout=dropout,
            activation=activation,
            batch_first=True,
            norm_first=norm_first,
        )
        # Nested tensors only help with padding masks, which this model never uses.
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False
        )
        # One FBAM per encoder layer, applied before it; None keeps the plain network intact.
        if fbam and tsam:
            raise ValueError("TransformerClassifier: choose one aligner, fbam or tsam, not both")
        self.fbam: nn.ModuleList | None = None
        self.tsam: nn.ModuleList | None = None
        if fbam or tsam:
            check_positive_ints("TransformerClassifier", fbam_bands=fbam_bands)
            opts = fbam_options("TransformerClassifier", fbam_kernel_mode, n_outputs, fbam_kwargs)
            aligner = FBAM if fbam else TSAM
            modules = nn.ModuleList(aligner(d_model,
                                            self.n_tokens, fbam_bands, **opts) for _ in range(n_layers))
            if fbam:
                self.fbam = modules
            else:
                self.tsam = modules
        self.batch_independent_eval = eval_is_batch_independent(
            self.fbam if self.fbam is not None else self.tsam
        )
        self.flatten_act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.feature_dropout = nn.Dropout(dropout)
        self.feature_dim = d_model if pooling == "mean" else self.n_tokens * d_model
        self.head = nn.Linear(self.feature_dim, n_outputs)

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        """Output of the last encoder layer ``(batch, n_tokens, d_model)``, before the final LayerNorm."""
        self.check_input(x)
        pad = self.n_tokens * self.patch_len - self.n_times
        if pad:
            x = nn.functional.pad(x, (0, pad))
        return aligned_layers(self.positions(self.embed(x).transpose(1, 2)), self.encoder.layers,
                              self.fbam if self.fbam is not None else self.tsam)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """Encoded tokens ``(batch, n_tokens, d_model)`` after the final LayerNorm."""
        return cast(nn.LayerNorm, self.encoder.norm)(self._encode(x))  # built with a final LayerNorm

    def forward_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """Final-layer temporal embedding ``(batch, n_tokens, d_model)``, before the final LayerNorm.

        One token per time step (or patch), in time order: the representation whose spectrum
        BioFormer's FBD analysis (Appendix F) measures, as for BioFormer's own ``forward_tokens``.
        """
        return self._encode(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled embedding ``(batch, feature_dim)`` that :attr:`head` maps to logits."""
        z = self.tokens(x)
        if self.pooling == "mean":
            pooled = z.mean(dim=1)
        else:
            pooled = self.flatten_act(z).flatten(1)
        return self.feature_dropout(pooled)
