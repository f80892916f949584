"""PatchTST classifier: channel-independent patching with a shared transformer.

The PatchTST baseline of SD-Former (Sec. 6: "a channel-independent patching transformer
(patch length 16, 3 layers, 4 heads)"), after Nie et al., "A Time Series is Worth 64
Words" (ICLR 2023), Sec. 3.1:

* **Instance normalisation.** Each channel of each window is standardised over time
  (RevIN without the learnable affine, as the classification variant needs no
  de-normalisation).
* **Patching.** The series is padded at the end by repeating its last value ``stride``
  times, then cut into ``P = (T - patch_len) // stride + 2`` patches of ``patch_len``
  samples (PatchTST's ``padding_patch="end"``).
* **Channel independence.** Every channel is an independent sequence of ``P`` patch
  tokens, embedded by one shared linear map plus a learnable position table (initialised
  uniform in [-0.02, 0.02] as in PatchTST), and encoded by one shared transformer.
* **Encoder.** PatchTST's layer: post-norm, BatchNorm over the model width instead of
  LayerNorm, GELU feed-forward of width ``d_ff`` (PatchTST's default 256), dropout on the
  residual branches. We leave out PatchTST's optional residual attention (adding the
  previous layer's pre-softmax scores), so attention can run through
  ``scaled_dot_product_attention``.
* **Head.** ``"flatten"`` (default): the ``C x P x d_model`` encoder outputs are flattened
  and mapped to the classes by one linear layer, as in the Time-Series-Library
  classification version of PatchTST. ``"mean"`` averages over patches and channels.

Size. SD-Former's Table 5 lists PatchTST at 0.9 M parameters on Sleep-EDF; these
defaults give 927,621 there (2 channels x 375 patches; the flatten head alone holds
480,005). The encoder (3 x 132,480) does not depend on the channel count.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.models.base import BiosignalModel, check_heads, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.attention import merge_heads, split_heads

__all__ = ["PatchTST"]

HeadType = Literal["flatten", "mean"]


class _BatchNormTokens(nn.Module):
    """BatchNorm1d over the width of ``(batch, tokens, width)`` tensors (PatchTST's norm)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class _PatchTSTLayer(nn.Module):
    """Post-norm encoder layer: ``BN(x + MHA(x))``, then ``BN(x + FFN(x))``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm_attn = _BatchNormTokens(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.norm_ff = _BatchNormTokens(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended = merge_heads(F.scaled_dot_product_attention(*split_heads(self.qkv(x), self.n_heads)))
        x = self.norm_attn(x + self.dropout(self.proj(attended)))
        return self.norm_ff(x + self.dropout(self.ff(x)))


@register_backbone(
    # experiments/sdformer/baselines/patchtst_*.yaml (patch 16, stride 8, 3 layers, 4 heads, width 128: the
    # defaults)
    shapes=["sleepedf", "chbmit", "ptbxl"],
    # Exact count of this implementation at Sleep-EDF (module docstring); SD-Former Table 5 gives
    # "0.9 M" (rounded; no public code).
    param_pins={"sleepedf": 927_621},
    test_kwargs={"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "patch_len": 64, "stride": 64},
)
class PatchTST(BiosignalModel):
    """Channel-independent patch transformer classifier (Nie et al., 2023).

    Args:
        n_chans, n_outputs, n_times, sfreq: input shape and classes (braindecode names;
            ``sfreq`` is recorded only).
        patch_len: samples per patch (SD-Former: 16).
        stride: hop between patches (PatchTST's default ``patch_len // 2`` = 8).
        d_model, n_layers, n_heads, d_ff: encoder (SD-Former: 128 wide, 3 layers, 4 heads;
            ``d_ff = 256`` is PatchTST's default).
        dropout: dropout on the embedded patches and inside every layer.
        head_dropout: dropout on the flattened features before the head.
        head_type: ``"flatten"`` or ``"mean"`` (see the module docstring).
        revin: standardise each channel of each window over time first.

    ``forward(x)`` maps ``(batch, n_chans, n_times)`` to logits ``(batch, n_outputs)`` and
    equals ``head(forward_features(x))``; ``feature_dim`` is ``n_chans * n_patches * d_model``
    for the flatten head and ``d_model`` for the mean head.
    """

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        patch_len: int = 16, stride: int = 8,
        d_model: int = 128, n_layers: int = 3, n_heads: int = 4, d_ff: int = 256,
        dropout: float = 0.1, head_dropout: float = 0.0, head_type: HeadType = "flatten", revin: bool = True,
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("PatchTST", patch_len=patch_len, stride=stride, d_model=d_model,
                            n_layers=n_layers,
                            n_heads=n_heads, d_ff=d_ff)
        if patch_len > n_times:
            raise ValueError(f"PatchTST: patch_len ({patch_len}) exceeds n_times ({n_times})")
        check_heads("PatchTST", d_model, n_heads)
        if head_type not in ("flatten", "mean"):
            raise ValueError(f"PatchTST: head_type must be 'flatten' or 'mean', got {head_type!r}")
        self.patch_len, self.stride, self.revin, self.head_type = patch_len, stride, revin, head_type
        self.n_patches = (n_times - patch_len) // stride + 2

        self.embed = nn.Linear(patch_len, d_model)
        self.positions = nn.Parameter(torch.empty(self.n_patches, d_model).uniform_(-0.02, 0.02))
        self.embed_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(_PatchTSTLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
        self.feature_dropout = nn.Dropout(head_dropout)
        self.feature_dim = n_chans * self.n_patches * d_model if head_type == "flatten" else d_model
        self.head = nn.Linear(self.feature_dim, n_outputs)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """Patches ``(batch, n_chans, n_patches, patch_len)`` of the (normalised) input."""
        self.check_input(x)
        if self.revin:
            x = (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(
                x.var(dim=-1, keepdim=True, unbiased=False) + 1e-5
            )
        x = torch.cat([x, x[..., -1:].expand(-1, -1, self.stride)], dim=-1)
        return x.unfold(-1, self.patch_len, self.stride)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Encoded patch tokens ``(batch, n_chans, n_patches, d_model)``."""
        patches = self.patches(x)
        batch = patches.shape[0]
        z = self.embed_dropout(self.embed(patches.flatten(0, 1)) + self.positions)
        for layer in self.layers:
            z = layer(z)
        return z.view(batch, self.n_chans, self.n_patches, -1)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Features ``(batch, feature_dim)`` that :attr:`head` maps to logits."""
        z = self.encode(x)
        pooled = z.flatten(1) if self.head_type == "flatten" else z.mean(dim=(1, 2))
        return self.feature_dropout(pooled)
