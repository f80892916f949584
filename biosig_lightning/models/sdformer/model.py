"""SD-Former: spectral tokens, a learned sparse directed graph, graph-masked attention.

Reproduces the model of Sharma, "SD-Former: Sparse Directed Attention as a Structural
Prior for Robust Physiological Time Series" (Sec. 4). No public code exists, so the paper
is the whole specification; every choice it leaves open is stated, with its reason, in the
docstrings below.

Pipeline (``x`` of shape ``(B, C, T)``), each step with its reading in :class:`SDFormer`'s docstring:

1. spectral tokenizer (:class:`SpectralTokenizer`): per channel-band pair a small MLP over the
   band's short-time log-power summary, ``N = 5 C`` tokens;
2. optional band pooling for graph inference only (``M = C`` graph nodes instead of ``N``);
3. sparse dependency inferencer (:class:`DependencyInferencer`): a per-sample hard graph
   ``a_ij = 1[sigmoid(MLP_edge([h_i || h_j])) > 0.5]`` with a straight-through gradient;
4. graph-conditioned transformer (:class:`GraphMaskedAttention`): attention where ``a_ij = 1`` or
   ``i = j``;
5. auxiliary terms for the recipe (:meth:`SDFormer.forward_with_aux`): reconstruction, dependency
   (:func:`dependency_loss`), NOTEARS acyclicity ``h(A) = tr(exp(A)) - M`` and l1 sparsity;
6. graph controls (``graph``: ``"learned"``, ``"random"``, ``"full"``, ``"none"``).

Size (Sec. 7.5 / Table 5: ~1.8 M on Sleep-EDF, 2.4 M on PTB-XL, 3.1 M on CHB-MIT). The exact
counts per corpus and tokenizer, and where they differ from the paper's, are in
docs/papers/sdformer.md (``python benchmarks/parity/sdformer_param_counts.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.features.spectral import EEG_BANDS, ShortTimeBandPower
from biosig_lightning.models.base import BiosignalModel, check_dropout, check_heads, check_positive_ints
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.attention import merge_heads, split_heads
from biosig_lightning.models.modules.learned_graphs import notears_acyclicity, random_dag

__all__ = [
    "DependencyInferencer",
    "EdgeScorer",
    "GraphConditionedBlock",
    "GraphMaskedAttention",
    "SDFormer",
    "SDFormerOutput",
    "SpectralTokenizer",
    "SUMMARY_FEATURES",
    "dependency_loss",
    "masked_attention",
    "straight_through_threshold",
]

GraphMode = Literal["learned", "random", "full", "none"]
_GRAPH_MODES = ("learned", "random", "full", "none")


# --------------------------------------------------------------------------- graph maths


def straight_through_threshold(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard edges ``1[sigmoid(s) > 0.5]`` with the straight-through gradient of ``sigmoid(s)``.

    Returns ``(gate, probs)``. ``gate`` equals the hard 0/1 value exactly in the forward
    pass (the zero-valued ``probs - probs.detach()`` is added last) and has the gradient
    of ``probs`` in the backward pass.
    """
    probs = torch.sigmoid(scores)
    hard = (probs > 0.5).to(probs.dtype)
    return hard + (probs - probs.detach()), probs


def _explained(cross: torch.Tensor, power: torch.Tensor) -> torch.Tensor:
    """``<z, m>^2 / ||m||^2`` (the part of ``||z||^2`` a least-squares multiple of ``m`` explains); 0 for ``m
    = 0``."""
    fitted = power > 1e-6
    return torch.where(fitted, cross.square() / power.clamp(min=1e-6), torch.zeros_like(cross))


