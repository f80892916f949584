"""Any recipe on any backbone: ERM, each DG method of :mod:`biosig_lightning.robust.dg` and STDRO, crossed
with every catalog backbone. One training step's loss backpropagates into the backbone (every parameter
that plain ERM trains receives a gradient under the recipe too), or the recipe refuses the backbone
when it is built, with a reason naming what the backbone lacks; the refused pairs are pinned below, so
a pair that stops working (or starts) is seen."""

from __future__ import annotations

import pytest
import torch

import biosig_lightning.models  # noqa: F401  (fills the catalog)
from biosig_lightning.models import catalog
from biosig_lightning.robust.dg import METHODS, DGTask
from biosig_lightning.robust.stdro.cost import period_bounds
from biosig_lightning.robust.stdro.task import STDROTask
from biosig_lightning.tasks.classification import ClassificationTask

RECIPES = ("erm", *[m for m in METHODS if m != "erm"], "stdro")
BATCH = 4
#: (recipe, backbone) pairs the recipe refuses, and the words its reason must contain: MixStyle and DSU
#: perturb a declared style site (BioFormer Appendix C.4: after the embedding), which these backbones do not
#: declare; MMD, CORAL and GRL align pooled features, which these backbones do not expose (no ``head``)
NO_STYLE_SITE = ["BioFormer", "CNNLSTM", "DCRNN", "DGCNN", "DenseCNN", "GIN", "PatchTST", "SDFormer",
                 "SPDTransNet",
                 "SeizureLSTM", "SignedGraphClassifier", "StaticGNN"]
NO_FEATURE_API = ["CNNLSTM", "DenseCNN", "SeizureLSTM", "SignedGraphClassifier"]
INCOMPATIBLE: dict[tuple[str, str], str] = {
    **{(r, b): "declares no style site" for b in NO_STYLE_SITE for r in ("mixstyle", "dsu")},
    **{(r, b): "lacks head" for b in NO_FEATURE_API for r in ("mmd", "coral", "grl")},
}

#: pairs where the step runs but the backbone gets no gradient: a finding this test made, kept visible
#: here until it is fixed (the test fails once the pair trains, so the entry is then removed)
KNOWN_GAPS: dict[tuple[str, str], str] = {}


#: STDRO ascent backtracking set where a backbone needs it (the paper's plain steps elsewhere): the
#: signed-graph classifier's logits are minus squared reconstruction errors (about -3.6e5 on this batch,
#: cross-entropy in the thousands), so even a 1e-3 fixed step overshoots every margin and leaves
#: cross-entropy exactly 0 on the adversarial batch; halving a step that lowers the objective keeps it
ASCENT_BACKTRACKS = {"SignedGraphClassifier": 4}


def _build(recipe: str, backbone: torch.nn.Module, n_outputs: int) -> ClassificationTask:
    if recipe == "erm":
        return ClassificationTask(backbone, n_outputs=n_outputs)
    if recipe == "stdro":
        # a small ascent step keeps X~ near X, so no unit is driven dead by the random batch
        return STDROTask(backbone, n_outputs=n_outputs, ascent_steps=2, n_periods=2, ascent_lr=1e-3,
                         ascent_backtracks=ASCENT_BACKTRACKS.get(type(backbone).__name__, 0))
    return DGTask(backbone, method=recipe, n_outputs=n_outputs, style_p=1.0, disc_hidden=8, disc_layers=1)


def _backbone(name: str) -> tuple[torch.nn.Module, catalog.Shape]:
    entry = catalog.get(name)
    corpus = next(iter(entry.shapes))
    torch.manual_seed(0)
    return entry.build(corpus, **dict(entry.test_kwargs)), entry.shapes[corpus]


def _step_grads(recipe: str, name: str) -> set[str]:
    """Names of the backbone parameters with a nonzero gradient after one training step's backward."""
    backbone, shape = _backbone(name)
    task = _build(recipe, backbone, shape.n_outputs)
    task.train()
    torch.manual_seed(1)
    x = torch.randn(BATCH, shape.n_chans, shape.n_times)
    batch = {"x": x, "y": torch.arange(BATCH) % shape.n_outputs, "subject": torch.tensor([0, 0, 1, 1]),
             "index": torch.arange(BATCH)}
    if recipe == "grl":
        task._build_discriminator([0, 1])
    if recipe == "stdro":
        bounds = period_bounds(shape.n_times, 2)
        task.init_cost(torch.eye(shape.n_chans).expand(len(bounds), -1, -1).clone(), bounds)
        x_adv, _ = task.inner_maximisation(x, batch["y"])
        assert not torch.equal(x_adv, x), "STDRO's ascent did not move the input"
        batch = {**batch, "x": x_adv}
    loss, _, _ = task.training_loss(batch)
    assert torch.isfinite(loss)
    loss.backward()
    return {n for n, p in backbone.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


@pytest.mark.parametrize("name", catalog.names())
def test_every_recipe_trains_the_backbone_or_refuses_it(name: str) -> None:
    erm = _step_grads("erm", name)
    assert erm, f"{name}: plain ERM trains no parameter"
    for recipe in RECIPES[1:]:
        try:
            got = _step_grads(recipe, name)
        except ValueError as err:
            assert (recipe, name) in INCOMPATIBLE, f"{recipe} x {name} refused but not declared: {err}"
            assert INCOMPATIBLE[(recipe, name)] in str(err) and type(_backbone(name)[0]).__name__ in str(err)
            continue
        assert (recipe, name) not in INCOMPATIBLE, f"{recipe} x {name} is declared incompatible but trains"
        if (recipe, name) in KNOWN_GAPS:
            assert not got, f"{recipe} x {name} now trains: drop it from KNOWN_GAPS"
            continue
        assert erm <= got, f"{recipe} x {name}: no gradient for {sorted(erm - got)[:5]}"
