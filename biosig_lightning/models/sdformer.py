"""SD-Former: spectral tokens, a learned sparse directed graph, graph-masked attention.

Reproduces the model of Sharma, "SD-Former: Sparse Directed Attention as a Structural
Prior for Robust Physiological Time Series" (Sec. 4). No public code exists, so the paper
is the whole specification; every choice it leaves open is stated below with its reason.

Pipeline (``x`` of shape ``(B, C, T)``):

1. **Spectral tokenizer** (Sec. 4, "Spectral tokenizer"). Each channel's window becomes a
   short-time band-power trajectory ``(5 bands, F frames)``
   (:class:`~biosig_lightning.features.spectral.ShortTimeBandPower`: delta, theta, alpha,
   beta, gamma capped at Nyquist; ``stft_win`` seconds per frame, ``stft_frames`` frames).
   *Reading:* the paper's "spectral summary" of a channel-band pair is that pair's
   log-power trajectory over the window, so a token knows both how much power a band has
   and how it evolves. The log powers are standardised per token with a parameter-free
   BatchNorm (running statistics, no affine), which makes the tokenizer indifferent to the
   input's units. A separate two-layer MLP per channel-band pair (``F -> token_hidden ->
   d_model``, GELU; all N MLPs run as one batched einsum over ``(N, in, out)`` weights)
   gives ``N = 5 C`` tokens of width 128, in channel-major order (token ``5 c + b``). The
   per-pair MLPs make every token's identity explicit, so no positional embedding is
   added.
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
   so the task loss can switch edges on as well as off. It is injected as a correction
   term whose forward value is exactly zero and which is a function of the gate only
   (queries, keys, values and outputs are detached inside it), so neither the output nor
   the gradients with respect to the inputs change (:func:`masked_attention`). Attention
   weights themselves are not dropped out (dropout acts on the residual branches), so that
   derivative is the one of the attention actually computed.
5. **Auxiliary terms** (Sec. 4, "Training objective"; :meth:`SDFormer.forward_with_aux`),
   returned separately so a training recipe can weight them (paper: 0.1 recon, 0.1 dep,
   0.5 dag, 0.01 sparse in phase 1, classification only in phase 2; the model behaves the
   same in both phases, so it has no phase switch, and in phase 2 the graph keeps
   learning from the task loss alone through the straight-through gradient):

   * ``recon``: mean squared error between a decoder's reconstruction of every band
     token's standardised log-power trajectory and that trajectory (the decoder reads the
     final, unpooled token states: ``LayerNorm -> Linear(128, 1024) -> GELU ->
     Linear(1024, 128) -> GELU -> Linear(128, F)``, ~0.27 M parameters).
   * ``dep``: the paper names a dependency loss without defining it. *Reading:* the
     data-fit term that NOTEARS pairs with its acyclicity and l1 penalties, a linear
     structural-equation residual ``1/2 sum_i ||z_i - mean_{j in pa(i)} z_j||^2 / F``,
     where ``z_i`` is node ``i``'s standardised band-power trajectory (for channel nodes,
     its five trajectories concatenated), each node predicted by the mean of its parents
     under the hard graph (a parentless node is predicted by zero). The targets are input
     features, not learned embeddings, so the term cannot be reduced by collapsing the
     representation; it rewards edges from nodes whose spectral dynamics predict the
     child's, and balances the sparsity penalty.
   * ``dag``: NOTEARS acyclicity ``h(A) = tr(exp(A o A)) - M`` (Zheng et al., 2018) of the
     hard per-sample graph, batch mean (:func:`notears_acyclicity`); zero exactly when the
     graph used for masking is a DAG.
   * ``sparse``: l1 norm ``sum_ij |a_ij|`` (the edge count) of the hard graph, batch mean.

   The three graph terms are the literal NOTEARS quantities per sample (sums, not
   averages over pairs), all differentiated through the straight-through estimator.
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

Size (Sec. 7.5: ~1.8 M on Sleep-EDF, 2.4 M on PTB-XL, 3.1 M on CHB-MIT; edge MLP ~0.13 M,
decoder ~0.26 M). With the defaults: backbone 6 x 198,272 + 256 (final LayerNorm); edge
MLP 132,097; decoder 271,808; light encoder 99,840; head ``129 n_outputs``; tokenizer
12,480 per token. That gives 1.82 M (Sleep-EDF: 2 ch, 5 classes), 2.44 M (PTB-XL: 12 ch) and 3.13 M
(CHB-MIT: 23 ch), each within 2 % of the paper. The per-token cost is what the paper's
growth with channel count implies (0.6 M for 50 more tokens, 0.7 M for 55 more), and the
tokenizer defaults (``stft_frames = 64``, ``token_hidden = 64``) are chosen to meet it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.features.spectral import EEG_BANDS, ShortTimeBandPower
from biosig_lightning.models.checks import check_positive_ints, check_window

__all__ = [
    "DependencyInferencer",
    "EdgeScorer",
    "GraphConditionedBlock",
    "GraphMaskedAttention",
    "SDFormer",
    "SDFormerOutput",
    "SpectralTokenizer",
    "dependency_loss",
    "masked_attention",
    "notears_acyclicity",
    "random_dag",
    "straight_through_threshold",
]

GraphMode = Literal["learned", "random", "full", "none"]
_GRAPH_MODES = ("learned", "random", "full", "none")


# --------------------------------------------------------------------------- graph maths


def notears_acyclicity(adjacency: torch.Tensor) -> torch.Tensor:
    """NOTEARS acyclicity ``h(A) = tr(exp(A o A)) - n`` of ``(..., n, n)`` matrices -> ``(...)``.

    ``h(A) = 0`` iff the weighted graph ``A`` has no directed cycle, and grows with the
    (weighted) number of closed walks otherwise (Zheng et al., 2018, Eq. 7). Computed in
    float64 with autocast off, because ``exp`` of a dense 0/1 matrix quickly exceeds the
    range and precision of bfloat16; returned as float32.
    """
    n = adjacency.shape[-1]
    with torch.autocast(device_type=adjacency.device.type, enabled=False):
        a = adjacency.double()
        h = torch.linalg.matrix_exp(a * a).diagonal(dim1=-2, dim2=-1).sum(-1) - n
    return h.float()


def straight_through_threshold(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard edges ``1[sigmoid(s) > 0.5]`` with the straight-through gradient of ``sigmoid(s)``.

    Returns ``(gate, probs)``. ``gate`` equals the hard 0/1 value exactly in the forward
    pass (the zero-valued ``probs - probs.detach()`` is added last) and has the gradient
    of ``probs`` in the backward pass.
    """
    probs = torch.sigmoid(scores)
    hard = (probs > 0.5).to(probs.dtype)
    return hard + (probs - probs.detach()), probs


