"""STDRO under DDP: two gloo processes, each its own data shard and inner loop; they end with the same M and
theta."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from lightning.pytorch.strategies import DDPStrategy

from biosig_lightning.robust.stdro import STDROTask
from tests.stdro_toy import N_CHANS, N_TIMES, STEP_BINS, ToySeizureDataModule


class SaveRankState(Callback):
    """Each rank writes its M, theta and the windows it trained on."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.indices: set[int] = set()

    def on_train_batch_start(self, trainer: Trainer,
                             pl_module: LightningModule, batch, batch_idx: int) -> None:
        self.indices |= set(batch["index"].tolist())

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        assert isinstance(pl_module, STDROTask)
        torch.save({"m": pl_module.m_weight.detach().cpu(), "steps": len(pl_module.m_history),
                    "theta": {k: v.detach().cpu() for k, v in pl_module.backbone.state_dict().items()},
                    "indices": sorted(self.indices)},
                   Path(self.directory) / f"rank{trainer.global_rank}.pt")


def test_two_gloo_ranks_end_with_the_same_m_and_theta(tmp_path: Path) -> None:
    seed_everything(0)
    backbone = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(N_CHANS * N_TIMES, 8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 2))
    task = STDROTask(backbone, variant="stdro", step_bins=STEP_BINS, ascent_steps=2, n_environments=2,
                     m_lr=0.2,
                     n_theta=2, n_theta_unit="step", lr=1e-2, scheduler="none", early_stopping_patience=None,
                     monitor="val/loss", mode="min")
    dm = ToySeizureDataModule(windows_per_subject=8, batch_size=8)
    trainer = Trainer(max_epochs=1, accelerator="cpu", devices=2,
                      strategy=DDPStrategy(process_group_backend="gloo", start_method="fork"),
                      default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, limit_val_batches=1,
                      callbacks=[SaveRankState(str(tmp_path))])
    trainer.fit(task, datamodule=dm)
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert r0["indices"] and r1["indices"] and not set(r0["indices"]) & set(r1["indices"])  # disjoint shards
    assert r0["steps"] == r1["steps"] >= 3  # at least two M steps (history starts with the initial A)
    eye = torch.eye(N_CHANS).expand(4, -1, -1)
    assert not torch.allclose(r0["m"], eye, atol=1e-4)  # M moved ...
    assert torch.equal(r0["m"], r1["m"])  # ... identically on both ranks
    for key, value in r0["theta"].items():
        assert torch.allclose(value, r1["theta"][key], atol=1e-6), key
