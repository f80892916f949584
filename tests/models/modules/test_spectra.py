"""sequence_spectra / sequence_signals / magnitude: FBAM's rFFT and inverse rFFT of several token sequences
(Eqs. 1 and 8) in real and imaginary planes, checked against ``torch.fft`` on each sequence alone; FBAM
against its equations in complex arithmetic."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models.bioformer import FBAM
from biosig_lightning.models.modules.alignment import AUTHORS_FBAM
from biosig_lightning.models.modules.spectra import magnitude, sequence_signals, sequence_spectra

LENGTHS = [[128, 64, 32], [125, 63, 32], [500, 250, 125], [6, 3, 2], [1, 4, 2], [9]]


def _reference(x: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    spectra = [torch.fft.rfft(part, dim=-1, norm="ortho") for part in x.split(lengths, dim=-1)]
    dc = torch.stack([s[..., 0] for s in spectra], dim=-1)
    bins = torch.cat([s[..., 1:] for s in spectra], dim=-1)
    return torch.stack([dc.real, dc.imag]), torch.stack([bins.real, bins.imag])


@pytest.mark.parametrize("lengths", LENGTHS)
def test_bins_are_each_sequences_own_rfft(lengths: list[int]) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, sum(lengths), dtype=torch.float64)
    dc, bins = sequence_spectra(x, lengths)
    ref_dc, ref_bins = _reference(x, lengths)
    torch.testing.assert_close(dc, ref_dc, atol=1e-13, rtol=1e-12)
    torch.testing.assert_close(bins, ref_bins, atol=1e-13, rtol=1e-12)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_synthesis_is_each_sequences_own_irfft(lengths: list[int]) -> None:
    """Arbitrary bins, imaginary DC and Nyquist parts included (``irfft`` ignores them)."""
    torch.manual_seed(1)
    dc = torch.randn(2, 3, 5, len(lengths), dtype=torch.float64)
    bins = torch.randn(2, 3, 5, sum(p // 2 for p in lengths), dtype=torch.float64)
    whole = [torch.complex(*torch.cat([d, b], dim=-1))
             for d, b in zip(dc.split(1, dim=-1), bins.split([p // 2 for p in lengths], dim=-1), strict=True)]
    ref = torch.cat([torch.fft.irfft(z, n=p, dim=-1, norm="ortho")
                     for z, p in zip(whole, lengths, strict=True)], dim=-1)
    torch.testing.assert_close(sequence_signals(dc, bins, lengths), ref, atol=1e-13, rtol=1e-12)
    x = torch.randn(3, 5, sum(lengths), dtype=torch.float64)
    back = sequence_signals(*sequence_spectra(x, lengths), lengths)
    torch.testing.assert_close(back, x, atol=1e-13, rtol=1e-12)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_gradients_are_those_of_torch_fft(lengths: list[int]) -> None:
    """Both transforms' backward (each the other transform, reweighted) against autograd through
    ``torch.fft`` on each sequence, in float64, for odd, even and one-sample sequences; the
    imaginary parts of DC and Nyquist bins, which ``irfft`` ignores, get a zero gradient."""
    torch.manual_seed(4)
    x = torch.randn(3, 5, sum(lengths), dtype=torch.float64, requires_grad=True)
    g_dc = torch.randn(2, 3, 5, len(lengths), dtype=torch.float64)
    g_bins = torch.randn(2, 3, 5, sum(p // 2 for p in lengths), dtype=torch.float64)
    dc, bins = sequence_spectra(x, lengths)
    ref_dc, ref_bins = _reference(x, lengths)
    ours = torch.autograd.grad((dc * g_dc).sum() + (bins * g_bins).sum(), x)[0]
    ref = torch.autograd.grad((ref_dc * g_dc).sum() + (ref_bins * g_bins).sum(), x)[0]
    torch.testing.assert_close(ours, ref, atol=1e-12, rtol=1e-10)

    dc, bins = (t.detach().requires_grad_(True) for t in (g_dc, g_bins))
    g = torch.randn(3, 5, sum(lengths), dtype=torch.float64)
    ours = torch.autograd.grad((sequence_signals(dc, bins, lengths) * g).sum(), [dc, bins])
    whole = [torch.complex(*torch.cat([d, b], dim=-1))
             for d, b in zip(dc.split(1, dim=-1), bins.split([p // 2 for p in lengths], dim=-1), strict=True)]
    ref_x = torch.cat([torch.fft.irfft(z, n=p, dim=-1, norm="ortho")
                       for z, p in zip(whole, lengths, strict=True)], dim=-1)
    ref = torch.autograd.grad((ref_x * g).sum(), [dc, bins])
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    assert ours[0][1].abs().max() == 0  # imaginary DC


def test_transforms_pass_gradcheck_twice() -> None:
    """First and second derivatives by finite differences (the backward functions are themselves
    differentiable, so a gradient penalty through FBAM works)."""
    torch.manual_seed(5)
    lengths = [6, 5, 1]
    x = torch.randn(2, sum(lengths), dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: sequence_spectra(t, lengths), (x,))
    torch.autograd.gradgradcheck(lambda t: sequence_spectra(t, lengths), (x,))
    dc = torch.randn(2, 2, len(lengths), dtype=torch.float64, requires_grad=True)
    bins = torch.randn(2, 2, sum(p // 2 for p in lengths), dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda d, b: sequence_signals(d, b, lengths), (dc, bins))
    torch.autograd.gradgradcheck(lambda d, b: sequence_signals(d, b, lengths), (dc, bins))


def test_magnitude_is_abs_with_its_gradient_at_zero() -> None:
    re = torch.tensor([3.0, 0.0, 0.0, -1e-30, 0.0], requires_grad=True)
    im = torch.tensor([4.0, 0.0, 2.0, 0.0, -0.0], requires_grad=True)
    out = magnitude(re, im)
    z = torch.complex(re.detach(), im.detach()).requires_grad_(True)
    ref = z.abs()
    torch.testing.assert_close(out, ref.detach())
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(torch.complex(re.grad, im.grad), z.grad)  # 0 at 0, not NaN


def _complex_fbam(fbam: FBAM, x: torch.Tensor) -> torch.Tensor:
    """FBAM's forward with Eqs. 1, 6-8 in complex arithmetic (``torch.fft``, ``abs``, ``angle``, ``polar``)
    on each sequence, from the module's own controller, kernel and band layout."""
    eps, shift = fbam.eps, fbam.eps_mode == "shift"
    parts = x.transpose(1, 2).split(fbam.seq_lens, dim=2)
    spectra = [torch.fft.rfft(part, dim=2, norm="ortho") for part in parts]
    z = torch.cat([s[..., 1:] for s in spectra], dim=2)
    abs_z = z.abs()
    mag = abs_z + eps if shift else abs_z
    params = fbam.controller(fbam.layout.band_statistics(mag, eps, log_guard=not shift), fbam.layout.valid)
    new_mag = mag
    if fbam.use_magnitude:
        kernel = fbam._kernel(params["kernel"])
        kernel = kernel / (kernel.sum(-1, keepdim=True) + eps) if shift else kernel
        smoothed = fbam.layout.convolve(mag, kernel)
        raw = torch.tanh(params["gain"][..., 0])
        gain = raw if fbam.gain_mode == "tanh" else (1 + fbam.gain_scale * 0.5 * raw).clamp(0.5, 1.5)
        new_mag = mag + fbam.layout.to_bins(gain).unsqueeze(1) * (smoothed - mag)
    if fbam.use_phase:
        angle = fbam.layout.to_bins(torch.tanh(params["phase"][..., 0])).unsqueeze(1)
        angle = angle * torch.angle(z) if fbam.phase_mode == "scale" else angle
        z_new = z * torch.polar(torch.ones_like(angle), angle) * (new_mag / (abs_z + eps * (abs_z + eps)))
    else:
        z_new = z * (new_mag / (abs_z + eps))
    dc_weight = fbam.dc_weight.unsqueeze(-1) if fbam.dc_weight is not None else 1.0
    out = [torch.fft.irfft(torch.cat([s[..., :1] * dc_weight, part], dim=2), n=n, dim=2, norm="ortho")
           for part, s, n in zip(z_new.split(fbam.layout.n_bins, dim=2), spectra, fbam.seq_lens, strict=True)]
    return torch.cat(out, dim=2).transpose(1, 2)


