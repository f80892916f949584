"""Medformer (Wang et al., 2024) and EEGNet (Lawhern et al., 2018) baseline backbones."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines import Medformer
from biosig_lightning.models.baselines.medformer import APAVA_PATCH_LENS
from biosig_lightning.models.bioformer import FBAM
from biosig_lightning.models.modules.encodings import sinusoidal_positions

APAVA = dict(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0)
TINY = dict(patch_lens=(4, 2, 4, 8), d_model=16, n_heads=2, e_layers=2, d_ff=32)


def tiny_medformer(**kw: object) -> Medformer:
    args = dict(n_chans=3, n_outputs=3, n_times=24, sfreq=100.0, **TINY)
    args.update(kw)
    return Medformer(**args)


# ---------------------------------------------------------------- Medformer


def test_medformer_apava_parameter_counts_match_the_authors() -> None:
    # Authors' code, APAVA configuration (github DL4mHealth/Medformer): HEAD 7,240,834, paper commit
    # 7,414,914.
    head = Medformer(**APAVA, variant="head")
    assert count_parameters(head) == 7_240_834
    paper = Medformer(**APAVA)
    assert paper.variant == "paper" and paper.patch_lens == list(APAVA_PATCH_LENS)
    assert count_parameters(paper) == 7_414_914
    # 3 x 129 + 3 x 65 + 4 x 17 + 5 x 9 tokens (floor(256 / p) + 1, the last one the router)
    assert sum(paper.n_tokens) == 695
    assert paper.feature_dim == 695 * 128 and head.feature_dim == 15 * 128


@pytest.mark.parametrize("variant", ["paper", "head"])
@pytest.mark.parametrize("single_channel", [False, True])
def test_medformer_shapes_and_head_split(variant: str, single_channel: bool) -> None:
    torch.manual_seed(0)
    m = tiny_medformer(variant=variant, single_channel=single_channel).eval()
    x = torch.randn(5, 3, 24)
    n_tok = [24 // p + 1 for p in (2, 4, 4, 8)]
    assert m.n_tokens == n_tok and m.patch_lens == [2, 4, 4, 8]
    per = (sum(n_tok) if variant == "paper" else 4) * 16
    assert m.feature_dim == per * (3 if single_channel else 1)
    feats = m.forward_features(x)
    assert feats.shape == (5, m.feature_dim)
    out = m(x)
    assert out.shape == (5, 3) and torch.isfinite(out).all()
    assert torch.equal(out, m.head(feats))


def test_medformer_eval_is_deterministic_and_training_augments() -> None:
    torch.manual_seed(0)
    m = tiny_medformer(augmentations=("jitter0.5", "scale0.5"), dropout=0.0)
    x = torch.randn(4, 3, 24)
    m.eval()
    assert torch.equal(m(x), m(x))
    m.train()
    assert not torch.allclose(m(x), m(x))


def test_medformer_embedding_matches_cross_channel_patch_definition() -> None:
    """Token j of granularity i = <W_i, padded patch j> + W_gr^(i) + PE[j] (Sec. 3.2-3.3)."""
    torch.manual_seed(1)
    for variant in ("paper", "head"):
        m = tiny_medformer(variant=variant).eval()
        emb = m.embedding
        x = torch.randn(2, 3, 24)
        got = emb(x)
        assert got.shape == (2, sum(m.n_tokens), 16)
        src = x + sinusoidal_positions(3, 24) if variant == "head" else x  # HEAD's channel tag PE[c, t]
        gran = 0
        for (p, k), weight in zip(emb.groups, emb.weights, strict=True):
            padded = torch.cat(
                [src, src[..., -1:].expand(-1, -1, p)], dim=-1
            )  # replicate the last sample p times
            for j in range(k):
                w = weight[j * 16 : (j + 1) * 16].unsqueeze(1)  # the authors' Conv2d(1, D, (C, p)) kernel
                ref = F.conv2d(padded.unsqueeze(1), w, stride=(1, p)).squeeze(2).transpose(1, 2)
                n = m.n_tokens[gran]
                ref = ref + emb.granularity[gran] + sinusoidal_positions(n, 16)
                start = emb.offsets[gran]
                torch.testing.assert_close(got[:, start : start + n], ref)
                gran += 1


def test_medformer_two_stage_attention_matches_reference_mha() -> None:
    """Intra attention per granularity and inter attention over routers equal nn.MultiheadAttention."""
    torch.manual_seed(2)
    m = tiny_medformer().eval()
    layer = m.layers[0]
    x = torch.randn(3, sum(m.n_tokens), 16)
    got = layer.intra(x)
    for i, (start, n) in enumerate(zip(m.embedding.offsets, m.n_tokens, strict=True)):
        mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
        with torch.no_grad():
            mha.in_proj_weight.copy_(layer.intra_in_weight[i].T)
            mha.in_proj_bias.copy_(layer.intra_in_bias[i])
            mha.out_proj.weight.copy_(layer.intra_out_weight[i].T)
            mha.out_proj.bias.copy_(layer.intra_out_bias[i])
        seq = x[:, start : start + n]
        torch.testing.assert_close(got[:, start : start + n], mha(seq, seq, seq, need_weights=False)[0])
    routers = x[:, m.router_index]
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(layer.inter_qkv.weight)
        mha.in_proj_bias.copy_(layer.inter_qkv.bias)
        mha.out_proj.load_state_dict(layer.inter_out.state_dict())
    torch.testing.assert_close(layer.inter(routers), mha(routers, routers, routers, need_weights=False)[0])
    # full layer: routers take the inter output, then TSLib post-norm residual + FFN
    attn = got.clone()
    attn[:, m.router_index] = layer.inter(got[:, m.router_index])
    a = layer.norm1(x + attn)
    ref = layer.norm2(a + layer.ff2(F.gelu(layer.ff1(a))))
    torch.testing.assert_close(layer(x), ref)
    # no inter attention: routers keep their intra output
    plain = tiny_medformer(inter_attention=False)
    assert plain.layers[0].inter_qkv is None
    assert count_parameters(m) - count_parameters(plain) == 2 * (4 * 16 * 16 + 4 * 16)


def test_medformer_fbam_option() -> None:
    torch.manual_seed(3)
    base = tiny_medformer()
    m = tiny_medformer(fbam=True, fbam_bands=2)  # 3 classes: "auto" gives batch-shared kernels
    assert m.fbam is not None and len(m.fbam) == 2
    assert all(isinstance(f, FBAM) and f.seq_lens == m.n_tokens and f.n_bands == 2 for f in m.fbam)
    assert m.fbam[0].kernel_mode == "batch"
    assert count_parameters(m) == count_parameters(base) + sum(count_parameters(f) for f in m.fbam)
    x = torch.randn(4, 3, 24)
    m.train()
    out = m(x)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    F.cross_entropy(out, torch.tensor([0, 1, 2, 0])).backward()
    assert all(p.grad is not None for p in m.fbam.parameters() if p.requires_grad and p.dim() > 1)
    m.eval()
    assert torch.equal(m(x), m(x)) and torch.equal(m(x), m.head(m.forward_features(x)))


def test_medformer_style_site_is_the_token_embedding() -> None:
    m = tiny_medformer().eval()
    site = m.get_submodule(Medformer.style_site)
    seen: list[torch.Tensor] = []
    handle = site.register_forward_hook(lambda _m, _i, out: seen.append(out))
    m(torch.randn(2, 3, 24))
    handle.remove()
    assert len(seen) == 1 and isinstance(seen[0], torch.Tensor)
    assert seen[0].shape == (2, sum(m.n_tokens), 16) and seen[0].shape[m.style_channel_dim] == 16
    # alignment site: the final LayerNorm over (B, N, D) tokens ("paper") or (B, G, D) routers ("head")
    for variant, n in (("paper", sum(m.n_tokens)), ("head", 4)):
        mv = tiny_medformer(variant=variant).eval()
        out: list[torch.Tensor] = []
        mv.get_submodule(mv.align_site).register_forward_hook(lambda _m, _i, o, out=out: out.append(o))
        mv(torch.randn(2, 3, 24))
        assert out[0].shape == (2, n, 16) and out[0].shape[mv.align_channel_dim] == 16
    assert tiny_medformer(single_channel=True).align_site is None


def test_medformer_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="variant"):
        tiny_medformer(variant="latest")
    with pytest.raises(ValueError, match="patch_lens"):
        tiny_medformer(patch_lens=[])
    with pytest.raises(ValueError, match="divisible"):
        tiny_medformer(n_heads=3)
    with pytest.raises(ValueError, match="unknown augmentation"):
        tiny_medformer(augmentations=("flipx",))
    with pytest.raises(ValueError, match=r"n_times=24"):
        tiny_medformer()(torch.randn(2, 3, 20))


