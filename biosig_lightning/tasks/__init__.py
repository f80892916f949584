"""LightningModules: training recipes around pure nn.Module backbones."""

from biosig_lightning.tasks.classification import ClassificationTask
from biosig_lightning.tasks.next_clip import NextClipTask
from biosig_lightning.tasks.sdformer import SDFormerTask

__all__ = ["ClassificationTask", "NextClipTask", "SDFormerTask"]
