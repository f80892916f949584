"""Turkish epilepsy corpus (manifest + .mat/.edf): reader, errors and DataModule splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from biosig_lightning.data.corpora.turkish_epilepsy import TurkishEpilepsy
from biosig_lightning.data.datamodules import TurkishEpilepsyDataModule
from biosig_lightning.data.spec import DataError
from tests.data.corpora.ramp_edf import write_ramp_edf


def _turkish(root: Path) -> None:
    rows = ["file,subject,label"]
    fs = 500
    for k, (subject, label) in enumerate([(3, "epilepsy"), (3, "epilepsy"), (8, "control")]):
        t = np.arange(15 * fs) / fs
        data = np.stack([100.0 * c + t for c in range(35)])  # channel c holds 100 c + time in s
        if k == 1:
            savemat(root / f"rec{k}.mat", {"data": data.T, "fs": 500.0})  # (n, 35) also accepted
        elif k == 0:
            savemat(root / f"rec{k}.mat", {"data": data})
        else:
            write_ramp_edf(root / "edf" / f"rec{k}.edf", [f"C{c}" for c in range(35)], 15, fs, step=100.0)
        rows.append(f"{'edf/' if k == 2 else ''}rec{k}.{'edf' if k == 2 else 'mat'},{subject},{label}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")


def test_turkish_reader_trims_and_windows(tmp_path: Path) -> None:
    _turkish(tmp_path)
    blocks = list(TurkishEpilepsy(tmp_path).iter_blocks())
    assert [b.subject for b in blocks] == [3, 3, 8] and [int(b.y[0]) for b in blocks] == [1, 1, 0]
    for b in blocks:
        assert b.x.shape == (1, 35, 6000)
        # first sample is t = 2 s (2 s trimmed), last t = 14 s - 1 sample (1 s trimmed at the end)
        np.testing.assert_allclose(
            b.x[0, 4, [0, -1]], [402.0, 400.0 + 14.0 - 1 / 500], atol=0.1
        )  # EDF: 16-bit steps
    per_rec = list(TurkishEpilepsy(tmp_path, unit="recording").iter_blocks())
    assert [b.subject for b in per_rec] == [1, 2, 3]


def test_turkish_reader_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="manifest.csv"):
        TurkishEpilepsy(tmp_path)
    _turkish(tmp_path)
    (tmp_path / "manifest.csv").write_text("file,subject,label\nrec0.mat,3,epilepsy\nrec1.mat,3,control\n")
    with pytest.raises(DataError, match=r"subject\(s\) \[3\] listed with both labels"):
        TurkishEpilepsy(tmp_path)
    (tmp_path / "manifest.csv").write_text("file,subject,label\n../x.mat,3,epilepsy\n")
    with pytest.raises(DataError, match="inside the corpus root"):
        TurkishEpilepsy(tmp_path)
    savemat(tmp_path / "bad.mat", {"data": np.zeros((34, 7500))})
    (tmp_path / "manifest.csv").write_text("file,subject,label\nbad.mat,1,control\n")
    with pytest.raises(DataError, match="bad.mat.*35 channels"):
        list(TurkishEpilepsy(tmp_path).iter_blocks())


def test_turkish_datamodule_recording_split_and_loso(tmp_path: Path) -> None:
    opts = {"n_subjects": 6, "windows_per_subject": 4}
    dm = TurkishEpilepsyDataModule(synthetic=True, unit="recording", synthetic_options=opts,
                                   cache_dir=str(tmp_path), batch_size=4)
    dm.setup()
    assert dm.dataset_name == "turkish_epilepsy-synthetic-recording-split"
    assert sum(len(v) for v in dm.subjects.values()) == 24  # every window is a split unit
    assert (dm.n_chans, dm.n_times, dm.sfreq) == (35, 6000, 500.0)
    from biosig_lightning.data.splits import SplitConfig

    loso = TurkishEpilepsyDataModule(synthetic=True, unit="subject", synthetic_options=opts,
                                     cache_dir=str(tmp_path),
                                     split=SplitConfig(strategy="loso", fold=2, val_ratio=0.2))
    loso.setup()
    assert len(loso.subjects["test"]) == 1
    assert not set(loso.subjects["test"]) & (set(loso.subjects["train"]) | set(loso.subjects["val"]))
