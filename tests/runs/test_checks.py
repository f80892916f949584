"""Inputs a run checks before it starts: a config file that repeats a key or whose aliases expand, and a
checkpoint whose compressed members inflate past the limit; each refused in one line."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import yaml

from biosig_lightning.runs.checks import (
    CheckpointError,
    RunConfigError,
    check_checkpoint_size,
    check_config_files,
)
from biosig_lightning.yaml_io import parse_yaml
from tests.test_yaml_io import _bomb


def test_a_repeated_key_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("trainer: {max_epochs: 3}\nmodel: {}\ntrainer: {max_epochs: 5}\n")
    with pytest.raises(RunConfigError) as err:
        check_config_files(["--config", str(path)])
    text = str(err.value)
    assert text.startswith(f"--config {path}:") and "key 'trainer' appears twice (lines 1 and 3)" in text
    assert "\n" not in text
    with pytest.raises(yaml.YAMLError, match="'lr' appears twice"):  # at any depth
        parse_yaml("model:\n  lr: 1\n  lr: 2\n")


def test_alias_bomb_config_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    with pytest.raises(RunConfigError, match=rf"^--config {path}: .*line 5.*aliases expand"):
        check_config_files(["--config", str(path)])


def _zip_checkpoint(path: Path, member_bytes: int) -> Path:
    """A zip laid out like ``torch.save``'s, one member deflated from ``member_bytes`` zeros."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", bytes(member_bytes))
    return path


def test_a_checkpoint_that_inflates_past_the_limit_is_refused_before_loading(tmp_path: Path) -> None:
    path = _zip_checkpoint(tmp_path / "bomb.ckpt", 80 * 2**20)  # a few KiB on disk
    assert path.stat().st_size < 2**20
    with pytest.raises(CheckpointError,
                       match=r"bomb.ckpt: its members inflate to 80 MiB from 0.1 MiB on disk"):
        check_checkpoint_size(path)  # the default limit: twice the file plus 64 MiB
    from biosig_lightning.runs.checks import read_checkpoint

    with pytest.raises(CheckpointError, match="inflate"):
        read_checkpoint(path)


def test_a_real_checkpoint_passes_and_the_limit_can_be_raised(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    real = tmp_path / "real.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, real)
    check_checkpoint_size(real)
    path = _zip_checkpoint(tmp_path / "big.ckpt", 80 * 2**20)
    monkeypatch.setenv("BIOSIG_MAX_CHECKPOINT_BYTES", str(100 * 2**20))
    check_checkpoint_size(path)
