"""DOD-H reader and DataModule on tiny records written with h5py in the published layout."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from biosig_lightning.data.corpora.dodh import CHANNELS, DODH
from biosig_lightning.data.datamodules.dodh import DODHDataModule
from biosig_lightning.data.spec import DataError

MODALITY = {"ECG": "emg", "EMG": "emg", "EOG1": "eog", "EOG2": "eog"}
EPOCH = 7500


def write_record(path: Path, hypnogram: list[int], fs: float = 250.0, drop: str | None = None,
                 short: bool = False) -> None:
    """Channel k (in CHANNELS order) holds 100 k + epoch index, so epochs and channels can be located."""
    n = len(hypnogram)
    with h5py.File(path, "w") as f:
        f.create_dataset("hypnogram", data=np.asarray(hypnogram, dtype=np.int64))
        description = []
        for k in reversed(range(len(CHANNELS))):  # written in another order than CHANNELS
            ch = CHANNELS[k]
            if ch == drop:
                continue
            data = np.repeat(100.0 * k + np.arange(n), EPOCH).astype(np.float32)
            if short:
                data = data[:-1]
            mod = MODALITY.get(ch, "eeg")
            f.create_dataset(f"signals/{mod}/{ch}", data=data)
            description.append({"name": ch, "path": f"/signals/{mod}/{ch}", "fs": fs, "domain": mod.upper(),
                                "unit": "uV"})
        f.attrs["record_id"] = path.stem.encode()
        f.attrs["description"] = json.dumps(description).encode()


def test_reader_labels_channels_and_unscored(tmp_path: Path) -> None:
    write_record(tmp_path / "b1c2.h5", [0, 1, -1, 2])
    write_record(tmp_path / "a0f9.h5", [4, 3])
    reader = DODH(tmp_path)
    assert reader.record_ids == {1: "a0f9", 2: "b1c2"}
    blocks = list(reader.iter_blocks())
    assert [b.subject for b in blocks] == [1, 2]
    b = blocks[1]
    assert b.x.shape == (3, 16, 7500)
    assert b.y.tolist() == [0, 1, 2]  # the unscored epoch is left out
    assert b.start.tolist() == [0.0, 30.0, 90.0]
    np.testing.assert_array_equal(b.x[:, :, 0], 100.0 * np.arange(16)[None, :] + np.array([0, 1, 3])[:, None])
    assert blocks[0].y.tolist() == [4, 3]


def test_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no .h5 records"):
        DODH(tmp_path)
    write_record(tmp_path / "x.h5", [0, 1], drop="EOG2")
    with pytest.raises(DataError, match=r"x\.h5: channel 'EOG2' not found"):
        list(DODH(tmp_path).iter_blocks())
    write_record(tmp_path / "x.h5", [0, 1], fs=256.0)
    with pytest.raises(DataError, match=r"x\.h5: channel 'C3_M2' is sampled at 256 Hz"):
        list(DODH(tmp_path).iter_blocks())
    write_record(tmp_path / "x.h5", [0, 1], short=True)
    with pytest.raises(DataError, match=r"has 14999 samples, expected 2 epochs x 7500"):
        list(DODH(tmp_path).iter_blocks())
    write_record(tmp_path / "x.h5", [0, 7])
    with pytest.raises(DataError, match=r"hypnogram values \[7\]"):
        list(DODH(tmp_path).iter_blocks())


def test_datamodule_split_15_5_5(tmp_path: Path) -> None:
    dm = DODHDataModule(synthetic=True, cache_dir=str(tmp_path), synthetic_options={"windows_per_subject": 2})
    assert (dm.n_chans, dm.n_outputs, dm.n_times, dm.sfreq) == (16, 5, 7500, 250.0)
    dm.setup()
    assert [len(dm.subjects[s]) for s in ("train", "val", "test")] == [15, 5, 5]
