"""SPDTransNet: SP-MHA preserves structure (eq. 2), both computations agree, the published size, no dead weights."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.features.spd import sym_from_tokens, tokens_from_sym
from biosig_lightning.models import catalog
from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention


def _mixing(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The matrix W with out = W x, solved by least squares (x has full row rank)."""
    return torch.linalg.lstsq(x.transpose(-1, -2), out.transpose(-1, -2)).solution.transpose(-1, -2)


@pytest.mark.parametrize("impl", ["sdpa", "recompute"])
def test_sp_mha_outputs_are_convex_combinations_of_input_tokens(impl: str) -> None:
    torch.manual_seed(0)
    att = SPMultiheadAttention(28, 4, impl=impl).double()  # d(7) = 28 > T = 6 tokens
    with torch.no_grad():
        att.theta.normal_()
    x = torch.randn(3, 6, 28, dtype=torch.float64)
    out = att(x)
    w = _mixing(out, x)
    torch.testing.assert_close(w @ x, out)  # every output token is a linear combination of input tokens
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6, dtype=torch.float64))  # weights sum to one
    assert (w > -1e-9).all()
    # decoded, the output matrices are symmetric and the same combination of the input matrices
    mats_in, mats_out = sym_from_tokens(x), sym_from_tokens(out)
    torch.testing.assert_close(mats_out, mats_out.transpose(-1, -2))
    torch.testing.assert_close(mats_out, torch.einsum("bij,bjkl->bikl", w, mats_in))
    torch.testing.assert_close(tokens_from_sym(mats_out), out)


def test_free_head_weights_are_the_authors_unnormalised_combination() -> None:
    torch.manual_seed(1)
    att = SPMultiheadAttention(28, 4, head_weights="free").double()
    x = torch.randn(2, 6, 28, dtype=torch.float64)
    w = _mixing(att(x), x)
    torch.testing.assert_close(w.sum(-1), att.theta.sum().expand(2, 6))


def test_sdpa_and_recompute_agree_in_outputs_and_gradients() -> None:
    torch.manual_seed(2)
    att = SPMultiheadAttention(45, 9, dropout=0.0)
    x = torch.randn(4, 30, 45, requires_grad=True)
    grads = []
    for impl in ("sdpa", "recompute"):
        att.impl = impl
        out = att(x)
        (out ** 2).sum().backward()
        grads.append((out.detach(), x.grad.clone(), att.q.weight.grad.clone(), att.theta.grad.clone()))
        x.grad = None
        att.zero_grad()
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_published_best_has_the_authors_live_parameter_count_and_no_dead_parameters() -> None:
    entry = catalog.get("SPDTransNet")
    full = entry.build("mass_ss3")
    n = sum(p.numel() for p in full.parameters() if p.requires_grad)
    assert n == entry.param_pins["mass_ss3"] == 14_009_912
    # the paper's fixed sinusoidal encoding drops the two PE MLPs (2 x 2 x (351^2 + 351))
    assert sum(p.numel() for p in entry.build("mass_ss3", pe="sinusoidal").parameters()) == 14_009_912 - 4 * 123_552
    # gradients reach every parameter (a one-epoch sequence keeps this fast; parameters do not depend on L)
    small = SPDTransNet(n_chans=210, n_outputs=5, n_times=45, sfreq=256.0, **{**entry.kwargs["mass_ss3"], "dropout": 0.0})
    assert sum(p.numel() for p in small.parameters()) == n
    small(torch.randn(2, 210, 45)).square().sum().backward()
    dead = [name for name, p in small.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert dead == []


def test_only_the_central_epoch_is_classified_from_its_own_tokens() -> None:
    torch.manual_seed(3)
    model = SPDTransNet(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3, d_model=10,
                        tokens_per_epoch=2, intra_heads=2, intra_layers=1, inter_heads=2, inter_layers=1,
                        d_ff=15, fc_width=10, dropout=0.0).eval()
    x = torch.randn(1, 18, 6)
    z = model.epoch_tokens(x)
    torch.testing.assert_close(model.forward_features(x), z[:, 2:4].flatten(1))
    torch.testing.assert_close(model(x), model.head(z[:, 2:4].flatten(1)))


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError, match="L \\* 210"):
        SPDTransNet(n_chans=2 * 210, n_outputs=5, n_times=45, sfreq=256.0)
    with pytest.raises(ValueError, match="divisible"):
        SPDTransNet(n_chans=210, n_outputs=5, n_times=45, sfreq=256.0, intra_heads=4)
    with pytest.raises(ValueError, match="triangular"):
        SPDTransNet(n_chans=210, n_outputs=5, n_times=44, sfreq=256.0)


def test_checkpointed_layers_give_the_same_gradients() -> None:
    torch.manual_seed(4)
    kw = dict(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3, d_model=10,
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15, fc_width=10,
              dropout=0.0)
    plain = SPDTransNet(**kw)
    ckpt = SPDTransNet(**kw, checkpoint_layers=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 18, 6)
    for m in (plain, ckpt):
        m(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