def dependency_loss(adjacency: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Linear-SEM residual of node features under a parent graph (our reading of ``L_dep``).

    Args:
        adjacency: ``(B, M, M)`` graph with ``a_ij = 1`` when ``j`` is a parent of ``i``.
        features: ``(B, M, F)`` node features; each row is standardised (zero mean, unit
            variance over ``F``) and detached, so only the graph is fitted.

    Returns ``1/2 * mean_b sum_i ||z_i - mean_{j in pa(i)} z_j||^2 / F``; a node without
    parents is predicted by zero and contributes ``1/2``.
    """
    z = features.detach().float()
    z = (z - z.mean(-1, keepdim=True)) / (z.std(-1, keepdim=True, unbiased=False) + 1e-5)
    a = adjacency.float()
    parents = a.sum(-1, keepdim=True).clamp(min=1.0)
    residual = z - (a @ z) / parents
    return 0.5 * residual.square().mean(-1).sum(-1).mean()


def random_dag(n_nodes: int, density: float, seed: int) -> torch.Tensor:
    """A random DAG ``(n, n)`` with exactly ``round(density * n (n - 1))`` edges, no self-loops.

    A random topological order is drawn, then that many of the ``n (n - 1) / 2`` ordered
    pairs consistent with it are chosen uniformly; ``a_ij = 1`` makes ``j`` a parent of
    ``i``. Uses its own generator, so the global RNG is untouched.
    """
    if not 0.0 <= density <= 0.5:
        raise ValueError(
            f"graph_density must lie in [0, 0.5] for a DAG (at most half the ordered pairs), got {density}"
        )
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n_nodes, generator=generator)
    earlier, later = torch.triu_indices(n_nodes, n_nodes, offset=1)
    n_edges = round(density * n_nodes * (n_nodes - 1))
    chosen = torch.randperm(earlier.numel(), generator=generator)[:n_edges]
    adjacency = torch.zeros(n_nodes, n_nodes)
    adjacency[order[later[chosen]], order[earlier[chosen]]] = 1.0
    return adjacency


# --------------------------------------------------------------------------- attention


def _gate_gradient_bridge(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, gate: torch.Tensor, scale: float
) -> torch.Tensor:
    """Zero-valued term whose gradient w.r.t. ``gate`` is that of the multiplicatively masked softmax.

    For ``o_i = sum_j a_ij e^{l_ij} v_j / sum_j a_ij e^{l_ij}``,
    ``do_i/da_ij = e^{l_ij} / Z_i (v_j - o_i)``. ``q, k, v, out`` enter detached, so only
    ``gate`` receives a gradient; the value is exactly zero because ``gate - gate.detach()``
    is.
    """
    with torch.no_grad():
        logits = (q @ k.transpose(-2, -1)) * scale
        allowed = gate.detach() > 0.5
        log_normaliser = torch.logsumexp(logits.masked_fill(~allowed, float("-inf")), dim=-1, keepdim=True)
        # Relative weight key j would get if unmasked; clamped so a far-off masked logit
        # cannot overflow (the forward value stays exactly zero either way).
        relative = torch.exp((logits - log_normaliser).clamp(max=30.0))
    delta = (gate - gate.detach()) * relative
    return delta @ v.detach() - delta.sum(-1, keepdim=True) * out.detach()


def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor | None = None
) -> torch.Tensor:
    """Scaled dot-product attention ``(B, H, N, dh)`` restricted to the edges of ``gate``.

    Args:
        q, k, v: ``(B, H, N, dh)``.
        gate: ``None`` for dense attention, else ``(B, N, N)`` or ``(B, 1, N, N)`` with hard
            values in ``{0, 1}``; key ``j`` is visible to query ``i`` iff ``gate_ij = 1``.
            Every row must allow at least one key (SD-Former always allows the diagonal).
            When ``gate`` carries a gradient (the straight-through edges), the gradient of
            the multiplicatively masked softmax flows to it (:func:`_gate_gradient_bridge`).
    """
    if gate is None:
        return F.scaled_dot_product_attention(q, k, v)
    if gate.ndim == 3:
        gate = gate.unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=gate.detach() > 0.5)
    if gate.requires_grad and torch.is_grad_enabled():
        out = out + _gate_gradient_bridge(q, k, v, out, gate.to(q.dtype), 1.0 / math.sqrt(q.shape[-1]))
    return out


class GraphMaskedAttention(nn.Module):
    """Multi-head self-attention whose key set per query is given by a graph gate."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        batch, n_tokens, width = x.shape
        q, k, v = (
            self.qkv(x).view(batch, n_tokens, 3, self.n_heads, width // self.n_heads).permute(2, 0, 3, 1, 4)
        )
        out = masked_attention(q, k, v, gate)
        return self.proj(out.transpose(1, 2).reshape(batch, n_tokens, width))


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


class SpectralTokenizer(nn.Module):
    """Channel-band tokens ``(B, 5C, d_model)`` from short-time band-power trajectories.

    Returns ``(tokens, spectra)`` where ``spectra`` ``(B, 5C, F)`` are the standardised
    log band-power trajectories the tokens were made from (the reconstruction target).
    One two-layer MLP per channel-band pair, run as a batched einsum.
    """

    def __init__(
        self,
        *,
        n_chans: int,
        sfreq: float,
        n_times: int,
        d_model: int,
        win_seconds: float,
        n_frames: int,
        hidden: int,
    ) -> None:
        super().__init__()
        self.band_power = ShortTimeBandPower(
            sfreq=sfreq, n_times=n_times, win_seconds=win_seconds, n_frames=n_frames, bands=EEG_BANDS
        )
        self.n_bands = self.band_power.n_bands
        self.n_tokens = n_chans * self.n_bands
        self.n_frames = n_frames
        self.norm = nn.BatchNorm1d(self.n_tokens, affine=False)
        self.w1 = nn.Parameter(torch.empty(self.n_tokens, n_frames, hidden))
        self.b1 = nn.Parameter(torch.empty(self.n_tokens, hidden))
        self.w2 = nn.Parameter(torch.empty(self.n_tokens, hidden, d_model))
        self.b2 = nn.Parameter(torch.empty(self.n_tokens, d_model))
        for weight, bias, fan_in in ((self.w1, self.b1, n_frames), (self.w2, self.b2, hidden)):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per pair
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        spectra = self.norm(self.band_power(x).flatten(1, 2))  # (B, C*5, F), channel-major
        hidden = F.gelu(torch.einsum("bnf,nfh->bnh", spectra, self.w1) + self.b1)
        tokens = torch.einsum("bnh,nhd->bnd", hidden, self.w2) + self.b2
        return tokens, spectra


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
    """Everything one SD-Former pass produces (see the module docstring for each term).

    Graph tensors are on the graph nodes: ``M = n_chans`` with band pooling, else
    ``M = 5 n_chans``. ``adjacency`` carries the straight-through gradient.
    """

    logits: torch.Tensor  # (B, n_outputs)
    features: torch.Tensor  # (B, d_model), what ``head`` maps to logits
    adjacency: torch.Tensor  # (B, M, M) hard graph, a_ij = 1: j may influence i
    edge_probs: torch.Tensor  # (B, M, M) sigmoid(s_ij) (the fixed graph for controls)
    token_mask: torch.Tensor  # (B, N, N) bool, attention allowed (diagonal included)
    recon_pred: torch.Tensor  # (B, N, F)
    recon_target: torch.Tensor  # (B, N, F), detached
    recon: torch.Tensor  # scalar
    dep: torch.Tensor  # scalar
    dag: torch.Tensor  # scalar
    sparse: torch.Tensor  # scalar
    edge_density: torch.Tensor  # scalar, fraction of the M (M - 1) off-diagonal pairs that are edges

    def losses(self) -> dict[str, torch.Tensor]:
        """The four auxiliary terms by name (``recon``, ``dep``, ``dag``, ``sparse``)."""
        return {"recon": self.recon, "dep": self.dep, "dag": self.dag, "sparse": self.sparse}


class SDFormer(nn.Module):
    """SD-Former (Sharma, Sec. 4): spectral tokens -> learned sparse DAG -> graph-masked transformer.

    Args:
        n_chans, n_outputs, n_times, sfreq: input shape and classes (braindecode names).
        d_model, n_layers, n_heads, d_ff: backbone (paper: 128, 6, 4, 512).
        dropout: dropout on the tokens and on every residual branch.
        band_pooling: infer the graph on channel tokens (mean of a channel's five band
            tokens) and expand it to band tokens; paper: off for Sleep-EDF, on for CHB-MIT
            and PTB-XL.
        stft_win: short-time frame length in seconds (1.0: 1 Hz resolution).
        stft_frames: frames per window (the length of each token's trajectory).
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
            task gradient and the dependency loss. With 0 the initial density is a coin
            flip of the initialisation (we saw 0.22 and 0.75), and a dense 23-node
            start has ``h(A) ~ 2e8``.

    ``forward(x)`` returns logits ``(B, n_outputs)``; ``forward_with_aux(x)`` returns an
    :class:`SDFormerOutput`; ``forward_features(x)`` the pooled ``(B, feature_dim)``
    representation that ``head`` maps to logits.
    """

    def __init__(
        self,
        *,
        n_chans: int,
        n_outputs: int,
        n_times: int,
        sfreq: float,
        d_model: int = 128,
        n_layers: int = 6,
        n_heads: int = 4,
        d_ff: int = 512,
        dropout: float = 0.1,
        band_pooling: bool = False,
        stft_win: float = 1.0,
        stft_frames: int = 64,
        token_hidden: int = 64,
        encoder_ff: int = 128,
        edge_hidden: int = 512,
        recon_hidden: int = 1024,
        graph: GraphMode = "learned",
        graph_density: float = 0.2,
        graph_seed: int = 0,
        edge_bias_init: float = -1.0,
    ) -> None:
        super().__init__()
        check_positive_ints("SDFormer",
            n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, d_model=d_model, n_layers=n_layers,
            n_heads=n_heads, d_ff=d_ff, stft_frames=stft_frames, token_hidden=token_hidden,
            encoder_ff=encoder_ff, edge_hidden=edge_hidden, recon_hidden=recon_hidden,
        )
        if graph not in _GRAPH_MODES:
            raise ValueError(f"SDFormer: graph must be one of {_GRAPH_MODES}, got {graph!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"SDFormer: dropout must lie in [0, 1), got {dropout}")
        self.n_chans, self.n_outputs, self.n_times, self.sfreq = n_chans, n_outputs, n_times, float(sfreq)
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
            nn.Linear(d_model, stft_frames),
        )
        self.feature_dim = d_model
        self.head = nn.Linear(d_model, n_outputs)

    # -- pieces -------------------------------------------------------------------------

    def _check_input(self, x: torch.Tensor) -> None:
        check_window("SDFormer", x, self.n_chans, self.n_times)

    def _graph_nodes(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self.band_pooling:
            return tokens
        return tokens.view(tokens.shape[0], self.n_chans, self.n_bands, -1).mean(dim=2)

    def infer_graph(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample graph ``(adjacency, edge_probs)``, each ``(B, M, M)``, zero diagonal."""
        batch = tokens.shape[0]
        if self.inferencer is None:
            fixed = self.fixed_adjacency.to(tokens.dtype).expand(batch, -1, -1)
            return fixed, fixed
        scores = self.inferencer(self._graph_nodes(tokens))
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
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        self._check_input(x)
        tokens, spectra = self.tokenizer(x)
        adjacency, probs = self.infer_graph(tokens)
        gate = self.token_gate(adjacency)
        h = self.token_dropout(tokens)
        for block in self.blocks:
            h = block(h, gate)
        return self.norm(h), spectra, adjacency, probs, gate

    # -- public API ---------------------------------------------------------------------

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of the final token states ``(B, feature_dim)``; ``forward == head(forward_features)``."""
        return self._encode(x)[0].mean(dim=1)

    def forward(self, x: torch.Tensor, return_aux: bool = False) -> torch.Tensor | SDFormerOutput:
        """Logits ``(B, n_outputs)``, or the full :class:`SDFormerOutput` when ``return_aux``."""
        if return_aux:
            return self.forward_with_aux(x)
        return self.head(self.forward_features(x))

    def forward_with_aux(self, x: torch.Tensor) -> SDFormerOutput:
        """Logits plus graph, reconstruction and the four auxiliary loss terms (unweighted)."""
        states, spectra, adjacency, probs, gate = self._encode(x)
        features = states.mean(dim=1)
        recon_pred = self.decoder(states)
        recon_target = spectra.detach()
        recon = F.mse_loss(recon_pred.float(), recon_target.float())
        hard = adjacency.detach() > 0.5
        n_pairs = max(self.n_nodes * (self.n_nodes - 1), 1)
        if self.inferencer is not None:
            node_spectra = spectra.reshape(spectra.shape[0], self.n_nodes, -1)
            dep = dependency_loss(adjacency, node_spectra)
            dag = notears_acyclicity(adjacency).mean()
            sparse = adjacency.float().abs().sum(dim=(-2, -1)).mean()
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
