"""The recipe x backbone matrix: every recipe (plain, each DG plug-in, STDRO) over every window backbone
trains
on a tiny stand-in and beats its ``lr = 0`` control on held-out subjects, or the recipe refuses the backbone
for a stated reason (a DG method needing a style site or pooled features the backbone does not declare).

One module-scoped run of the whole matrix (:func:`biosig_lightning.robust.matrix.run_matrix`), one test per
backbone reading its row. DenseCNN is left to the docs' matrix (``benchmarks/recipe_matrix.py``): its pooling
needs 700+ samples per window and one of its training steps takes seconds on a CPU."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.robust.matrix import RECIPES, Cell, run_matrix, window_backbones

SLOW = ("DenseCNN",)
BACKBONES = [n for n in window_backbones() if n not in SLOW]
#: the reasons a recipe may refuse a backbone (the contract test pins which pairs)
REFUSALS = ("declares no style site", "lacks head")
#: pairs that run but do not beat their control: a finding kept visible until fixed (the test fails once the
#: pair trains). The signed-graph classifier trains on its own objective (DenoiserPairTask, eq. 23); its
#: logits no longer saturate (per sample), yet cross-entropy, the loss of every recipe in this matrix, does
#: not train it in the matrix's eight steps: its held-out AUROC stays below the untrained pair's
KNOWN_GAPS = {
    (r, "SignedGraphClassifier"): "cross-entropy on reconstruction-error logits" for r in ("erm", "stdro")
}


@pytest.fixture(scope="module")
def matrix() -> dict[tuple[str, str], Cell]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {(c.recipe, c.backbone): c for c in run_matrix(BACKBONES)}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", BACKBONES)
def test_every_recipe_beats_its_lr0_control(matrix: dict[tuple[str, str], Cell], name: str) -> None:
    assert not matrix[("erm", name)].refused, f"plain training refused {name}"
    for recipe in RECIPES:
        cell = matrix[(recipe, name)]
        if cell.refused:
            assert any(r in cell.refused for r in REFUSALS) and name in cell.refused, cell.refused
            continue
        if (recipe, name) in KNOWN_GAPS:
            assert not cell.beats_control, f"{recipe} x {name} now trains: drop it from KNOWN_GAPS"
            continue
        assert cell.beats_control, f"{recipe} x {name} does not beat its lr = 0 control: {cell}"


def test_the_matrix_covers_every_recipe_and_window_backbone(matrix: dict[tuple[str, str], Cell]) -> None:
    assert set(matrix) == {(r, b) for r in RECIPES for b in BACKBONES}
    assert set(RECIPES) == {"erm", "mmd", "coral", "grl", "mixstyle", "dsu", "stdro"}
    assert "SPDTransNet" not in window_backbones() and "SignedGraphClassifier" in BACKBONES


def test_a_cell_that_does_not_train_fails_the_control() -> None:
    """The criterion itself: equal AUROC below the ceiling, or an equal loss at it, is not a win."""
    assert not Cell("erm", "X", 0.8, 0.8, 0.3, 0.5).beats_control
    assert not Cell("erm", "X", 1.0, 1.0, 0.5, 0.5).beats_control
    assert Cell("erm", "X", 1.0, 1.0, 0.2, 0.5).beats_control
    assert not Cell("erm", "X", None, None, refused="lacks head").beats_control
