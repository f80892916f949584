"""SPDTransNet: SP-MHA preserves structure (eq. 2), both computations agree, the published size, no dead weights."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.features.spd import sym_from_tokens, tokens_from_sym
from biosig_lightning.models import catalog
from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention, kernels
from tests.models.spdtransnet.sp_reference import reference_sp_mha


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


def test_drop_masks_have_the_rate_and_are_reproducible() -> None:
    from biosig_lightning.models.spdtransnet import kernels

    m = kernels.drop_mask((1000, 1000), 0.1, seed=3)
    assert abs(m.float().mean().item() - 0.1) < 0.002  # 6 binomial standard deviations
    assert torch.equal(m, kernels.drop_mask((1000, 1000), 0.1, seed=3))
    assert not torch.equal(m, kernels.drop_mask((1000, 1000), 0.1, seed=3, stream=1))


def test_lean_dropout_gradients() -> None:
    from biosig_lightning.models.spdtransnet import kernels

    h = torch.randn(50, 40, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(7)
    out = kernels.dropout(h, 0.25, True)
    torch.manual_seed(7)
    keep = ~kernels.drop_mask(tuple(h.shape), 0.25, kernels.draw_seed())
    ref = h * keep / 0.75
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    (gh,) = torch.autograd.grad(out, h, g)
    (gr,) = torch.autograd.grad(ref, h, g)
    torch.testing.assert_close(gh, gr)
    assert kernels.dropout(h, 0.25, False) is h


@pytest.mark.parametrize("n", [7, 3 * 2**20 + 5])  # one block; several blocks drawn in pool threads
def test_apply_drop_is_drop_mask_applied_in_place_or_into_out(n: int) -> None:
    from biosig_lightning.models.spdtransnet import kernels

    x = torch.randn(n, dtype=torch.float64)
    want = x.masked_fill(kernels.drop_mask((n,), 0.2, seed=5, stream=2), 0.0) * 1.25
    got = kernels.apply_drop(x, 0.2, seed=5, stream=2, scale=1.25, out=torch.empty_like(x))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert kernels.apply_drop(x, 0.2, seed=5, stream=2, scale=1.25) is x
    torch.testing.assert_close(x, want, rtol=0, atol=0)


@pytest.mark.parametrize(("d", "f", "p"), [(21, 55, 0.3), (16, 32, 0.0), (351, 1035, 0.1)])
def test_feed_forward_matches_the_linear_relu_dropout_linear_chain(d: int, f: int, p: float) -> None:
    # the fused block against Linear -> ReLU -> Dropout -> Linear by autograd in float64, with the mask that
    # the block draws (its hidden layer is padded to a multiple of 16, so the mask is drawn at that width)
    from biosig_lightning.models.spdtransnet import kernels

    torch.manual_seed(14)
    lin1, lin2 = torch.nn.Linear(d, f).double(), torch.nn.Linear(f, d).double()
    x = torch.randn(3, 5, d, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(15)
    out = kernels.feed_forward(x, lin1, lin2, p, True)
    keep = torch.ones(15, f, dtype=torch.bool)
    if p > 0:
        torch.manual_seed(15)
        keep = ~kernels.drop_mask((15, kernels._aligned(f)), p, kernels.draw_seed())[:, :f]
        assert not keep.all()
    ref = lin2((torch.relu(lin1(x)).reshape(15, f) * keep / (1 - p)).reshape(3, 5, f))
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    params = [x, *lin1.parameters(), *lin2.parameters()]
    for got, want in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g), strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kernels.feed_forward(x, lin1, lin2, p, False), lin2(torch.relu(lin1(x))))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_apply_drop_zeroes_half_precision_in_place_by_its_bits(dtype: torch.dtype) -> None:
    # bfloat16 has no numpy dtype: without a scale the drop is done on the 16-bit patterns; with one it
    # takes torch's path; both equal masked_fill with the same mask
    from biosig_lightning.models.spdtransnet import kernels

    n = 2 * 2**20 + 9
    x = torch.randn(n).to(dtype)
    drop = kernels.drop_mask((n,), 0.3, seed=4, stream=1)
    want = x.masked_fill(drop, 0.0)
    assert torch.equal(kernels.apply_drop(x.clone(), 0.3, seed=4, stream=1), want)
    assert torch.equal(kernels.apply_drop(x, 0.3, seed=4, stream=1, scale=2.0, out=torch.empty_like(x)), want * 2)


def test_feed_forward_under_bfloat16_autocast_is_as_accurate_as_autocasts_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    # under CPU bf16 autocast the fused block runs its six products in bfloat16, as autocast runs the two
    # Linear maps; against float64 with the same mask, its output and every gradient must be no further
    # off than autocast's own Linear -> ReLU -> Dropout -> Linear chain (its error, here about 4e-3 for
    # the output and 4e-2 for dx), and it must hand back float32
    from biosig_lightning.models.spdtransnet import kernels

    d, f, p, n = 64, 160, 0.2, 600
    torch.manual_seed(24)
    lin1, lin2 = torch.nn.Linear(d, f), torch.nn.Linear(f, d)
    x = torch.randn(n, d, requires_grad=True)
    g = torch.randn(n, d)
    lows: list[torch.dtype | None] = []
    apply = kernels.FeedForward.apply
    monkeypatch.setattr(kernels.FeedForward, "apply", lambda *a: lows.append(a[-1]) or apply(*a))
    torch.manual_seed(25)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = kernels.feed_forward(x, lin1, lin2, p, True)
    assert lows == [torch.bfloat16] and out.dtype == torch.float32
    params = [x, *lin1.parameters(), *lin2.parameters()]
    got = [out, *torch.autograd.grad(out, params, g)]
    assert all(t.dtype == torch.float32 for t in got)
    torch.manual_seed(25)
    keep = ~kernels.drop_mask((n, kernels._aligned(f)), p, kernels.draw_seed())[:, :f]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chain_out = lin2(torch.relu(lin1(x)) * keep / (1 - p))
    chain = [chain_out, *torch.autograd.grad(chain_out, params, g.bfloat16())]
    l1, l2 = lin1.double(), lin2.double()  # in place: the last use of the float32 modules
    xd = x.detach().double().requires_grad_()
    ref_out = l2(torch.relu(l1(xd)) * keep / (1 - p))
    ref = [ref_out, *torch.autograd.grad(ref_out, [xd, *l1.parameters(), *l2.parameters()], g.double())]
    for name, a, b, r in zip(("y", "dx", "dW1", "db1", "dW2", "db2"), got, chain, ref, strict=True):
        err_ours = ((a.double() - r).norm() / r.norm()).item()
        err_chain = ((b.double() - r).norm() / r.norm()).item()
        assert err_ours <= 1.25 * err_chain + 1e-6, (name, err_ours, err_chain)


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
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15, fc_width=10,
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
    out = kernels.SPAttention.apply(*args, 0.0, 0)
    out.sum().backward()
    ref_args = [t.detach().float().requires_grad_() for t in args]
    ref = kernels.SPAttention.apply(*ref_args, 0.0, 0)
    ref.sum().backward()
    assert out.dtype == torch.float32
    # the products with x take bfloat16 operands, so the results are those of float32 to a few bfloat16
    # roundings (2^-8 each) in norm; test_map_kernels pins their accuracy against float64
    for a, r in ((out, ref), *((a.grad, r.grad) for a, r in zip(args, ref_args, strict=True))):
        assert ((a.double() - r.double()).norm() / r.double().norm()).item() < 4 * 2**-8
    assert [a.grad.dtype for a in args] == [a.dtype for a in args]


@pytest.mark.parametrize(("k", "n", "bias"), [(35, 103, True), (351, 1035, True), (32, 17, False), (16, 48, True)])
def test_aligned_linear_matches_f_linear_in_outputs_and_gradients(k: int, n: int, bias: bool) -> None:
    torch.manual_seed(12)
    x = torch.randn(3, 5, k, dtype=torch.float64, requires_grad=True)
    w = torch.randn(n, k, dtype=torch.float64, requires_grad=True)
    b = torch.randn(n, dtype=torch.float64, requires_grad=True) if bias else None
    inputs = (x, w, b) if bias else (x, w)
    out = kernels.AlignedLinear.apply(x, w, b)
    ref = torch.nn.functional.linear(x, w, b)
    assert out.shape == ref.shape == (3, 5, n)
    g = torch.randn_like(ref)
    for got, want in zip(torch.autograd.grad(out, inputs, g), torch.autograd.grad(ref, inputs, g), strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    # the dispatcher: any leading shape, a single token included, as F.linear takes it
    for lead in ((), (4,), (2, 3, 2)):
        xs = torch.randn(*lead, k, dtype=torch.float64)
        torch.testing.assert_close(kernels.linear(xs, w, b), torch.nn.functional.linear(xs, w, b), rtol=1e-12, atol=1e-12)


def test_encoder_layer_cpu_path_is_the_plain_layer_with_aligned_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    # the CPU path (lean dropout, fused SP-MHA, aligned linear maps) against the layer written with the
    # modules themselves, at dropout 0 in float64; and its unaligned maps (d = 21, d_ff = 55) do run aligned
    from biosig_lightning.models.spdtransnet.attention import SPEncoderLayer

    torch.manual_seed(13)
    layer = SPEncoderLayer(21, 3, 55, dropout=0.0).double()
    calls: list[tuple[int, ...]] = []
    apply = kernels.AlignedLinear.apply
    monkeypatch.setattr(kernels.AlignedLinear, "apply", lambda x, w, b: calls.append(tuple(w.shape)) or apply(x, w, b))
    ff_calls: list[tuple[int, ...]] = []
    ff_apply = kernels.FeedForward.apply
    monkeypatch.setattr(kernels.FeedForward, "apply", lambda x, *a: ff_calls.append(tuple(a[0].shape)) or ff_apply(x, *a))
    x = torch.randn(2, 7, 21, dtype=torch.float64, requires_grad=True)
    out = layer(x)
    # q and k in one product: 2 x 3 heads of 7, each padded to 8 columns (a multiple of 8) on the CPU
    assert calls == [(48, 21)] and ff_calls == [(55, 21)]
    h = layer.norm1(x + reference_sp_mha(layer.attn, x, seed=0))
    ref = layer.norm2(h + layer.ff(h))
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    params = [x, *layer.parameters()]
    for got, want in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g), strict=True):
        torch.testing.assert_close(got, want)


def test_backward_workspaces_holding_garbage_change_no_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    # the backward passes of the feed-forward block and the aligned maps write their large temporaries
    # into per-thread buffers kept from call to call; whatever those hold before (NaN here) must not reach
    # a gradient (the zero padding columns are written anew each time)
    torch.manual_seed(16)
    lin1, lin2 = torch.nn.Linear(21, 55).double(), torch.nn.Linear(55, 21).double()
    x = torch.randn(3, 5, 21, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, 21, dtype=torch.float64)
    params = [x, *lin1.parameters(), *lin2.parameters()]
    want = torch.autograd.grad(lin2(torch.relu(lin1(x))), params, g)
    want_lin = torch.autograd.grad(torch.nn.functional.linear(x, lin1.weight, lin1.bias), [x, lin1.weight], g.repeat(1, 1, 3)[..., :55])
    monkeypatch.setattr(kernels, "_workspace", lambda name, shape, like: like.new_full(shape, float("nan")))
    got = torch.autograd.grad(kernels.feed_forward(x, lin1, lin2, 0.0, True), params, g)
    got_lin = torch.autograd.grad(kernels.linear(x, lin1.weight, lin1.bias), [x, lin1.weight], g.repeat(1, 1, 3)[..., :55])
    for a, b in zip((*got, *got_lin), (*want, *want_lin), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


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
def test_first_layer_factored_queries_change_no_output_or_gradient(pe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.models.spdtransnet import attention

    kw = dict(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3, d_model=10,
              tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1, d_ff=15, fc_width=10,
              dropout=0.3, pe=pe)
    torch.manual_seed(22)
    model = SPDTransNet(**kw).double()
    x = torch.randn(2, 18, 6, dtype=torch.float64)
    widths: list[int] = []
    project = attention._project
    monkeypatch.setattr(attention, "_project", lambda x, w, b, f: widths.append((f or (x,))[0].shape[-1]) or project(x, w, b, f))
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
