"""LightningModules: training recipes around pure nn.Module backbones."""

from biosig_lightning.tasks.classification import ClassificationTask

__all__ = ["ClassificationTask"]
