"""SPDTransNet: SP-MHA preserves structure (eq. 2), both computations agree, the published size, no dead
weights."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from biosig_lightning.features.spd import sym_from_tokens, tokens_from_sym
from biosig_lightning.models import catalog, spdtransnet
from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention, recompute


def _mixing(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The matrix W with out = W x, solved by least squares (x has full row rank)."""
    return torch.linalg.lstsq(x.transpose(-1, -2), out.transpose(-1, -2)).solution.transpose(-1, -2)


@pytest.mark.parametrize("impl", ["sdpa", "fused", "recompute"])
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


def test_published_best_has_the_authors_live_parameter_count_and_no_dead_parameters() -> None:
    entry = catalog.get("SPDTransNet")
    full = entry.build("mass_ss3")
    n = sum(p.numel() for p in full.parameters() if p.requires_grad)
    assert n == entry.param_pins["mass_ss3"] == 14_009_912
    # the paper's fixed sinusoidal encoding drops the two PE MLPs (2 x 2 x (351^2 + 351))
    assert (
        sum(p.numel() for p in entry.build("mass_ss3", pe="sinusoidal").parameters())
        == 14_009_912 - 4 * 123_552
    )
    # gradients reach every parameter (a one-epoch sequence keeps this fast; parameters do not depend on L)
    small = SPDTransNet(n_chans=210, n_outputs=5, n_times=45, sfreq=256.0,
                        **{**entry.kwargs["mass_ss3"], "dropout": 0.0})
    assert sum(p.numel() for p in small.parameters()) == n
    small(torch.randn(2, 210, 45)).square().sum().backward()
    dead = [name for name, p in small.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert dead == []


def test_only_the_central_epoch_is_classified_from_its_own_tokens() -> None:
    torch.manual_seed(3)
    model = SPDTransNet(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3,
                        d_model=10,
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
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15,
              fc_width=10,
              dropout=0.0)
    plain = SPDTransNet(**kw)
    ckpt = SPDTransNet(**kw, checkpoint_layers=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 18, 6)
    for m in (plain, ckpt):
        m(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_drop_masks_have_the_rate_and_are_reproducible() -> None:
    m = recompute.drop_mask((1000, 1000), 0.1, seed=3)
    assert abs(m.float().mean().item() - 0.1) < 0.002  # 6 binomial standard deviations
    assert torch.equal(m, recompute.drop_mask((1000, 1000), 0.1, seed=3))
    assert not torch.equal(m, recompute.drop_mask((1000, 1000), 0.1, seed=3, stream=1))


def test_fused_sp_mha_runs_in_float32_under_bfloat16_autocast() -> None:
    torch.manual_seed(8)
    att = SPMultiheadAttention(21, 3, impl="fused")
    x = torch.randn(2, 7, 21, requires_grad=True)
    ref = att(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = att(x)
    out.float().sum().backward()
    assert out.dtype == torch.float32 and x.grad is not None and att.theta.grad is not None
    torch.testing.assert_close(out, ref, atol=0.05, rtol=0.05)  # only q and k come from bfloat16 matmuls


def test_checkpointed_layers_redraw_the_same_dropout_masks() -> None:
    kw = dict(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3, d_model=10,
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15,
              fc_width=10,
              dropout=0.3)
    torch.manual_seed(9)
    plain = SPDTransNet(**kw)
    ckpt = SPDTransNet(**kw, checkpoint_layers=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 18, 6)
    for m in (plain, ckpt):
        torch.manual_seed(10)  # the same masks in both forwards; the recomputation must redraw them
        m(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_fused_kernel_takes_the_mixed_dtypes_that_autocast_hands_it_on_any_device() -> None:
    # under CUDA autocast q and k come from bf16 linear maps while x stays float32; the kernel must
    # compute in float32 itself (a CPU-only autocast decorator let CUDA runs fail in torch.bmm)
    torch.manual_seed(11)
    q, k = torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    x, w = torch.randn(2, 7, 12), torch.randn(3).softmax(0)
    args = [t.requires_grad_() for t in (q.bfloat16(), k.bfloat16(), x, w)]
    out = recompute.SPAttention.apply(*args, 0.0, 0)
    out.sum().backward()
    ref_args = [t.detach().float().requires_grad_() for t in args]
    ref = recompute.SPAttention.apply(*ref_args, 0.0, 0)
    ref.sum().backward()
    assert out.dtype == torch.float32
    # the products with x take bfloat16 operands, so the results are those of float32 to a few bfloat16
    # roundings (2^-8 each) in norm; test_recompute pins their accuracy against float64
    for a, r in ((out, ref), *((a.grad, r.grad) for a, r in zip(args, ref_args, strict=True))):
        assert ((a.double() - r.double()).norm() / r.double().norm()).item() < 4 * 2**-8
    assert [a.grad.dtype for a in args] == [a.dtype for a in args]


@pytest.mark.parametrize("impl", ["fused", "sdpa", "recompute"])
def test_queries_and_keys_from_factors_are_those_of_the_full_input(impl: str) -> None:
    # x = u A^T + c given as (u, A, c): q and k from u (W A)^T + (c W^T + b) must be x's, so the layer's
    # output and every gradient (u, A and c included) are the same
    from biosig_lightning.models.spdtransnet.attention import SPEncoderLayer

    torch.manual_seed(20)
    layer = SPEncoderLayer(21, 3, 28, dropout=0.2 if impl == "fused" else 0.0, impl=impl).double().train()
    u = torch.randn(4, 7, 6, dtype=torch.float64, requires_grad=True)
    a = torch.randn(21, 6, dtype=torch.float64, requires_grad=True)
    c = torch.randn(7, 21, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 7, 21, dtype=torch.float64)
    params = [u, a, c, *layer.parameters()]
    results = []
    for factors in ((u, a, c), None):
        torch.manual_seed(21)
        out = layer(u @ a.T + c, factors)
        results.append([out, *torch.autograd.grad(out, params, g)])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pe", ["sinusoidal", "learnable", "learnable_tokens"])
def test_first_layer_factored_queries_change_no_output_or_gradient(pe: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.models.spdtransnet import attention

    kw = dict(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3, d_model=10,
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15,
              fc_width=10,
              dropout=0.3, pe=pe)
    torch.manual_seed(22)
    model = SPDTransNet(**kw).double()
    x = torch.randn(2, 18, 6, dtype=torch.float64)
    widths: list[int] = []
    project = attention._project
    monkeypatch.setattr(attention, "_project", lambda x, w, b,
                        f: widths.append((f or (x,))[0].shape[-1]) or project(x, w, b, f))
    results = []
    for factored in (True, False):
        model.factor_first_layer = factored
        torch.manual_seed(23)
        logits = model(x)
        results.append([logits, *torch.autograd.grad(logits.square().sum(), list(model.parameters()))])
    # q and k (one product) of 2 + 1 layers in each forward: in the first forward, the first layer's from
    # the 6-number tokens when the encoding is additive
    assert widths == ([6] if pe != "learnable_tokens" else [10]) + [10] * 2 + [10] * 3
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_the_model_package_has_no_device_branch_and_does_not_import_the_cpu_backend() -> None:
    # the model reads like the paper on every device: CPU speed-ups live in biosig_lightning.accel, which
    # swaps modules from outside (the task's cpu_kernels flag)
    sources = {p.name: p.read_text() for p in Path(spdtransnet.__file__).parent.glob("*.py")}
    assert {"model.py", "attention.py", "recompute.py"} <= set(sources)
    branch = re.compile(r"is_cuda|device\.type\s*(==|!=|in\b)|\bimport accel|biosig_lightning\.accel|from "
                        r"biosig_lightning import accel")
    assert {name: branch.search(text).group(0) for name, text in sources.items() if branch.search(text)} == {}
