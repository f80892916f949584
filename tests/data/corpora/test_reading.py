"""A user's own recordings that the reading libraries refuse: each is one ``DataError`` naming the file and
what was wrong (BIDS written with mne-bids and then damaged, an Epochs file, PTB-XL's database, EDF)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import mne
import numpy as np
import pytest

from biosig_lightning.data.corpora.arrays import arrays_from_epochs
from biosig_lightning.data.corpora.bids import BIDSReader
from biosig_lightning.data.corpora.edf import read_header
from biosig_lightning.data.corpora.reading import reading
from biosig_lightning.data.spec import DataError

CHANNELS = ["C3", "C4", "Cz"]


@pytest.fixture(scope="module")
def bids_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two subjects, 8 s each at 100 Hz, events ``a``/``b`` every 2 s, written by mne-bids (BrainVision)."""
    import mne_bids

    root = tmp_path_factory.mktemp("bids")
    rng = np.random.default_rng(0)
    for sub in (1, 2):
        raw = mne.io.RawArray(rng.normal(0, 1e-5, (3, 800)),
                              mne.create_info(CHANNELS, 100.0, "eeg"), verbose="error")
        raw.set_annotations(mne.Annotations([0, 2, 4, 6], [1] * 4, ["a", "b", "a", "b"]))
        mne_bids.write_raw_bids(raw,
                                mne_bids.BIDSPath(subject=f"{sub:02d}", task="t", datatype="eeg", root=root),
                                format="BrainVision", allow_preload=True, verbose="error")
    return root


def _copy(root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(root, tmp_path / "bids"))


def test_the_intact_dataset_reads(bids_root: Path) -> None:
    blocks = list(BIDSReader(bids_root, task="t", window_seconds=1.0).iter_blocks())
    assert [b.x.shape for b in blocks] == [(4, 3, 100)] * 2


def test_channels_tsv_naming_other_channels_names_the_recording(bids_root: Path, tmp_path: Path) -> None:
    root = _copy(bids_root, tmp_path)
    channels = root / "sub-02" / "eeg" / "sub-02_task-t_channels.tsv"
    channels.write_text(channels.read_text().replace("C3\t", "XX\t"))
    reader = BIDSReader(root, task="t", window_seconds=1.0)  # sub-01 is read first, and is intact
    with pytest.raises(DataError) as err:
        list(reader.iter_blocks())
    text = str(err.value)
    assert text.startswith(f"{root}/sub-02/eeg/sub-02_task-t_eeg.vhdr: cannot read the BIDS recording "
                           f"(RuntimeError: "
                           "Channel mismatch between"), text
    assert "\n" not in text


def test_empty_data_files_name_the_recording_and_the_empty_file(bids_root: Path, tmp_path: Path) -> None:
    root = _copy(bids_root, tmp_path)
    for data in root.rglob("*.eeg"):
        data.write_bytes(b"")
    reader = BIDSReader(root, task="t", window_seconds=1.0)  # the headers are intact
    with pytest.raises(DataError) as err:
        list(reader.iter_blocks())
    text = str(err.value)
    assert text.startswith(f"{root}/sub-01/eeg/sub-01_task-t_eeg.vhdr: cannot read the BIDS recording (")
    assert text.endswith("; sub-01_task-t_eeg.eeg is empty (0 bytes)") and "\n" not in text


def test_an_epochs_file_of_one_class_is_named(tmp_path: Path) -> None:
    import pandas as pd

    events = np.column_stack([np.arange(6) * 100, np.zeros(6, int), np.ones(6, int)])
    epochs = mne.EpochsArray(np.zeros((6, 3, 50)), mne.create_info(CHANNELS, 100.0, "eeg"), events=events,
                             event_id={"left": 1}, metadata=pd.DataFrame({"subject": [1, 1, 2, 2, 3, 3]}),
                             verbose="error")
    path = tmp_path / "one-epo.fif"
    epochs.save(path, verbose="error")
    with pytest.raises(DataError,
                       match=rf"^epochs {path}: one class only \(left \(event code 1\)\); a classifier "
                                        "needs at least two event codes$"):
        arrays_from_epochs(str(path))


def test_an_epochs_file_mne_cannot_read_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad-epo.fif"
    path.write_bytes(b"\0" * 64)
    with pytest.raises(DataError, match=rf"^{path}: cannot read epochs file \(\w+: "):
        arrays_from_epochs(str(path))


def test_ptbxl_record_path_outside_the_root_is_refused(tmp_path: Path) -> None:
    from biosig_lightning.data.corpora.ptbxl_wfdb import PTBXL
    from tests.data.corpora.test_ptbxl_wfdb import ROWS, write_csvs

    write_csvs(tmp_path, ROWS[:1])
    db = tmp_path / "ptbxl_database.csv"
    rows = list(csv.reader(db.read_text().splitlines()))
    rows[1][6] = "/etc/passwd"
    with open(db, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(DataError,
                       match=r"ptbxl_database.csv: row 2 \(ecg_id 1\): filename_lr '/etc/passwd' leads "
                                        r"outside the corpus root"):
        PTBXL(tmp_path)
    rows[1][6] = "records100/../../x"
    with open(db, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(DataError, match=r"filename_lr 'records100/../../x' leads outside"):
        PTBXL(tmp_path)


def test_any_error_a_library_raises_inside_the_boundary_is_one_line(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import pyedflib

    def broken(*args: object, **kwargs: object) -> None:
        raise IndexError("list index out of range\n  deep inside the C reader")

    monkeypatch.setattr(pyedflib, "EdfReader", broken)
    edf = tmp_path / "rec.edf"
    edf.write_bytes(b"0" * 256)
    with pytest.raises(DataError,
                       match=rf"^{edf}: cannot read EDF/EDF\+ file \(IndexError: list index out of "
                                        r"range\)$"):
        read_header(edf)
    with (
        pytest.raises(DataError, match="reader's own line"),
        reading(edf),
    ):  # the reader's own DataError passes
        raise DataError("the reader's own line")
