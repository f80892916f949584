"""SP-MHA recomputed in backward: the same attention, masks and gradients as plain autograd."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models.spdtransnet import SPMultiheadAttention, recompute
from tests.models.spdtransnet.sp_reference import reference_sp_mha


def _grads(att: SPMultiheadAttention, x: torch.Tensor, dout: torch.Tensor, run) -> list[torch.Tensor]:  # noqa: ANN001
    out = run()
    return [out.detach(), *torch.autograd.grad(out, [x, *att.parameters()], dout)]


@pytest.mark.parametrize("head_weights", ["softmax", "free"])
def test_fused_is_plain_autograd_with_the_same_dropout_masks(head_weights: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recompute, "MAP_CHUNK", 2 * 3 * 7 * 7)  # several chunks, one mask stream each
    torch.manual_seed(5)
    att = SPMultiheadAttention(21, 3, dropout=0.3, head_weights=head_weights, impl="fused").double().train()
    x = torch.randn(5, 7, 21, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(5, 7, 21, dtype=torch.float64)
    torch.manual_seed(6)
    seed = recompute.draw_seed()
    torch.manual_seed(6)
    got = _grads(att, x, dout, lambda: att(x))
    want = _grads(att, x, dout, lambda: reference_sp_mha(att, x, seed))
    assert (got[0] != 0).any()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_sdpa_fused_and_recompute_agree_in_outputs_and_gradients() -> None:
    # in float64, where the three orders of summation agree to round-off (in float32 each is about 1e-5
    # away from the exact head-weight gradient, so comparing two of them pins their rounding, not the maths)
    torch.manual_seed(2)
    att = SPMultiheadAttention(45, 9, dropout=0.0).double()
    x = torch.randn(4, 30, 45, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(4, 30, 45, dtype=torch.float64)
    results = []
    for impl in ("sdpa", "fused", "recompute"):
        att.impl = impl
        results.append(_grads(att, x, dout, lambda: att(x)))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_under_bf16_autocast_as_accurate_as_autocasts_own_ops() -> None:
    # CPU bf16 autocast hands the function bfloat16 q and k; it keeps the scores, softmax, dropout and
    # combination in float32 and takes bfloat16 operands only for the three products with x. Against
    # float64 with the same masks, its output and every gradient must be no further off than the plain
    # ops of eq. 2 under the same autocast (whose q k^T, combination and A x all run in bfloat16)
    torch.manual_seed(26)
    att = SPMultiheadAttention(351, 9, dropout=0.1, impl="fused").train()
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
    chain = grads(att, x, lambda m, i: reference_sp_mha(m, i, seed), True)
    exact = grads(att.double(), x.double(), lambda m, i: reference_sp_mha(m, i, seed), False)
    for name, a, b, r in zip(["out", "x", "q.w", "q.b", "k.w", "k.b", "theta"], got,
                             chain, exact, strict=True):
        err, ref = ((a - r).norm() / r.norm()).item(), ((b - r).norm() / r.norm()).item()
        assert err <= 1.25 * ref + 1e-6, (name, err, ref)
