"""A checkpoint whose pickle would run code on load: our loaders refuse it and nothing runs.

The file is an ordinary ``torch.save`` of a dict holding a ``state_dict`` and one object whose
``__reduce__`` tells the unpickler to call ``open(marker, "w")``: a loader that unpickles arbitrary
objects (``weights_only=False``) creates ``marker``; one restricted to tensors and plain values
refuses the file before calling anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from biosig_lightning.runs.checks import CheckpointError, read_checkpoint
from biosig_lightning.runs.load import load_run


class _CreatesFile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return open, (str(self.marker), "w")


def _evil_checkpoint(path: Path, marker: Path) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 3, "payload": _CreatesFile(marker)}, path)
    return path


def test_the_payload_runs_when_unpickled_freely(tmp_path: Path) -> None:
    """The fixture is live: loading it without the restriction does create the file."""
    marker = tmp_path / "ran"
    torch.load(_evil_checkpoint(tmp_path / "evil.ckpt", marker), map_location="cpu", weights_only=False)
    assert marker.exists()


def test_ckpt_path_loader_refuses_in_one_line_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ckpt = _evil_checkpoint(tmp_path / "evil.ckpt", marker)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(ckpt)
    assert (
        str(err.value)
        == f"--ckpt_path {ckpt}: not a checkpoint (torch cannot read it as saved tensors and plain values)"
    )
    assert "weights_only" not in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_reopening_a_run_refuses_its_checkpoint_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    ckpt = _evil_checkpoint(run_dir / "checkpoints" / "best.ckpt", marker)
    config = {"model": {"class_path": "biosig_lightning.tasks.ClassificationTask",
                        "init_args": {"backbone": {"class_path": "biosig_lightning.models.baselines.CNN1D",
                                                   "init_args": {"width": 4,
                                                                 "n_blocks": 1, "convs_per_block": 1}}}},
              "data": {"class_path": "biosig_lightning.data.datamodules.SyntheticDataModule",
                       "init_args": {"n_subjects": 4, "windows_per_subject": 2}}}
    (run_dir / "results.json").write_text(json.dumps({"config": config, "best_checkpoint": str(ckpt)}))
    with pytest.raises(Exception, match="Weights only load failed|not a checkpoint|weights_only"):
        load_run(run_dir)
    assert not marker.exists()
