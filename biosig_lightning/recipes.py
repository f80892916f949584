"""The recipe catalog: every training recipe by name, what it is for and which backbones it takes.

A recipe is the LightningModule around a backbone (``model.class_path`` of an experiment; the backbone
goes under ``model.init_args.backbone``). Recipes live beside the code they belong to: the generic one
and the papers' own in ``tasks/``, the ones that add a generalisation objective to any backbone in
``robust/``; their class paths stay what the experiments name. This table is the one place that lists
them: ``biosig --help``, the docs' recipe list, a benchmark grid's recipe check
(:mod:`biosig_lightning.benchmarking.grid`) and the recipe x backbone matrix
(:mod:`biosig_lightning.robust.matrix`) read it.

It imports no recipe, so it can be imported from anywhere (``biosig --help`` stays instant);
:func:`load` imports one. ``tests/test_recipes.py`` checks that every entry imports as a LightningModule
and that every LightningModule of ``tasks/`` and ``robust/`` has an entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["RECIPES", "RecipeEntry", "get", "load", "names", "wrapping_any"]


@dataclass(frozen=True)
class RecipeEntry:
    """One recipe: its short name (what LightningCLI resolves), dotted class path, purpose and backbones.

    Attributes:
        backbones: the catalog backbones (:mod:`biosig_lightning.models.catalog`) it is made for;
            ``None``: it wraps any backbone.
        takes: which backbones it takes, in words.
    """

    name: str
    class_path: str
    purpose: str
    backbones: tuple[str, ...] | None
    takes: str


RECIPES: tuple[RecipeEntry, ...] = (
    RecipeEntry("ClassificationTask", "biosig_lightning.tasks.ClassificationTask",
                "cross-entropy training (ERM): common metrics, schedules, checkpoint selection, results.json",
                None, "any catalog backbone"),
    RecipeEntry("DGTask", "biosig_lightning.robust.DGTask",
                "domain generalisation across subjects (BioFormer Table 3): erm/mmd/coral/grl/mixstyle/dsu",
                None,
                "any catalog backbone; mmd/coral/grl align its features, mixstyle/dsu need a declared "
                "style site (a pair it cannot serve is refused when built)"),
    RecipeEntry("STDROTask", "biosig_lightning.robust.STDROTask",
                "spatiotemporal distributionally robust optimisation (STDRO, Algorithm 1)", None,
                "any catalog backbone whose input is channels x time (its cost reads the channel "
                "correlations of each period)"),
    RecipeEntry("SDFormerTask", "biosig_lightning.tasks.SDFormerTask",
                "SD-Former's two phases: composite objective with the learned graph, then the frozen graph",
                ("SDFormer",),
                "a backbone with forward_with_aux (SDFormer)"),
    RecipeEntry("SPDTransNetTask", "biosig_lightning.tasks.SPDTransNetTask",
                "SPDTransNet's recipe: label smoothing, Adam with exponential decay, N1 F1 metrics",
                ("SPDTransNet",), "SPDTransNet (its optional CPU kernels are SPDTransNet's)"),
    RecipeEntry("DenoiserPairTask", "biosig_lightning.tasks.DenoiserPairTask",
                "signed-graph denoisers trained on noisy/clean pairs; class by reconstruction error",
                ("SignedGraphClassifier",), "a backbone with one denoiser per class (SignedGraphClassifier)"),
    RecipeEntry("NextClipTask", "biosig_lightning.tasks.NextClipTask",
                "DCRNN's self-supervised next-clip pre-training (mean absolute error)", (),
                "DCRNNNextClip (a pre-training model, not a catalog classifier)"),
)

def names() -> list[str]:
    """Every recipe's short name, in catalog order."""
    return [r.name for r in RECIPES]


def get(name: str) -> RecipeEntry:
    """The entry of a short name or a dotted class path (one line naming the known recipes if none)."""
    for r in RECIPES:
        if name in (r.name, r.class_path):
            return r
    raise KeyError(f"no recipe {name!r}; known: {', '.join(names())}")


def load(name: str) -> type:
    """Import a recipe's class by short name or class path."""
    module, _, attr = get(name).class_path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def wrapping_any() -> list[RecipeEntry]:
    """The recipes that wrap any catalog backbone (the rows of the recipe x backbone matrix)."""
    return [r for r in RECIPES if r.backbones is None]
