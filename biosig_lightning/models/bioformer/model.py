"""BioFormer (Du et al., ICML 2026): PCE -> hybrid FBAM/attention encoder -> SCLN -> head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.base import BiosignalModel, check_dropout, check_positive_ints
from biosig_lightning.models.bioformer.embedding import PyramidConvEmbedding
from biosig_lightning.models.bioformer.encoder import FfnResidual, SegmentedEncoderLayer
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.alignment import (
    AUTHORS_FBAM,
    DESCRIPTORS,
    FBAM,
    TSAM,
    BandAttention,
    EpsMode,
    EvalKernel,
    GainMode,
    HostKernelMode,
    PhaseMode,
    TokenInit,
    aligned_layers,
    eval_is_batch_independent,
    resolve_kernel_mode,
)
from biosig_lightning.models.modules.dropout import MaskDropout
from biosig_lightning.models.modules.scln import SampleConditionalLayerNorm

__all__ = ["AUTHORS_BIOFORMER", "BIT_PARITY_ONLY", "BioFormer"]

Mixer = Literal["fbam", "tsam", "none"]
DEFAULT_AUGMENTATIONS = ("jitter", "scale", "dropout", "identity")

#: The authors' operator set (github NKU-EmbeddedSystem/BioFormer, ``layers/BioFormer_EncDec.py``): FBAM's
#: (:data:`AUTHORS_FBAM`) plus the FFN residual ``LN2(a + f)``. The training-loop part of their
#: code (grad-norm clip 4.0, early-stopping ``min_delta`` 1e-5) lives in the YAMLs.
AUTHORS_BIOFORMER: dict[str, object] = {**AUTHORS_FBAM, "ffn_residual": "raw"}
#: Switches of :data:`AUTHORS_BIOFORMER` that a training YAML may leave at the paper's value
#: because they move outputs at the ``eps`` level only. Empty: the default YAMLs carry every
#: switch, ``eps_mode: shift`` included, so they train the function the authors' code trains.
BIT_PARITY_ONLY: tuple[str, ...] = ()


@register_backbone(
    # experiments/bioformer_<corpus>.yaml: per-corpus settings of the authors' runs
    # (NKU-EmbeddedSystem/BioFormer, ``experiments.ipynb``)
    shapes=["apava", "adftd", "ptb", "ptbxl_medformer", "bci2a", "bci2b"],
    kwargs={
        "apava": {"kernel_mode": "sample", "augmentations": ["scale0.1", "drop0.25"]},
        "adftd": {"kernel_mode": "batch", "augmentations": ["drop0.5"]},
        "ptb": {"kernel_mode": "sample", "use_magnitude": False, "alpha": 0.2,
                "augmentations": ["none", "drop0.5"]},
        "ptbxl_medformer": {"kernel_mode": "batch", "use_scln": False,
                            "augmentations": ["jitter0.2", "scale0.2", "drop0.5"]},
        "bci2a": {"kernel_mode": "batch", "augmentations": ["scale0.1", "drop0.25"]},
        "bci2b": {"kernel_mode": "sample", "augmentations": ["scale0.1", "drop0.25"]},
    },
    # The authors' code has 1,364,454 trainable parameters at APAVA (NKU-EmbeddedSystem/BioFormer with its
    # APAVA flags;
    # BioFormer Table 13: 1.36 M); ours has 6 fewer, the authors' per-FBAM gain scalars gamma, which
    # exist here only with gain_mode="offset" (tests/models/bioformer/test_bioformer.py pins that count too).
    param_pins={"apava": 1_364_454 - 6},
    test_kwargs={"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1, "d_token": 8},
)
class BioFormer(BiosignalModel):
    """BioFormer classifier for ``(batch, n_chans, n_times)`` windows.

    Pipeline (Sec. 4.1, Fig. 3): Pyramid Convolutional Embedding gives three token
    sequences of ``ceil(T/2)``, ``ceil(T/4)``, ``ceil(T/8)`` tokens (Appendix B.1); each of
    ``n_layers`` hybrid layers applies its FBAM and then its attention + FFN layer to all
    three sequences with shared weights (no cross-branch attention); the sequences are
    concatenated, normalised by SCLN (Sec. 4.3) and the head applies
    ``GELU -> Dropout -> flatten -> Linear`` (the authors' classifier).

    Table 5 ablations are constructor switches that remove the parts: ``mixer="none"``
    (no FBAM modules at all), ``use_magnitude=False`` (phase only: no kernel/gain heads),
    ``use_phase=False`` (magnitude only: no phase head), ``use_scln=False`` (plain
    LayerNorm, no SCLN MLP). ``mixer="tsam"`` swaps FBAM for its time-domain control
    (Appendix B.2). ``band_edges`` / ``learnable_dc`` are Appendix G.3's Variants 1 and 2,
    ``magnitude_residual=False`` is Variant 3, ``band_attention="static"`` Variant 4 and
    ``"self"`` Variant 5; ``descriptors`` picks Table 10's band statistics.

    ``pyramid_factors`` are PCE's downsampling factors (Appendix B.1: ``{2, 4, 8}``, the
    default). Reading: the paper's inputs are 1-s windows and heartbeats (250-300 samples,
    so at most 150 tokens per branch); for much longer windows (a 30-s sleep epoch at
    100 Hz has 3,000 samples, i.e. 1,500 / 750 / 375 tokens and full attention over them)
    scaling the factors by a power of two, e.g. ``(16, 32, 64)``, keeps the token counts in
    the paper's range while each branch keeps its 2:1 ratio to the next.

    Paper vs authors' code (defaults follow the paper; the code's choice is an option):
    ``phase_mode`` ("rotate" = Eq. 7 rotation by ``beta``; "scale" = code's
    ``theta -> (1+beta) theta``), ``gain_mode`` ("tanh" = Algorithm 1; "offset" = code's
    ``clamp(1 + gamma 0.5 tanh, 0.5, 1.5)``), ``magnitude_clamp`` (None; code 0.5),
    ``token_init`` ("xavier"; code "zeros"), ``ffn_residual`` ("normed" = standard
    post-norm layer; code "raw"), ``eps_mode`` ("paper" = Algorithm 1's ``A = |Z|``; code
    "shift", ``A = |Z| + eps``: a 1e-6-level difference, kept for bit-level parity);
    :data:`AUTHORS_BIOFORMER` lists the code's values.
    ``kernel_mode`` is a flag (paper/code: "batch" for more than two classes, "sample"
    otherwise; ``"auto"``, the default, applies that rule). ``eval_kernel="batch"`` (paper
    and code) averages the kernel over the evaluated batch; ``"running"`` is our opt-in
    BatchNorm-like running average, so eval logits never depend on batch-mates
    (see :mod:`.alignment`).

    Interfaces for other code: ``forward(x) == head(forward_features(x))`` exactly;
    :attr:`feature_dim` ``= sum(seq_lens) * d_model``; :meth:`forward_tokens` returns the
    final-layer token embeddings of each branch (for the FBD analysis, Appendix F).

    With the APAVA configuration (16 x 256, 2 classes, defaults) the model has 1,364,448
    trainable parameters (authors' code: 1,364,454; the 6 missing are their ``gamma``
    scalars, present here with ``gain_mode="offset"``).
    """

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        d_model: int = 128, d_ff: int = 256, n_heads: int = 8, n_layers: int = 6, dropout: float = 0.1,
        mixer: Mixer = "fbam", n_bands: int = 6, band_edges: list[float] | list[list[int]] | None = None,
        learnable_dc: bool = False,
        kernel_mode: HostKernelMode = "auto", kernel_momentum: float | None = 0.1, kernel_size: int = 3,
        d_token: int | None = None, fbam_dropout: float = 0.1,
        use_magnitude: bool = True, use_phase: bool = True, phase_mode: PhaseMode = "rotate",
        gain_mode: GainMode = "tanh",
        magnitude_clamp: float | None = None, magnitude_residual: bool = True,
        token_init: TokenInit = "xavier", eval_kernel: EvalKernel = "batch", eps_mode: EpsMode = "paper",
        band_attention: BandAttention = "cross", descriptors: Sequence[str] = DESCRIPTORS,
        use_scln: bool = True, alpha: float = 0.1, ffn_residual: FfnResidual = "normed",
        augmentations: Sequence[str] = DEFAULT_AUGMENTATIONS,
        pyramid_factors: Sequence[int] = (2, 4, 8),
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("BioFormer", d_model=d_model, d_ff=d_ff, n_heads=n_heads, n_layers=n_layers,
                            n_bands=n_bands)
        if n_times < 8:
            raise ValueError(f"BioFormer needs n_times >= 8 for its T/8 branch, got {n_times}")
        if mixer not in ("fbam", "tsam", "none"):
            raise ValueError(f"mixer must be 'fbam', 'tsam' or 'none', got {mixer!r}")
        check_dropout("BioFormer", dropout=dropout)

        self.d_model = d_model
        self.mixer = mixer

        self.embedding = PyramidConvEmbedding(n_chans, n_times, d_model, factors=pyramid_factors,
                                              augmentations=augmentations)
        self.seq_lens = list(self.embedding.seq_lens)
        self.n_tokens = sum(self.seq_lens)

        self.kernel_mode = resolve_kernel_mode(kernel_mode, n_outputs)
        common: dict[str, Any] = dict(
            d_token=d_token, kernel_size=kernel_size, dropout=fbam_dropout, kernel_mode=self.kernel_mode,
            kernel_momentum=kernel_momentum, token_init=token_init, eval_kernel=eval_kernel,
            band_attention=band_attention,
        )
        self.mixers: nn.ModuleList | None
        if mixer == "fbam":
            self.mixers = nn.ModuleList(
                FBAM(
                    d_model, self.seq_lens, n_bands, band_edges, use_magnitude=use_magnitude,
                    use_phase=use_phase,
                    phase_mode=phase_mode, gain_mode=gain_mode, magnitude_clamp=magnitude_clamp,
                    magnitude_residual=magnitude_residual, learnable_dc=learnable_dc, descriptors=descriptors,
                    eps_mode=eps_mode, **common,
                )
                for _ in range(n_layers)
            )
        elif mixer == "tsam":
            self.mixers = nn.ModuleList(TSAM(d_model, self.seq_lens,
                                             n_bands, band_edges, **common) for _ in range(n_layers))
        else:
            self.mixers = None
        self.batch_independent_eval = eval_is_batch_independent(self.mixers)
        self.layers = nn.ModuleList(
            SegmentedEncoderLayer(d_model, n_heads, d_ff, dropout,
                                  self.seq_lens, ffn_residual) for _ in range(n_layers)
        )
        self.norm: nn.Module = (
            SampleConditionalLayerNorm(d_model, alpha) if use_scln else nn.LayerNorm(d_model)
        )
        self.feature_dropout = MaskDropout(dropout)
        self.feature_dim = self.n_tokens * d_model
        self.head = nn.Linear(self.feature_dim, n_outputs)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder output before the final norm: all branch tokens end to end, ``(B, N, D)``."""
        self.check_input(x)
        return aligned_layers(self.embedding(x), self.layers, self.mixers)

    def forward_tokens(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Final-layer token embeddings per pyramid branch, ``[(B, ceil(T/f), D) for f in 2, 4, 8]``.

        These are the "final-layer temporal embeddings" of the FBD analysis (Appendix F):
        the output of the last hybrid layer, before the final SCLN / LayerNorm.
        """
        return list(self.encode(x).split(self.seq_lens, dim=1))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened representation ``(B, feature_dim)`` that :attr:`head` maps to logits."""
        h = self.norm(self.encode(x))
        return self.feature_dropout(F.gelu(h)).flatten(1)
