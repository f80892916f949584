"""LightningModules: training recipes around pure nn.Module backbones."""

from biosig_lightning.tasks.classification import ClassificationTask
from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask
from biosig_lightning.tasks.next_clip import NextClipTask
from biosig_lightning.tasks.sdformer import SDFormerTask
from biosig_lightning.tasks.spdtransnet import SPDTransNetTask

__all__ = ["ClassificationTask", "DenoiserPairTask", "NextClipTask", "SDFormerTask", "SPDTransNetTask"]