def dependency_loss(adjacency: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Least-squares residual of each node given its parents (our reading of ``L_dep``, Sec. 4).

    Args:
        adjacency: ``(B, M, M)`` hard 0/1 graph with ``a_ij = 1`` when ``j`` is a parent of
            ``i``; it may carry the straight-through gradient.
        features: ``(B, M, F)`` node features; each row is standardised (zero mean, unit
            variance over ``F``) and detached, so only the graph is fitted.

    Value: ``1/2 * mean_b sum_i min_c ||z_i - c m_i||^2 / F`` with ``m_i`` the sum (equivalently,
    the mean) of ``i``'s parents' standardised features; in closed form each node contributes
    ``(||z_i||^2 - <z_i, m_i>^2 / ||m_i||^2) / (2F) = (1 - r_i^2) / 2``, ``r_i`` the correlation
    of ``z_i`` with its parents' mean, and a parentless node ``1/2``. This is the data-fit term
    NOTEARS pairs with acyclicity and l1 (a linear SEM fitted by least squares), with one
    scalar coefficient per node and sample instead of a learned weight per edge, since the
    graph here is binary and inferred per sample. A parent therefore can only *lower* a
    parentless node's term, by ``r^2 / 2``; with the paper's weights (0.1 dep, 0.01 sparse) a
    first parent pays for its l1 cost when ``0.1 r^2 / 2 > 0.01``, i.e. ``|r| > 0.45``. A
    further parent helps only if it raises the correlation of the parents' mean.

    Gradient: the value is piecewise constant in a 0/1 graph (and scale-invariant in ``m_i``,
    so the gradient of the closed form at ``m_i = 0`` is zero: an empty row could never gain
    its first parent). ``dL/da_ij`` is instead the exact change of the value when that one
    edge flips, ``L(a_ij = 1) - L(a_ij = 0)`` with the rest of the graph as it is, which is the
    partial derivative of the loss's multilinear extension ``E_{a ~ Bernoulli(p)} L(a)`` at the
    hard graph. All ``M^2`` flips come in closed form from the Gram matrix, ``O(B M^2 F)``.
    The value returned is exactly the least-squares residual; the gradient enters through a
    term that is zero in the forward pass.
    """
    with torch.autocast(device_type=adjacency.device.type, enabled=False):
        z = features.detach().float()
        z = (z - z.mean(-1, keepdim=True)) / (z.std(-1, keepdim=True, unbiased=False) + 1e-5)
        gram = z @ z.transpose(-2, -1) / z.shape[-1]  # <z_i, z_j> / F
        edges = adjacency.float()
        a = edges.detach()
        own = gram.diagonal(dim1=-2, dim2=-1)  # ||z_i||^2 / F
        with_parents = a @ gram  # [i, j]: <m_i, z_j> / F, m_i the sum of i's parents
        cross = (a * gram).sum(-1)  # <z_i, m_i> / F
        power = (with_parents * a).sum(-1)  # ||m_i||^2 / F
        residual = 0.5 * (own - _explained(cross, power)).clamp(min=0.0)  # (B, M)
        # every single-edge flip at once: sign +1 adds parent j to node i, -1 removes it
        sign = 1.0 - 2.0 * a
        flipped_cross = cross.unsqueeze(-1) + sign * gram
        flipped_power = power.unsqueeze(-1) + 2.0 * sign * with_parents + own.unsqueeze(-2)
        flipped = 0.5 * (own.unsqueeze(-1) - _explained(flipped_cross, flipped_power)).clamp(min=0.0)
        flip_gain = sign * (flipped - residual.unsqueeze(-1))  # L(a_ij = 1) - L(a_ij = 0)
        flip_gain = flip_gain * (
            1.0 - torch.eye(a.shape[-1], device=a.device)
        )  # a node is not its own parent
        bridge = ((edges - a) * flip_gain).sum(dim=(-2, -1))  # zero-valued, gradient flip_gain
        return (residual.sum(-1) + bridge).mean()


# --------------------------------------------------------------------------- attention


def _relative_weights(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """``exp(l_ij) / Z_i`` for every key, ``Z_i`` over the allowed keys only: on allowed keys the
    attention weights, on masked ones the weight key ``j`` would get relative to them."""
    logits = (q * scale) @ k.transpose(-2, -1)
    log_normaliser = torch.logsumexp(logits.masked_fill(~allowed, float("-inf")), dim=-1, keepdim=True)
    # clamped so a far-off masked logit cannot overflow (its weight is 0 in the output either way)
    return logits.sub_(log_normaliser).clamp_(max=30.0).exp_()


class _GateGradientAttention(torch.autograd.Function):
    """Masked attention ``(B, H, N, dh)`` with the gradients of the multiplicatively masked softmax.

    For ``o_i = sum_j a_ij e^{l_ij} v_j / sum_j a_ij e^{l_ij}`` at a hard gate,
    ``do_i/da_ij = e^{l_ij} / Z_i (v_j - o_i)``, so ``dL/da_ij = sum_h R_ij (g_i . v_j - g_i . o_i)``
    with ``R = exp(l) / Z`` (:func:`_relative_weights`) and ``g = dL/do``. The bracket is also
    the ``dL/dP - rowsum`` of the softmax backward, and ``R`` on the allowed keys is the
    attention itself, so one pass computes the attention, its gradients for ``q, k, v`` and the
    gate's: one ``q k^T``, one ``dL/dP = g v^T``. (Our first version ran the fused
    ``scaled_dot_product_attention`` and added a zero-valued bridge term for the gate, which
    recomputed ``q k^T``, the normaliser and ``e^{l}`` and multiplied a zero tensor by ``v``.)
    Runs in float32 under bf16/fp16 autocast; the output has the input dtype.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor,
                scale: float) -> torch.Tensor:
        dtype = q.dtype
        compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            q, k, v = (t.to(compute) for t in (q, k, v))
            allowed = gate > 0.5
            relative = _relative_weights(q, k, allowed, scale)
            out = (relative * allowed) @ v
        ctx.save_for_backward(q, k, v, out, relative, allowed)
        ctx.scale, ctx.dtype, ctx.gate_dtype = scale, dtype, gate.dtype
        return out.to(dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, relative, allowed = ctx.saved_tensors
        with torch.autocast(device_type=q.device.type, enabled=False):
            grad = grad.to(q.dtype)
            centred = grad @ v.transpose(-2, -1)  # dL/dP_ij = g_i . v_j
            centred.sub_((grad * out).sum(-1, keepdim=True)).mul_(relative)  # per head: dL/da_ij
            grad_gate = centred.sum(1, keepdim=True) if ctx.needs_input_grad[3] else None
            grad_logits = centred.mul_(allowed)  # the softmax backward: R (dL/dP - g . o) on allowed keys
            probs = relative * allowed  # not in place: a retained graph may run this backward again
            grad_v = probs.transpose(-2, -1) @ grad
            grad_q = (grad_logits @ k) * ctx.scale
            grad_k = (grad_logits.transpose(-2, -1) @ q) * ctx.scale
        return (grad_q.to(ctx.dtype), grad_k.to(ctx.dtype), grad_v.to(ctx.dtype),
                grad_gate.to(ctx.gate_dtype) if grad_gate is not None else None, None)


def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor | None = None
) -> torch.Tensor:
    """Scaled dot-product attention ``(B, H, N, dh)`` restricted to the edges of ``gate``.

    Args:
        q, k, v: ``(B, H, N, dh)``.
        gate: ``None`` for dense attention, else ``(B, N, N)`` or ``(B, 1, N, N)`` with hard
            values in ``{0, 1}``; key ``j`` is visible to query ``i`` iff ``gate_ij = 1``.
            Every row must allow at least one key (SD-Former always allows the diagonal).
            When ``gate`` carries a gradient (the straight-through edges while the graph
            learns), the gradient of the multiplicatively masked softmax flows to it
            (:class:`_GateGradientAttention`); otherwise (evaluation, a frozen graph, the fixed
            controls) the fused ``scaled_dot_product_attention`` runs with a boolean mask.
    """
    if gate is None:
        return F.scaled_dot_product_attention(q, k, v)
    if gate.ndim == 3:
        gate = gate.unsqueeze(1)
    if gate.requires_grad and torch.is_grad_enabled():
        return _GateGradientAttention.apply(q, k, v, gate, 1.0 / math.sqrt(q.shape[-1]))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=gate.detach() > 0.5)


