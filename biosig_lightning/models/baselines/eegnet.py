"""EEGNet (Lawhern et al., J. Neural Eng. 2018), the compact EEG CNN.

The third backbone of BioFormer's domain-generalisation comparison (Table 3, Appendix C.4).
EEGNet-F1,D (Lawhern et al., Sec. 2.2 and Table 2), on input ``(B, 1, C, T)``:

* **Block 1.** Temporal convolution ``Conv2d(1, F1, (1, K))`` ("same" padding, no bias)
  -> BatchNorm; depthwise spatial convolution ``Conv2d(F1, D*F1, (C, 1), groups=F1)`` (no
  bias, max-norm 1 per spatial filter) -> BatchNorm -> ELU -> AvgPool ``(1, 4)`` ->
  Dropout.
* **Block 2.** Separable convolution: depthwise ``Conv2d(D*F1, D*F1, (1, 16),
  groups=D*F1)`` then pointwise ``Conv2d(D*F1, F2, 1)`` (no biases, "same" padding) ->
  BatchNorm -> ELU -> AvgPool ``(1, 8)`` -> Dropout.
* **Classifier.** Flatten, then a dense layer (max-norm 0.25 per class unit) whose softmax
  gives the class probabilities; here it returns logits.

Defaults are EEGNet-8,2 (``F1 = 8, D = 2, F2 = 16``) with the paper's kernel length 64
(half of its 128 Hz sampling rate) and dropout 0.25 (its cross-subject value). BatchNorm
uses Keras' momentum (0.99, i.e. torch ``bn_momentum=0.01``) and ``eps = 1e-3`` as in the
authors' reference implementation; with so slow running statistics, eval-mode outputs lag
behind training for the first few hundred steps.

Max-norm constraints, the MixStyle/DSU and feature-alignment sites, the +FBAM reading and the accepted
window lengths: :class:`EEGNet`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel, check_dropout, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.alignment import (
    FBAM,
    HostKernelMode,
    eval_is_batch_independent,
    fbam_options,
)

__all__ = ["EEGNet"]


class _MaxNorm:
    """Mixin: before every forward pass, project each output unit's weights (``weight[i]``) to
    L2 norm <= ``max_norm`` (Keras' max-norm constraint; see :class:`EEGNet`)."""

    max_norm: float | None
    weight: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.max_norm is not None:
            with torch.no_grad():
                self.weight.copy_(torch.renorm(self.weight, p=2, dim=0, maxnorm=self.max_norm))
        return super().forward(x)  # type: ignore[misc]


class _MaxNormConv2d(_MaxNorm, nn.Conv2d):
    """Conv2d whose filters (one per output map) are projected to L2 norm <= ``max_norm``."""

    def __init__(self, *args: object, max_norm: float | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.max_norm = max_norm


class _MaxNormLinear(_MaxNorm, nn.Linear):
    """Linear layer whose rows (one per output unit) are projected to L2 norm <= ``max_norm``."""

    def __init__(self, in_features: int, out_features: int, max_norm: float | None = None) -> None:
        super().__init__(in_features, out_features)
        self.max_norm = max_norm


def _bn(n: int, momentum: float) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(n, momentum=momentum, eps=1e-3)


def _same_pad(kernel: int) -> nn.ZeroPad2d:
    """Keras "same" padding along time: ``(k - 1) // 2`` before, the rest after (even kernels too)."""
    return nn.ZeroPad2d(((kernel - 1) // 2, kernel // 2, 0, 0))


def _eegnet_8_2_params(n_chans: int, n_outputs: int, n_times: int) -> int:
    """EEGNet-8,2's trainable parameters from Lawhern et al. (2018), Table 2's per-layer counts:
    temporal conv ``F1 K``, BN ``2 F1``, depthwise ``C D F1``, BN ``2 D F1``, separable depthwise
    ``16 D F1`` and pointwise ``D F1 F2``, BN ``2 F2``, dense ``N F2 (T / 32) + N``."""
    f1, d, f2, k = 8, 2, 16, 64
    dense = n_outputs * f2 * ((n_times // 4) // 8) + n_outputs
    return f1 * k + 2 * f1 + n_chans * d * f1 + 2 * d * f1 + 16 * d * f1 + d * f1 * f2 + 2 * f2 + dense


@register_backbone(
    # BioFormer Table 3 backbones run on APAVA, ADFTD and PTB-XL (experiments/bioformer/baselines/eegnet.yaml
    # over the base experiments; class defaults, dropout 0.25).
    shapes=["apava", "adftd", "ptbxl_medformer"],
    param_pins={"apava": _eegnet_8_2_params(16, 2, 256), "adftd": _eegnet_8_2_params(19, 3, 256),
                "ptbxl_medformer": _eegnet_8_2_params(12, 5, 250)},
    test_kwargs={"F1": 4, "D": 2, "F2": 8, "kernel_length": 16},
)
class EEGNet(BiosignalModel):
    """EEGNet-F1,D classifier for ``(batch, n_chans, n_times)`` windows.

    Max-norm constraints (``max_norm=True``, the paper's setting): Keras applies them as a
    projection after every weight update. Here the projection runs at the start of every
    forward pass of the constrained layer (under ``no_grad``, in both train and eval mode),
    which is the same thing seen by every forward computation; it is idempotent, so repeated
    eval passes are deterministic. ``max_norm=False`` leaves the weights unconstrained.

    MixStyle/DSU site (BioFormer C.4: "inserted after the first convolutional block"): the
    temporal convolution + BatchNorm, :attr:`style_site` ``= "temporal"``, whose output is
    ``(B, F1, C, T)`` with feature maps on axis 1 (:attr:`style_channel_dim` ``= 1``). This is
    the block before the depthwise spatial filter, so the perturbed statistics are per
    temporal filter, as in MixStyle's CNN placement after early conv layers.

    Feature alignment (MMD/CORAL/GRL, "temporal average of the encoder outputs", BioFormer
    C.4): :attr:`align_site` ``= "separable"``, block 2's output ``(B, F2, 1, T')``, averaged
    over its last two axes by the DG task (``align_channel_dim = 1``).

    "+FBAM" (BioFormer Table 3, ``fbam=True``): EEGNet has no token encoder, so FBAM is inserted
    between its convolutional stages, on the feature maps read as token sequences over time: before
    the depthwise spatial filter on the first block's ``(B, F1, C, T)`` maps (``T`` tokens of width
    ``F1 * C``) and before the separable block on ``(B, D*F1, 1, T / pool1)`` (tokens of width
    ``D * F1``). *Reading:* FBAM aligns spectra along the time axis of an intermediate
    representation; these are the two places where EEGNet still has one, before each of its
    learned mixing stages. ``fbam_kernel_mode="auto"`` (default) gives batch-shared kernels for
    multi-class tasks and sample-specific ones for binary tasks (Appendix C.3); ``fbam_kwargs`` go to
    :class:`~biosig_lightning.models.modules.FBAM`.

    Any ``n_times >= pool1 * pool2`` (32 by default) works; the feature length is
    ``F2 * floor(floor(T / pool1) / pool2)``. ``forward(x) == head(forward_features(x))``.

    Args:
        n_chans, n_outputs, n_times, sfreq: the data shape (``sfreq`` is recorded only; set
            ``kernel_length`` to about ``sfreq / 2`` as the paper does).
        F1: temporal filters. D: spatial filters per temporal filter. F2: pointwise filters
            (the paper uses ``F2 = D * F1``).
        kernel_length: temporal kernel of block 1 (paper: 64 at 128 Hz).
        separable_kernel: temporal kernel of block 2's depthwise convolution (paper: 16).
        pool1, pool2: average-pooling widths of blocks 1 and 2 (paper: 4 and 8).
        dropout: dropout after each block (paper: 0.5 within-subject, 0.25 cross-subject).
        max_norm: apply the paper's max-norm constraints (1 on spatial filters, 0.25 on the
            classifier).
        bn_momentum: torch BatchNorm momentum (0.01 = Keras' 0.99, the reference code's).
        fbam, fbam_bands, fbam_kernel_mode, fbam_kwargs: insert BioFormer's FBAM between the
            convolutional stages (Table 3 "+FBAM"; see above).
    """

    style_site: str = "temporal"
    style_channel_dim: int = 1
    align_site: str = "separable"
    align_channel_dim: int = 1

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        F1: int = 8, D: int = 2, F2: int = 16, kernel_length: int = 64, separable_kernel: int = 16,
        pool1: int = 4, pool2: int = 8,
        dropout: float = 0.25, max_norm: bool = True, bn_momentum: float = 0.01,
        fbam: bool = False, fbam_bands: int = 6, fbam_kernel_mode: HostKernelMode = "auto",
        fbam_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("EEGNet", F1=F1, D=D, F2=F2, kernel_length=kernel_length,
                            separable_kernel=separable_kernel, pool1=pool1, pool2=pool2)
        if n_times < pool1 * pool2:
            raise ValueError(
                f"EEGNet needs n_times >= pool1 * pool2 = {pool1 * pool2} samples (two average pools of "
                f"{pool1} and {pool2}), got n_times={n_times}"
            )
        check_dropout("EEGNet", dropout=dropout)
        if not 0.0 < bn_momentum <= 1.0:
            raise ValueError(f"EEGNet: bn_momentum must lie in (0, 1], got {bn_momentum}")

        self.temporal = nn.Sequential(
            _same_pad(kernel_length),
            nn.Conv2d(1, F1, (1, kernel_length), bias=False),
            _bn(F1, bn_momentum),
        )
        self.spatial = nn.Sequential(
            _MaxNormConv2d(F1, D * F1, (n_chans, 1), groups=F1, bias=False,
                           max_norm=1.0 if max_norm else None),
            _bn(D * F1, bn_momentum),
            nn.ELU(),
            nn.AvgPool2d((1, pool1)),
            nn.Dropout(dropout),
        )
        self.separable = nn.Sequential(
            _same_pad(separable_kernel),
            nn.Conv2d(D * F1, D * F1, (1, separable_kernel), groups=D * F1, bias=False),
            nn.Conv2d(D * F1, F2, 1, bias=False),
            _bn(F2, bn_momentum),
            nn.ELU(),
            nn.AvgPool2d((1, pool2)),
            nn.Dropout(dropout),
        )
        self.fbam: nn.ModuleList | None = None
        if fbam:
            check_positive_ints("EEGNet", fbam_bands=fbam_bands)
            opts = fbam_options("EEGNet", fbam_kernel_mode, n_outputs, fbam_kwargs)
            self.fbam = nn.ModuleList([
                _MapFBAM(FBAM(F1 * n_chans, n_times, fbam_bands, **opts)),
                _MapFBAM(FBAM(D * F1, n_times // pool1, fbam_bands, **opts)),
            ])
        self.batch_independent_eval = eval_is_batch_independent(self.fbam)
        self.feature_dim = F2 * ((n_times // pool1) // pool2)
        self.head = _MaxNormLinear(self.feature_dim, n_outputs, max_norm=0.25 if max_norm else None)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened block-2 output ``(B, feature_dim)`` that :attr:`head` maps to logits."""
        self.check_input(x)
        z = self.temporal(x.unsqueeze(1))
        if self.fbam is not None:
            z = self.fbam[0](z)
        z = self.spatial(z)
        if self.fbam is not None:
            z = self.fbam[1](z)
        return self.separable(z).flatten(1)


class _MapFBAM(nn.Module):
    """FBAM on ``(B, F, H, T)`` feature maps read as ``T`` tokens of width ``F * H``."""

    def __init__(self, fbam: FBAM) -> None:
        super().__init__()
        self.fbam = fbam

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b, f, h, t = z.shape
        tokens = z.permute(0, 3, 1, 2).reshape(b, t, f * h)
        return self.fbam(tokens).reshape(b, t, f, h).permute(0, 2, 3, 1)
