"""Every paper model's training forward compiles as one graph, and compiled logits equal eager ones.

``torch.compile(fullgraph=True)`` raises on any graph break, so a host-device synchronisation put
back into a forward (``.item()``, ``.tolist()``, a data-dependent shape, boolean-mask indexing) fails
here before it costs a launch-bound step on a GPU. Each model is built at its catalog test size on
its paper corpus's shape; the compiled function is the training objective (cross-entropy, plus the
auxiliary terms of a model with the ``aux`` capability) in train mode, backward included (AOTAutograd
compiles the backward graph when it first runs; the ``aot_eager`` backend, see :data:`BACKEND`); then eval-mode logits of the compiled model equal
eager ones at float32 tolerance, in train mode too for models without random operators at test size.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biosig_lightning.models import catalog
from biosig_lightning.models.base import BiosignalModel

#: (catalog name, paper corpus) of the five paper models
PAPER_MODELS = [
    ("BioFormer", "apava"),
    ("SDFormer", "sleepedf"),
    ("SPDTransNet", "sleep_edf_spd"),
    ("SignedGraphClassifier", "turkish_epilepsy"),
    ("DCRNN", "tusz"),
]
#: beyond the catalog's test size: dropout on, as in the paper configuration (its random paths traced too)
OVERRIDES = {"SPDTransNet": {"dropout": 0.1}}
BATCH = 2
#: Dynamo's capture (where graph breaks arise) and AOTAutograd's forward and backward graphs, run
#: eagerly: Inductor's C++ code generation would take minutes on a CI runner and finds no graph break
BACKEND = "aot_eager"


def _objective(model: BiosignalModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if model.supports("aux"):
        out = model.forward_with_aux(x)
        return F.cross_entropy(out.logits, y) + sum(out.losses().values())
    return F.cross_entropy(model(x), y)


@pytest.mark.parametrize(("name", "corpus"), PAPER_MODELS, ids=[n for n, _ in PAPER_MODELS])
def test_training_forward_compiles_fullgraph_and_matches_eager(name: str, corpus: str) -> None:
    torch._dynamo.reset()
    entry = catalog.get(name)
    torch.manual_seed(0)
    model = entry.build(corpus, **{**dict(entry.test_kwargs), **OVERRIDES.get(name, {})})
    shape = entry.shapes[corpus]
    x = torch.randn(BATCH, shape.n_chans, shape.n_times, generator=torch.Generator().manual_seed(1))
    y = torch.arange(BATCH) % shape.n_outputs

    model.train()
    step = torch.compile(lambda a, b: _objective(model, a, b), fullgraph=True, dynamic=False, backend=BACKEND)
    loss = step(x, y)  # a graph break raises here (torch._dynamo.exc.Unsupported and kin)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)

    model.eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False, backend=BACKEND)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
