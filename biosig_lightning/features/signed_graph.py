"""Balanced signed graph maths and the Lanczos low-pass graph filter (Yao et al., Secs. 2-3, App. B, C, E).

Everything here is batched over samples and differentiable (except the discrete polarity search),
so the unrolled denoiser of :mod:`biosig_lightning.models.signed_graph` stacks these pieces.

Graph (Sec. 3.1, Fig. 1c, App. E.1):

* nodes are ``n_chans x n_chunks``: each channel's window is cut into ``H`` consecutive chunks of
  ``D`` samples; node ``h * n_chans + c`` is chunk ``h`` of channel ``c`` (:func:`product_graph_mask`).
  Edges: the spatial graph inside every chunk (all channel pairs, or the line graph of a bipolar
  montage, :func:`line_graph_mask`) plus a temporal edge between consecutive chunks of one channel.
* polarities ``beta`` are per *channel* and shared by its chunks. Reading: a temporal edge joins two
  chunks of the same sensor and the product graph makes it positive (Fig. 1c); by eq. 2 a positive
  edge needs equal polarities, so the only polarity assignment compatible with a balanced product
  graph gives all chunks of a sensor one polarity.
* :func:`covariance_polarity` initialises ``beta`` from one reference row of the empirical
  covariance; :func:`refine_polarity` flips single channels while the GLR of eq. 5 drops, until no
  flip helps. The "set of training signals" of eq. 5 is read as the ``D`` graph signals of one
  sample (the node values at each time offset inside the chunks), so every sample gets its own graph.
* :func:`pairwise_distance`: Mahalanobis (eq. 6, ``M = Q Q^T`` from a set of candidates), Euclidean,
  cosine or Manhattan feature distances (Table 6), normalised to ``[0, 1]`` per sample (App. E.2).
* :func:`signed_weights`: eq. 7 (balanced), or the ablations of Table 2: ``exp(-d)`` (positive graph)
  and the shifted logistic of eq. 28 (unbalanced signed graph).
* :func:`normalize_weights` (eq. 8), :func:`combinatorial_laplacian` (``L = D - W`` with the
  signed degree, App. C), :func:`signed_laplacian` (``L^s = D^s - W``, eq. 27, used by the unbalanced
  ablation), :func:`gershgorin_shift` (eq. 9), :func:`similarity_transform` (eq. 3).

Filter (Sec. 3.2, eq. 12-13, 24-25, App. E.3):

* responses: ``"sigmoid"`` ``g(lambda) = sigmoid(alpha (omega - lambda))`` with ``alpha = 10`` and a
  learnable ``omega`` in eigenvalue units (eq. 31), and ``"ideal"``: the first ``omega`` eigenvectors
  (eq. 13), which for a Lanczos basis of size ``m`` keeps ``xi = round(omega m / N)`` Ritz values.
* :func:`exact_filter`: ``V g(Lambda) V^T y`` by a dense eigendecomposition (the O(N^3) reference).
* :func:`lanczos_filter`: ``||y|| U_m g(H_m) c_1`` (eq. 25) with full re-orthogonalisation,
  batched over samples and over the ``D`` signals of a sample (each signal has its own Krylov space).
* :func:`filter_flops` / :func:`choose_filter`: the two filters' flop counts for a product graph, and the
  one expected to be faster (the denoiser's ``filter_method="auto"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import torch

__all__ = [
    "DistanceKind",
    "GraphKind",
    "Response",
    "SymmetricOperator",
    "balance_violations",
    "choose_filter",
    "chunk_nodes",
    "combinatorial_laplacian",
    "covariance_polarity",
    "exact_filter",
    "filter_flops",
    "filter_response",
    "gershgorin_shift",
    "greedy_polarity",
    "lanczos_filter",
    "line_graph_mask",
    "normalize_weights",
    "pairwise_distance",
    "product_graph_mask",
    "refine_polarity",
    "signed_laplacian",
    "signal_gaps",
    "signed_weights",
    "similarity_transform",
    "unchunk_nodes",
]

GraphKind = Literal["balanced", "positive", "unbalanced"]
DistanceKind = Literal["mahalanobis", "euclidean", "cosine", "manhattan"]
Response = Literal["sigmoid", "ideal"]


class SymmetricOperator(Protocol):
    """A batched symmetric ``(B, N, N)`` operator known only through its products (for
    :func:`lanczos_filter`)."""

    def matvec(self, v: torch.Tensor) -> torch.Tensor: ...

    def inf_norm(self) -> torch.Tensor: ...


# ---- nodes and edges ----------------------------------------------------------------------------------
def chunk_nodes(x: torch.Tensor, n_chunks: int) -> torch.Tensor:
    """``(B, C, H*D)`` windows -> ``(B, H*C, D)`` node signals, node ``h*C + c`` = chunk ``h`` of channel
    ``c``."""
    b, c, t = x.shape
    if t % n_chunks:
        raise ValueError(f"a window of {t} samples cannot be cut into {n_chunks} equal chunks "
                         f"(sequence length must divide n_times)")
    d = t // n_chunks
    return x.reshape(b, c, n_chunks, d).transpose(1, 2).reshape(b, n_chunks * c, d)


def unchunk_nodes(nodes: torch.Tensor, n_chans: int) -> torch.Tensor:
    """Inverse of :func:`chunk_nodes`."""
    b, n, d = nodes.shape
    h = n // n_chans
    return nodes.reshape(b, h, n_chans, d).transpose(1, 2).reshape(b, n_chans, h * d)


def line_graph_mask(ch_names: Sequence[str]) -> torch.Tensor:
    """Line graph of a bipolar montage (App. E.1, eq. 30): channels ``A-B`` and ``B-C`` share electrode B.

    Raises ``ValueError`` naming a channel that is not bipolar (no ``-`` between two electrode names).
    """
    pairs = []
    for name in ch_names:
        parts = [p.strip().upper() for p in str(name).split("-")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"line graph needs bipolar channel names 'A-B'; got {name!r}")
        pairs.append(set(parts))
    c = len(pairs)
    mask = torch.zeros(c, c, dtype=torch.bool)
    for i in range(c):
        for j in range(c):
            mask[i, j] = i != j and bool(pairs[i] & pairs[j])
    return mask


def product_graph_mask(n_chans: int, n_chunks: int, spatial: torch.Tensor | None = None) -> torch.Tensor:
    """Edge set of the product graph of Fig. 1c as an ``(N, N)`` bool matrix, ``N = n_chans * n_chunks``.

    ``spatial`` (``(C, C)`` bool, symmetric) is the graph inside each chunk; ``None`` joins all pairs.
    Consecutive chunks ``h, h+1`` of the same channel are joined (temporal edges). No self-loops.
    """
    c, h = n_chans, n_chunks
    if spatial is None:
        spatial = ~torch.eye(c, dtype=torch.bool)
    spatial = spatial.to(torch.bool) & ~torch.eye(c, dtype=torch.bool)
    if spatial.shape != (c, c) or not torch.equal(spatial, spatial.T):
        raise ValueError(f"spatial graph must be a symmetric ({c}, {c}) matrix, got shape "
                         f"{tuple(spatial.shape)}")
    temporal = torch.zeros(h, h, dtype=torch.bool)
    idx = torch.arange(h - 1)
    temporal[idx, idx + 1] = True
    temporal[idx + 1, idx] = True
    eye_h, eye_c = torch.eye(h, dtype=torch.bool), torch.eye(c, dtype=torch.bool)
    # block (h, h') = spatial if h == h', identity (same channel) if |h - h'| == 1
    return torch.kron(eye_h, spatial) | torch.kron(temporal, eye_c)


# ---- polarity (eq. 2, 5) -----------------------------------------------------------------------------
def covariance_polarity(x: torch.Tensor, ref: int = 0, pool: bool = False) -> torch.Tensor:
    """Initial polarities ``(B, C)`` from one row of the empirical channel covariance (Sec. 3.1).

    ``beta_ref = 1`` and ``beta_j = sign(C[ref, j])`` (ties -> +1), from windows ``x`` of ``(B, C, T)``;
    ``pool=True`` uses the covariance pooled over all windows and returns ``(1, C)``.
    """
    xc = x - x.mean(dim=-1, keepdim=True)
    cov_ref = (xc * xc[:, ref: ref + 1]).sum(-1)
    if pool:
        cov_ref = cov_ref.sum(0, keepdim=True)
    beta = torch.where(cov_ref >= 0, 1.0, -1.0).to(x.dtype)
    beta[:, ref] = 1.0
    return beta


def signal_gaps(nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_q (x_i - x_j)^2, sum_q (x_i + x_j)^2)`` over a sample's ``D`` graph signals, each ``(B, N,
    N)``."""
    sq = nodes.square().sum(-1)
    gram = nodes @ nodes.transpose(-1, -2)
    base = sq.unsqueeze(-1) + sq.unsqueeze(-2)
    return (base - 2 * gram).clamp_min(0), (base + 2 * gram).clamp_min(0)


