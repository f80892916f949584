"""TUAB (v3 flat / v2 nested EDF layouts): reader, errors and the official patient-disjoint split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data.corpora.tuab import CHANNELS, TUAB, patient_id
from biosig_lightning.data.datamodules import TUABDataModule
from biosig_lightning.data.spec import DataError
from tests.data.corpora.ramp_edf import write_ramp_edf


def _tuab_v3(root: Path) -> None:
    labels = [f"EEG {c}-REF" for c in CHANNELS] + ["EKG1-REF"]
    for folder, cls, name, fs in [("train", "normal", "aaaaaaaa_s001_t000", 250), ("train", "abnormal",
                                   "aaaaaaab_s002_t001", 500), ("eval", "normal", "aaaaaaac_s001_t000", 250)]:
        write_ramp_edf(root / "edf" / folder / cls / "01_tcp_ar" / f"{name}.edf", labels[::-1], 30, fs)


def test_tuab_v3_reader(tmp_path: Path) -> None:
    _tuab_v3(tmp_path)
    reader = TUAB(tmp_path, window_seconds=24.0, offset_seconds=60.0)
    assert reader.patient_folders() == {"train": [0, 1], "eval": [2]}
    blocks = list(reader.iter_blocks())
    assert [int(b.y[0]) for b in blocks] == [0, 1, 0]  # train: normal, abnormal; eval: normal
    for b in blocks:
        assert b.x.shape == (1, 21, 6000)
        # channel order is CHANNELS' (the file stores them reversed after an EKG): channel k holds 10 (21 - k)
        # + t
        # recordings of 30 s start their 24-s window at 6 s (offset clipped to fit)
        np.testing.assert_allclose(b.x[0, :, 0], 10.0 * (21 - np.arange(21)) + 6.0, atol=0.2)


def test_tuab_v2_nested_layout_and_errors(tmp_path: Path) -> None:
    labels = [f"EEG {c}-LE" for c in CHANNELS]
    nested = tmp_path / "edf" / "eval" / "abnormal" / "01_tcp_ar" / "000" / "00000021" / "s004_2013_08_15"
    write_ramp_edf(nested / "00000021_s004_t000.edf", labels, 25, 250)
    reader = TUAB(tmp_path / "edf")
    assert [r.patient for r in reader.recordings] == [21] and reader.recordings[0].folder == "eval"
    assert patient_id("aaaaaaba") == 26
    with pytest.raises(DataError, match="EEG CZ"):
        write_ramp_edf(nested / "00000021_s004_t001.edf", [lbl for lbl in labels if "CZ" not in lbl], 25, 250)
        list(TUAB(tmp_path).iter_blocks())
    with pytest.raises(DataError, match="edf/train"):
        TUAB(tmp_path / "nothing")


def test_tuab_official_split_is_patient_disjoint(tmp_path: Path) -> None:
    _tuab_v3(tmp_path)
    dm = TUABDataModule(root=str(tmp_path), protocol="official", cache_dir=str(tmp_path / "cache"),
                        val_fraction=0.5, batch_size=2)
    dm.setup()
    assert dm.subjects["test"] == [2]
    assert sorted(dm.subjects["train"] + dm.subjects["val"]) == [0, 1]
