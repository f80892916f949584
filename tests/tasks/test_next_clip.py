"""DCRNN next-clip pre-training: the model predicts the second half, learns a predictable toy, and a DCRNN
fine-tuning run starts from its encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything

from biosig_lightning.models.dcrnn import DCRNN, DCRNNNextClip
from biosig_lightning.tasks import NextClipTask
from tests.stdro_toy import ToySeizureDataModule

NAMES = ["FP1", "FP2", "C3", "C4"]


def test_prediction_shape_and_decoder_layers_share_one_cell() -> None:
    m = DCRNNNextClip(4, 2, 32, 4.0, step_bins=4, ch_names=NAMES, rnn_units=6, num_rnn_layers=3)
    assert m(torch.randn(2, 4, 32)).shape == (2, 4, 16)
    assert m.decoder_cells[1] is m.decoder_cells[2] and m.decoder_cells[0] is not m.decoder_cells[1]
    assert m.encoder.head is None


def test_pretraining_learns_and_finetuning_loads_the_encoder(tmp_path: Path) -> None:
    seed_everything(0)
    backbone = DCRNNNextClip(4, 2, 32, 4.0, step_bins=4, ch_names=NAMES, rnn_units=8, num_rnn_layers=2)
    task = NextClipTask(backbone, lr=1e-2, weight_decay=0.0)
    dm = ToySeizureDataModule(windows_per_subject=8, batch_size=16)
    dm.setup()
    x = dm.datasets["val"].x
    with torch.no_grad():
        before = torch.nn.functional.l1_loss(backbone(x), backbone.split(x)[1])
    trainer = Trainer(max_epochs=8, accelerator="cpu", default_root_dir=tmp_path, logger=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(task, datamodule=dm)
    with torch.no_grad():
        after = torch.nn.functional.l1_loss(backbone(x), backbone.split(x)[1])
    assert after < 0.95 * before  # validation MAE drops clearly (noise floor of the toy ~0.75)
    ckpt = trainer.checkpoint_callback.best_model_path
    assert ckpt
    fine = DCRNN(4, 2, 16, 4.0, step_bins=4, ch_names=NAMES, rnn_units=8, num_rnn_layers=2, pretrained=ckpt)
    saved = torch.load(ckpt, weights_only=True)["state_dict"]
    for i, cell in enumerate(fine.cells):
        for name, value in cell.state_dict().items():
            assert torch.equal(value, saved[f"backbone.encoder.cells.{i}.{name}"]), (i, name)
    assert not torch.equal(fine.cells[0].gate_weight,
                           DCRNN(4, 2, 16, 4.0, step_bins=4, ch_names=NAMES, rnn_units=8,
                                                           num_rnn_layers=2).cells[0].gate_weight)
    with pytest.raises(ValueError, match="encoder weights"):
        DCRNN(4, 2, 16, 4.0, step_bins=4, ch_names=NAMES, rnn_units=8, num_rnn_layers=3, pretrained=ckpt)
    with pytest.raises(FileNotFoundError):
        DCRNN(4, 2, 16, 4.0, step_bins=4, ch_names=NAMES, pretrained=str(tmp_path / "none.ckpt"))
