"""The SPD DataModule: two cache stages (alpha/beta/eps rebuild only the tokens), the layout the model
reads, training-only whitening, Sleep-EDF through the same pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data.datamodules import MASSSS3DataModule, SleepEDFSPDDataModule
from biosig_lightning.data.splits import SplitConfig

SMALL = {"n_subjects": 3, "windows_per_subject": 8}
SPLIT = SplitConfig(strategy="fixed", train=[1], val=[2], test=[3])


def _dm(tmp: Path, **kw: object) -> MASSSS3DataModule:
    return MASSSS3DataModule(synthetic=True, synthetic_options=SMALL, context=3, trim=0, test_trim=0,
                             split=SPLIT, cache_dir=str(tmp), batch_size=4, seed=0, **kw)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_changing_alpha_rebuilds_only_the_tokens(tmp_path: Path) -> None:
    a = _dm(tmp_path)
    a.setup()
    cov_dirs = sorted(tmp_path.glob("mass_ss3-spdcov-*"))
    assert len(cov_dirs) == 1
    created = json.loads((cov_dirs[0] / "manifest.json").read_text())["created"]
    b = _dm(tmp_path, alpha=10.0, beta=10.0, eps=None)
    b.setup()
    assert sorted(tmp_path.glob("mass_ss3-spdcov-*")) == cov_dirs  # stage 1 reused ...
    assert json.loads((cov_dirs[0] / "manifest.json").read_text())["created"] == created  # ... not rebuilt
    assert a.cache.dir != b.cache.dir and len(list(tmp_path.glob("mass_ss3-*"))) == 3
    assert not np.allclose(np.asarray(a.cache.signals), np.asarray(b.cache.signals))
    # the layout the model reads: L epochs of 7 x 30 tokens of d(9) = 45 numbers, centre's label
    batch = next(iter(a.val_dataloader()))
    assert batch["x"].shape[1:] == (a.n_chans, a.n_times) == (3 * 210, 45)
    i = int(batch["index"][0])
    nb = a.datasets["val"].neighbours[i]
    np.testing.assert_array_equal(batch["x"][0, 210:420].numpy(), np.asarray(a.cache.signals[i]))  # centre
    np.testing.assert_array_equal(batch["x"][0, :210].numpy(), np.asarray(a.cache.signals[nb[0]]))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_training_only_whitening_uses_training_recordings(tmp_path: Path) -> None:
    per_rec = _dm(tmp_path)
    train = _dm(tmp_path, whitening="train")
    train.setup()
    per_rec.setup()
    subject1 = sorted(
        {train.cache.recording_names[r] for r in np.unique(train.cache.recordings[train.cache.subjects == 1])}
    )
    assert train.cache.manifest["reader"]["train_recordings"] == subject1  # the training subject's only
    assert per_rec.cache.manifest["reader"]["train_recordings"] is None
    # a test recording's tokens differ between the two references
    test_rows = np.flatnonzero(np.asarray(train.cache.subjects) == 3)
    assert not np.allclose(np.asarray(train.cache.signals[test_rows]),
                           np.asarray(per_rec.cache.signals[test_rows]))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sleep_edf_through_the_same_pipeline(tmp_path: Path) -> None:
    dm = SleepEDFSPDDataModule(synthetic=True, synthetic_options={"n_subjects": 3, "windows_per_subject": 6,
                                                                 "recordings_per_subject": 1},
                               context=3, trim=0, test_trim=0, cache_dir=str(tmp_path), batch_size=2,
                               split=SplitConfig(strategy="fixed", train=[1], val=[2], test=[3]))
    assert (dm.n_chans, dm.n_times, dm.sfreq) == (3 * 210, 6, 100.0)  # SPD(2) -> SPD(3): 6 numbers
    dm.setup()
    assert next(iter(dm.train_dataloader()))["x"].shape[1:] == (630, 6)
