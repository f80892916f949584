"""Band partitions and the index tables that let FBAM / TSAM work on all bands at once.

FBAM (BioFormer, Sec. 4.2 and Algorithm 1) splits the non-DC spectrum of every token
sequence into ``M`` contiguous bands; TSAM (Appendix B.2) splits the token axis itself
into ``M`` contiguous segments. Both then need, per band: the mean / std / max / energy /
argmax of a quantity over the band's bins, and a short convolution along the axis that
never crosses a band edge. :class:`BandLayout` precomputes integer index tables for this,
so the modules do everything with masked sums and one matmul instead of Python loops over
bands, branches or samples.

A layout covers several *segments* laid end to end on one axis (the three pyramid
branches of BioFormer: their non-DC bins are concatenated, 64 + 32 + 16 = 112 bins for
``T = 256``). Band ``m`` of segment ``s`` has the flat index ``s * M + m``.

Edges are given per segment as bin indices ``0 = e_0 <= e_1 <= ... <= e_M = n_bins``;
band ``m`` holds bins ``[e_m, e_{m+1})``. A band may be empty (e.g. 6 bands over 4 bins,
or a custom partition with fewer bands than ``M`` on a short branch); empty bands are
flagged in :attr:`BandLayout.valid` and masked by the modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

__all__ = ["BandLayout", "resolve_edges", "uniform_edges"]

EdgesSpec = Sequence[float] | Sequence[Sequence[int]] | None


def uniform_edges(n_bins: int, n_bands: int) -> list[int]:
    """Uniform band edges ``floor(i * n_bins / n_bands)``, ``i = 0..n_bands``.

    This is the paper's default ("6 uniformly spaced frequency bands", Appendix C.3);
    truncation matches the authors' integer cast, e.g. 64 bins -> [0, 10, 21, 32, 42, 53, 64].
    """
    if n_bins < 0 or n_bands < 1:
        raise ValueError(f"uniform_edges needs n_bins >= 0 and n_bands >= 1, got {n_bins}, {n_bands}")
    return [(i * n_bins) // n_bands for i in range(n_bands + 1)]


def _check_edges(edges: Sequence[int], n_bins: int, where: str) -> list[int]:
    out = [int(e) for e in edges]
    if any(float(e) != float(o) for e, o in zip(edges, out, strict=True)):
        raise ValueError(f"{where}: band edges must be integers (bin indices), got {list(edges)}")
    if len(out) < 2:
        raise ValueError(f"{where}: need at least two edges (one band), got {out}")
    if out[0] != 0 or out[-1] != n_bins:
        raise ValueError(f"{where}: edges must start at 0 and end at the number of bins {n_bins}, got {out}")
    if any(b < a for a, b in zip(out[:-1], out[1:], strict=True)):
        raise ValueError(f"{where}: edges must be non-decreasing, got {out}")
    return out


def resolve_edges(spec: EdgesSpec, n_bins: Sequence[int], n_bands: int) -> list[list[int]]:
    """Turn a user edge specification into integer edges for every segment.

    ``spec`` is one of:

    * ``None``: uniform edges with ``n_bands`` bands on every segment (paper default);
    * a flat list of ``n_bands + 1`` fractions in ``[0, 1]`` from 0 to 1: the same
      relative partition on every segment, edge ``floor(f * n_bins)``;
    * a list with one list of integer bin edges per segment (Appendix G.3, Variant 1,
      e.g. APAVA ``[[0,5,12,20,32,48,64], [0,5,12,20,32], [0,4,8,12,16]]``). A segment may
      have fewer than ``n_bands`` bands; it then uses the first band tokens only.
    """
    if spec is None:
        return [uniform_edges(n, n_bands) for n in n_bins]
    spec = cast("list[Any]", list(spec))  # fractions or per-segment lists, told apart below
    if len(spec) == 0:
        raise ValueError("band_edges must not be empty (use None for uniform bands)")
    nested = [isinstance(e, (list, tuple)) for e in spec]
    if all(nested):
        if len(spec) != len(n_bins):
            raise ValueError(
                f"band_edges has {len(spec)} per-segment edge lists but there are {len(n_bins)} segments "
                f"with {list(n_bins)} bins"
            )
        out = [_check_edges(e, n, f"band_edges[{i}]") for i,
               (e, n) in enumerate(zip(spec, n_bins, strict=True))]
        too_many = [i for i, e in enumerate(out) if len(e) - 1 > n_bands]
        if too_many:
            raise ValueError(
                f"band_edges[{too_many[0]}] defines {len(out[too_many[0]]) - 1} bands, more than "
                f"n_bands={n_bands}"
            )
        return out
    if any(nested):
        raise ValueError("band_edges must be either a flat list of fractions or a list of per-segment lists")
    fractions = [float(f) for f in spec]
    if len(fractions) != n_bands + 1:
        raise ValueError(f"band_edges as fractions needs n_bands + 1 = {n_bands + 1} values, got "
                         f"{len(fractions)}")
    if fractions[0] != 0.0 or fractions[-1] != 1.0 or any(b <= a for a,
                                                          b in zip(fractions[:-1],
                                                                   fractions[1:], strict=True)):
        raise ValueError(f"band_edges fractions must increase strictly from 0.0 to 1.0, got {fractions}")
    # The small tolerance keeps exact fractions such as 0.5 * 64 from truncating to 31.
    return [[int(f * n + 1e-9) for f in fractions] for n in n_bins]


class BandLayout(nn.Module):
    """Index tables for ``S`` segments of ``n_bins[s]`` bins, each cut into at most ``M`` bands.

    Buffers (all non-persistent: they are rebuilt from the constructor arguments):

    * ``band_bins`` ``(S*M, W)`` long: the bins of each band, left-aligned and padded
      with 0 up to the widest band ``W``;
    * ``band_mask`` ``(S*M, W)`` bool: which entries of ``band_bins`` are real;
    * ``band_count`` ``(S*M,)`` float: bins per band, at least 1 (empty bands are masked);
    * ``valid`` ``(S, M)`` bool: non-empty bands;
    * ``membership`` ``(S*M, K)`` float: row ``b`` is 1 on the bins of band ``b`` (zero row
      for an empty band), so per-band sums of all channels are one matmul (means divide by
      ``band_count``: both exact in any dtype, so a float64 copy computes exact float64 means);
    * ``bin_band`` ``(K,)`` long: the flat band index of each of the ``K`` bins;
    * ``bin_index`` ``(K,)`` long: ``0..K-1``;
    * ``neighbours`` ``(K, r)`` long: for a kernel of odd size ``r``, the bins read by tap
      ``t`` at bin ``k`` (offset ``t - r // 2``). Outside its band a tap is reflected at
      the band edge ("reflect" padding, which the authors' code uses) and, for bands too
      narrow to reflect into, clamped to the edge ("replicate"); so the convolution of
      Eq. 6 never mixes two bands, and a one-bin band is left unchanged by any kernel
      that sums to one;
    * ``tap_offset`` ``(K, r, 2h + 1)`` float: 1 where tap ``t`` at bin ``k`` reads bin ``k + o``,
      ``o = -h..h`` (``h`` the largest such offset, ``r // 2``).
    """

    band_bins: torch.Tensor  # buffers (see __init__)
    band_mask: torch.Tensor
    band_count: torch.Tensor
    valid: torch.Tensor
    bin_band: torch.Tensor
    neighbours: torch.Tensor
    membership: torch.Tensor
    bin_index: torch.Tensor
    tap_offset: torch.Tensor

    def __init__(self, n_bins: Sequence[int], edges: Sequence[Sequence[int]],
                 n_bands: int, kernel_size: int) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}")
        if len(edges) != len(n_bins):
            raise ValueError(f"need one edge list per segment: {len(edges)} lists for {len(n_bins)} segments")
        self.n_bins = [int(n) for n in n_bins]
        self.edges = [[int(e) for e in seg] for seg in edges]
        self.n_segments = len(self.n_bins)
        self.n_bands = int(n_bands)
        self.kernel_size = int(kernel_size)
        self.total_bins = sum(self.n_bins)

        n_flat = self.n_segments * self.n_bands
        width = max([1] + [b - a for seg in self.edges for a, b in zip(seg[:-1], seg[1:], strict=True)])
        band_bins = torch.zeros(n_flat, width, dtype=torch.long)
        band_mask = torch.zeros(n_flat, width, dtype=torch.bool)
        valid = torch.zeros(self.n_segments, self.n_bands, dtype=torch.bool)
        bin_band = torch.zeros(self.total_bins, dtype=torch.long)
        neighbours = torch.zeros(self.total_bins, self.kernel_size, dtype=torch.long)
        half = self.kernel_size // 2
        offset = 0
        for s, seg in enumerate(self.edges):
            for m, (lo, hi) in enumerate(zip(seg[:-1], seg[1:], strict=True)):
                flat = s * self.n_bands + m
                if hi == lo:
                    continue
                valid[s, m] = True
                bins = torch.arange(offset + lo, offset + hi)
                band_bins[flat, : hi - lo] = bins
                band_mask[flat, : hi - lo] = True
                bin_band[bins] = flat
                for t in range(self.kernel_size):
                    j = torch.arange(lo, hi) + (t - half)
                    j = torch.where(j < lo, 2 * lo - j, j)
                    j = torch.where(j > hi - 1, 2 * (hi - 1) - j, j)
                    neighbours[bins, t] = offset + j.clamp(lo, hi - 1)
            offset += self.n_bins[s]
        self.register_buffer("band_bins", band_bins, persistent=False)
        self.register_buffer("band_mask", band_mask, persistent=False)
        self.register_buffer("band_count", band_mask.sum(1).clamp(min=1).to(torch.float32), persistent=False)
        self.register_buffer("valid", valid, persistent=False)
        self.register_buffer("bin_band", bin_band, persistent=False)
        self.register_buffer("neighbours", neighbours, persistent=False)
        membership = torch.zeros(n_flat, self.total_bins)
        membership[
            torch.arange(n_flat).unsqueeze(1).expand_as(band_bins)[band_mask], band_bins[band_mask]
        ] = 1.0
        self.register_buffer("membership", membership, persistent=False)
        self.register_buffer("bin_index", torch.arange(self.total_bins), persistent=False)
        offsets = neighbours - torch.arange(self.total_bins).unsqueeze(1)  # (K, r)
        reach = int(offsets.abs().max()) if offsets.numel() else 0
        tap_offset = offsets.unsqueeze(-1) == torch.arange(-reach, reach + 1)  # (K, r, 2 reach + 1)
        self.register_buffer("tap_offset", tap_offset.to(torch.float32), persistent=False)

    def to_bins(self, per_band: torch.Tensor) -> torch.Tensor:
        """``(B, S, M)`` per-band values -> ``(B, K)`` per-bin values (extra trailing dims are kept).

        Each bin takes its band's value, selected by the band-membership matrix and summed over the
        bands (one term is not zero), so that the gradient is the same selection summed over each
        band's bins: no scatter, which deterministic mode would run unfused, one launch each.
        """
        flat = per_band.flatten(1, 2).unsqueeze(2)  # (B, S*M, 1, ...)
        return (flat * self.membership.view(*self.membership.shape, *([1] * (flat.ndim - 3)))).sum(1)

    def _band_sums(self, values: torch.Tensor) -> torch.Tensor:
        """``(..., K)`` -> per-band sums ``(..., S*M)``: one matmul with the membership matrix, in the
        membership's dtype (float32 under autocast: the variance below is a difference of sums)."""
        with torch.autocast(values.device.type, enabled=False):
            return torch.matmul(values.to(self.membership.dtype), self.membership.t())

    def band_statistics(
        self, values: torch.Tensor, eps: float, signed: torch.Tensor | None = None, *, log_guard: bool = True
    ) -> torch.Tensor:
        """Log band descriptors ``(B, S, M, 5)`` of non-negative channel-first ``values`` ``(B, D, K)``.

        Eq. 2, in the authors' order ``[log mean, log std, log max, log energy, argmax]``;
        every statistic is taken per channel over the band's bins and then averaged over the
        ``D`` channels before the log. The std is the population std over the band, taken
        of ``signed`` when given (TSAM: variability of the signed signal) and of ``values``
        otherwise (FBAM: of the magnitude spectrum); ``sqrt(var + eps)`` keeps its gradient
        finite for one-bin bands. The argmax is the 0-based bin index inside the band, as
        the authors compute it (not differentiable, not normalised). Empty bands get zeros.

        ``log_guard=False`` drops the ``eps`` inside the logs of the mean and the max, as the
        authors' code does (its magnitudes already carry ``+ eps``, FBAM's ``eps_mode="shift"``);
        the std and energy logs keep theirs in both cases, as there.

        All sums are one matmul with the band-membership matrix, of the spread values less their
        band's first value (a constant: no gradient), their squares, and ``values`` at each band's
        argmax (found without autograd on the padded band rows). With that shift ``c`` the variance
        ``E[(v - c)^2] - E[v - c]^2`` keeps float32's precision (``c`` lies inside the band's range),
        and the mean and energy of ``values`` are ``E[v - c] + c`` and
        ``sum (v - c)^2 + c (2 sum (v - c) + n c)``.
        """
        batch, channels, _ = values.shape
        spread = values if signed is None else signed
        with torch.no_grad():
            rows = values[..., self.band_bins].masked_fill(~self.band_mask, -1.0)  # (B, D, SM, W)
            where = rows.argmax(-1)  # values >= 0, so the -1 padding never wins; ties -> first bin
            peak_bin = self.band_bins.expand(batch, channels, -1, -1).gather(3, where.unsqueeze(-1))
            at_peak = peak_bin.squeeze(-1)[..., self.bin_band] == self.bin_index  # (B, D, K)
            first = spread[..., self.band_bins[:, 0]] * self.band_mask[:, 0]  # (B, D, SM); 0 if empty
        shifted = spread - first[..., self.bin_band]
        parts = [shifted, shifted.square(), values * at_peak]
        if signed is not None:
            parts += [values, values.square()]
        sums = self._band_sums(torch.stack(parts))  # (parts, B, D, SM)
        count = self.band_count
        shifted_mean = sums[0] / count
        var = (sums[1] / count - shifted_mean.square()).clamp_min(0.0)
        peak = sums[2]
        if signed is None:
            first = first.to(sums.dtype)
            mean, energy = shifted_mean + first, sums[1] + first * (2.0 * sums[0] + count * first)
        else:
            mean, energy = sums[3] / count, sums[4]
        # An empty band (custom edges beyond a branch's bins) has mean and peak 0: it keeps the
        # eps guard even in the authors' mode, where log(0) would turn every logit into NaN.
        guard = eps if log_guard else eps * (~self.band_mask.any(-1)).to(mean.dtype)
        stats = torch.stack(
            [
                torch.log(mean.mean(1) + guard),
                torch.log(torch.sqrt(var + eps).mean(1) + eps),
                torch.log(peak.mean(1) + guard),
                torch.log(energy.mean(1) + eps),
                where.to(mean.dtype).mean(1),
            ],
            dim=-1,
        )  # (B, SM, 5)
        stats = stats.view(batch, self.n_segments, self.n_bands, 5)
        return stats.masked_fill(~self.valid.unsqueeze(-1), 0.0)

    def convolve(self, values: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        """Band-limited convolution of channel-first ``values`` ``(B, D, K)`` with per-band kernels.

        ``kernel`` is ``(B or 1, S, M, r)``: one ``r``-tap kernel per sample (or shared by
        the batch), band and segment, the same for all ``D`` channels (Eq. 6, ``A_m * w_m``).
        Tap ``t`` at bin ``k`` reads bin ``neighbours[k, t] = k + o`` with ``|o| <= r // 2``, so the
        taps are first summed into one weight per offset ``o`` and the output is
        ``sum_o weight_o(k) values(k + o)``, a few shifted products (no gather or scatter).
        """
        weights = self.to_bins(kernel)  # (B or 1, K, r)
        per_offset = (weights.unsqueeze(-1) * self.tap_offset).sum(-2).unsqueeze(1)  # (B or 1, 1, K, 2h + 1)
        reach = self.tap_offset.shape[-1] // 2
        padded = torch.nn.functional.pad(values, (reach, reach))
        n_bins = values.shape[-1]
        out = padded[..., :n_bins] * per_offset[..., 0]
        for o in range(1, 2 * reach + 1):
            out = out + padded[..., o:o + n_bins] * per_offset[..., o]
        return out
