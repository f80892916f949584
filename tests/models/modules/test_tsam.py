"""TSAM (BioFormer Appendix B.2): its segment descriptors against a direct evaluation of their equation."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.alignment import TSAM


def _captured_descriptors(module: TSAM, x: torch.Tensor) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    handle = module.controller.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
    try:
        module(x)
    finally:
        handle.remove()
    return seen[0]


def test_tsam_descriptors_are_log_magnitude_signed_std_peak_and_energy_per_segment() -> None:
    """Per segment and channel: ``mean |x|``, the population std of the *signed* ``x``, ``max |x|`` and
    ``sum x^2``; each averaged over channels, then ``log(. + eps)`` (the std as ``sqrt(var + eps)``).
    The input alternates sign, so the std of ``x`` and the std of ``|x|`` differ by a whole unit."""
    eps = 1e-6
    n_tokens, d_model, n_segments = 12, 3, 3
    module = TSAM(d_model, n_tokens, n_bands=n_segments, eps=eps).eval()
    amp = torch.tensor([1.0, 2.0, 0.5])  # per channel
    sign = torch.tensor([1.0, -1.0] * (n_tokens // 2))
    ramp = 1.0 + torch.arange(n_tokens) / n_tokens  # the peak moves with the segment
    x = (sign * ramp)[None, :, None] * amp[None, None, :]  # (1, N, D)
    got = _captured_descriptors(module, x)[0, 0]  # (segments, 4)
    assert got.shape == (n_segments, 4)
    for m in range(n_segments):
        seg = x[0, m * 4:(m + 1) * 4, :]  # (4 tokens, D): uniform segments of 12 / 3
        mag = seg.abs().mean(0).mean()
        std = torch.sqrt(seg.var(0, unbiased=False) + eps).mean()
        peak = seg.abs().max(0).values.mean()
        energy = seg.square().sum(0).mean()
        expected = torch.stack([torch.log(mag + eps), torch.log(std + eps), torch.log(peak + eps),
                                torch.log(energy + eps)])
        assert torch.allclose(got[m], expected, atol=1e-5), (m, got[m], expected)
