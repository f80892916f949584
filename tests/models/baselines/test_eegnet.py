"""Medformer (Wang et al., 2024) and EEGNet (Lawhern et al., 2018) baseline backbones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines import EEGNet, Medformer

APAVA = dict(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0)
TINY = dict(patch_lens=(4, 2, 4, 8), d_model=16, n_heads=2, e_layers=2, d_ff=32)


def tiny_medformer(**kw: object) -> Medformer:
    args = dict(n_chans=3, n_outputs=3, n_times=24, sfreq=100.0, **TINY)
    args.update(kw)
    return Medformer(**args)


# ---------------------------------------------------------------- EEGNet


def test_eegnet_shapes_parameters_and_head_split() -> None:
    torch.manual_seed(0)
    m = EEGNet(**APAVA).eval()
    # temporal 8*64 + BN 16 + depthwise 16*16 + BN 32 + separable 16*16 + pointwise 16*16 + BN 32 + dense
    # 128*2+2
    assert count_parameters(m) == 1618
    assert m.feature_dim == 16 * (256 // 4 // 8)
    x = torch.randn(3, 16, 256)
    feats = m.forward_features(x)
    assert feats.shape == (3, 128)
    assert torch.equal(m(x), m.head(feats)) and torch.equal(m(x), m(x))
    for n_times in (32, 45, 100):  # any length down to pool1 * pool2
        small = EEGNet(n_chans=2, n_outputs=4, n_times=n_times, sfreq=128.0, kernel_length=8)
        assert small(torch.randn(2, 2, n_times)).shape == (2, 4)
        assert small.feature_dim == 16 * (n_times // 32)


def test_eegnet_short_input_and_bad_shape_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"n_times >= pool1 \* pool2 = 32"):
        EEGNet(n_chans=2, n_outputs=2, n_times=31, sfreq=128.0)
    with pytest.raises(ValueError, match="n_chans=2"):
        EEGNet(n_chans=2, n_outputs=2, n_times=64, sfreq=128.0)(torch.randn(1, 3, 64))


def test_eegnet_max_norm_constraints() -> None:
    torch.manual_seed(0)
    m = EEGNet(n_chans=4, n_outputs=2, n_times=64, sfreq=128.0, kernel_length=16)
    spatial, head = m.spatial[0], m.head
    with torch.no_grad():
        spatial.weight.mul_(10.0)
        head.weight.mul_(10.0)
    before = spatial.weight.flatten(1).norm(dim=1)
    assert before.max() > 1.0 and head.weight.norm(dim=1).max() > 0.25
    m(torch.randn(2, 4, 64))
    after = spatial.weight.flatten(1).norm(dim=1)
    assert after.max() <= 1.0 + 1e-5 and head.weight.norm(dim=1).max() <= 0.25 + 1e-6
    # filters already inside the ball are untouched, the others are rescaled onto it
    torch.testing.assert_close(after, before.clamp(max=1.0))
    free = EEGNet(n_chans=4, n_outputs=2, n_times=64, sfreq=128.0, kernel_length=16, max_norm=False)
    with torch.no_grad():
        free.head.weight.mul_(10.0)
    w = free.head.weight.clone()
    free(torch.randn(2, 4, 64))
    assert torch.equal(free.head.weight, w)


def test_eegnet_style_site_is_first_conv_block() -> None:
    m = EEGNet(n_chans=4, n_outputs=2, n_times=64, sfreq=128.0, kernel_length=16).eval()
    site = m.get_submodule(EEGNet.style_site)
    seen: list[torch.Tensor] = []
    handle = site.register_forward_hook(lambda _m, _i, out: seen.append(out))
    m(torch.randn(2, 4, 64))
    handle.remove()
    assert isinstance(site[-1], nn.BatchNorm2d)  # temporal conv + BN
    assert seen[0].shape == (2, 8, 4, 64) and seen[0].shape[m.style_channel_dim] == 8
    out: list[torch.Tensor] = []
    m.get_submodule(m.align_site).register_forward_hook(lambda _m, _i, o: out.append(o))
    m(torch.randn(2, 4, 64))
    assert out[0].shape == (2, 16, 1, 2) and out[0].shape[m.align_channel_dim] == 16


