"""Callbacks the end-to-end tests inject with ``--trainer.callbacks+=tests.helpers.X``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class RecordRank(Callback):
    """Writes, per rank, a hash of the final weights and the window indices it trained on."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        self.seen.extend(batch["index"].tolist())

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        digest = hashlib.sha256()
        for name, tensor in sorted(pl_module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        out = Path(trainer.log_dir) / f"rank{trainer.global_rank}.json"
        out.write_text(json.dumps({"weights": digest.hexdigest(), "seen": self.seen,
                                   "world_size": trainer.world_size}))


class InterruptAfterEpoch(Callback):
    """Simulates a crash (Ctrl-C) once epoch ``epoch`` has finished and been checkpointed."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == self.epoch + 1:
            raise KeyboardInterrupt


def state_hash(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class RecordEpochs(Callback):
    """Writes the epochs in which this process ran training batches (a resumed run continues the count)."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if trainer.current_epoch not in self.epochs:
            self.epochs.append(trainer.current_epoch)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        (Path(trainer.log_dir) / "epochs_trained.json").write_text(json.dumps(self.epochs))
