"""FBAM (frequency-band alignment) and TSAM (its time-domain control) for BioFormer.

Both modules act on tokens ``(B, N, D)``; ``N`` may be several independent token
sequences laid end to end (``n_tokens=(128, 64, 32)`` for BioFormer's three pyramid
branches), each aligned on its own but with the same weights, exactly as running the
module once per branch. Everything is vectorised over samples, bands and sequences.

* :class:`FBAM`, BioFormer Sec. 4.2, Eqs. 1-8 and Algorithm 1: rFFT over the token axis
  per embedding channel, DC kept aside, band descriptors (Eq. 2), cross-attention of
  learnable band tokens over the band contexts (Eq. 3), three heads giving a softmax
  kernel ``w``, a gain ``g`` and a phase ``beta`` per band (Eq. 4), residual magnitude
  update (Eq. 6), unit-complex phase update (Eq. 7), inverse rFFT (Eq. 8).
* :class:`TSAM`, Appendix B.2: the same controller over uniform *time* segments, with the
  dynamic convolution and residual gain applied to the tokens themselves (no phase).

Kernel modes (Appendix C.3). ``"sample"``: each sample gets its own kernels (binary
tasks in the paper). ``"batch"``: the kernels are averaged over the batch and shared
(multi-class tasks). ``eval_kernel`` says what the batch-shared kernel is at inference:
``"batch"`` (default) is what the paper states and the authors' code does, the average over
the batch being evaluated, in eval mode too, so a test sample's logits depend on its
batch-mates (github NKU-EmbeddedSystem/BioFormer, ``layers/BioFormer_EncDec.py``, ``FreqBandAlign``, for more
than two classes).
``"running"`` is our option, not in the paper or the code: a BatchNorm-like inference rule,
with an exponential running average of the batch-shared kernel per sequence and band kept in
training (``running_kernel``, momentum ``kernel_momentum``; ``None`` = cumulative average)
and used in eval mode, so that a prediction never depends on the rest of its batch (use it
when test batches are small or mixed across subjects). Gains and phases are always per
sample, as in the authors' code.

The authors' operator set (github NKU-EmbeddedSystem/BioFormer, ``FreqBandAlign``) is
:data:`AUTHORS_FBAM`; the paper's equations are the constructor defaults.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from torch import nn

from biosig_lightning.models.base import check_dropout
from biosig_lightning.models.modules.bands import BandLayout, EdgesSpec, resolve_edges
from biosig_lightning.models.modules.spectra import magnitude, sequence_signals, sequence_spectra

__all__ = [
    "AUTHORS_FBAM", "DESCRIPTORS", "eval_is_batch_independent", "FBAM", "TSAM", "BandController",
    "aligned_layers", "fbam_options", "resolve_kernel_mode",
]

KernelMode = Literal["sample", "batch"]
#: what a backbone hosting FBAM accepts: ``"auto"`` applies the paper's rule for its class count
HostKernelMode = Literal["auto", "sample", "batch"]
PhaseMode = Literal["rotate", "scale"]
GainMode = Literal["tanh", "offset"]
TokenInit = Literal["xavier", "zeros"]
EvalKernel = Literal["batch", "running"]
#: where FBAM's ``eps`` goes: "paper" is Algorithm 1 (``A = |Z|``, ``P = Z / (A + eps)``, log
#: descriptors ``log(. + eps)``); "shift" is the authors' code (``A = |Z| + eps`` is the magnitude
#: that is described, smoothed, clamped and recombined; no ``eps`` in the logs of its mean and
#: max; the kernel renormalised by ``sum + eps``)
EpsMode = Literal["paper", "shift"]
#: how band parameters are generated: Eq. 3's cross-attention of band tokens over band contexts
#: ("cross"), self-attention among the band contexts (Appendix G.3, Variant 5, "self"), or free
#: per-band parameters with no conditioning on the input (Variant 4, "static")
BandAttention = Literal["cross", "self", "static"]
#: FBAM's band descriptors of Eq. 2 in the authors' order; Table 10 uses subsets of them
DESCRIPTORS = ("mean", "std", "max", "energy", "argmax")

#: Every FBAM setting in which the authors' public code departs from the paper's equations
# : (github NKU-EmbeddedSystem/BioFormer, ``FreqBandAlign``): phase angle scaled ``theta -> (1 + beta)
# theta``; gain
#: ``clamp(1 + gamma 0.5 tanh(.), 0.5, 1.5)`` with learnable ``gamma``; magnitude update clamped
#: to ``+-0.5 A``; band tokens initialised to zero; batch-averaged kernel at eval (K > 2); and
#: their ``eps`` placement (``A = |Z| + eps``, :data:`EpsMode`), a 1e-6-level difference that
#: matters only for bit-level parity: the scaled phase ``(1 + beta) theta`` jumps by
#: ``2 pi beta`` where a bin crosses the negative real axis, so eps-level differences upstream
#: can move a bin across it (benchmarks/parity/bioformer_parity.md, section 1).
AUTHORS_FBAM: dict[str, Any] = {
    "phase_mode": "scale", "gain_mode": "offset", "magnitude_clamp": 0.5, "token_init": "zeros",
    "eval_kernel": "batch", "eps_mode": "shift",
}


def resolve_kernel_mode(mode: str, n_outputs: int) -> KernelMode:
    """The FBAM kernel mode for a task with ``n_outputs`` classes.

    ``"auto"`` is the paper's rule (Appendix C.3): batch-shared kernels for multi-class tasks
    (``K > 2``), sample-specific kernels for binary ones. ``"sample"`` / ``"batch"`` pass through.
    """
    if mode == "auto":
        return "batch" if n_outputs > 2 else "sample"
    if mode not in ("sample", "batch"):
        raise ValueError(f"FBAM kernel mode must be 'auto', 'sample' or 'batch', got {mode!r}")
    return mode  # type: ignore[return-value]


def fbam_options(host: str, kernel_mode: str, n_outputs: int, extra: dict[str, Any] | None) -> dict[str, Any]:
    """FBAM keyword arguments for a backbone that hosts FBAM (Table 3 "+FBAM").

    ``kernel_mode`` is the host's ``fbam_kernel_mode`` (resolved by :func:`resolve_kernel_mode`);
    ``extra`` are further FBAM options, which must not name the kernel mode a second time.
    """
    opts = dict(extra or {})
    if "kernel_mode" in opts:
        raise ValueError(f"{host}: set the FBAM kernel mode with fbam_kernel_mode, not "
                         f"fbam_kwargs.kernel_mode")
    opts["kernel_mode"] = resolve_kernel_mode(kernel_mode, n_outputs)
    return opts


def eval_is_batch_independent(modules: Sequence[nn.Module] | nn.ModuleList | None) -> bool:
    """Whether eval outputs of a host holding these aligners depend on each sample alone.

    False when any of them averages its kernel over the batch at eval (``kernel_mode="batch"``
    with ``eval_kernel="batch"``, the paper's and the authors' rule for K > 2); hosts set their
    ``batch_independent_eval`` from this.
    """
    return not any(
        isinstance(m, _Alignment) and m.kernel_mode == "batch" and m.eval_kernel == "batch"
        for module in (modules or []) for m in module.modules()
    )


def aligned_layers(z: torch.Tensor, layers: Sequence[nn.Module] | nn.ModuleList,
                   aligners: Sequence[nn.Module] | nn.ModuleList | None) -> torch.Tensor:
    """Run encoder ``layers`` in order on tokens ``z``, each preceded by its aligner when ``aligners`` is
    given.

    BioFormer's hybrid layer is FBAM (or TSAM) then attention + FFN (Sec. 4.1, Fig. 3); Table 3's
    "+FBAM" inserts one FBAM before every encoder layer of a host backbone (Appendix C.4). The
    aligner replaces its input (no outer residual), as in the paper.
    """
    if aligners is not None and len(aligners) != len(layers):
        raise ValueError(f"one aligner per layer: got {len(aligners)} aligners for {len(layers)} layers")
    for i, layer in enumerate(layers):
        if aligners is not None:
            z = aligners[i](z)
        z = layer(z)
    return z


class _Head(nn.Sequential):
    """One modulation head of Eq. 4: Linear -> LayerNorm -> ReLU -> Dropout -> Linear."""

    def __init__(self, d_token: int, n_out: int, dropout: float) -> None:
        super().__init__(
            nn.Linear(d_token, d_token),
            nn.LayerNorm(d_token),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_token, n_out),
        )


class BandController(nn.Module):
    """Band descriptors -> band contexts -> band-token cross-attention -> modulation heads.

    Eq. 3: ``o_m = CrossAttn(phi_o(t_m), phi_s(s_m))``. Descriptors are projected to
    contexts ``c = LN(Linear(s))`` (``phi_s``); the ``M`` learnable band tokens ``T`` are
    the queries ``T W_q`` and the contexts give keys ``c W_k`` and values ``c W_v`` (one
    head, no biases, scale ``sqrt(d)``); ``O = LN(softmax(Q K^T / sqrt(d)) V)``. Empty bands
    are masked out of the keys. ``heads`` maps a head name to its output width; each head
    is an MLP (Eq. 4) returning raw (pre-activation) values ``(B, S, M, width)``.

    ``token_init="xavier"`` draws the band tokens Xavier-uniform, so the bands are told
    apart from the first step; ``"zeros"`` reproduces the authors' code, where all
    queries start at zero and the attention starts uniform.

    ``attention="self"`` (Appendix G.3, Variant 5) drops the band tokens: the band contexts
    attend to each other, ``Q = c W_q``. ``attention="static"`` (Variant 4) drops everything
    input-dependent: every head's raw output is a free parameter per sequence and band
    ``(S, M, width)``, initialised at zero (uniform kernel, zero gain and phase before the
    head activations).
    """

    def __init__(
        self, n_stats: int, d_token: int, n_bands: int, heads: dict[str, int], dropout: float,
        token_init: TokenInit,
        attention: BandAttention = "cross", n_segments: int = 1,
    ) -> None:
        super().__init__()
        if token_init not in ("xavier", "zeros"):
            raise ValueError(f"token_init must be 'xavier' or 'zeros', got {token_init!r}")
        if attention not in ("cross", "self", "static"):
            raise ValueError(f"band attention must be 'cross', 'self' or 'static', got {attention!r}")
        self.attention = attention
        if attention == "static":
            self.static = nn.ParameterDict(
                {name: nn.Parameter(torch.zeros(n_segments, n_bands, width)) for name, width in heads.items()}
            )
            return
        self.describe = nn.Sequential(nn.Linear(n_stats, d_token), nn.LayerNorm(d_token))
        if attention == "cross":
            self.tokens = nn.Parameter(torch.zeros(n_bands, d_token))
            if token_init == "xavier":
                nn.init.xavier_uniform_(self.tokens)
        self.query = nn.Linear(d_token, d_token, bias=False)
        self.key = nn.Linear(d_token, d_token, bias=False)
        self.value = nn.Linear(d_token, d_token, bias=False)
        self.attn_norm = nn.LayerNorm(d_token)
        self.heads = nn.ModuleDict({name: _Head(d_token, width, dropout) for name, width in heads.items()})
        self.scale = 1.0 / math.sqrt(d_token)

    def forward(self, stats: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.attention == "static":
            return {name: p.expand(stats.shape[0], -1, -1, -1) for name, p in self.static.items()}
        context = self.describe(stats)  # (B, S, M, d)
        projections = [self.key, self.value]
        if self.attention == "self":
            projections.insert(0, self.query)
        *query, key, value = _linear_all(context, projections)
        if self.attention == "cross":
            scores = torch.einsum("md,bsnd->bsmn", self.query(self.tokens), key) * self.scale
        else:
            scores = torch.einsum("bsmd,bsnd->bsmn", query[0], key) * self.scale
        # A finite fill keeps a sequence with no non-empty band (a 1-token branch) NaN-free.
        scores = scores.masked_fill(~valid[None, :, None, :], torch.finfo(scores.dtype).min)
        out = self.attn_norm(torch.softmax(scores, dim=-1) @ value)
        return self._heads(out)

    def _heads(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every head of Eq. 4 on the band outputs ``out`` at once: their first layers as one product,
        a LayerNorm per head, and their last layers as one block-diagonal product (same values as
        running each :class:`_Head` on its own, fewer and larger matrix products)."""
        heads = [cast(_Head, head) for head in self.heads.values()]
        if len(heads) == 1:
            return {name: head(out) for name, head in self.heads.items()}
        norms = [cast(nn.LayerNorm, head[1]) for head in heads]
        hidden = _linear_all(out, [cast(nn.Linear, head[0]) for head in heads], stacked=True)  # (..., H, d)
        hidden = torch.nn.functional.layer_norm(hidden, hidden.shape[-1:], eps=norms[0].eps)
        hidden = hidden * torch.stack([n.weight for n in norms]) + torch.stack([n.bias for n in norms])
        hidden = heads[0][3](torch.relu(hidden)).flatten(-2)
        last = [cast(nn.Linear, head[4]) for head in heads]
        raw = torch.nn.functional.linear(hidden, torch.block_diag(*[lin.weight for lin in last]),
                                         torch.cat([lin.bias for lin in last]))
        widths = [lin.out_features for lin in last]
        return dict(zip(self.heads.keys(), raw.split(widths, dim=-1), strict=True))


