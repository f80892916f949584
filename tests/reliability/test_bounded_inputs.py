"""Inputs that expand: YAML aliases, a checkpoint's compressed members, a ``.npy`` header; each refused
in one line before it is expanded, and YAML that repeats a key."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from biosig_lightning.data.npy_files import NpyError, load_npy
from biosig_lightning.runs.checks import (
    CheckpointError,
    RunConfigError,
    check_checkpoint_size,
    check_config_files,
)
from biosig_lightning.yaml_io import ALIAS_BUDGET, parse_yaml


def _bomb(levels: int = 9) -> str:
    """Billion laughs: each level a list of nine aliases of the one before (9**levels leaves)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_its_alias_before_it_expands() -> None:
    with pytest.raises(yaml.MarkedYAMLError,
                       match=rf"aliases expand to more than {ALIAS_BUDGET} nodes") as err:
        parse_yaml(_bomb())
    assert err.value.problem_mark.line + 1 == 5  # 9**4 leaves pass the budget at level 4


def test_aliases_within_the_budget_still_load() -> None:
    assert parse_yaml(_bomb(3))["l2"] == [[["x"] * 9] * 9] * 9
    assert parse_yaml("base: &b {lr: 1}\nrun: {<<: *b, lr: 2}\n")["run"] == {"lr": 2}  # a merge is no repeat


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


def _npy_with_header(path: Path, shape: tuple[int, ...], data: bytes) -> Path:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + data)
    return path


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_npy_header_claiming_more_than_the_file_holds_is_refused(
    tmp_path: Path, mmap_mode: str | None
) -> None:
    path = _npy_with_header(tmp_path / "huge.npy", (10**12, 4), bytes(64))
    with pytest.raises(NpyError,
                       match=r"huge.npy: .*shape \(1000000000000, 4\) of float32, 16,000,000,000,000 bytes, "
                                       r"but the file holds 64 bytes"):
        load_npy(path, mmap_mode=mmap_mode)


def test_a_well_formed_npy_loads_unchanged(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    np.testing.assert_array_equal(load_npy(tmp_path / "x.npy"), x)
    np.testing.assert_array_equal(load_npy(tmp_path / "x.npy", mmap_mode="r"), x)
    assert os.path.getsize(tmp_path / "x.npy") > 48