@pytest.mark.parametrize(("lengths", "options"), [
    ([64, 32, 16], {"phase_mode": "rotate", "gain_mode": "tanh", "eps_mode": "paper"}),  # the paper's Eqs.
    ([63, 32, 16], {"phase_mode": "scale", "gain_mode": "offset", "eps_mode": "shift", "learnable_dc": True}),
    ([64, 32, 16], {"use_phase": False}),
    ([64, 32, 16], {"use_magnitude": False, "phase_mode": "scale"}),
])
def test_fbam_equals_its_complex_arithmetic_form(lengths: list[int], options: dict[str, object]) -> None:
    """Output and every gradient, in float64, against the same equations in complex arithmetic."""
    torch.manual_seed(2)
    fbam = FBAM(16, lengths, n_bands=6, d_token=8, **options).double().eval()  # type: ignore[arg-type]
    with torch.no_grad():
        for p in fbam.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(4, sum(lengths), 16, dtype=torch.float64, requires_grad=True)
    results = []
    for forward in (fbam, lambda t: _complex_fbam(fbam, t)):
        out = forward(x)
        results.append((out, torch.autograd.grad(out.square().sum(), [x, *fbam.parameters()])))
    (out, grads), (ref, ref_grads) = results
    assert (out - x).abs().max() > 0.05  # the module really changes its input
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("phase_mode", ["scale", "rotate"])
def test_fbam_gradient_is_finite_where_a_bin_is_exactly_zero(phase_mode: str) -> None:
    """Tokens constant along a sequence have non-DC bins of exactly 0: ``|Z|`` and ``angle(Z)`` there
    take ``torch.abs``'s zero gradient, not ``sqrt``'s NaN."""
    torch.manual_seed(3)
    fbam = FBAM(8, [16, 8], n_bands=2, d_token=4, **{**AUTHORS_FBAM, "phase_mode": phase_mode})
    x = torch.randn(2, 24, 8)
    x[0] = 1.5  # every sequence of sample 0 constant: all its non-DC bins are 0
    x.requires_grad_(True)
    assert sequence_spectra(x.transpose(1, 2), [16, 8])[1][:, 0].abs().max() == 0
    fbam(x).square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in fbam.parameters() if p.grad is not None)
