"""Robust training recipes: LightningModules that add a generalisation objective to any backbone."""

from biosig_lightning.robust.dg import DEFAULT_DG_WEIGHTS, DGTask, dann_lambda
from biosig_lightning.robust.stdro import STDROTask

__all__ = ["DEFAULT_DG_WEIGHTS", "DGTask", "STDROTask", "dann_lambda"]