class GraphMaskedAttention(nn.Module):
    """Multi-head self-attention whose key set per query is given by a graph gate."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        check_heads(type(self).__name__, d_model, n_heads)
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        return self.proj(merge_heads(masked_attention(*split_heads(self.qkv(x), self.n_heads), gate)))


class GraphConditionedBlock(nn.Module):
    """Pre-norm transformer layer: ``x + attn(LN(x); gate)``, then ``x + FFN(LN(x))`` (GELU)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = GraphMaskedAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), gate))
        return x + self.dropout(self.ff(self.norm2(x)))


# --------------------------------------------------------------------------- tokenizer


TokenizerMode = Literal["summary", "trajectory"]
_TOKENIZER_MODES = ("summary", "trajectory")
#: numbers in a channel-band pair's spectral summary (``tokenizer="summary"``): relative log power, its spread
SUMMARY_FEATURES = 2


class SpectralTokenizer(nn.Module):
    """Channel-band tokens ``(B, 5C, d_model)`` from short-time band powers (Sec. 4, "Spectral tokenizer").

    Both modes compute the short-time log band powers ``L[c, b, t]`` (``n_frames`` frames) and run
    one two-layer MLP per channel-band pair (a batched einsum); they differ in what that MLP reads.

    * ``"summary"`` (default, the paper's "a small MLP projects the corresponding spectral summary
      into a token embedding"): the pair's **per-window spectral summary**, two numbers,
      ``mean_t L[c, b, t] - mean_{b', t} L[c, b', t]`` (the band's log power relative to the
      channel's mean over bands: its share of the spectrum) and ``std_t L[c, b, t]`` (how much
      the band's power moves within the window). Both are unchanged when channel ``c`` is
      multiplied by any gain (``L`` then shifts by ``2 log g`` in every band and frame), so a
      subject's or montage's channel gain reaches no token, whatever the data's normalisation
      (per-channel z-scoring with training statistics, per window, none). A parameter-free
      BatchNorm (running statistics, no affine) then puts the summaries on unit scale; it only
      standardises numbers that carry no gain.
      *Reading:* "spectral summary" of a pair = these two gain-free statistics of its band-power
      trajectory; "small MLP" = ``2 -> token_hidden -> d_model`` per pair. What the absolute
      power of a window says (ictal power, slow-wave amplitude) is not seen by the tokens; with
      one window there is no way to tell it from a subject's gain.
    * ``"trajectory"`` (the earlier code's reading, kept as an option,
      ``experiments/sdformer/variants/trajectory_tokenizer.yaml``): the pair's whole ``n_frames``-frame
      log-power
      trajectory, standardised per token by a parameter-free BatchNorm over batch and frames
      (``F -> token_hidden -> d_model``). That BatchNorm is a per-token affine map with
      dataset-wide statistics, so it undoes a global per-channel z-scoring exactly (the log of a
      rescaled channel is a shifted log) and a subject's channel gain stays in every token of
      that channel as an offset. Its per-pair first layer is ``n_frames x token_hidden``, the
      part that makes the model's size match Table 5 (see the module docstring, "Size").

    ``forward`` returns ``(tokens, recon_target, trajectories)``: ``recon_target`` ``(B, 5C, S)``
    the standardised inputs of the MLPs (``S = 2`` or ``n_frames``; what the decoder
    reconstructs), ``trajectories`` ``(B, 5C, n_frames)`` the band-power trajectories the
    dependency loss fits (summary: ``L`` z-scored over frames per window and pair, so a
    channel-node's five bands weigh alike and its mean spectrum does not make every channel
    look alike; trajectory: the standardised trajectories, as before).
    """

    def __init__(
        self, *, n_chans: int, sfreq: float, n_times: int, d_model: int,
        win_seconds: float, n_frames: int, hidden: int, mode: TokenizerMode = "summary",
    ) -> None:
        super().__init__()
        if mode not in _TOKENIZER_MODES:
            raise ValueError(f"SpectralTokenizer: mode must be one of {_TOKENIZER_MODES}, got {mode!r}")
        if mode == "summary" and n_frames < 2:
            raise ValueError(f"SpectralTokenizer: the summary's spread needs n_frames >= 2, got {n_frames}")
        self.mode = mode
        self.band_power = ShortTimeBandPower(
            sfreq=sfreq, n_times=n_times, win_seconds=win_seconds, n_frames=n_frames, bands=EEG_BANDS
        )
        self.n_bands = self.band_power.n_bands
        self.n_tokens = n_chans * self.n_bands
        self.n_frames = n_frames
        self.in_features = n_frames if mode == "trajectory" else SUMMARY_FEATURES
        self.norm = nn.BatchNorm1d(
            self.n_tokens if mode == "trajectory" else self.n_tokens * SUMMARY_FEATURES, affine=False
        )
        self.w1 = nn.Parameter(torch.empty(self.n_tokens, self.in_features, hidden))
        self.b1 = nn.Parameter(torch.empty(self.n_tokens, hidden))
        self.w2 = nn.Parameter(torch.empty(self.n_tokens, hidden, d_model))
        self.b2 = nn.Parameter(torch.empty(self.n_tokens, d_model))
        for weight, bias, fan_in in ((self.w1, self.b1, self.in_features), (self.w2, self.b2, hidden)):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per pair
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)

    def summary(self, log_power: torch.Tensor) -> torch.Tensor:
        """``(B, C, 5, F)`` log band powers -> ``(B, 5C, 2)`` gain-free summaries (relative level, spread)."""
        relative = log_power.mean(-1) - log_power.mean(dim=(-2, -1)).unsqueeze(-1)
        spread = log_power.std(-1, unbiased=False)
        return torch.stack([relative, spread], dim=-1).flatten(1, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_power = self.band_power(x)  # (B, C, 5, F), channel-major tokens 5 c + b
        if self.mode == "trajectory":
            inputs = self.norm(log_power.flatten(1, 2))  # (B, C*5, F)
            trajectories = inputs
        else:
            summary = self.summary(log_power)
            inputs = self.norm(summary.flatten(1)).view_as(summary)  # (B, C*5, 2)
            flat = log_power.flatten(1, 2)
            centred = flat - flat.mean(-1, keepdim=True)
            trajectories = centred / (centred.square().mean(-1, keepdim=True).sqrt() + 1e-5)
        hidden = F.gelu(torch.einsum("bnf,nfh->bnh", inputs, self.w1) + self.b1)
        tokens = torch.einsum("bnh,nhd->bnd", hidden, self.w2) + self.b2
        return tokens, inputs, trajectories


# --------------------------------------------------------------------------- graph inference


class EdgeScorer(nn.Module):
    """``s_ij = w . GELU(W_i h_i + W_j h_j + b) + c``: the edge MLP on ``[h_i || h_j]``, all pairs at once."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.target = nn.Linear(d_model, hidden)  # acts on h_i (the child / query side)
        self.source = nn.Linear(d_model, hidden, bias=False)  # acts on h_j (the parent / key side)
        self.out = nn.Linear(hidden, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pair = F.gelu(self.target(h).unsqueeze(2) + self.source(h).unsqueeze(1))  # (B, M, M, hidden)
        return self.out(pair).squeeze(-1)


class DependencyInferencer(nn.Module):
    """Light encoder (one dense pre-norm layer + LayerNorm) followed by :class:`EdgeScorer`."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, edge_hidden: int, dropout: float) -> None:
        super().__init__()
        self.encoder = GraphConditionedBlock(d_model, n_heads, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)
        self.edges = EdgeScorer(d_model, edge_hidden)

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        """Edge scores ``(B, M, M)`` for node embeddings ``(B, M, d_model)``."""
        return self.edges(self.norm(self.encoder(nodes)))


# --------------------------------------------------------------------------- model


@dataclass
class SDFormerOutput:
    """Everything one SD-Former pass produces (see :class:`SDFormer` for each term).

    Graph tensors are on the graph nodes: ``M = n_chans`` with band pooling, else
    ``M = 5 n_chans``. ``adjacency`` carries the straight-through gradient.
    """

    logits: torch.Tensor  # (B, n_outputs)
    features: torch.Tensor  # (B, d_model), what ``head`` maps to logits
    adjacency: torch.Tensor  # (B, M, M) hard graph, a_ij = 1: j may influence i
    edge_probs: torch.Tensor  # (B, M, M) sigmoid(s_ij) (the fixed graph for controls)
    token_mask: torch.Tensor  # (B, N, N) bool, attention allowed (diagonal included)
    recon_pred: torch.Tensor  # (B, N, S): S = 2 (summary tokenizer) or n_frames (trajectory)
    recon_target: torch.Tensor  # (B, N, S), detached
    recon: torch.Tensor  # scalar
    dep: torch.Tensor  # scalar
    dag: torch.Tensor  # scalar
    sparse: torch.Tensor  # scalar
    edge_density: torch.Tensor  # scalar, fraction of the M (M - 1) off-diagonal pairs that are edges

    def losses(self) -> dict[str, torch.Tensor]:
        """The four auxiliary terms by name (``recon``, ``dep``, ``dag``, ``sparse``)."""
        return {"recon": self.recon, "dep": self.dep, "dag": self.dag, "sparse": self.sparse}


#: parameters that do not depend on the corpus: backbone 6 x 198,272 + 256 (final LayerNorm), edge MLP
#: 132,097, decoder 263,810 (summary tokenizer), light encoder 99,840 (module docstring, "Size")
_SHARED = 6 * 198_272 + 256 + 132_097 + 263_810 + 99_840
#: per channel-band token: the summary tokenizer's MLP 2 -> 64 -> 128
_PER_TOKEN = 2 * 64 + 64 + 64 * 128 + 128


@register_backbone(
    # experiments/sdformer_<corpus>.yaml: band pooling off on Sleep-EDF, on for CHB-MIT and PTB-XL (Sec. 4)
    shapes=["sleepedf", "chbmit", "ptbxl"],
    kwargs={"sleepedf": {"band_pooling": False}, "chbmit": {"band_pooling": True},
            "ptbxl": {"band_pooling": True}},
    # SD-Former Sec. 7.5 / Table 5 give ~1.8 M (Sleep-EDF), ~2.4 M (PTB-XL), ~3.1 M (CHB-MIT), rounded;
    # the paper has no public code. The exact counts are the module docstring's breakdown ("Size"): the
    # shared part plus 8,512 per channel-band token (5 per channel) plus the head 129 n_outputs, with the
    # default summary tokenizer (1.6 %, 8.5 %, 14 % below the paper; the trajectory tokenizer is within 2 %).
    param_pins={"sleepedf": _SHARED + _PER_TOKEN * 5 * 2 + 129 * 5,
                "chbmit": _SHARED + _PER_TOKEN * 5 * 23 + 129 * 2,
                "ptbxl": _SHARED + _PER_TOKEN * 5 * 12 + 129 * 5},
    test_kwargs={"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "stft_frames": 8, "token_hidden": 8,
                 "encoder_ff": 16, "edge_hidden": 16, "recon_hidden": 16},
)
class SDFormer(BiosignalModel):
    """SD-Former (Sharma, Sec. 4): spectral tokens -> learned sparse DAG -> graph-masked transformer.

    Pipeline (``x`` of shape ``(B, C, T)``):

    1. **Spectral tokenizer** (Sec. 4, "Spectral tokenizer"; :class:`SpectralTokenizer`). Each
       channel's window becomes short-time log band powers ``(5 bands, F frames)``
       (:class:`~biosig_lightning.features.spectral.ShortTimeBandPower`: delta, theta, alpha,
       beta, gamma capped at Nyquist; ``stft_win`` seconds per frame, ``stft_frames`` frames).
       "For each channel-band pair, a small MLP projects the corresponding spectral summary into a
       token embedding." *Reading* (``tokenizer="summary"``, the default): the summary is two
       numbers per pair and window, the band's log power relative to the channel's mean log power
       over bands and the spread of its log power over the frames; both are unchanged by any gain
       on the channel, so a subject's amplitude never reaches the tokens as an offset (the data's
       per-channel z-score with training statistics cannot remove it, and a BatchNorm over tokens
       does not either). *Reading:* "for each pair, a small MLP" is a separate two-layer MLP per
       pair (``2 -> token_hidden -> d_model``, GELU; all N MLPs run as one batched einsum over
       ``(N, in, out)`` weights): the growth of Table 5's sizes with the channel count (0.6 M for
       50 more tokens) is what per-pair weights give, and a shared MLP would not grow at all. The
       per-pair MLPs make every token's identity explicit, so no positional embedding is added.
       ``N = 5 C`` tokens of width 128, channel-major (token ``5 c + b``). The earlier reading,
       ``tokenizer="trajectory"`` (``experiments/sdformer/variants/trajectory_tokenizer.yaml``), feeds each
       pair's whole ``F = 64``-frame log-power trajectory, standardised by a parameter-free
       BatchNorm (a per-token shift and scale with dataset statistics, which passes a subject's
       channel gain through as an offset on every token of the channel), into the per-pair MLPs
       (``F -> token_hidden -> d_model``); on CHB-MIT's 2 s windows the 64 frames of 1 s overlap
       almost completely.
    2. **Band pooling** (optional, Sec. 4). With ``band_pooling=True`` the five band tokens
       of a channel are averaged into one channel token *for graph inference only*; the graph
       then has ``M = C`` nodes instead of ``M = N``. *Reading:* the transformer still runs on
       all ``N`` band tokens ("retaining the unpooled band tokens for reconstruction"), with the
       channel graph expanded to token level: token ``(c, b)`` may attend to token ``(c', b')``
       iff ``c' = c`` or ``a_{c c'} = 1``. This keeps the frequency resolution of the
       backbone and the reconstruction while the pairwise scoring costs ``C^2`` instead of
       ``25 C^2``. The paper enables it for CHB-MIT and PTB-XL, not for Sleep-EDF.
    3. **Sparse dependency inferencer** (Sec. 4). A lightweight encoder (one pre-norm
       transformer layer with feed-forward width ``encoder_ff = 128``, dense attention, then
       LayerNorm) gives context embeddings ``H``. The edge MLP scores every ordered pair,
       ``s_ij = MLP_edge([h_i || h_j])``, one hidden layer of width ``edge_hidden = 512``
       (GELU), vectorised by splitting the first layer as ``W_i h_i + W_j h_j`` and
       broadcasting to ``(B, M, M, edge_hidden)``. ``a_ij = 1[sigmoid(s_ij) > 0.5]`` with a
       straight-through gradient (forward: the hard value exactly; backward: the gradient of
       ``sigmoid(s_ij)``). The diagonal is not an edge: ``a_ii = 0`` in the graph, and
       self-attention is always allowed.
       *Reading:* the graph is inferred **per sample** (``(B, M, M)``), because the paper
       describes the dependencies as "state-dependent", "dynamically learned" and the graph
       ``G_w`` as varying across windows (Secs. 1, 3).
       *Orientation:* ``a_ij = 1`` means token ``j`` may influence token ``i`` (Sec. 4), i.e.
       ``j`` is a parent of ``i`` and row ``i`` of ``A`` lists ``i``'s parents; this is also
       the row-query / column-key layout of the attention mask.
       *Initial graph* (not in the paper): the edge MLP's output bias starts at
       ``edge_bias_init = -1``, an (almost) empty graph as in NOTEARS's ``W = 0`` start, so the
       acyclicity penalty starts at zero instead of at ``~1e8`` for a dense 23-node graph.
    4. **Graph-conditioned transformer** (Sec. 4): 6 pre-norm layers, 4 heads, width 128,
       feed-forward 512 (GELU), final LayerNorm, mean over tokens, linear head.
       Attention runs through ``scaled_dot_product_attention`` with the boolean mask
       ``a_ij = 1 or i = j``, so a masked key has exactly zero weight.
       *Gradient to the graph:* a hard mask has no gradient, so the straight-through
       gradient needs a defined ``dL/da_ij``. We use the derivative of the multiplicatively
       masked softmax ``w_ij = a_ij e^{l_ij} / sum_k a_ik e^{l_ik}`` at the current hard mask,
       ``dL/da_ij = e^{l_ij} / Z_i * g_i . (v_j - o_i)`` (``Z_i`` over the allowed keys,
       ``g_i = dL/do_i``), summed over heads. This derivative exists for masked entries too,
       so the task loss can switch edges on as well as off. The output and the gradients for
       queries, keys and values are those of the hard-masked attention; while the graph learns,
       one autograd function computes them together with the gate's gradient, sharing ``q k^T``
       and ``g v^T`` (:class:`_GateGradientAttention`); without a gate gradient the fused
       ``scaled_dot_product_attention`` runs (:func:`masked_attention`). Attention weights
       themselves are not dropped out (dropout acts on the residual branches), so that
       derivative is the one of the attention actually computed.
    5. **Auxiliary terms** (Sec. 4, "Training objective"; :meth:`SDFormer.forward_with_aux`),
       returned separately so a training recipe can weight them (paper: 0.1 recon, 0.1 dep,
       0.5 dag, 0.01 sparse in phase 1, classification only in phase 2). The model has no
       phase switch; :meth:`SDFormer.freeze_graph` fixes the graph path, which the recipe does
       in phase 2 (:mod:`biosig_lightning.tasks.sdformer`).

       * ``recon``: mean squared error between a decoder's reconstruction of every band
         token's standardised tokenizer input (its 2-number summary, or its ``F``-frame
         trajectory with ``tokenizer="trajectory"``) and that input (the decoder reads the
         final, unpooled token states: ``LayerNorm -> Linear(128, 1024) -> GELU ->
         Linear(1024, 128) -> GELU -> Linear(128, S)``, ~0.26-0.27 M parameters).
       * ``dep``: the paper names a dependency loss without defining it. *Reading:* the
         data-fit term that NOTEARS pairs with its acyclicity and l1 penalties, a linear
         structural-equation residual fitted by least squares: each node's standardised
         band-power trajectory ``z_i`` (for channel nodes, its five trajectories concatenated;
         with the summary tokenizer each is z-scored over its frames first, so a channel's mean
         spectrum, alike on every channel, does not correlate all channels)
         is predicted by the least-squares multiple of its parents' mean under the hard graph,
         ``1/2 sum_i (1 - r_i^2)`` with ``r_i`` the correlation of ``z_i`` with that mean (a
         parentless node: ``1/2``) (:func:`dependency_loss`). A parent can only lower a
         parentless node's term, by ``r^2 / 2``, so the term rewards edges from nodes whose
         spectral dynamics predict the child's and weighs against the l1 term: with the paper's
         weights a first parent pays off when ``|r| > 0.45``. The targets are input features,
         not learned embeddings, so the term cannot be lowered by collapsing the
         representation.
       * ``dag``: NOTEARS acyclicity ``h(A) = tr(exp(A)) - M`` (Zheng et al., 2018; ``A o A = A``
         for a 0/1 graph) of the hard per-sample graph, batch mean (:func:`notears_acyclicity`
         with ``square=False``); zero exactly when the graph used for masking is a DAG.
       * ``sparse``: l1 norm ``sum_ij a_ij`` (the edge count) of the hard graph, batch mean.

       The three graph terms are the literal NOTEARS quantities per sample (sums, not
       averages over pairs), differentiated through the straight-through estimator. On a 0/1
       graph their values are piecewise constant, so what ``dL/da_ij`` is must be chosen; we
       take, for every term, the change it undergoes when edge ``ij`` flips (the partial
       derivative of its multilinear extension at the hard graph): exactly for ``dep`` and
       ``sparse`` (``1`` per edge, present or absent; ``|a|`` would give absent edges ``0``),
       to first order for ``dag`` (``exp(A)_ji``, positive iff switching the edge on would close
       a cycle; NOTEARS's ``A o A`` gives absent edges ``0``, so cycles could only be removed
       after they form).
    6. **Graph controls** (``graph``): ``"learned"`` is SD-Former. ``"full"`` attends densely
       (the transformer with SD-Former's tokenizer and decoder). ``"none"`` keeps only the
       diagonal (no token sees another). ``"random"`` is the matched-sparsity control the
       paper lists as missing (Sec. 8): a fixed random **DAG** on the graph nodes, drawn once
       at construction from ``graph_seed`` (saved in the state dict), with exactly
       ``round(graph_density * M (M - 1))`` edges. *Matched to what:* to a density the user
       measures on a trained learned model (``SDFormerOutput.edge_density``) and passes as
       ``graph_density``; it is a DAG because the learned graph is driven to one by the
       acyclicity penalty, so the control differs from the learned graph only in which edges
       are present and in not depending on the input. A DAG holds at most half of the
       ordered pairs, so ``graph_density <= 0.5``. For fixed graphs the inferencer is not
       built and ``dep``, ``dag`` and ``sparse`` are returned as zeros (constants with no
       gradient).

    Args:
        n_chans, n_outputs, n_times, sfreq: input shape and classes (braindecode names).
        d_model, n_layers, n_heads, d_ff: backbone (paper: 128, 6, 4, 512).
        dropout: dropout on the tokens and on every residual branch.
        band_pooling: infer the graph on channel tokens (mean of a channel's five band
            tokens) and expand it to band tokens; paper: off for Sleep-EDF, on for CHB-MIT
            and PTB-XL.
        tokenizer: ``"summary"`` (default: a small MLP per pair on a gain-free per-window
            spectral summary) or ``"trajectory"`` (the pair's 64-frame log-power trajectory);
            see :class:`SpectralTokenizer`.
        stft_win: short-time frame length in seconds (1.0: 1 Hz resolution).
        stft_frames: frames per window (the trajectory the dependency loss fits and the
            summary's spread is taken over; with ``tokenizer="trajectory"`` each token's input).
        token_hidden: hidden width of the per channel-band MLPs.
        encoder_ff: feed-forward width of the light encoder of the inferencer.
        edge_hidden: hidden width of the edge MLP.
        recon_hidden: hidden width of the reconstruction decoder.
        graph: ``"learned"`` (SD-Former), or the controls ``"random"``, ``"full"``, ``"none"``.
        graph_density: edge density of the ``"random"`` DAG (``<= 0.5``).
        graph_seed: seed of the ``"random"`` DAG.
        edge_bias_init: initial bias of the edge MLP's output (the paper does not say).
            The default -1 starts, like NOTEARS (``W = 0``), from an (almost) empty graph,
            so ``h(A) = 0`` at the start, while ``sigmoid'(-1) = 0.2`` leaves the
            straight-through gradient near its maximum; edges are then switched on by the
            task gradient and the dependency loss. With 0 the initial density depends on the
            initialisation's draw, and a dense 23-node start has ``h(A) ~ 2e8``.
            How the graph leaves the empty start on the stand-ins: docs/papers/sdformer.md.

    ``forward(x)`` returns logits ``(B, n_outputs)``; ``forward_with_aux(x)`` returns an
    :class:`SDFormerOutput`; ``forward_features(x)`` the pooled ``(B, feature_dim)``
    representation that ``head`` maps to logits.
    """

    fixed_adjacency: torch.Tensor | None  # buffer: the fixed graph, None when it is learned
    eye: torch.Tensor  # buffer

    def __init__(
        self, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        d_model: int = 128, n_layers: int = 6, n_heads: int = 4, d_ff: int = 512, dropout: float = 0.1,
        band_pooling: bool = False, tokenizer: TokenizerMode = "summary", stft_win: float = 1.0,
        stft_frames: int = 64, token_hidden: int = 64,
        encoder_ff: int = 128, edge_hidden: int = 512, recon_hidden: int = 1024,
        graph: GraphMode = "learned", graph_density: float = 0.2, graph_seed: int = 0,
        edge_bias_init: float = -1.0,
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
        check_positive_ints("SDFormer", d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff,
                            stft_frames=stft_frames, token_hidden=token_hidden, encoder_ff=encoder_ff,
                            edge_hidden=edge_hidden, recon_hidden=recon_hidden)
        if graph not in _GRAPH_MODES:
            raise ValueError(f"SDFormer: graph must be one of {_GRAPH_MODES}, got {graph!r}")
        check_dropout(type(self).__name__, dropout=dropout)
        self.graph = graph
        self.band_pooling = band_pooling

        self.tokenizer = SpectralTokenizer(
            n_chans=n_chans,
            sfreq=sfreq,
            n_times=n_times,
            d_model=d_model,
            win_seconds=stft_win,
            n_frames=stft_frames,
            hidden=token_hidden,
            mode=tokenizer,
        )
        self.n_bands = self.tokenizer.n_bands
        self.n_tokens = self.tokenizer.n_tokens
        self.n_nodes = n_chans if band_pooling else self.n_tokens
        self.token_dropout = nn.Dropout(dropout)

        self.inferencer = (
            DependencyInferencer(d_model, n_heads, encoder_ff, edge_hidden, dropout)
            if graph == "learned"
            else None
        )
        if self.inferencer is not None:
            nn.init.constant_(self.inferencer.edges.out.bias, edge_bias_init)
        if graph == "random":
            fixed = random_dag(self.n_nodes, graph_density, graph_seed)
        elif graph == "full":
            fixed = torch.ones(self.n_nodes, self.n_nodes) - torch.eye(self.n_nodes)
        else:
            fixed = torch.zeros(self.n_nodes, self.n_nodes)
        self.register_buffer("fixed_adjacency", fixed if graph != "learned" else None)
        self.register_buffer("eye", torch.eye(self.n_nodes), persistent=False)
        self.graph_frozen = False

        self.blocks = nn.ModuleList(
            GraphConditionedBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.decoder = nn.Sequential(
            nn.LayerNorm(d_model),
            nn.Linear(d_model, recon_hidden),
            nn.GELU(),
            nn.Linear(recon_hidden, d_model),
            nn.GELU(),
            nn.Linear(d_model, self.tokenizer.in_features),  # reconstructs the tokenizer's inputs
        )
        self.feature_dim = d_model
        self.head = nn.Linear(d_model, n_outputs)

    # -- graph freezing (the recipe's phase 2) ------------------------------------------

    def _graph_path(self) -> tuple[nn.Module, ...]:
        return (self.tokenizer, self.inferencer) if self.inferencer is not None else ()

    def freeze_graph(self, frozen: bool = True) -> None:
        """Fix (or release) the learned graph function ``x -> A(x)``: tokenizer and inferencer.

        Frozen: the parameters of both stop requiring gradients and both stay in eval mode
        whatever ``train()`` is called with (the inferencer's dropout off; the tokenizer's
        parameter-free BatchNorm normalises with its running statistics), so the graph of an
        input is exactly the one the frozen weights give it, and the gate carries no gradient
        (so :func:`masked_attention` runs the fused kernel). The tokenizer belongs to the
        graph path: with only the inferencer frozen, the tokens it reads kept changing under
        the task loss and the frozen inferencer's graphs grew dense and cyclic (measured on the
        stand-ins: ``docs/results/sdformer_design_choices.json``). The
        transformer, head and decoder stay trainable. A no-op for the fixed-graph controls.
        Not saved in the state dict: it is training state, which
        :class:`~biosig_lightning.tasks.sdformer.SDFormerTask` restores.
        """
        if self.inferencer is None:
            return
        self.graph_frozen = frozen
        for module in self._graph_path():
            module.requires_grad_(not frozen)
            module.train(self.training and not frozen)

    def train(self, mode: bool = True) -> SDFormer:
        """``nn.Module.train``, except that a frozen graph path (tokenizer, inferencer) stays in eval mode."""
        super().train(mode)
        if self.graph_frozen:
            for module in self._graph_path():
                module.eval()
        return self

    # -- pieces -------------------------------------------------------------------------

    def _graph_nodes(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self.band_pooling:
            return tokens
        return tokens.view(tokens.shape[0], self.n_chans, self.n_bands, -1).mean(dim=2)

    def infer_graph(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample graph ``(adjacency, edge_probs)``, each ``(B, M, M)``, zero diagonal."""
        batch = tokens.shape[0]
        if self.inferencer is None:
            assert self.fixed_adjacency is not None  # graph is fixed
            fixed = self.fixed_adjacency.to(tokens.dtype).expand(batch, -1, -1)
            return fixed, fixed
        nodes = self._graph_nodes(tokens)
        scores = self.inferencer(nodes.detach() if self.graph_frozen else nodes)
        gate, probs = straight_through_threshold(scores.float())
        off_diagonal = 1.0 - self.eye
        return gate * off_diagonal, probs * off_diagonal

    def token_gate(self, adjacency: torch.Tensor) -> torch.Tensor | None:
        """Attention gate ``(B, N, N)`` from a node graph (self-loops added, expanded to band tokens).

        ``None`` for ``graph="full"``, which attends densely (same result, faster kernel).
        """
        if self.graph == "full":
            return None
        gate = adjacency + self.eye
        if self.band_pooling:
            gate = gate.repeat_interleave(self.n_bands, dim=1).repeat_interleave(self.n_bands, dim=2)
        return gate

    def _encode(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        self.check_input(x)
        tokens, inputs, trajectories = self.tokenizer(x)
        adjacency, probs = self.infer_graph(tokens)
        gate = self.token_gate(adjacency)
        h = self.token_dropout(tokens)
        for block in self.blocks:
            h = block(h, gate)
        return self.norm(h), inputs, trajectories, adjacency, probs, gate

    # -- public API ---------------------------------------------------------------------

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of the final token states ``(B, feature_dim)``; ``forward == head(forward_features)``."""
        return self._encode(x)[0].mean(dim=1)

    def forward(self, x: torch.Tensor,  # type: ignore[override]  # return_aux widens the return
                return_aux: bool = False) -> torch.Tensor | SDFormerOutput:
        """Logits ``(B, n_outputs)``, or the full :class:`SDFormerOutput` when ``return_aux``."""
        if return_aux:
            return self.forward_with_aux(x)
        return self.head(self.forward_features(x))

    def forward_with_aux(self, x: torch.Tensor) -> SDFormerOutput:
        """Logits plus graph, reconstruction and the four auxiliary loss terms (unweighted)."""
        states, inputs, trajectories, adjacency, probs, gate = self._encode(x)
        features = states.mean(dim=1)
        recon_pred = self.decoder(states)
        recon_target = inputs.detach()
        recon = F.mse_loss(recon_pred.float(), recon_target.float())
        hard = adjacency.detach() > 0.5
        n_pairs = max(self.n_nodes * (self.n_nodes - 1), 1)
        if self.inferencer is not None:
            node_spectra = trajectories.reshape(trajectories.shape[0], self.n_nodes, -1)
            dep = dependency_loss(adjacency, node_spectra)
            dag = notears_acyclicity(adjacency, square=False).mean()
            # a >= 0, so |a| = a: the l1 norm as a plain sum, whose straight-through gradient is 1
            # for absent edges too (abs() has gradient 0 at 0, so an edge's cost would never weigh
            # against switching it on)
            sparse = adjacency.float().sum(dim=(-2, -1)).mean()
        else:
            dep = dag = sparse = recon.new_zeros(())
        if gate is None:
            token_mask = torch.ones(
                x.shape[0], self.n_tokens, self.n_tokens, dtype=torch.bool, device=x.device
            )
        else:
            token_mask = gate.detach() > 0.5
        return SDFormerOutput(
            logits=self.head(features),
            features=features,
            adjacency=adjacency,
            edge_probs=probs,
            token_mask=token_mask,
            recon_pred=recon_pred,
            recon_target=recon_target,
            recon=recon,
            dep=dep,
            dag=dag,
            sparse=sparse,
            edge_density=hard.float().sum(dim=(-2, -1)).mean() / n_pairs,
        )