def refine_polarity(beta: torch.Tensor, distance: torch.Tensor, diff_gap: torch.Tensor, sum_gap: torch.Tensor,
                    mask: torch.Tensor, max_sweeps: int | None = None, pool: bool = False) -> torch.Tensor:
    """Greedy minimum-GLR polarity search of eq. 5, one channel at a time, until no flip lowers the GLR.

    Args:
        beta: ``(B, C)`` current polarities (+-1).
        distance: ``(B, N, N)`` normalised feature distances ``d_ij``.
        diff_gap, sum_gap: ``(B, N, N)`` ``sum_q (x^q_i -+ x^q_j)^2`` over the sample's ``D`` graph
            signals (:func:`signal_gaps`).
        mask: ``(N, N)`` edge set.
        max_sweeps: safety cap on full sweeps (default ``C``); each flip strictly lowers the GLR,
            so the search stops on its own well before.
        pool: one polarity for the whole batch (``beta`` of shape ``(1, C)``): the GLR of eq. 5 summed
            over every graph signal of every window, i.e. the windows are eq. 5's set of training signals.

    Reading of the GLR in eq. 5. With the combinatorial Laplacian and eq. 7's signed weights, a pair
    contributes ``exp(-d) (x_i - x_j)^2`` with equal polarities and ``(exp(-d) - 1) (x_i - x_j)^2 <= 0``
    with opposite ones, so *every* flip that makes an edge negative lowers that GLR: its minimum is a
    max-cut of the signal differences, whatever the correlations (a positively correlated pair would be
    split), which contradicts the covariance initialisation it refines. We measure smoothness where the
    signal is filtered, on the positive twin (Sec. 3.2): ``GLR^+ = sum |w_ij| (beta_i x_i - beta_j x_j)^2``
    (the signed-Laplacian form, eq. 27), so equal polarities cost ``exp(-d) (x_i - x_j)^2`` and opposite
    ones ``(1 - exp(-d)) (x_i + x_j)^2``: anti-correlated pairs are drawn apart, correlated ones together.
    Per channel pair, ``A`` / ``B`` sum these over the edges between their chunks; flipping channel ``c``
    changes the GLR by ``beta_c sum_c' beta_c' (B - A)_{cc'}``.
    """
    c = beta.shape[1]
    n = distance.shape[-1]
    h = n // c
    m = mask.to(distance.dtype)
    same = torch.exp(-distance) * diff_gap * m
    opp = (1.0 - torch.exp(-distance)) * sum_gap * m
    gain = (opp - same).reshape(distance.shape[0], h, c, h, c).sum(dim=(1, 3))  # (B, C, C): B - A per pair
    return greedy_polarity(beta, gain, max_sweeps, pool)