def _linear_all(x: torch.Tensor, layers: Sequence[nn.Linear], stacked: bool = False) -> Any:
    """Several linear layers of the same input and output width applied to ``x`` as one product: their
    outputs, one per layer (``stacked``: as one ``(..., layers, width)`` tensor)."""
    bias = None if layers[0].bias is None else torch.cat([lin.bias for lin in layers])  # type: ignore[misc]
    out = torch.nn.functional.linear(x, torch.cat([lin.weight for lin in layers]), bias)
    return out.unflatten(-1, (len(layers), -1)) if stacked else out.chunk(len(layers), dim=-1)


class _Alignment(nn.Module):
    """Shared plumbing: sequence bookkeeping, controller, and the batch-shared kernel rule."""

    running_kernel: torch.Tensor  # buffers of the running eval kernel (when kept)
    num_batches_tracked: torch.Tensor

    def __init__(
        self, *, d_model: int, n_tokens: int | Sequence[int], n_bins: Sequence[int], n_bands: int,
        band_edges: EdgesSpec,
        n_stats: int, heads: dict[str, int],
        d_token: int | None, kernel_size: int, dropout: float, kernel_mode: KernelMode,
        kernel_momentum: float | None, token_init: TokenInit, eps: float, eval_kernel: EvalKernel = "batch",
        band_attention: BandAttention = "cross",
    ) -> None:
        super().__init__()
        if eval_kernel not in ("batch", "running"):
            raise ValueError(f"eval_kernel must be 'batch' or 'running', got {eval_kernel!r}")
        if d_model < 1 or n_bands < 1:
            raise ValueError(f"d_model and n_bands must be positive, got {d_model}, {n_bands}")
        if kernel_mode not in ("sample", "batch"):
            raise ValueError(f"kernel_mode must be 'sample' or 'batch', got {kernel_mode!r}")
        if kernel_momentum is not None and not 0.0 < kernel_momentum <= 1.0:
            raise ValueError(f"kernel_momentum must lie in (0, 1] or be None, got {kernel_momentum}")
        check_dropout(type(self).__name__, dropout=dropout)
        self.d_model = d_model
        self.seq_lens = _as_lengths(n_tokens)
        self.n_tokens = sum(self.seq_lens)
        self.n_bands = n_bands
        self.kernel_mode = kernel_mode
        self.kernel_momentum = kernel_momentum
        self.eval_kernel = eval_kernel
        self.eps = eps
        self.d_token = d_token if d_token is not None else max(1, d_model // 2)
        edges = resolve_edges(band_edges, n_bins, n_bands)
        self.layout = BandLayout(n_bins, edges, n_bands, kernel_size)
        self.controller = BandController(n_stats, self.d_token, n_bands, heads, dropout, token_init,
                                         band_attention,
                                         len(self.seq_lens))
        if "kernel" in heads and kernel_mode == "batch" and eval_kernel == "running":
            self.register_buffer(
                "running_kernel", torch.full((len(self.seq_lens), n_bands, kernel_size), 1.0 / kernel_size)
            )
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    @property
    def band_edges(self) -> list[list[int]]:
        """Integer band edges actually used, one list per token sequence."""
        return [list(e) for e in self.layout.edges]

    def _check(self, x: torch.Tensor) -> None:
        if x.ndim != 3 or x.shape[1] != self.n_tokens or x.shape[2] != self.d_model:
            raise ValueError(
                f"{type(self).__name__} expects tokens (batch, {self.n_tokens}, {self.d_model}), got "
                f"{tuple(x.shape)}"
            )

    def _kernel(self, raw: torch.Tensor) -> torch.Tensor:
        """Softmax kernels ``(B, S, M, r)`` (sample mode) or ``(1, S, M, r)`` (batch mode).

        A mean of points of the probability simplex stays on it, so the batch-shared kernel
        needs no renormalisation.
        """
        kernel = torch.softmax(raw, dim=-1)
        if self.kernel_mode == "sample":
            return kernel
        if not self.training and self.eval_kernel == "running":
            return self.running_kernel.unsqueeze(0)
        shared = kernel.mean(0, keepdim=True)
        if not self.training or self.eval_kernel != "running":
            return shared
        with torch.no_grad():
            self.num_batches_tracked += 1
            weight = self.kernel_momentum
            if weight is None:
                weight = 1.0 / float(self.num_batches_tracked)
            self.running_kernel.lerp_(shared[0].detach(), weight)
        return shared


class FBAM(_Alignment):
    """Frequency-Band Alignment Module (BioFormer Sec. 4.2, Algorithm 1) on ``(B, N, D)`` tokens.

    For each token sequence of length ``P`` the rFFT (``norm="ortho"``) runs over the token
    axis per channel (Eq. 1); the DC bin is kept aside (multiplied by a learnable
    per-channel weight, initialised to 1, when ``learnable_dc``: Appendix G.3, Variant 2)
    and the ``floor(P / 2)`` other bins (Nyquist included) are cut into bands. With
    ``A = |Z|`` and ``P = Z / (A + eps)`` (Algorithm 1, line 3), per band ``m``:

    * magnitude (Eq. 6): ``A' = A + g (A * w - A)``, with ``w = softmax(MLP_w(o))`` an
      ``r``-tap kernel applied inside the band only, ``g = tanh(MLP_g(o))`` (Algorithm 1,
      ``gain_mode="tanh"``). ``gain_mode="offset"`` is the authors' code instead:
      ``g = clamp(1 + gamma * 0.5 tanh(MLP_g(o)), 0.5, 1.5)`` with a learnable scalar
      ``gamma`` (init 0.5). ``magnitude_clamp=c`` bounds the update to ``[-cA, cA]`` (the
      authors use 0.5). ``magnitude_residual=False`` drops the residual, ``A' = A * w``
      (Appendix G.3, Variant 3; no gain head then).
    * phase (Eq. 7): ``P' = P e^{j beta} / (|P e^{j beta}| + eps)``, ``beta = tanh(MLP_p(o))``,
      a rotation of every bin of the band by ``beta`` radians (``phase_mode="rotate"``).
      ``phase_mode="scale"`` is the authors' code: the phase angle is scaled,
      ``theta -> (1 + beta) theta`` with ``theta = angle(Z)`` in ``(-pi, pi]``; unlike the
      rotation this is discontinuous where a bin crosses the negative real axis (the output
      bin jumps by ``A' |e^{2 pi j beta} - 1|``), as in their code.
    * ``eps_mode="shift"`` (the authors' code) uses ``A = |Z| + eps`` as the magnitude
      throughout (descriptors without a further ``eps`` in the logs of mean and max, smoothing,
      clamp bound, recombination) and renormalises the kernel by ``sum + eps``; ``"paper"``
      (default) is Algorithm 1's ``A = |Z|``. ``P`` is ``Z / (|Z| + eps)`` in both.

    Then ``Z' = [Z_DC, A' P']`` and the inverse rFFT of length ``P`` (Eq. 8). Because
    ``|e^{j beta}| = 1``, Eq. 7 is evaluated in closed form as
    ``A' P' = A' e^{j beta} Z / (A + eps (A + eps))`` (same value, fewer operations), in real arithmetic
    on the real and imaginary planes (:func:`~biosig_lightning.models.modules.spectra.sequence_spectra`).
    For even ``P`` the Nyquist bin is modulated like any other; the inverse rFFT keeps only
    its real part, which is the real signal nearest to the rotated spectrum. There is no
    outer residual: FBAM replaces its input, as in the paper and the authors' code.

    Ablations (Table 5): ``use_magnitude=False`` is "phase only" (no kernel or gain head,
    magnitude untouched); ``use_phase=False`` is "magnitude only" (no phase head, phase
    untouched). Turning both off is refused: drop the module instead.

    Invariants (tested): with ``g = 0`` and ``beta = 0`` the output equals the input up to
    the ``eps`` of Eq. 7 (relative error about ``eps``); the DC bin, hence the mean of every
    token sequence, is never changed unless ``learnable_dc``.

    Args:
        d_model: token width ``D``.
        n_tokens: tokens per sequence, an int or one length per sequence laid end to end.
        n_bands: bands per sequence ``M`` (paper: 6).
        band_edges: ``None`` (uniform), ``n_bands + 1`` fractions, or per-sequence integer
            bin edges over the non-DC bins (see :func:`resolve_edges`).
        d_token: controller width ``d`` (paper: 64 = ``D / 2``, the default).
        kernel_size: taps ``r`` of the band kernel (paper: 3).
        dropout: dropout inside the heads (authors: 0.1).
        kernel_mode / eval_kernel / kernel_momentum: see the module docstring.
        band_attention: ``"cross"`` (Eq. 3), ``"self"`` (App. G.3 Variant 5) or ``"static"``
            (Variant 4); see :class:`BandController`.
        descriptors: which of Eq. 2's descriptors (:data:`DESCRIPTORS`) feed the controller
            (Table 10: ``["mean", "std", "max"]`` is LogMom, ``+ ["argmax"]`` LogMom+PeakLoc,
            ``+ ["energy"]`` LogMom+BandEnergy).
        eps: the ``eps`` of Algorithm 1 and of the log descriptors.
    """

    descriptor_index: torch.Tensor  # buffer

    def __init__(
        self, d_model: int, n_tokens: int | Sequence[int], n_bands: int = 6, band_edges: EdgesSpec = None, *,
        d_token: int | None = None, kernel_size: int = 3, dropout: float = 0.1,
        kernel_mode: KernelMode = "sample", kernel_momentum: float | None = 0.1,
        use_magnitude: bool = True, use_phase: bool = True, phase_mode: PhaseMode = "rotate",
        gain_mode: GainMode = "tanh",
        magnitude_clamp: float | None = None, magnitude_residual: bool = True, learnable_dc: bool = False,
        token_init: TokenInit = "xavier", eval_kernel: EvalKernel = "batch",
        band_attention: BandAttention = "cross", descriptors: Sequence[str] = DESCRIPTORS, eps: float = 1e-6,
        eps_mode: EpsMode = "paper",
    ) -> None:
        unknown = [d for d in descriptors if d not in DESCRIPTORS]
        if unknown or not descriptors or len(set(descriptors)) != len(descriptors):
            raise ValueError(f"descriptors must be distinct names from {list(DESCRIPTORS)}, got "
                             f"{list(descriptors)}")
        if not (use_magnitude or use_phase):
            raise ValueError("FBAM with use_magnitude=False and use_phase=False does nothing; remove the "
                             "module instead")
        if phase_mode not in ("rotate", "scale"):
            raise ValueError(f"phase_mode must be 'rotate' or 'scale', got {phase_mode!r}")
        if gain_mode not in ("tanh", "offset"):
            raise ValueError(f"gain_mode must be 'tanh' or 'offset', got {gain_mode!r}")
        if eps_mode not in ("paper", "shift"):
            raise ValueError(f"eps_mode must be 'paper' or 'shift', got {eps_mode!r}")
        if magnitude_clamp is not None and magnitude_clamp <= 0:
            raise ValueError(f"magnitude_clamp must be positive or None, got {magnitude_clamp}")
        heads: dict[str, int] = {}
        if use_magnitude:
            heads["kernel"] = kernel_size
            if magnitude_residual:
                heads["gain"] = 1
        if use_phase:
            heads["phase"] = 1
        lengths = _as_lengths(n_tokens)
        # spectrum: floor(P / 2) non-DC bins per sequence; five band descriptors (Eq. 2)
        super().__init__(
            d_model=d_model, n_tokens=lengths, n_bins=[p // 2 for p in lengths], n_bands=n_bands,
            band_edges=band_edges, n_stats=len(descriptors), heads=heads, d_token=d_token,
            kernel_size=kernel_size,
            dropout=dropout, kernel_mode=kernel_mode, kernel_momentum=kernel_momentum, token_init=token_init,
            eps=eps,
            eval_kernel=eval_kernel, band_attention=band_attention,
        )
        self.descriptors = [str(d) for d in descriptors]
        self.register_buffer(
            "descriptor_index", torch.tensor([DESCRIPTORS.index(d) for d in descriptors]), persistent=False
        )
        self.use_magnitude = use_magnitude
        self.use_phase = use_phase
        self.phase_mode = phase_mode
        self.gain_mode = gain_mode
        self.eps_mode = eps_mode
        self.magnitude_clamp = magnitude_clamp
        self.magnitude_residual = magnitude_residual
        self.gain_scale = (
            nn.Parameter(torch.tensor(0.5))
            if use_magnitude and magnitude_residual and gain_mode == "offset"
            else None
        )
        self.dc_weight = nn.Parameter(torch.ones(d_model)) if learnable_dc else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Aligned tokens ``(B, N, D)`` for tokens ``x`` ``(B, N, D)``."""
        self._check(x)
        # Channel-first (B, D, N): FFTs, gathers and reductions then run along the last axis.
        xt = x.transpose(1, 2)
        # under bf16 autocast the tokens arrive in bfloat16, which cuFFT does not transform: at least float32
        xf = xt if xt.dtype in (torch.float32, torch.float64) else xt.float()
        dc, bins = sequence_spectra(xf, self.seq_lens)  # (2, B, D, S), (2, B, D, K): real, imaginary
        re, im = bins
        abs_z = magnitude(re, im)
        shift = self.eps_mode == "shift"
        mag = abs_z + self.eps if shift else abs_z
        stats = self.layout.band_statistics(mag, self.eps, log_guard=not shift)
        if len(self.descriptors) != len(DESCRIPTORS):  # Table 10: a subset of Eq. 2's descriptors
            stats = stats.index_select(-1, self.descriptor_index)
        params = self.controller(stats, self.layout.valid)

        new_mag = mag
        if self.use_magnitude:
            kernel = self._kernel(params["kernel"])
            if shift:  # the authors renormalise the (already normalised) kernel by sum + eps
                kernel = kernel / (kernel.sum(-1, keepdim=True) + self.eps)
            smoothed = self.layout.convolve(mag, kernel)
            if not self.magnitude_residual:
                new_mag = smoothed
            else:
                raw_gain = params["gain"][..., 0]
                if self.gain_mode == "tanh":
                    gain = torch.tanh(raw_gain)
                else:
                    gain_scale = cast(nn.Parameter, self.gain_scale)  # set for the offset gain
                    gain = (1.0 + gain_scale * 0.5 * torch.tanh(raw_gain)).clamp(0.5, 1.5)
                delta = self.layout.to_bins(gain).unsqueeze(1) * (smoothed - mag)
                if self.magnitude_clamp is not None:
                    bound = self.magnitude_clamp * mag
                    delta = torch.maximum(torch.minimum(delta, bound), -bound)
                new_mag = mag + delta

        if self.use_phase:
            angle = self.layout.to_bins(torch.tanh(params["phase"][..., 0])).unsqueeze(1)  # (B, 1, K)
            if self.phase_mode == "scale":
                angle = angle * torch.atan2(im, re)  # theta -> theta + beta * theta, theta = angle(Z)
            cos, sin = torch.cos(angle), torch.sin(angle)
            rotated = torch.stack([re * cos - im * sin, re * sin + im * cos])  # Z e^{j angle}
            bins = rotated * (new_mag / (abs_z + self.eps * (abs_z + self.eps)))
        else:
            bins = bins * (new_mag / (abs_z + self.eps))

        if self.dc_weight is not None:
            dc = dc * self.dc_weight.unsqueeze(-1)
        return sequence_signals(dc, bins, self.seq_lens).transpose(1, 2)


class TSAM(_Alignment):
    """Temporal Segment Alignment Module (BioFormer Appendix B.2), FBAM's time-domain control.

    Each token sequence is cut into ``n_bands`` contiguous, near-equal segments along the
    token axis (the "bands" of this module). Per segment four log descriptors summarise
    it, each per channel and then averaged over channels: magnitude ``mean |x|``,
    variability ``std(x)``, peak ``max |x|`` and energy ``sum x^2`` (B.2 lists these four;
    FBAM's peak location has no counterpart). The same controller as FBAM (band tokens,
    cross-attention, heads) gives a softmax kernel ``w`` and a gain ``g = tanh(.)`` per
    segment, and ``x' = x + g (x * w - x)`` with the convolution confined to the segment
    (reflect padding at segment edges). There is no phase. Hyperparameters (kernel size,
    token width, number of segments, kernel modes) are FBAM's, as B.2 asks for a fair
    comparison. With ``g = 0`` the module is exactly the identity.

    ``band_edges`` partitions the token axis: ``None`` (uniform), fractions, or
    per-sequence integer token edges ending at the sequence length.
    """

    def __init__(
        self, d_model: int, n_tokens: int | Sequence[int], n_bands: int = 6, band_edges: EdgesSpec = None, *,
        d_token: int | None = None, kernel_size: int = 3, dropout: float = 0.1,
        kernel_mode: KernelMode = "sample", kernel_momentum: float | None = 0.1,
        token_init: TokenInit = "xavier", eval_kernel: EvalKernel = "batch",
        band_attention: BandAttention = "cross", eps: float = 1e-6,
    ) -> None:
        lengths = _as_lengths(n_tokens)
        # the token axis itself is cut into segments; four descriptors, kernel and gain heads (B.2)
        super().__init__(
            d_model=d_model, n_tokens=lengths, n_bins=lengths, n_bands=n_bands, band_edges=band_edges,
            n_stats=4,
            heads={"kernel": kernel_size, "gain": 1}, d_token=d_token, kernel_size=kernel_size,
            dropout=dropout,
            kernel_mode=kernel_mode, kernel_momentum=kernel_momentum, token_init=token_init, eps=eps,
            eval_kernel=eval_kernel, band_attention=band_attention,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Aligned tokens ``(B, N, D)`` for tokens ``x`` ``(B, N, D)``."""
        self._check(x)
        xt = x.transpose(1, 2)  # (B, D, N): the token axis plays the role of FBAM's bins
        stats = self.layout.band_statistics(xt.abs(), self.eps, signed=xt)[..., :4]
        params = self.controller(stats, self.layout.valid)
        smoothed = self.layout.convolve(xt, self._kernel(params["kernel"]))
        gain = self.layout.to_bins(torch.tanh(params["gain"][..., 0])).unsqueeze(1)
        return (xt + gain * (smoothed - xt)).transpose(1, 2)


def _as_lengths(n_tokens: int | Sequence[int]) -> list[int]:
    lengths = [int(n_tokens)] if isinstance(n_tokens, int) else [int(n) for n in n_tokens]
    if not lengths or any(n < 1 for n in lengths):
        raise ValueError(f"n_tokens must be a positive int or a non-empty list of positive ints, got "
                         f"{n_tokens!r}")
    return lengths
