"""Self-supervised next-clip pre-training of DCRNN (Tang et al., ICLR 2022) as a LightningModule.

The backbone (:class:`~biosig_lightning.models.dcrnn.DCRNNNextClip`) predicts the second half of each
window from its first half; the loss is the mean absolute error (the reference's "MAE" regression
loss). Reference settings: Adam, lr 5e-4, weight decay 5e-4, cosine schedule over the epochs,
gradient clipping at 5, 350 epochs, the checkpoint with the lowest validation MAE kept. A
fine-tuning run loads the encoder from that checkpoint
(``--model.init_args.backbone.init_args.pretrained <run>/checkpoints/best-*.ckpt`` on a DCRNN
experiment). Labels are not used. The test stage reports ``test/mae`` (and ``test/loss``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.parsing import AttributeDict

from biosig_lightning.models.dcrnn.ssl import DCRNNNextClip
from biosig_lightning.tasks.compile import CompileSetting, check_compile_options, compile_backbone
from biosig_lightning.tasks.optimizers import multi_tensor_optimizer

__all__ = ["NextClipTask"]


class NextClipTask(LightningModule):
    """Args: ``backbone`` (a :class:`DCRNNNextClip`); ``n_outputs`` (linked from the data, unused);
    ``lr``, ``weight_decay``; ``monitor``/``mode`` (``val/loss``, ``min``); ``early_stopping_patience``;
    ``compile``/``compile_mode`` (:mod:`biosig_lightning.tasks.compile`)."""

    hparams: AttributeDict  # what save_hyperparameters() makes it

    def __init__(self, backbone: DCRNNNextClip, n_outputs: int = 2, lr: float = 5e-4,
                 weight_decay: float = 5e-4,
                 monitor: str = "val/loss", mode: Literal["min", "max"] = "min",
                 early_stopping_patience: int | None = None, compile: CompileSetting = "auto",  # noqa: A002
                 compile_mode: str | None = None) -> None:
        super().__init__()
        check_compile_options(compile, compile_mode)
        if not isinstance(backbone, DCRNNNextClip):
            raise TypeError(f"NextClipTask needs a DCRNNNextClip backbone, got {type(backbone).__name__}")
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone

    def on_fit_start(self) -> None:
        compile_backbone(self.backbone, self.hparams.compile, self.hparams.compile_mode, self.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        _, target = self.backbone.split(batch["x"])
        return F.l1_loss(self.backbone(batch["x"]), target)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True,
                 batch_size=batch["x"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val/loss", loss, prog_bar=True, on_epoch=True, sync_dist=True,
                 batch_size=batch["x"].shape[0])
        return loss

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        n = batch["x"].shape[0]
        self.log("test/loss", loss, on_epoch=True, sync_dist=True, batch_size=n)
        self.log("test/mae", loss, on_epoch=True, sync_dist=True, batch_size=n)
        return loss

    def configure_optimizers(self) -> Any:
        opt = multi_tensor_optimizer(torch.optim.Adam, list(self.parameters()), trainer=self._trainer,
                                     lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        return {"optimizer": opt,
                "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)}

    def configure_callbacks(self) -> list[Callback]:
        hp = self.hparams
        callbacks: list[Callback] = [
            ModelCheckpoint(monitor=hp.monitor, mode=hp.mode, save_top_k=1, filename="best-epoch{epoch:03d}",
                            auto_insert_metric_name=False, save_on_train_epoch_end=True),
            ModelCheckpoint(monitor=None, save_top_k=1, filename="last", enable_version_counter=False,
                            save_on_train_epoch_end=True),
        ]
        if hp.early_stopping_patience is not None:
            callbacks.append(EarlyStopping(monitor=hp.monitor, mode=hp.mode,
                                           patience=hp.early_stopping_patience))
        return callbacks
