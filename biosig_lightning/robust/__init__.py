"""Robust training recipes: LightningModules that add a generalisation objective to any backbone."""

from biosig_lightning.robust.dg import DEFAULT_DG_WEIGHTS, DGTask, dann_lambda

__all__ = ["DEFAULT_DG_WEIGHTS", "DGTask", "dann_lambda"]
