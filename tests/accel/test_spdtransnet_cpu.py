"""SPDTransNet's CPU backend: the same attention, masks and gradients as plain autograd, maps kept safely,
switched on in one place."""

from __future__ import annotations

import gc
import math

import pytest
import torch

from biosig_lightning import accel
from biosig_lightning.accel import map_kernels
from biosig_lightning.accel import spdtransnet as cpu
from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention, attention, recompute
from biosig_lightning.tasks.spdtransnet import SPDTransNetTask
from tests.models.spdtransnet.sp_reference import reference_sp_mha

PATHS = ["numba_kept", "numba_recomputed"]


def _use(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Route the switched SP-MHA's computation through ``path``."""
    if not map_kernels.available():
        pytest.skip("numba is not installed (the 'fast' extra)")
    if path == "numba_recomputed":
        monkeypatch.setattr(cpu, "KEEP_MAPS_BYTES", 0)


def _cpu_att(*args, **kwargs) -> SPMultiheadAttention:  # noqa: ANN002, ANN003
    att = SPMultiheadAttention(*args, **kwargs)
    assert cpu.enable(att) == 1 and isinstance(att, cpu.CPUSPMultiheadAttention)
    return att


def _kept_maps(calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    slab = cpu._slab
    monkeypatch.setattr(cpu, "_slab", lambda shape,
                        dtype: calls.append(math.prod(shape)) or slab(shape, dtype))


def _grads(att: SPMultiheadAttention, x: torch.Tensor, dout: torch.Tensor, run) -> list[torch.Tensor]:  # noqa: ANN001
    out = run()
    return [out.detach(), *torch.autograd.grad(out, [x, *att.parameters()], dout)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("head_weights", ["softmax", "free"])
def test_each_path_is_plain_autograd_with_the_same_dropout_masks(path: str, head_weights: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _use(path, monkeypatch)
    kept: list[int] = []
    _kept_maps(kept, monkeypatch)
    monkeypatch.setattr(cpu, "_MAP_CHUNK", 2 * 3 * 7 * 7)  # several chunks, one mask stream each
    torch.manual_seed(5)
    att = _cpu_att(21, 3, dropout=0.3, head_weights=head_weights, impl="fused").double().train()
    x = torch.randn(5, 7, 21, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(5, 7, 21, dtype=torch.float64)
    torch.manual_seed(6)
    seed = recompute.draw_seed()
    torch.manual_seed(6)
    got = _grads(att, x, dout, lambda: att(x))
    want = _grads(att, x, dout, lambda: reference_sp_mha(att, x, seed, masks=cpu))
    assert kept == ([5 * 3 * 7 * 7] if path == "numba_kept" else [])
    assert (got[0] != 0).any()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_cpu_masks_have_the_rate_and_are_reproducible() -> None:
    m = cpu.drop_mask((1000, 1000), 0.1, seed=3)
    assert abs(m.float().mean().item() - 0.1) < 0.002  # 6 binomial standard deviations
    assert torch.equal(m, cpu.drop_mask((1000, 1000), 0.1, seed=3))
    assert not torch.equal(m, cpu.drop_mask((1000, 1000), 0.1, seed=3, stream=1))


@pytest.mark.parametrize("path", PATHS)
def test_switched_module_agrees_with_the_plain_one(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # in float64 (in float32 the orders of summation differ by round-off), dropout 0: the switched fused
    # way against the plain module's fused, sdpa and recompute ways, outputs and gradients
    _use(path, monkeypatch)
    torch.manual_seed(2)
    plain = SPMultiheadAttention(45, 9, dropout=0.0).double()
    switched = _cpu_att(45, 9, dropout=0.0).double()
    switched.load_state_dict(plain.state_dict())
    x = torch.randn(4, 30, 45, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(4, 30, 45, dtype=torch.float64)
    got = _grads(switched, x, dout, lambda: switched(x))
    for impl in ("fused", "sdpa", "recompute"):
        plain.impl = impl
        for a, b in zip(got, _grads(plain, x, dout, lambda: plain(x)), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("path", PATHS)
def test_under_bf16_autocast_as_accurate_as_autocasts_own_ops(path: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU bf16 autocast hands the kernel bfloat16 q and k; it keeps the scores, softmax, dropout and
    # combination in float32 and takes bfloat16 operands only for the three products with x. Against
    # float64 with the same masks, its output and every gradient must be no further off than the plain
    # ops of eq. 2 under the same autocast (whose q k^T, combination and A x all run in bfloat16)
    _use(path, monkeypatch)
    torch.manual_seed(26)
    att = _cpu_att(351, 9, dropout=0.1, impl="fused").train()
    x = torch.randn(2, 210, 351)
    dout = torch.randn(2, 210, 351)
    torch.manual_seed(27)
    seed = recompute.draw_seed()

    def grads(module: SPMultiheadAttention, inp: torch.Tensor, run, autocast: bool) -> list[torch.Tensor]:  # noqa: ANN001
        inp = inp.detach().requires_grad_()
        torch.manual_seed(27)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = run(module, inp)
        return [t.double() for t in (out,
                                     *torch.autograd.grad(out,
                                                          [inp, *module.parameters()], dout.to(out.dtype)))]

    got = grads(att, x, lambda m, i: m(i), True)
    assert got[0].abs().sum() > 0
    chain = grads(att, x, lambda m, i: reference_sp_mha(m, i, seed, masks=cpu), True)
    exact = grads(att.double(), x.double(), lambda m, i: reference_sp_mha(m, i, seed, masks=cpu), False)
    for name, a, b, r in zip(["out", "x", "q.w", "q.b", "k.w", "k.b", "theta"], got,
                             chain, exact, strict=True):
        err, ref = ((a - r).norm() / r.norm()).item(), ((b - r).norm() / r.norm()).item()
        assert err <= 1.25 * ref + 1e-6, (name, err, ref)


@pytest.mark.parametrize("path", PATHS)
def test_float32_kernels_are_as_accurate_as_torch(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # float32 against float64, at the published head width: the switched module's error may not exceed
    # twice the plain module's (the kernels' row sums are reassociated, so they need not round the same way)
    torch.manual_seed(3)
    att = SPMultiheadAttention(351, 9, dropout=0.0)
    x = torch.randn(2, 210, 351)
    dout = torch.randn(2, 210, 351)

    def run(dtype: torch.dtype, switched: bool) -> list[torch.Tensor]:
        a = (_cpu_att if switched else SPMultiheadAttention)(351, 9, dropout=0.0).to(dtype)
        a.load_state_dict(att.state_dict())
        xx = x.to(dtype).requires_grad_()
        return [t.double() for t in _grads(a, xx, dout.to(dtype), lambda: a(xx))]

    exact = run(torch.float64, False)
    torch_errors = [(a - b).abs().max().item() for a, b in zip(run(torch.float32, False), exact, strict=True)]
    _use(path, monkeypatch)
    errors = [(a - b).abs().max().item() for a, b in zip(run(torch.float32, True), exact, strict=True)]
    for name, err, ref in zip(["out", "x", "q.w", "q.b", "k.w", "k.b", "theta"], errors,
                              torch_errors, strict=True):
        assert err <= 2 * ref + 1e-7, (name, err, ref)


@pytest.mark.parametrize("path", PATHS)
def test_nan_inputs_give_nan_where_torch_does(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernels' float flags keep NaN semantics: a NaN in one query of one head reaches exactly the
    # outputs and gradients it reaches through the plain function (no silent zeros)
    q, k = torch.randn(2, 3, 7, 4, dtype=torch.float64), torch.randn(2, 3, 7, 4, dtype=torch.float64)
    q[1, 0, 2, 1] = float("nan")
    x, w = torch.randn(2, 7, 5, dtype=torch.float64), torch.randn(3, dtype=torch.float64).softmax(0)

    def nan_pattern(fn: type[torch.autograd.Function]) -> list[torch.Tensor]:
        args = [t.clone().requires_grad_() for t in (q, k, x, w)]
        out = fn.apply(*args, 0.2, 9)
        out.backward(torch.ones_like(out))
        return [t.isnan() for t in (out, *(a.grad for a in args))]

    want = nan_pattern(recompute.SPAttention)
    _use(path, monkeypatch)
    got = nan_pattern(cpu.SPAttention)
    assert want[0][1, 2].all() and not want[0][0].any() and want[4][0] and not want[4][1:].any()
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_kept_maps_survive_a_second_forward_before_their_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kept map's memory returns to the pool only when no tensor holds it: with retain_graph, a second
    # forward of the same size must not overwrite the first graph's maps before its second backward
    _use("numba_kept", monkeypatch)
    torch.manual_seed(17)
    att = _cpu_att(21, 3, dropout=0.2, impl="fused").double().train()
    x1, x2 = (torch.randn(4, 7, 21, dtype=torch.float64, requires_grad=True) for _ in range(2))
    out1 = att(x1)
    (g1,) = torch.autograd.grad(out1.sum(), x1, retain_graph=True)
    out2 = att(x2)
    (g2,) = torch.autograd.grad(out2.sum(), x2, retain_graph=True)
    (g1_again,) = torch.autograd.grad(out1.sum(), x1)
    torch.testing.assert_close(g1_again, g1, rtol=0, atol=0)
    assert not torch.equal(g1, g2)


def test_slab_memory_is_reused_once_its_tensor_is_gone() -> None:
    cpu.release_workspaces()
    a = cpu._slab((3, 5), torch.float32)
    b = cpu._slab((3, 5), torch.float32)
    assert a.data_ptr() != b.data_ptr()  # a is still in use
    ptr = a.data_ptr()
    view = a[1:]
    del a
    gc.collect()
    assert cpu._slab((3, 5), torch.float32).data_ptr() != ptr  # a view still holds it
    del view
    c = cpu._slab((3, 5), torch.float32)
    assert c.data_ptr() == ptr and c.shape == (3, 5)
    assert cpu._slab((15,), torch.float64).dtype == torch.float64


@pytest.mark.parametrize("path", PATHS)
def test_garbage_in_workspaces_and_slabs_changes_nothing(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernels' chunk buffers are per-thread workspaces kept from call to call, and kept maps live on
    # pooled memory: whatever they hold before (NaN here) must not reach the output or a gradient
    _use(path, monkeypatch)
    torch.manual_seed(18)
    att = _cpu_att(21, 3, dropout=0.25, impl="fused").double().train()
    x = torch.randn(3, 7, 21, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(3, 7, 21, dtype=torch.float64)
    torch.manual_seed(19)
    want = _grads(att, x, dout, lambda: att(x))
    monkeypatch.setattr(cpu, "_workspace", lambda name, shape, like: like.new_full(shape, float("nan")))
    monkeypatch.setattr(cpu, "_slab", lambda shape, dtype: torch.full(shape, float("nan"), dtype=dtype))
    torch.manual_seed(19)
    got = _grads(att, x, dout, lambda: att(x))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_heads_are_padded_and_without_numba_the_plain_function_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # q and k in one product: 2 x 3 heads of 7 columns, each padded to 8; numba absent: the model's own
    # recompute function takes the padded heads, with the same output and gradients as the plain module
    monkeypatch.setattr(map_kernels, "_numba", None)
    torch.manual_seed(13)
    plain = SPMultiheadAttention(21, 3, dropout=0.0).double()
    switched = _cpu_att(21, 3, dropout=0.0).double()
    switched.load_state_dict(plain.state_dict())
    widths: list[tuple[int, ...]] = []
    project = attention._project
    monkeypatch.setattr(attention, "_project", lambda x, w, b,
                        f: widths.append(tuple(w.shape)) or project(x, w, b, f))
    x = torch.randn(2, 7, 21, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(2, 7, 21, dtype=torch.float64)
    got = _grads(switched, x, dout, lambda: switched(x))
    assert widths == [(48, 21)]
    for a, b in zip(got, _grads(plain, x, dout, lambda: plain(x)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("flag", [True, False])
def test_the_task_flag_switches_a_cpu_backbone_and_keeps_its_state(flag: bool) -> None:
    backbone = SPDTransNet(n_chans=3 * 6, n_outputs=5, n_times=6, sfreq=100.0, n_bands=2, n_subwindows=3,
                           d_model=10,
                           tokens_per_epoch=2, intra_heads=2, intra_layers=2, inter_heads=2, inter_layers=1,
                           d_ff=15,
                           fc_width=10, dropout=0.1)
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    task = SPDTransNetTask(backbone=backbone, n_outputs=5, cpu_kernels=flag)
    task.on_fit_start()
    switched = [
        type(m) is cpu.CPUSPMultiheadAttention
        for m in backbone.modules()
        if isinstance(m, SPMultiheadAttention)
    ]
    assert switched == [flag] * 3
    assert backbone.state_dict().keys() == state.keys()
    assert all(torch.equal(backbone.state_dict()[k], v) for k, v in state.items())
    assert accel.enable_spdtransnet_cpu(backbone) == (0 if flag else 3)  # idempotent
