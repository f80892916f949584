"""Medformer (Wang et al., NeurIPS 2024), the multi-granularity patching Transformer.

A baseline backbone of BioFormer (Table 2, Table 3 "Medf.", Table 13). Medformer, Sec. 3:

* **Cross-channel multi-granularity patching** (Sec. 3.2). For every patch length ``L_i``
  the window ``(C, T)`` is cut into non-overlapping ``C x L_i`` patches, and each patch is
  mapped linearly to ``D`` dimensions (the authors' ``Conv2d(1, D, (C, L_i), stride L_i)``
  without bias). The authors' code first pads the window on the right by ``L_i`` samples
  (replicating the last sample), so a granularity has ``n_i = floor(T / L_i) + 1`` tokens.
* **Granularity embedding and router** (Sec. 3.3). Each granularity gets the fixed
  sinusoidal positions plus a learnable granularity embedding ``W_gr^(i)`` (drawn
  ``N(0, 1)``), ``x^(i) = x_e^(i) + W_pos[1:n_i] + W_gr^(i)``. The *router* ``u^(i)`` of a
  granularity is its last token: the paper writes ``u^(i) = W_pos[n_i + 1] + W_gr^(i)``,
  the authors' code realises it as the extra patch that the replicate padding creates
  (position ``n_i`` plus ``W_gr^(i)`` plus the embedding of that padded patch). We follow
  the code, so the router also carries the embedding of the trailing samples.
* **Two-stage multi-granularity self-attention** (Sec. 3.4), in every layer: intra-
  granularity self-attention (a separate multi-head attention per granularity, over its
  own ``n_i`` tokens, router included), then inter-granularity self-attention (one shared
  multi-head attention) over the ``G`` routers only; each router's intra output is
  replaced by its inter output. The rest of the layer is the TSLib post-norm block:
  ``a = LN1(x + Drop(attn))``, ``LN2(a + Drop(W2 Drop(GELU(W1 a))))``, with the
  feed-forward and both norms shared by all granularities.
* **Head.** A final LayerNorm, then GELU, dropout, flatten and a linear layer.

Versions of the authors' code (``variant``: ``"paper"``, the paper-reproduction commit and the default;
``"head"``, the repository HEAD), the augmentation, the single-channel and FBAM options and how the
granularities are batched are described in :class:`Medformer`'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import groupby
from typing import Any, Literal, cast

import torch
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.base import BiosignalModel, check_dropout, check_heads, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.alignment import (
    FBAM,
    HostKernelMode,
    aligned_layers,
    eval_is_batch_independent,
    fbam_options,
)
from biosig_lightning.models.modules.attention import (
    PostNormLayer,
    merge_heads,
    softmax_attention,
    split_heads,
)
from biosig_lightning.models.modules.augment import augment, parse_augmentation
from biosig_lightning.models.modules.dropout import MaskDropout
from biosig_lightning.models.modules.encodings import sinusoidal_positions

__all__ = ["APAVA_PATCH_LENS", "Medformer"]

Variant = Literal["paper", "head"]
APAVA_PATCH_LENS = (2, 2, 2, 4, 4, 4, 16, 16, 16, 16, 32, 32, 32, 32, 32)


def _patches(x: torch.Tensor, p: int, n: int) -> torch.Tensor:
    """``(..., C, T)`` -> ``(..., n, C * p)``: the window padded on the right by ``p`` copies of
    its last sample, cut into ``n`` non-overlapping ``C x p`` patches, each flattened (channel-major,
    like a ``(C, p)`` convolution kernel)."""
    padded = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], p)], dim=-1)
    return padded[..., : n * p].unflatten(-1, (n, p)).transpose(-3, -2).flatten(-2)


class MultiGranularityEmbedding(nn.Module):
    """Cross-channel patch embedding for every granularity, laid end to end: ``(B', N, D)``.

    ``B' = B`` (or ``B * C`` with ``single_channel``). Tokens of granularity ``i`` occupy
    ``[offsets[i], offsets[i] + n_tokens[i])``; the last of them is its router.
    """

    positions: torch.Tensor  # buffers
    channel_tag: torch.Tensor  # (variant head only)

    def __init__(
        self, *, n_chans: int, n_times: int, d_model: int,
        patch_lens: Sequence[int], augmentations: Sequence[str], variant: Variant, single_channel: bool,
    ) -> None:
        super().__init__()
        self.variant = variant
        self.single_channel = single_channel
        self.d_model = d_model
        self.patch_lens = sorted(int(p) for p in patch_lens)
        # (patch length, number of granularities with it), in sorted order
        self.groups = [(p, len(list(g))) for p, g in groupby(self.patch_lens)]
        self.n_tokens = [n_times // p + 1 for p in self.patch_lens]
        self.offsets = [sum(self.n_tokens[:i]) for i in range(len(self.n_tokens))]
        self.augmentations = [parse_augmentation(a) for a in augmentations]
        in_chans = 1 if single_channel else n_chans
        # One weight (k*D, C_in, p) per patch length = k stacked Conv2d(1, D, (C_in, p)) kernels,
        # applied as one matrix product over the flattened patches (a strided conv is much slower
        # on CPU for such short kernels).
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(k * d_model, in_chans, p)) for p, k in self.groups
        )
        for w in self.weights:
            # fan_in = C_in * p, as for the authors' Conv2d(1, D, (C_in, p)) (Kaiming normal, leaky_relu)
            nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="leaky_relu")
        self.granularity = nn.Parameter(torch.randn(len(self.patch_lens), d_model))
        self.register_buffer("positions", sinusoidal_positions(max(self.n_tokens), d_model), persistent=False)
        if variant == "head":
            # HEAD's channel tag: the sinusoidal table with channels as positions, time as dimensions.
            self.register_buffer("channel_tag", sinusoidal_positions(in_chans, n_times), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.single_channel:
            x = x.reshape(-1, 1, x.shape[-1])
        b = x.shape[0]
        n_gran = len(self.patch_lens)
        choices: list[int | None] = [None] * n_gran
        if self.training and self.augmentations:
            choices = torch.randint(len(self.augmentations), (n_gran,)).tolist()
        augs = [
            None if c is None or self.augmentations[c][0] == "identity" else self.augmentations[c]
            for c in choices
        ]

        out = []
        start = 0
        for (p, k), weight in zip(self.groups, self.weights, strict=True):
            group_augs = augs[start : start + k]
            raw_augs = group_augs if self.variant == "head" else [None] * k
            n = x.shape[-1] // p + 1
            w = weight.view(k, self.d_model, -1)  # (k, D, C_in * p)
            if all(a is None for a in raw_augs):
                inp = x if self.variant == "paper" else x + self.channel_tag
                emb = (_patches(inp, p, n) @ w.flatten(0, 1).T).view(b, n, k, self.d_model).transpose(1, 2)
            else:
                # Each granularity sees its own augmented copy of the window.
                copies = [x if a is None else augment(x, *a) for a in raw_augs]
                inp = torch.stack(copies, dim=1) + self.channel_tag  # (B, k, C_in, T)
                emb = torch.einsum("bknf,kdf->bknd", _patches(inp, p, n), w)
            if self.variant == "paper" and any(a is not None for a in group_augs):
                emb = torch.stack(
                    [emb[:, j] if a is None else augment(emb[:, j], *a) for j, a in enumerate(group_augs)],
                    dim=1
                )
            emb = emb + self.granularity[start : start + k, None, :] + self.positions[:n]
            out.append(emb.reshape(b, k * n, self.d_model))
            start += k
        return torch.cat(out, dim=1)


class MultiGranularityLayer(PostNormLayer):
    """One Medformer encoder layer on all granularities' tokens ``(B, N, D)`` (Sec. 3.4).

    Intra-granularity attention has its own q/k/v/o projections (with bias) per
    granularity, stored stacked as ``(G, D, D)`` tensors; granularities of equal length are
    computed in one batched call. Inter-granularity attention (shared weights) runs over
    the routers. Dropout on attention weights and the TSLib post-norm FFN follow.
    """

    router_index: torch.Tensor  # buffer

    def __init__(
        self, *, d_model: int, n_heads: int, d_ff: int, dropout: float,
        groups: Sequence[tuple[int, int]], router_index: torch.Tensor, inter_attention: bool,
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.groups = [(int(n), int(k)) for n, k in groups]  # (tokens per granularity, granularities)
        n_gran = sum(k for _, k in self.groups)
        bound = 1.0 / math.sqrt(d_model)  # nn.Linear's default initialisation
        self.intra_in_weight = nn.Parameter(torch.empty(n_gran, d_model, 3 * d_model).uniform_(-bound, bound))
        self.intra_in_bias = nn.Parameter(torch.empty(n_gran, 3 * d_model).uniform_(-bound, bound))
        self.intra_out_weight = nn.Parameter(torch.empty(n_gran, d_model, d_model).uniform_(-bound, bound))
        self.intra_out_bias = nn.Parameter(torch.empty(n_gran, d_model).uniform_(-bound, bound))
        # The authors' code skips inter attention when asked to or with a single granularity.
        self.inter_qkv = nn.Linear(d_model, 3 * d_model) if inter_attention and n_gran > 1 else None
        self.inter_out = nn.Linear(d_model, d_model) if self.inter_qkv is not None else None
        self.register_buffer("router_index", router_index, persistent=False)
        self.build_post_norm(d_model, d_ff, dropout)

    def intra(self, x: torch.Tensor) -> torch.Tensor:
        b, _, d = x.shape
        h = self.n_heads
        outs = []
        start, gran = 0, 0
        for n, k in self.groups:
            xs = x[:, start : start + k * n].reshape(b, k, n, d)
            sl = slice(gran, gran + k)
            qkv = torch.einsum("bknd,kde->bkne", xs, self.intra_in_weight[sl]) + self.intra_in_bias[sl, None]
            q, kk, v = split_heads(qkv, h)  # each (B, k, H, n, dh)
            o = merge_heads(softmax_attention(q, kk, v, self.attn_dropout))
            o = torch.einsum("bknd,kde->bkne", o, self.intra_out_weight[sl]) + self.intra_out_bias[sl, None]
            outs.append(o.reshape(b, k * n, d))
            start += k * n
            gran += k
        return torch.cat(outs, dim=1)

    def inter(self, routers: torch.Tensor) -> torch.Tensor:
        # called only with inter attention, when both layers exist
        q, k, v = split_heads(cast(nn.Linear, self.inter_qkv)(routers), self.n_heads)
        return cast(nn.Linear, self.inter_out)(merge_heads(softmax_attention(q, k, v, self.attn_dropout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn = self.intra(x)
        if self.inter_qkv is not None:
            routers = self.inter(attn.index_select(1, self.router_index))
            attn = attn.index_copy(1, self.router_index, routers)
        return self.post_norm(x, attn)


#: Medformer's ADFTD / PTB-XL configuration (scripts/classification/Medformer.sh), as in
#: experiments/bioformer/baselines/medformer_adftd.yaml and medformer_ptbxl.yaml
_MEDFORMER_LONG = (2, 4, 8, 8, 16, 16, 16, 16, 32, 32, 32, 32, 32, 32, 32, 32)


@register_backbone(
    shapes=["apava", "adftd", "ptbxl_medformer"],
    kwargs={
        "apava": {"augmentations": ["none", "drop0.35"]},
        "adftd": {"patch_lens": _MEDFORMER_LONG, "augmentations": ["drop0.5"]},
        "ptbxl_medformer": {"patch_lens": _MEDFORMER_LONG,
                            "augmentations": ["jitter0.2", "scale0.2", "drop0.5"]},
    },
    # The authors' count at APAVA for the paper-reproduction commit 446275f (github DL4mHealth/Medformer, its
    # README's reproduction commit);
    # BioFormer Table 13 lists it as 7.41 M. (Repository HEAD, variant="head": 7,240,834.)
    param_pins={"apava": 7_414_914},
    test_kwargs={"d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 32, "patch_lens": [16, 32, 32]},
)
class Medformer(BiosignalModel):
    """Medformer classifier for ``(batch, n_chans, n_times)`` windows.

    Versions of the authors' code (``variant``):

    * ``"paper"`` (default): the paper-reproduction commit ``446275f`` that the Medformer
      README points to. The head flattens *all* tokens of all granularities; the in-model
      augmentation acts on each granularity's patch embedding ``(B, n_i, D)``.
    * ``"head"``: the current repository HEAD. The head flattens only the ``G`` final routers;
      the augmentation acts on a copy of the raw window per granularity; and a fixed
      "channel embedding" is added to the raw window before patching (the sinusoidal table
      with channels as positions and time steps as dimensions, ``PE[c, t]``).

    Why ``"paper"`` is the default: BioFormer's Table 2 marks the Medformer numbers as adopted
    from the Medformer paper (Table 3's "Medf." backbone row reuses them, e.g. APAVA F1 76.31),
    which were produced with the paper commit, and BioFormer's Table 13 lists 7.41 M
    parameters, which is the paper commit's count for APAVA. The defaults are Medformer's APAVA
    configuration (``scripts/classification/Medformer.sh``): patch lengths
    ``2,2,2,4,4,4,16,16,16,16,32,32,32,32,32``, ``D = 128``, 8 heads, 6 layers,
    ``D_ff = 256``, dropout 0.1, augmentations ``none,drop0.35``. At 16 channels x 256
    samples and 2 classes this gives **7,414,914** trainable parameters with
    ``variant="paper"`` and **7,240,834** with ``variant="head"``, both exactly the authors'
    counts. (The authors' scripts also train with stochastic weight averaging, ``--swa``;
    that is a training-loop option, not part of this module.)

    Augmentation (in training mode only): for every granularity and forward pass, one entry of
    ``augmentations`` is drawn uniformly (the whole batch gets the same one), as in the code.
    Accepted entries are those of :func:`~biosig_lightning.models.modules.parse_augmentation`:
    ``jitterS`` (add ``S N(0,1)``), ``scaleS`` (multiply each slice along axis 1 by
    ``1 + S N(0,1)``: per (sample, token) on embeddings, per (sample, channel) on the raw
    window, as the authors' ``Scale`` does on the tensors it receives), ``dropP`` and
    ``none``; these cover every Medformer configuration of the BioFormer datasets. Draws use
    torch's RNG, so ``seed_everything`` makes them reproducible.

    ``single_channel=True`` is Medformer's ablation in which every channel is patched on its
    own (``1 x L_i`` patches, batch ``B * C`` inside the encoder); the head then sees the
    features of all channels.

    ``fbam=True`` is BioFormer's "Medf. + FBAM" (Table 3, Appendix C.4): one
    :class:`~biosig_lightning.models.modules.FBAM` is inserted before each encoder layer and
    aligns every granularity's token sequence (router included) on its own, with weights
    shared across granularities, like BioFormer's branches. ``fbam_kernel_mode`` is ``"auto"`` by
    default: batch-shared kernels for multi-class tasks, sample-specific ones for binary tasks
    (Appendix C.3); ``fbam_kwargs`` passes further FBAM options.

    Implementation. Granularities are kept sorted by patch length (the model is equivariant to
    the order of ``patch_lens`` up to a relabelling of its parameters) and their tokens are
    laid end to end in one ``(B, N, D)`` tensor, ``N = sum_i n_i``. Granularities with equal
    patch length share one strided convolution call and one batched attention computation
    (their per-granularity weights are stacked), so a layer runs one attention per *distinct*
    patch length rather than per granularity. The embedding module
    (:attr:`style_site` ``= "embedding"``) returns that single tensor, so MixStyle/DSU can
    perturb its channel statistics (``style_channel_dim = -1``). *Reading:* those statistics are
    taken per sample and embedding channel over all tokens of all granularities, i.e. over the
    whole output of Medformer's embedding layer (C.4: "immediately after the embedding layer"),
    not per granularity.
    ``forward(x) == head(forward_features(x))`` holds exactly. For the feature-alignment
    losses (MMD/CORAL/GRL, "temporal average of the encoder outputs", BioFormer C.4)
    :attr:`align_site` ``= "norm"`` (``align_channel_dim = -1``) is the final LayerNorm, whose
    output is ``(B, N, D)`` (``"paper"``) or the routers ``(B, G, D)`` (``"head"``); with
    ``single_channel`` it is ``None`` and ``forward_features`` is used instead. With
    ``single_channel`` the style site's rows are the ``B * C`` single-channel sequences.

    Args:
        n_chans, n_outputs, n_times, sfreq: the data shape (``sfreq`` is recorded only).
        patch_lens: one patch length per granularity (default: Medformer's APAVA list).
        d_model, n_heads, e_layers, d_ff, dropout: Transformer sizes (Medformer/BioFormer
            C.3: 128, 8, 6, 256, 0.1). ``dropout`` acts on attention weights, residual
            branches, the feed-forward and the flattened features.
        augmentations: in-model augmentation choices (default APAVA's ``none,drop0.35``).
        single_channel: patch every channel separately (Medformer's ablation).
        inter_attention: ``False`` is Medformer's ``--no_inter_attn`` ablation.
        variant: ``"paper"`` (commit 446275f, default) or ``"head"`` (repository HEAD).
        fbam, fbam_bands, fbam_kernel_mode, fbam_kwargs: insert BioFormer's FBAM before every
            layer (``fbam_kernel_mode="auto"``: batch-shared kernels when ``n_outputs > 2``).

    Attributes: :attr:`feature_dim` (``N * D`` for ``"paper"``, ``G * D`` for ``"head"``,
    times ``n_chans`` with ``single_channel``), :attr:`head`, :attr:`n_tokens` (tokens per
    granularity, sorted by patch length).
    """

    style_site: str = "embedding"
    style_channel_dim: int = -1
    align_site: str | None = "norm"
    align_channel_dim: int = -1

    router_index: torch.Tensor  # buffer

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        patch_lens: Sequence[int] = APAVA_PATCH_LENS,
        d_model: int = 128, n_heads: int = 8, e_layers: int = 6, d_ff: int = 256, dropout: float = 0.1,
        augmentations: Sequence[str] = ("none", "drop0.35"), single_channel: bool = False,
        inter_attention: bool = True, variant: Variant = "paper",
        fbam: bool = False, fbam_bands: int = 6, fbam_kernel_mode: HostKernelMode = "auto",
        fbam_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("Medformer", d_model=d_model, n_heads=n_heads, e_layers=e_layers, d_ff=d_ff,
                            fbam_bands=fbam_bands)
        patch_lens = list(patch_lens)
        if not patch_lens or any(not isinstance(p, int) or isinstance(p, bool) or p < 1 for p in patch_lens):
            raise ValueError(f"Medformer: patch_lens must be a non-empty list of positive ints, got "
                             f"{patch_lens!r}")
        check_heads("Medformer", d_model, n_heads)
        check_dropout("Medformer", dropout=dropout)
        if variant not in ("paper", "head"):
            raise ValueError(f"Medformer: variant must be 'paper' or 'head', got {variant!r}")

        self.variant = variant
        self.single_channel = single_channel
        self.embedding = MultiGranularityEmbedding(
            n_chans=n_chans, n_times=n_times, d_model=d_model, patch_lens=patch_lens,
            augmentations=augmentations, variant=variant, single_channel=single_channel,
        )
        self.patch_lens = list(self.embedding.patch_lens)
        self.n_tokens = list(self.embedding.n_tokens)
        router_index = torch.tensor([o + n - 1 for o,
                                     n in zip(self.embedding.offsets, self.n_tokens, strict=True)])
        self.register_buffer("router_index", router_index, persistent=False)
        groups = [(n_times // p + 1, k) for p, k in self.embedding.groups]
        self.fbam = (
            nn.ModuleList(
                FBAM(d_model, self.n_tokens, n_bands=fbam_bands,
                     **fbam_options("Medformer", fbam_kernel_mode, n_outputs,
                                                                                 fbam_kwargs))
                for _ in range(e_layers)
            )
            if fbam
            else None
        )
        self.batch_independent_eval = eval_is_batch_independent(self.fbam)
        self.layers = nn.ModuleList(
            MultiGranularityLayer(
                d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, groups=groups,
                router_index=router_index, inter_attention=inter_attention,
            )
            for _ in range(e_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        if single_channel:
            # the final norm sees (B * C, N, D): not one row per sample, so DG losses use forward_features
            self.align_site = None
        self.feature_dropout = MaskDropout(dropout)
        per_sample = (sum(self.n_tokens) if variant == "paper" else len(self.n_tokens)) * d_model
        self.feature_dim = per_sample * (n_chans if single_channel else 1)
        self.head = nn.Linear(self.feature_dim, n_outputs)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Last-layer tokens of all granularities end to end, ``(B', N, D)``, before the final norm."""
        self.check_input(x)
        return aligned_layers(self.embedding(x), self.layers, self.fbam)

    def forward_tokens(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Final-layer temporal embedding per granularity, ``[(B, n_i - 1, D)]``, before the final norm.

        For BioFormer's FBD analysis (Appendix F): each granularity's patch tokens in time order,
        without its router (the last token, a summary rather than a time step), sorted by patch
        length like :attr:`n_tokens`. Not defined with ``single_channel`` (rows are channels).
        """
        if self.single_channel:
            raise ValueError("Medformer.forward_tokens: with single_channel=True the rows are single "
                             "channels, "
                             "not samples; there is no per-sample temporal embedding")
        return [part[:, :-1] for part in self.encode(x).split(self.n_tokens, dim=1)]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened representation ``(B, feature_dim)`` that :attr:`head` maps to logits."""
        z = self.encode(x)
        if self.variant == "head":
            z = z.index_select(1, self.router_index)
        h = self.feature_dropout(F.gelu(self.norm(z)))
        return h.reshape(x.shape[0], -1)