def greedy_polarity(beta: torch.Tensor, gain: torch.Tensor, max_sweeps: int | None = None,
                    pool: bool = False) -> torch.Tensor:
    """The single-channel flip search of :func:`refine_polarity` from the per-pair GLR change ``gain`` ``(B,
    C, C)``."""
    b, c = beta.shape
    if pool:
        gain = gain.sum(0, keepdim=True)
        b = 1
    gain = gain * (1 - torch.eye(c, dtype=gain.dtype, device=gain.device))
    beta = beta.clone()
    for _ in range(max_sweeps or c):
        flipped = torch.zeros(b, dtype=torch.bool, device=beta.device)
        for i in range(c):
            delta = beta[:, i] * (gain[:, i] * beta).sum(-1)
            flip = delta < -1e-12 * gain[:, i].abs().sum(-1).clamp_min(1e-30)
            beta[:, i] = torch.where(flip, -beta[:, i], beta[:, i])
            flipped |= flip
        if not bool(flipped.any()):
            break
    return beta


# ---- distances and weights (eq. 6, 7, 28) ------------------------------------------------------------
def pairwise_distance(f: torch.Tensor, kind: DistanceKind = "mahalanobis", q: torch.Tensor | None = None,
                      mix: torch.Tensor | None = None, per_candidate: bool = False) -> torch.Tensor:
    """Feature distances ``(B, N, N)`` from node features ``f`` ``(B, N, K)`` (eq. 6 and Table 6).

    ``mahalanobis``: ``d_ij = (f_i - f_j)^T M (f_i - f_j)`` with ``M = sum_k mix_k Q_k Q_k^T``, ``q`` of
    shape ``(n_candidates, K, r)`` and ``mix`` ``(B, n_candidates)`` convex weights (one candidate: no mix);
    ``per_candidate=True`` returns every candidate's distances, ``(B, n_candidates, N, N)``. A grouped
    ``q`` ``(G, n_candidates, K, r)`` gives group ``g``'s factors to the ``g``-th of ``G`` equal slices of
    the batch (several denoisers' metrics on their own copies of the windows, in one product).
    ``euclidean``: ``M = I``; ``cosine``: ``1 - cos(f_i, f_j)``; ``manhattan``: ``sum |f_i - f_j|``.
    """
    if kind == "mahalanobis":
        if q is None:
            raise ValueError("mahalanobis distance needs the metric factors q")
        if q.ndim == 4:  # grouped: (G * B', N, K) features, one candidate set per group
            g = torch.einsum("gbnk,gckr->gbcnr", f.reshape(q.shape[0], -1, *f.shape[1:]), q).flatten(0, 1)
        else:  # project once per candidate: ||Q^T (f_i - f_j)||^2
            g = torch.einsum("bnk,ckr->bcnr", f, q)
        sq = (g * g).sum(-1)
        flat = g.flatten(0, 1)
        d = torch.baddbmm((sq.unsqueeze(-1) + sq.unsqueeze(-2)).flatten(0, 1), flat,
                          flat.transpose(-1, -2), alpha=-2)
        d = d.reshape(sq.shape + sq.shape[-1:]).clamp_min(0)  # (B, n_cand, N, N)
        if per_candidate:
            return d
        if mix is None:
            return d.sum(1)
        return torch.einsum("bc,bcij->bij", mix, d)
    if kind == "euclidean":
        sq = (f * f).sum(-1)
        return (sq.unsqueeze(-1) + sq.unsqueeze(-2) - 2 * f @ f.transpose(-1, -2)).clamp_min(0)
    if kind == "cosine":
        u = f / f.norm(dim=-1, keepdim=True).clamp_min(1e-8)
        return (1 - u @ u.transpose(-1, -2)).clamp_min(0)
    if kind == "manhattan":
        return (f.unsqueeze(-2) - f.unsqueeze(-3)).abs().sum(-1)
    raise ValueError(f"unknown distance {kind!r}; expected mahalanobis, euclidean, cosine or manhattan")


