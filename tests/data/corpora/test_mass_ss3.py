"""MASS SS3 reader on PSG + Base EDF+ fixtures in the real layout, the IITNet folds, the SPD DataModule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data.corpora.mass_ss3 import MASSSS3
from biosig_lightning.data.corpora.mass_ss3_folds import FOLDS, SUBJECTS
from biosig_lightning.data.spd import oversample, segment_neighbours, trimmed
from biosig_lightning.data.spec import DataError
from biosig_lightning.testing.mass_ss3 import FS, write_subject


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mass")
    write_subject(root, 1, [0, 0, 1, 2, 2, 3, 4, 2], seed=1, unknown=(3,))
    write_subject(root, 2, [2, 2, 3, 3, 4], seed=2, reference="LER", lead=3.0)
    (root / "README.txt").write_text("unrelated")
    return root


def test_reader_cuts_epochs_at_annotation_onsets(corpus: Path) -> None:
    reader = MASSSS3(corpus)
    blocks = {b.recording: b for b in reader.iter_blocks()}
    assert sorted(blocks) == ["01-03-0001", "01-03-0002"]
    b1 = blocks["01-03-0001"]
    # "?" epoch (index 3) dropped; labels W N1 N2 N3 REM = 0..4
    assert b1.y.tolist() == [0, 0, 1, 2, 3, 4, 2]
    np.testing.assert_allclose(b1.start, 7.3 + 30.0 * np.array([0, 1, 2, 4, 5, 6, 7]))
    assert b1.x.shape == (7, 8, 30 * FS)
    # epoch k starts at round(onset * fs) of the PSG: compare with the raw EEG channel
    import pyedflib

    with pyedflib.EdfReader(str(corpus / "01-03-0001 PSG.edf")) as f:
        labels = f.getSignalLabels()
        o1 = f.readSignal(labels.index("EEG O1-CLE"))
    first = int(round((7.3 + 120.0) * FS))
    np.testing.assert_allclose(b1.x[3, 6], o1[first: first + 30 * FS], rtol=1e-5, atol=1e-3)
    assert blocks["01-03-0002"].subject == 2 and blocks["01-03-0002"].y.tolist() == [2, 2, 3, 3, 4]


def test_reader_errors_name_the_file(tmp_path: Path, corpus: Path) -> None:
    with pytest.raises(DataError, match="no recordings"):
        MASSSS3(tmp_path)
    (tmp_path / "01-03-0005 PSG.edf").write_bytes((corpus / "01-03-0001 PSG.edf").read_bytes())
    with pytest.raises(DataError, match="01-03-0005 Base.edf"):
        MASSSS3(tmp_path)
    reader = MASSSS3(corpus, electrodes=["F3", "Fz"])
    with pytest.raises(DataError, match="'Fz'.*0001 PSG.edf|0001 PSG.edf.*'Fz'"):
        next(reader.iter_blocks())


def test_iitnet_folds_partition_the_62_recordings() -> None:
    assert len(FOLDS) == 31 and len(SUBJECTS) == 62
    tests = sorted(s for f in FOLDS for s in f["test"])
    assert tests == list(SUBJECTS)
    for f in FOLDS:
        assert (len(f["train"]), len(f["val"]), len(f["test"])) == (50, 10, 2)
        assert set(f["train"]) | set(f["val"]) | set(f["test"]) == set(SUBJECTS)
    assert FOLDS[11]["test"] == (29, 47)  # IITNet's fold lists: fold 11 = subjects 29 and 47


def test_context_windows_never_cross_a_gap() -> None:
    rec = np.array([0, 0, 0, 0, 0, 1, 1])
    starts = np.array([0.0, 30.0, 60.0, 120.0, 150.0, 0.0, 30.0])  # gap between 60 and 120
    nb, pos, length = segment_neighbours(rec, starts, 30.0, 2)
    assert nb[2].tolist() == [0, 1, 2, 2, 2]  # the epoch before the gap repeats itself, not epoch 3
    assert nb[3].tolist() == [3, 3, 3, 4, 4]
    assert nb[5].tolist() == [5, 5, 5, 6, 6]  # recording 1 never reaches into recording 0
    assert pos.tolist() == [0, 1, 2, 3, 4, 0, 1] and length.tolist() == [5] * 5 + [2] * 2
    assert trimmed(pos, length, 1).tolist() == [False, True, True, True, False, True, True]  # too short: kept


def test_oversampling_brings_every_class_to_the_largest() -> None:
    labels = np.array([0] * 10 + [1] * 3 + [2] * 1)
    idx = oversample(labels, seed=0)
    assert np.bincount(labels[idx]).tolist() == [10, 10, 10]
    assert set(range(14)) <= set(idx.tolist())
    assert np.array_equal(idx, oversample(labels, seed=0))
