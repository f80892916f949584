"""The recipe x backbone matrix: every recipe (plain, each DG plug-in, STDRO) over every window backbone
trains
on a tiny stand-in and beats its ``lr = 0`` control on held-out subjects, or the recipe refuses the backbone
for a stated reason (a DG method needing a style site or pooled features the backbone does not declare).

One module-scoped run of the whole matrix (:func:`biosig_lightning.robust.matrix.run_matrix`), one test per
backbone reading its row; the same cells make the docs' table (``benchmarks/recipe_matrix.py``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from biosig_lightning.robust.matrix import (
    RECIPES,
    Cell,
    matrix_standin,
    recalibrate_batchnorm,
    run_cell,
    run_matrix,
    window_backbones,
)

BACKBONES = window_backbones()
#: the reasons a recipe may refuse a backbone (the contract test pins which pairs)
REFUSALS = ("declares no style site", "lacks head")


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


def test_recalibrated_batchnorm_holds_the_training_windows_statistics() -> None:
    """After eight updates a momentum-0.1 running mean still holds 0.9^8 of its start; recalibration replaces
    it by the average over the windows (equal batches: the windows' own mean and mean batch variance)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv1d(2, 3, 3), nn.BatchNorm1d(3))
    x = torch.randn(32, 2, 20) * 4 + 3
    net.train()
    with torch.no_grad():
        for _ in range(8):
            net(x[:16])
    bn = net[1]
    h = net[0](x).detach()
    assert not torch.allclose(bn.running_mean, h.mean((0, 2)), atol=1e-3)
    net.eval()
    recalibrate_batchnorm(net, x)
    assert not net.training and bn.momentum == 0.1
    assert torch.allclose(bn.running_mean, h.mean((0, 2)), atol=1e-5)
    var = torch.stack([h[i:i + 16].var((0, 2)) for i in (0, 16)]).mean(0)  # unbiased per batch, as BN keeps
    assert torch.allclose(bn.running_var, var, atol=1e-4)


@pytest.mark.parametrize("recipe", ["erm", "stdro"])
def test_the_signed_graph_pair_trains_at_every_seed(recipe: str) -> None:
    """The pair's row holds beyond the matrix's one seed: five seeds on three times the held-out windows
    (cross-entropy on its reconstruction-error logits is not its own objective, eq. 23, so one lucky seed
    would prove little)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = matrix_standin(windows=24)
        cells = [run_cell(recipe, "SignedGraphClassifier", data, seed=s) for s in range(5)]
    finally:
        torch.set_num_threads(threads)
    assert all(c.beats_control for c in cells), cells
