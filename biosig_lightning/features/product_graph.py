"""The product graph of Fig. 1c stored by its edges, so graph learning and filtering cost O(|E|) (Yao et al.).

The graph of :mod:`biosig_lightning.features.signed_graph` has ``N = H x C`` nodes (chunk ``h`` of channel
``c`` is node ``h * C + c``) and two kinds of edges: the spatial graph inside each chunk (all channel pairs,
or the line graph of a bipolar montage, App. E.1) and one temporal edge between consecutive chunks of a
channel. Nothing couples chunk ``h`` to chunk ``h + 2`` or channel ``c`` of chunk ``h`` to channel
``c' != c`` of chunk ``h + 1``, so every per-edge quantity lives in two small tensors:

* ``spatial``: ``(B, H, C, C)``, the entries of the ``H`` spatial blocks (zero off the spatial graph);
* ``temporal``: ``(B, H - 1, C)``, the entry between node ``(h, c)`` and node ``(h + 1, c)``.

That is ``H C^2 + (H - 1) C`` numbers per window instead of ``N^2 = H^2 C^2``, and a product with the
Laplacian is ``H`` batched ``C x C`` matrix products plus two shifts along the chunk axis (App. B: the
Lanczos basis costs ``O(m |E|)``). The functions here mirror the dense ones of
:mod:`~biosig_lightning.features.signed_graph` edge for edge (eq. 6-9, 3, 5); the tests check that
:meth:`ProductLaplacian.dense` equals the dense pipeline's Laplacian.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from biosig_lightning.features.signed_graph import DistanceKind, GraphKind, greedy_polarity

__all__ = [
    "ProductLaplacian",
    "edge_distances",
    "edge_gaps",
    "edge_laplacian",
    "edge_polarity_gain",
    "edge_weights",
    "normalise_edge_distances",
    "normalize_edge_weights",
    "refine_polarity_edges",
]


def _pad_chunks(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Pad a ``(B, H', C, ...)`` tensor with zero chunks along dim 1."""
    pad = [0, 0] * (t.dim() - 2) + [before, after]
    return F.pad(t, pad)


def _temporal_row_sum(t: torch.Tensor) -> torch.Tensor:
    """``(B, H - 1, C)`` temporal entries -> ``(B, H, C)`` sum over each node's temporal neighbours."""
    return _pad_chunks(t, 0, 1) + _pad_chunks(t, 1, 0)


@dataclass(frozen=True)
class ProductLaplacian:
    """A symmetric operator on the product graph given by its diagonal and its edges.

    ``diag`` ``(B, H, C)``; ``spatial`` ``(B, H, C, C)`` off-diagonal entries inside each chunk (zero
    diagonal); ``temporal`` ``(B, H - 1, C)`` entries between chunk ``h`` and ``h + 1`` of a channel.
    """

    diag: torch.Tensor
    spatial: torch.Tensor
    temporal: torch.Tensor

    @property
    def n_nodes(self) -> int:
        return self.diag.shape[1] * self.diag.shape[2]

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """``L v`` for node signals ``v`` ``(B, N, D)``: one ``C x C`` product per chunk and two chunk
        shifts."""
        b, n, d = v.shape
        h, c = self.diag.shape[1:]
        v4 = v.reshape(b, h, c, d)
        out = (self.spatial + torch.diag_embed(self.diag)) @ v4
        if h > 1:  # in place on the product's own output (the product's backward does not need it)
            t = self.temporal.unsqueeze(-1)
            out[:, :-1].addcmul_(t, v4[:, 1:])
            out[:, 1:].addcmul_(t, v4[:, :-1])
        return out.reshape(b, n, d)

    def inf_norm(self) -> torch.Tensor:
        """``||L||_inf`` per window, ``(B,)`` (bounds every eigenvalue)."""
        rows = self.diag.abs() + self.spatial.abs().sum(-1) + _temporal_row_sum(self.temporal.abs())
        return rows.flatten(1).amax(-1)

    def dense(self) -> torch.Tensor:
        """The ``(B, N, N)`` matrix (for the dense eigendecomposition filter of eq. 12 and for checks)."""
        b, h, c = self.diag.shape
        eye_h = torch.eye(h, dtype=self.diag.dtype, device=self.diag.device)
        eye_c = torch.eye(c, dtype=self.diag.dtype, device=self.diag.device)
        blocks = self.spatial + torch.diag_embed(self.diag)  # (B, H, C, C)
        full = torch.einsum("bhij,hg->bhigj", blocks, eye_h)
        if h > 1:
            up = torch.diag_embed(torch.ones(h - 1, dtype=self.diag.dtype, device=self.diag.device), 1)
            temporal = torch.einsum("bhc,hg,cd->bhcgd", _pad_chunks(self.temporal, 0, 1), up, eye_c)
            full = full + temporal + temporal.permute(0, 3, 4, 1, 2)
        return full.reshape(b, h * c, h * c)

    def gershgorin_shift(self) -> tuple[ProductLaplacian, torch.Tensor]:
        """Eq. 9 on the edges: ``delta = max(-min_i (L_ii - sum_{j != i} |L_ij|), 0)``; returns ``(L + delta
        I, delta)``."""
        radius = self.spatial.abs().sum(-1) + _temporal_row_sum(self.temporal.abs())
        delta = (-(self.diag - radius).flatten(1).amin(-1)).clamp_min(0)
        return replace(self, diag=self.diag + delta[:, None, None]), delta

    def similarity_transform(self, beta: torch.Tensor) -> ProductLaplacian:
        """Eq. 3, ``T L T`` with ``T = diag(beta)`` for per-channel polarities ``beta`` ``(B or 1, C)``.

        A temporal edge joins two chunks of one channel (``beta_c^2 = 1``) and the diagonal keeps its sign,
        so only the spatial blocks change.
        """
        sign = (beta.unsqueeze(-1) * beta.unsqueeze(-2)).unsqueeze(1)  # (B, 1, C, C)
        return replace(self, spatial=self.spatial * sign)