def normalise_distance(d: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scale distances to ``[0, 1]`` per sample by their largest value on the edge set (App. E.2)."""
    top = (d * mask).amax(dim=(-1, -2), keepdim=True).clamp_min(1e-8)
    return d / top


def signed_weights(distance: torch.Tensor, mask: torch.Tensor, kind: GraphKind = "balanced",
                   node_beta: torch.Tensor | None = None,
                   d_star: float = 0.5, mirror: bool = False) -> torch.Tensor:
    """Edge weights ``(B, N, N)`` on ``mask`` from distances.

    ``balanced`` (eq. 7): ``exp(-d)`` between equal polarities, ``exp(-d) - 1`` between opposite ones
    (``-exp(-d)`` with ``mirror``, eq. 8's closed form), so ``sign(w_ij) = beta_i beta_j`` wherever
    ``w_ij != 0`` and the graph is balanced (eq. 2, CHT).
    ``positive``: ``exp(-d)`` (App. C). ``unbalanced``: ``1 - 2 / (1 + exp(-(d - d*)))`` (eq. 28).
    """
    m = mask.to(distance.dtype)
    a = torch.exp(-distance)
    if kind == "balanced":
        if node_beta is None:
            raise ValueError("balanced weights need node polarities")
        sign = node_beta.unsqueeze(-1) * node_beta.unsqueeze(-2)
        w = a * sign if mirror else torch.where(sign > 0, a, a - 1.0)
    elif kind == "positive":
        w = a
    elif kind == "unbalanced":
        w = 1.0 - 2.0 * torch.sigmoid(distance - d_star)
    else:
        raise ValueError(f"unknown graph kind {kind!r}; expected balanced, positive or unbalanced")
    return w * m


def normalize_weights(w: torch.Tensor) -> torch.Tensor:
    """Symmetric normalisation of eq. 8: ``w_ij / sqrt(sum_l |w_il|) sqrt(sum_k |w_kj|)``."""
    deg = w.abs().sum(-1).clamp_min(1e-8).rsqrt()
    return deg.unsqueeze(-1) * w * deg.unsqueeze(-2)


def combinatorial_laplacian(w: torch.Tensor) -> torch.Tensor:
    """``L = diag(W 1) - W`` with the signed degree (Sec. 2.1; App. C: the Laplacian the paper filters
    with)."""
    return torch.diag_embed(w.sum(-1)) - w


def signed_laplacian(w: torch.Tensor) -> torch.Tensor:
    """``L^s = diag(|W| 1) - W`` (eq. 27, footnote 4), PSD for any signed ``W``; the unbalanced ablation's."""
    return torch.diag_embed(w.abs().sum(-1)) - w


def gershgorin_shift(lap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 9: add self-loops ``delta = max(-min_i (L_ii - sum_{j != i} |L_ij|), 0)``; returns ``(L + delta I,
    delta)``."""
    diag = torch.diagonal(lap, dim1=-2, dim2=-1)
    radius = lap.abs().sum(-1) - diag.abs()
    lam_lower = (diag - radius).amin(-1)
    delta = (-lam_lower).clamp_min(0)
    eye = torch.eye(lap.shape[-1], dtype=lap.dtype, device=lap.device)
    return lap + delta[..., None, None] * eye, delta


def similarity_transform(lap: torch.Tensor, node_beta: torch.Tensor) -> torch.Tensor:
    """Eq. 3: ``L^+ = T L^B T^{-1}`` with ``T = diag(beta)`` (``T^{-1} = T``)."""
    return node_beta.unsqueeze(-1) * lap * node_beta.unsqueeze(-2)


def balance_violations(w: torch.Tensor, tol: float = 0.0) -> int:
    """Number of graphs in a ``(B, N, N)`` batch that are NOT balanced, found without any polarity.

    Harary's theorem: a signed graph is balanced iff its nodes can be 2-coloured so that positive edges
    join equal colours and negative edges opposite ones, i.e. iff no cycle has an odd number of negative
    edges. We 2-colour each connected component by breadth-first search along edges with ``|w| > tol``
    and report a violation when an edge contradicts the colouring (the edge closes an odd-negative cycle).
    """
    bad = 0
    for g in w.detach().cpu():
        n = g.shape[0]
        sign = torch.sign(g) * (g.abs() > tol)
        colour = [0] * n
        ok = True
        for start in range(n):
            if colour[start] or not ok:
                continue
            colour[start] = 1
            queue = [start]
            while queue and ok:
                i = queue.pop()
                for j in torch.nonzero(sign[i]).flatten().tolist():
                    if j == i:
                        continue
                    want = colour[i] * int(sign[i, j])
                    if colour[j] == 0:
                        colour[j] = want
                        queue.append(j)
                    elif colour[j] != want:
                        ok = False
                        break
        bad += not ok
    return bad


# ---- filters (eq. 12-13, 24-25, 31) ------------------------------------------------------------------
def filter_response(eigvals: torch.Tensor, omega: torch.Tensor | float, response: Response = "sigmoid",
                    steepness: float = 10.0, n_nodes: int | None = None) -> torch.Tensor:
    """Frequency response ``g(lambda)`` on (ascending) eigenvalues ``(..., m)``.

    ``sigmoid`` (eq. 31): ``sigmoid(steepness * (omega - lambda))``. ``ideal`` (eq. 13): 1 for the
    ``xi`` smallest eigenvalues and 0 otherwise, ``xi = round(omega * m / n_nodes)`` (``n_nodes = m``
    for an exact eigendecomposition, so ``xi = omega``); not differentiable in ``omega``.
    """
    if response == "sigmoid":
        return torch.sigmoid(steepness * (omega - eigvals))
    if response == "ideal":
        m = eigvals.shape[-1]
        xi = round(float(omega) * m / (n_nodes or m))
        rank = torch.argsort(torch.argsort(eigvals, dim=-1), dim=-1)
        return (rank < xi).to(eigvals.dtype)
    raise ValueError(f"unknown filter response {response!r}; expected sigmoid or ideal")


def exact_filter(lap: torch.Tensor, y: torch.Tensor, omega: torch.Tensor | float,
                 response: Response = "sigmoid",
                 steepness: float = 10.0) -> torch.Tensor:
    """``V g(Lambda) V^T y`` (eq. 12) for ``lap`` ``(B, N, N)`` and signals ``y`` ``(B, N, D)``; ``omega``
    one cutoff, or one per window ``(B, 1)``.

    The sigmoid response is differentiated as a matrix function (:class:`_SigmoidFilter`), which stays
    finite where eigenvalues coincide; the ideal response (not differentiable in ``omega``) goes through
    ``torch.linalg.eigh``'s own backward.
    """
    if response == "sigmoid" and lap.dtype in (torch.float32, torch.float64):
        omega_t = omega if isinstance(omega, torch.Tensor) else torch.tensor(float(omega))
        return _SigmoidFilter.apply(lap, y, omega_t.to(lap.device, lap.dtype), float(steepness))
    evals, evecs = torch.linalg.eigh(lap)
    g = filter_response(evals, omega, response, steepness)
    return _apply_spectral(evecs, g, y)


def _apply_spectral(evecs: torch.Tensor, g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``V diag(g) V^T y``, associated for the fewer flops."""
    n, d = evecs.shape[-1], y.shape[-1]
    if d > n:  # g(L) once (2 N^3 flops), then one N x N product per signal: 2 N^3 + 2 N^2 D < 4 N^2 D
        return ((evecs * g.unsqueeze(-2)) @ evecs.transpose(-1, -2)) @ y
    return evecs @ (g.unsqueeze(-1) * (evecs.transpose(-1, -2) @ y))


class _SigmoidFilter(torch.autograd.Function):
    """``g(L) y`` with ``g(lambda) = sigmoid(a (omega - lambda))`` and the matrix-function derivative.

    Backward (Daleckii-Krein): with ``L = V diag(lambda) V^T``, ``A = (V^T G)(V^T y)^T`` for the output
    gradient ``G``, ``dL = V (F o sym(A)) V^T`` where ``F_ij = (g_i - g_j) / (lambda_i - lambda_j)`` and
    ``F_ii = g'(lambda_i)`` (also for eigenvalues closer than ``sqrt(eps)`` times the spectrum's scale,
    where the divided difference tends to the derivative); ``dy = g(L) G``;
    ``domega = sum_i a g_i (1 - g_i) A_ii``. ``eigh``'s own backward divides by ``lambda_i - lambda_j``
    and is infinite at a repeated eigenvalue, which a graph with equal weights has.
    """

    @staticmethod
    def forward(ctx, lap: torch.Tensor, y: torch.Tensor, omega: torch.Tensor,
                steepness: float) -> torch.Tensor:
        evals, evecs = torch.linalg.eigh(lap)
        g = torch.sigmoid(steepness * (omega - evals))
        ctx.save_for_backward(evals, evecs, g, y)
        ctx.steepness = steepness
        ctx.omega_shape = omega.shape
        return _apply_spectral(evecs, g, y)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: ANN205
        evals, evecs, g, y = ctx.saved_tensors
        a = ctx.steepness
        vt = evecs.transpose(-1, -2)
        grad_lap = grad_y = grad_omega = None
        if ctx.needs_input_grad[1]:
            grad_y = _apply_spectral(evecs, g, grad)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            proj = (vt @ grad) @ (vt @ y).transpose(-1, -2)  # A = (V^T G)(V^T y)^T, (B, N, N)
            g64, lam = g.double(), evals.double()
            slope = -a * g64 * (1 - g64)  # g'(lambda)
            if ctx.needs_input_grad[2]:  # summed to omega's shape: one cutoff, or one per window
                grad_omega = (-slope * torch.diagonal(proj, dim1=-2, dim2=-1).double())
                grad_omega = grad_omega.sum_to_size(ctx.omega_shape).to(g.dtype)
            if ctx.needs_input_grad[0]:
                gap = lam.unsqueeze(-1) - lam.unsqueeze(-2)
                scale = lam.abs().amax(-1, keepdim=True).unsqueeze(-1).clamp_min(1.0)
                close = gap.abs() <= torch.finfo(g.dtype).eps ** 0.5 * scale
                g_mid = (g64.unsqueeze(-1) + g64.unsqueeze(-2)) / 2  # g at nearly equal eigenvalues
                slope_mid = -a * g_mid * (1 - g_mid)
                diff = (g64.unsqueeze(-1) - g64.unsqueeze(-2)) / torch.where(close, 1.0, gap)
                loewner = torch.where(close, slope_mid, diff).to(g.dtype)
                sym = (proj + proj.transpose(-1, -2)) / 2
                grad_lap = evecs @ (loewner * sym) @ vt
        return grad_lap, grad_y, grad_omega, None


#: flops of a dense symmetric eigendecomposition with eigenvectors, per ``n^3`` (Golub & Van Loan,
#: *Matrix Computations*, 4th ed., Sec. 8.3: about ``9 n^3`` for the symmetric QR algorithm)
EIGH_FLOPS_PER_N3 = 9


def filter_flops(n_chans: int, n_chunks: int, n_samples: int, krylov_dim: int) -> dict[str, int]:
    """Multiply-add counts (2 flops each) of one window's filter on the product graph, forward pass.

    ``N = C H`` nodes, ``D = n_samples`` signals per node, ``m = krylov_dim``. The edge-stored Laplacian
    multiplies dense ``C x C`` spatial blocks (masked entries are zeros, not skipped), so one product costs
    ``2 (H C^2 + 2 (H - 1) C)`` flops per signal.

    * ``lanczos``: ``m`` products per signal, about ``10 N`` flops of recurrence (dot products, norms,
      axpys) per step, and one ``m x m`` eigendecomposition per signal (eq. 24-25, App. B):
      ``D (m (2 nnz + 10 N) + 9 m^3)``;
    * ``exact``: one ``N x N`` eigendecomposition per window (``9 N^3``), ``g(L) = V g(Lambda) V^T``
      (``2 N^3``) and ``g(L) Y`` (``2 N^2 D``) (eq. 12).

    Reading: App. B's ``O(m |E|)`` assumes ``|E| = O(N)``; with the full spatial graph ``|E|`` grows as
    ``N C``, so Lanczos costs ``O(m N C D)`` against the dense ``O(N^3 + N^2 D)``, and the dense filter is
    the cheaper of the two when ``N`` is small and ``D`` large (the paper's ``N = 210``, ``D = 1000``).
    """
    c, h, d, m = n_chans, n_chunks, n_samples, min(krylov_dim, n_chans * n_chunks)
    n = c * h
    nnz = h * c * c + 2 * (h - 1) * c
    lanczos = d * (m * (2 * nnz + 10 * n) + EIGH_FLOPS_PER_N3 * m ** 3)
    exact = (EIGH_FLOPS_PER_N3 + 2) * n ** 3 + 2 * n * n * d
    return {"lanczos": lanczos, "exact": exact}


#: how many dense-filter flops one Lanczos flop costs in time: the dense filter's work is a few large
#: LAPACK / GEMM calls, Lanczos's is ``m`` small products per signal, memory-bound vector updates, one tiny
#: LAPACK call per signal and autograd through the recurrence. Calibrated on the filter table of
#: ``benchmarks/results/signed_graph.json`` (CPU, forward + backward), where the measured crossover lies
#: well beyond the flop crossover.
LANCZOS_FLOP_WEIGHT = 16


def choose_filter(n_chans: int, n_chunks: int,
                  n_samples: int, krylov_dim: int) -> Literal["lanczos", "exact"]:
    """The filter expected to be faster: Lanczos when ``LANCZOS_FLOP_WEIGHT x`` its :func:`filter_flops`
    count is below the dense filter's, else ``"exact"``."""
    flops = filter_flops(n_chans, n_chunks, n_samples, krylov_dim)
    return "lanczos" if LANCZOS_FLOP_WEIGHT * flops["lanczos"] < flops["exact"] else "exact"


def lanczos_filter(lap: torch.Tensor | SymmetricOperator, y: torch.Tensor, omega: torch.Tensor | float,
                   krylov_dim: int, response: Response = "sigmoid", steepness: float = 10.0,
                   reorth_passes: int = 1) -> torch.Tensor:
    """Lanczos approximation of ``g(L) y`` (App. B, eq. 24-25), one Krylov space per column of ``y``.

    ``lap`` is a ``(B, N, N)`` symmetric matrix or any operator with ``matvec`` and ``inf_norm`` (e.g.
    :class:`~biosig_lightning.features.product_graph.ProductLaplacian`, whose products cost ``O(|E|)``);
    ``y`` ``(B, N, D)``; returns ``(B, N, D)``. All ``B x D`` Krylov spaces advance together, one operator
    product per step, and their ``m x m`` tridiagonal eigenproblems are solved as one batch.
    ``reorth_passes`` Gram-Schmidt sweeps against the whole basis after each step (0 = the plain
    three-term recurrence). Reading: App. B does not say; full re-orthogonalisation keeps the basis
    orthonormal in float32 but costs ``O(m^2 N D)`` time and, under autograd, ``O(m^2 N D)`` memory.
    Without it the basis loses orthogonality once Ritz values converge, yet eq. 25 stays as accurate as
    the best polynomial approximation of ``g`` of degree about ``m`` (Musco, Musco & Sidford, "Stability of
    the Lanczos method for matrix function approximation", SODA 2018), which is what the denoiser uses.
    A Krylov space that closes early (an invariant subspace, e.g. ``krylov_dim >= N``) is handled exactly:
    the remaining basis vectors are zero and their rows of ``H_m`` are decoupled from ``c_1`` (they get
    distinct placeholder eigenvalues above the spectrum so the eigendecomposition stays differentiable).
    """
    b, n, d = y.shape
    m = min(int(krylov_dim), n)
    if m < 1:
        raise ValueError(f"krylov_dim must be >= 1, got {krylov_dim}")
    if isinstance(lap, torch.Tensor):
        dense = lap
        matvec: Callable[[torch.Tensor], torch.Tensor] = dense.__matmul__
        scale = dense.abs().sum(-1).amax(-1)
    else:
        matvec = lap.matvec
        scale = lap.inf_norm()
    scale = scale.clamp_min(1e-12)[:, None]  # ||L||_inf bounds the spectrum, (B, 1)
    norm = y.norm(dim=1, keepdim=True)  # (B, 1, D)
    v = y * (norm > 0) / norm.clamp_min(torch.finfo(y.dtype).tiny ** 0.5)
    basis: list[torch.Tensor] = []
    alphas: list[torch.Tensor] = []
    betas: list[torch.Tensor] = []
    alive = (norm.squeeze(1) > 0)  # (B, D)
    prev: torch.Tensor | None = None
    beta_prev = torch.zeros(b, d, dtype=y.dtype, device=y.device)
    for k in range(m):
        basis.append(v)
        w = matvec(v)
        alpha = torch.linalg.vecdot(v, w, dim=1)
        # a closed Krylov space leaves zero basis vectors: give their rows distinct eigenvalues above the
        # spectrum (||L||_inf bounds it), decoupled from c_1, so eigh stays differentiable and "ideal" keeps
        # them last
        alphas.append(torch.where(alive, alpha, 2.0 * scale + 1.0 + k))
        if k == m - 1:
            break
        w = torch.addcmul(w, alpha.unsqueeze(1), v, value=-1.0)  # three-term recurrence, fused
        if prev is not None:
            w = w.addcmul_(beta_prev.unsqueeze(1), prev, value=-1.0)
        for _ in range(reorth_passes):  # Gram-Schmidt against the whole basis (full re-orthogonalisation)
            for u_j in basis:
                w = w - torch.linalg.vecdot(u_j, w, dim=1).unsqueeze(1) * u_j
        beta = torch.linalg.vector_norm(w, dim=1)
        alive = alive & (beta > 1e-6 * scale)
        beta = beta * alive
        betas.append(beta)
        prev, beta_prev = v, beta
        v = w * (alive / beta.clamp_min(1e-30)).unsqueeze(1)  # zero once the Krylov space has closed
    coef = _tridiagonal_response(torch.stack(alphas, dim=-1), torch.stack(betas, dim=-1) if betas else None,
                                 omega, response, steepness, n)
    out = basis[0] * (norm * coef[:, None, :, 0])
    for k in range(1, len(basis)):
        out = out.addcmul_(basis[k], norm * coef[:, None, :, k])
    return out


def _tridiagonal_response(diag: torch.Tensor, off: torch.Tensor | None, omega: torch.Tensor | float,
                          response: Response, steepness: float, n_nodes: int) -> torch.Tensor:
    """``Z g(Theta) Z^T c_1`` for the tridiagonal ``H_m`` of eq. 24 given by ``diag`` ``(..., m)`` and ``off``
    ``(..., m-1)``.

    All tridiagonals are decomposed in one batched call, in float64: LAPACK is no slower there on small
    matrices, and the ghost copies of converged Ritz values that the plain recurrence produces stay
    separable.
    """
    h = torch.diag_embed(diag.double())
    if off is not None:
        off64 = off.double()
        h = h + torch.diag_embed(off64, offset=1) + torch.diag_embed(off64, offset=-1)
    theta, z = _batched_eigh(h)  # (..., m), (..., m, m)
    omega64 = omega.double() if isinstance(omega, torch.Tensor) else omega
    g = filter_response(theta, omega64, response, steepness, n_nodes=n_nodes)
    return (z * (g * z[..., 0, :]).unsqueeze(-2)).sum(-1).to(diag.dtype)


#: the most matrices one batched cuSOLVER eigendecomposition is given (larger batches of small matrices
#: failed there with CUSOLVER_STATUS_INTERNAL_ERROR); LAPACK on the CPU takes any batch
CUDA_EIGH_BATCH = 16384


def _batched_eigh(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` of a ``(..., m, m)`` batch; on CUDA in slices of :data:`CUDA_EIGH_BATCH`
    matrices."""
    flat = h.reshape(-1, *h.shape[-2:])
    if not h.is_cuda or flat.shape[0] <= CUDA_EIGH_BATCH:
        return torch.linalg.eigh(h)
    parts = [torch.linalg.eigh(chunk) for chunk in flat.split(CUDA_EIGH_BATCH)]
    theta = torch.cat([p[0] for p in parts]).reshape(*h.shape[:-1])
    z = torch.cat([p[1] for p in parts]).reshape(h.shape)
    return theta, z
