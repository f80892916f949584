"""Callbacks the benchmark tests hand to cells through ``fit_args`` (one ``trainer.callbacks+`` each)."""

from __future__ import annotations

import json
from pathlib import Path

from lightning.pytorch import LightningModule, Trainer

from tests.helpers import PauseForKill


class PauseForKillThenRecordEpochs(PauseForKill):
    """:class:`~tests.helpers.PauseForKill`, and at the end of a fit ``epochs_trained.json`` in the run
    directory: the epochs in which THIS process ran training batches (a resumed fit starts at the
    checkpoint's next epoch; a fresh restart starts at 0)."""

    def __init__(self, seed: int, epoch: int = 1, seconds: float = 120.0) -> None:
        super().__init__(seed, epoch, seconds)
        self.epochs: list[int] = []

    def on_train_batch_start(self, trainer: Trainer,
                             pl_module: LightningModule, batch, batch_idx: int) -> None:
        if trainer.current_epoch not in self.epochs:
            self.epochs.append(trainer.current_epoch)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        (Path(trainer.log_dir) / "epochs_trained.json").write_text(json.dumps(self.epochs))
