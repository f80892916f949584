"""Every paper model's training step has no host-device synchronisation and compiles as one graph.

Two checks per model. Eager: a ``TorchDispatchMode`` watches one training forward and backward for
the operators that read a tensor back to the host or give a data-dependent shape (``.item()``,
``.tolist()``, ``bool(t)``: ``aten._local_scalar_dense``; boolean-mask indexing, ``nonzero``,
``masked_select``, ``unique``): each stalls a GPU step and breaks CUDA-graph capture. Compiled:
``torch.compile(fullgraph=True)`` raises on any graph break (data-dependent control flow,
``.tolist()`` of floats; Dynamo itself folds an ``.item()`` that only feeds tensor arithmetic, hence
the eager check). Each model is built at its catalog test size on
its paper corpus's shape; the compiled function is the training objective (cross-entropy, plus the
auxiliary terms of a model with the ``aux`` capability) in train mode, backward included (AOTAutograd
compiles the backward graph when it first runs; the ``aot_eager`` backend, see :data:`BACKEND`); then
eval-mode logits of the compiled model equal
eager ones at float32 tolerance, in train mode too for models without random operators at test size.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from biosig_lightning.models import catalog
from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.spdtransnet import SPMultiheadAttention

#: (catalog name, paper corpus) of the five paper models
PAPER_MODELS = [
    ("BioFormer", "apava"),
    ("SDFormer", "sleepedf"),
    ("SPDTransNet", "sleep_edf_spd"),
    ("SignedGraphClassifier", "turkish_epilepsy"),
    ("DCRNN", "tusz"),
]


def _attention_dropout_on(model: BiosignalModel) -> None:
    """SPDTransNet's attention dropout at the paper's 0.1 (the catalog's test size has none), so that
    the compiled graph holds its random path. Eagerly, the fused SP-MHA draws that dropout's seed from
    the CPU generator (``draw_seed``: a host value, not a device sync), so the eager check runs without it."""
    for module in model.modules():
        if isinstance(module, SPMultiheadAttention):
            module.dropout = 0.1


#: changes to the test-size model before compiling
COMPILE_SETUP = {"SPDTransNet": _attention_dropout_on}


def _class_polarities(model: BiosignalModel, x: torch.Tensor, y: torch.Tensor) -> None:
    """The signed-graph pair's class polarities (Sec. 3.1, eq. 5), which its task fits from training
    windows before the epoch's steps: a discrete search outside the step, as in training."""
    model.fit_polarity(x, y)  # type: ignore[operator]


#: what training does to a model before its steps, outside them
BEFORE_STEPS = {"SignedGraphClassifier": _class_polarities}
BATCH = 2
#: Dynamo's capture (where graph breaks arise) and AOTAutograd's forward and backward graphs, run
#: eagerly: Inductor's C++ code generation would take minutes on a CI runner and finds no graph break
BACKEND = "aot_eager"


#: operators whose result the host must wait for (a value read back, or an output shape set by the data)
HOST_SYNC = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim",
             "unique_consecutive",
             "is_nonzero", "equal"}


class HostSyncWatch(TorchDispatchMode):
    """Records every dispatched operator that synchronises with the host (:data:`HOST_SYNC`, boolean
    indexing)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in HOST_SYNC:
            self.found.append(name)
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or [])
        ):
            self.found.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


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
    model = entry.build(corpus, **dict(entry.test_kwargs))
    shape = entry.shapes[corpus]
    x = torch.randn(BATCH, shape.n_chans, shape.n_times, generator=torch.Generator().manual_seed(1))
    y = torch.arange(BATCH) % shape.n_outputs

    if name in BEFORE_STEPS:
        BEFORE_STEPS[name](model, x, y)
    model.train()
    with HostSyncWatch() as watch:  # eager, at the catalog's test size
        _objective(model, x, y).backward()
    assert watch.found == [], f"{name}'s training step synchronises with the host: {watch.found}"
    model.zero_grad(set_to_none=True)

    if name in COMPILE_SETUP:
        COMPILE_SETUP[name](model)
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
