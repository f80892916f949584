"""BandLayout (FBAM / TSAM's band bookkeeping) against band-by-band loops written from its definitions:
per-bin values, the band-limited convolution with reflect / replicate edges, and Eq. 2's descriptors,
outputs and gradients, in float64, on layouts with one-bin, two-bin and empty bands."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biosig_lightning.models.modules.bands import BandLayout

# (bins per segment, edges per segment, n_bands, kernel size): uniform bands; a one-bin and a two-bin
# band, an empty band and a segment with fewer bands; a five-tap kernel over bands of 1 to 6 bins
LAYOUTS = [
    ([12, 6], [[0, 2, 4, 6, 8, 10, 12], [0, 1, 2, 3, 4, 5, 6]], 6, 3),
    ([9, 4], [[0, 1, 3, 3, 9], [0, 2, 4]], 4, 3),
    ([11], [[0, 1, 3, 5, 11]], 4, 5),
]


def _bands(layout: BandLayout) -> list[tuple[int, int, int]]:
    """(flat band index, first bin, end bin) of every non-empty band, on the concatenated axis."""
    out, offset = [], 0
    for s, seg in enumerate(layout.edges):
        for m, (lo, hi) in enumerate(zip(seg[:-1], seg[1:], strict=True)):
            if hi > lo:
                out.append((s * layout.n_bands + m, offset + lo, offset + hi))
        offset += layout.n_bins[s]
    return out


def _reference_convolve(layout: BandLayout, values: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Three taps: each band padded as the authors' code pads it (reflect; replicate for one bin).
    More taps: each tap read at the layout's ``neighbours`` table (reflect at the band edge, then clamp)."""
    half = layout.kernel_size // 2
    out = torch.zeros_like(values)
    flat = kernel.flatten(1, 2).expand(values.shape[0], -1, -1)
    for band, lo, hi in _bands(layout):
        w = flat[:, band]  # (B, r)
        if layout.kernel_size == 3:
            padded = F.pad(values[..., lo:hi], (1, 1), mode="reflect" if hi - lo > 1 else "replicate")
            taps = [padded[..., t:t + hi - lo] for t in range(3)]
        else:
            taps = [values[..., layout.neighbours[lo:hi, t]] for t in range(2 * half + 1)]
        out[..., lo:hi] = sum(w[:, t, None, None] * tap for t, tap in enumerate(taps))
    return out


def _reference_statistics(layout: BandLayout, values: torch.Tensor, eps: float,
                          signed: torch.Tensor | None) -> torch.Tensor:
    stats = torch.zeros(values.shape[0], layout.n_segments * layout.n_bands, 5, dtype=values.dtype)
    for band, lo, hi in _bands(layout):
        v = values[..., lo:hi]
        s = v if signed is None else signed[..., lo:hi]
        stats[:, band] = torch.stack([
            torch.log(v.mean(-1).mean(-1) + eps),
            torch.log(torch.sqrt(s.var(-1, unbiased=False) + eps).mean(-1) + eps),
            torch.log(v.amax(-1).mean(-1) + eps),
            torch.log(v.square().sum(-1).mean(-1) + eps),
            v.argmax(-1).to(v.dtype).mean(-1),
        ], -1)
    return stats.view(values.shape[0], layout.n_segments, layout.n_bands, 5)


def _grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    weight = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return torch.autograd.grad((out * weight).sum(), inputs)


@pytest.mark.parametrize(("n_bins", "edges", "n_bands", "size"), LAYOUTS)
def test_to_bins_and_convolution_match_band_by_band_loops(n_bins: list[int], edges: list[list[int]],
                                                           n_bands: int, size: int) -> None:
    torch.manual_seed(0)
    layout = BandLayout(n_bins, edges, n_bands, size).double()
    values = torch.randn(3, 4, sum(n_bins), dtype=torch.float64, requires_grad=True)
    for batch in (3, 1):  # sample-specific and batch-shared kernels
        kernel = torch.randn(batch, len(n_bins), n_bands, size, dtype=torch.float64, requires_grad=True)
        ours = layout.convolve(values, kernel)
        ref = _reference_convolve(layout, values, kernel)
        torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-12)
        for a, b in zip(_grads(ours, [values, kernel]), _grads(ref, [values, kernel]), strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)

    per_band = torch.randn(3, len(n_bins), n_bands, 2, dtype=torch.float64, requires_grad=True)
    ours = layout.to_bins(per_band)
    ref = torch.zeros(3, sum(n_bins), 2, dtype=torch.float64)
    for band, lo, hi in _bands(layout):
        ref[:, lo:hi] = per_band.flatten(1, 2)[:, band, None]
    torch.testing.assert_close(ours, ref, atol=0, rtol=0)
    torch.testing.assert_close(_grads(ours, [per_band])[0], _grads(ref, [per_band])[0], atol=1e-14, rtol=0)


@pytest.mark.parametrize(("n_bins", "edges", "n_bands", "size"), LAYOUTS)
@pytest.mark.parametrize("signed", [False, True])
def test_band_statistics_match_band_by_band_loops(n_bins: list[int], edges: list[list[int]], n_bands: int,
                                                  size: int, signed: bool) -> None:
    """Eq. 2's descriptors (FBAM) and TSAM's, whose std is of the signed values; gradients included.
    The values have a mean of about 3 and a spread of 1, so a variance taken carelessly shows."""
    torch.manual_seed(1)
    layout = BandLayout(n_bins, edges, n_bands, size).double()
    values = (3.0 + torch.rand(2, 5, sum(n_bins), dtype=torch.float64)).requires_grad_(True)
    sign = torch.randn(2, 5, sum(n_bins), dtype=torch.float64).requires_grad_(True) if signed else None
    inputs = [values] + ([sign] if sign is not None else [])
    ours = layout.band_statistics(values, 1e-6, signed=sign)
    ref = _reference_statistics(layout, values, 1e-6, sign)
    torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-12)
    for a, b in zip(_grads(ours[..., :4], inputs), _grads(ref[..., :4], inputs), strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_band_statistics_stay_float32_under_autocast() -> None:
    """The variance is a difference of sums: under bfloat16 autocast they are still summed in float32."""
    layout = BandLayout([64], [[0, 10, 21, 32, 42, 53, 64]], 6, 3)
    values = 3.0 + torch.rand(2, 8, 64)
    exact = layout.band_statistics(values, 1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = layout.band_statistics(values, 1e-6)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, exact, atol=1e-6, rtol=1e-6)


def test_band_std_keeps_float32_precision_when_the_spread_is_small_against_the_mean() -> None:
    """Magnitudes of about 100 that vary by 0.01 within a band: ``E[v^2] - E[v]^2`` in float32 would
    lose every digit of the variance (1e-5 against rounding of 1e-3); the shifted sums keep it."""
    torch.manual_seed(2)
    layout = BandLayout([24], [[0, 6, 12, 18, 24]], 4, 3)
    values = 100.0 + 0.01 * torch.rand(2, 8, 24, dtype=torch.float64)
    ref = _reference_statistics(layout.double(), values, 1e-8, None)
    ours = layout.float().band_statistics(values.float(), 1e-8)
    # the argmax (last descriptor) may move between bins that float32 rounds to the same value
    torch.testing.assert_close(ours[..., :4].double(), ref[..., :4], atol=1e-4, rtol=1e-4)