def edge_gaps(nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sum_q (x_i -+ x_j)^2`` over a window's ``D`` graph signals on the edges (cf. ``signal_gaps``).

    ``nodes`` ``(B, H, C, D)``; returns ``(diff_spatial, sum_spatial)`` ``(B, H, C, C)`` and
    ``diff_temporal`` ``(B, H - 1, C)``.
    """
    sq = nodes.square().sum(-1)
    gram = nodes @ nodes.transpose(-1, -2)
    base = sq.unsqueeze(-1) + sq.unsqueeze(-2)
    diff_t = (nodes[:, 1:] - nodes[:, :-1]).square().sum(-1)
    return (base - 2 * gram).clamp_min(0), (base + 2 * gram).clamp_min(0), diff_t


def edge_distances(f: torch.Tensor, kind: DistanceKind = "mahalanobis", q: torch.Tensor | None = None,
                   mix: torch.Tensor | None = None,
                   per_candidate: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Feature distances on the edges (eq. 6, Table 6) from node features ``f`` ``(B, H, C, K)``.

    Same metrics and arguments as ``pairwise_distance``; returns ``(spatial (B, H, C, C), temporal (B, H-1,
    C))``.
    ``per_candidate=True`` (Mahalanobis) returns every candidate ``Q_k``'s distances instead, ``(B, n, H, C,
    C)``
    and ``(B, n, H-1, C)``, all computed at once.
    """
    if kind in ("mahalanobis", "euclidean"):
        if kind == "mahalanobis":
            if q is None:
                raise ValueError("mahalanobis distance needs the metric factors q")
            g = torch.einsum("bhck,nkr->bnhcr", f, q)  # ||Q^T (f_i - f_j)||^2 per candidate
        else:
            g = f.unsqueeze(1)
        sq = g.square().sum(-1)
        flat = g.flatten(0, 2)  # (B n H, C, r)
        ds = torch.baddbmm((sq.unsqueeze(-1) + sq.unsqueeze(-2)).flatten(0, 2), flat,
                           flat.transpose(-1, -2), alpha=-2)
        ds = ds.reshape(sq.shape + sq.shape[-1:]).clamp_min(0)
        dt = (g[:, :, 1:] - g[:, :, :-1]).square().sum(-1)
        if per_candidate and kind == "mahalanobis":
            return ds, dt
        if kind == "euclidean" or mix is None:
            return ds.sum(1), dt.sum(1)
        return torch.einsum("bn,bnhij->bhij", mix, ds), torch.einsum("bn,bnhc->bhc", mix, dt)
    if kind == "cosine":
        u = f / f.norm(dim=-1, keepdim=True).clamp_min(1e-8)
        return (1 - u @ u.transpose(-1, -2)).clamp_min(0), (1 - (u[:, 1:] * u[:, :-1]).sum(-1)).clamp_min(0)
    if kind == "manhattan":
        return ((f.unsqueeze(-2) - f.unsqueeze(-3)).abs().sum(-1), (f[:, 1:] - f[:, :-1]).abs().sum(-1))
    raise ValueError(f"unknown distance {kind!r}; expected mahalanobis, euclidean, cosine or manhattan")


def normalise_edge_distances(ds: torch.Tensor, dt: torch.Tensor, spatial_mask: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale to ``[0, 1]`` per window by the largest distance on the edge set (App. E.2).

    ``ds`` ``(..., H, C, C)`` and ``dt`` ``(..., H - 1, C)``: any leading dimensions (windows, candidates)."""
    top = (ds * spatial_mask).flatten(-3).amax(-1)
    if dt.shape[-2]:
        top = torch.maximum(top, dt.flatten(-2).amax(-1))
    top = top.clamp_min(1e-8).unsqueeze(-1)
    return ds / top.unsqueeze(-1).unsqueeze(-1), dt / top.unsqueeze(-1)


def edge_weights(ds: torch.Tensor, dt: torch.Tensor, spatial_mask: torch.Tensor, kind: GraphKind = "balanced",
                 beta: torch.Tensor | None = None, d_star: float = 0.5, mirror: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Edge weights (eq. 7, App. C, eq. 28) on the spatial and temporal edges.

    ``beta`` ``(B or 1, C)`` are the channel polarities (balanced graph); a temporal edge joins equal
    polarities, so it gets ``exp(-d)``. ``mirror`` gives opposite polarities ``-exp(-d)`` (eq. 8's closed
    form).
    """
    m = spatial_mask.to(ds.dtype)
    if kind == "balanced":
        if beta is None:
            raise ValueError("balanced weights need node polarities")
        a = torch.exp(-ds)
        sign = (beta.unsqueeze(-1) * beta.unsqueeze(-2)).unsqueeze(1)
        ws = a * sign if mirror else torch.where(sign > 0, a, a - 1.0)
        wt = torch.exp(-dt)
    elif kind == "positive":
        ws, wt = torch.exp(-ds), torch.exp(-dt)
    elif kind == "unbalanced":
        ws, wt = 1.0 - 2.0 * torch.sigmoid(ds - d_star), 1.0 - 2.0 * torch.sigmoid(dt - d_star)
    else:
        raise ValueError(f"unknown graph kind {kind!r}; expected balanced, positive or unbalanced")
    return ws * m, wt


def normalize_edge_weights(ws: torch.Tensor, wt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 8 on the edges: ``w_ij / sqrt(sum_l |w_il|) sqrt(sum_k |w_kj|)``."""
    r = (ws.abs().sum(-1) + _temporal_row_sum(wt.abs())).clamp_min(1e-8).rsqrt()  # (B, H, C)
    return r.unsqueeze(-1) * ws * r.unsqueeze(-2), r[:, :-1] * wt * r[:, 1:]


def edge_laplacian(ws: torch.Tensor, wt: torch.Tensor, signed: bool = False) -> ProductLaplacian:
    """``L = D - W`` with the signed degree (App. C), or ``L^s = D^s - W`` (eq. 27) with ``signed=True``."""
    if signed:
        deg = ws.abs().sum(-1) + _temporal_row_sum(wt.abs())
    else:
        deg = ws.sum(-1) + _temporal_row_sum(wt)
    return ProductLaplacian(deg, -ws, -wt)


def edge_polarity_gain(ds: torch.Tensor, diff_gap: torch.Tensor, sum_gap: torch.Tensor,
                       spatial_mask: torch.Tensor) -> torch.Tensor:
    """``(B, C, C)`` GLR change per channel pair of eq. 5 (see ``refine_polarity``), from the spatial edges.

    Temporal edges join a channel to itself, so they only touch the diagonal, which a flip never changes.
    """
    m = spatial_mask.to(ds.dtype)
    a = torch.exp(-ds)
    return (((1.0 - a) * sum_gap - a * diff_gap) * m).sum(1)


def refine_polarity_edges(beta: torch.Tensor, ds: torch.Tensor, diff_gap: torch.Tensor, sum_gap: torch.Tensor,
                          spatial_mask: torch.Tensor, max_sweeps: int | None = None,
                          pool: bool = False) -> torch.Tensor:
    """``refine_polarity`` (eq. 5) from the spatial edges' distances and signal gaps ``(B, H, C, C)``."""
    gain = edge_polarity_gain(ds, diff_gap, sum_gap, spatial_mask)
    return greedy_polarity(beta, gain, max_sweeps, pool)
