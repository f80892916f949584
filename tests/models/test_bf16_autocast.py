"""Every paper model trains under bf16 autocast (``trainer.precision: bf16-mixed``), as on a GPU.

PyTorch's autocast runs matrix products in bfloat16 and leaves other operators in the dtype they get, so a
model that mixes a product's output with a float32 tensor in an operator that needs one dtype (``lerp``,
``index_put``, an in-place update) fails only under mixed precision. The step runs here under CPU autocast,
which casts the same operator lists; the loss and every gradient must be finite and the logits close to
float32's.
"""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models import catalog
from tests.models.test_compile_fullgraph import BEFORE_STEPS, PAPER_MODELS, _objective


@pytest.mark.parametrize(("name", "corpus"), PAPER_MODELS, ids=[n for n, _ in PAPER_MODELS])
def test_training_step_runs_under_bf16_autocast(name: str, corpus: str) -> None:
    entry = catalog.get(name)
    torch.manual_seed(0)
    model = entry.build(corpus, **dict(entry.test_kwargs))
    shape = entry.shapes[corpus]
    x = torch.randn(2, shape.n_chans, shape.n_times, generator=torch.Generator().manual_seed(1))
    y = torch.arange(2) % shape.n_outputs
    if name in BEFORE_STEPS:
        BEFORE_STEPS[name](model, x, y)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = _objective(model, x, y)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    model.eval()
    with torch.no_grad():
        want = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model(x).float()
    # bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per product): within 3 % of the logits' scale
    torch.testing.assert_close(got, want, rtol=0.03, atol=0.03 * float(want.abs().max()) + 1e-3)
