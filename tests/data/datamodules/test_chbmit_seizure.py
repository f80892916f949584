"""CHB-MIT for STDRO: the existing reader with 18 channels, 64 Hz, 4-s clips, and the fixed 18/3/3 split."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from biosig_lightning.data.corpora.chb_mit import CHANNELS_18
from biosig_lightning.data.datamodules.chb_mit import STDRO_SPLIT, CHBMITSeizureDataModule
from tests.data.corpora.test_chb_mit import corpus  # noqa: F401  (the real-format fixture: EDFs + summaries)


def test_reader_options_on_real_format(corpus: Path, tmp_path: Path) -> None:  # noqa: F811
    dm = CHBMITSeizureDataModule(root=str(corpus), cache_dir=str(tmp_path))
    assert (dm.n_chans, dm.n_times, dm.sfreq, dm.step_bins, dm.ch_names) == (18, 256,
                                                                             64.0, 0, list(CHANNELS_18))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blocks = {b.recording: b for b in dm.reader().iter_blocks()}
    b = blocks["chb01_03"]  # seizure 10-15 s: the 4-s clips [8, 12) and [12, 16) overlap it
    assert b.x.shape[1:] == (18, 256)
    assert b.y[:5].tolist() == [0, 0, 1, 1, 0]
    assert b.start[:5].tolist() == [0.0, 4.0, 8.0, 12.0, 16.0]
    # channel k holds 100 k + t: after 256 -> 64 Hz, clip 2 of channel FP1-F3 (k = 4) runs from ~408 to ~412
    mid = b.x[2, 4, 32:224]  # away from the polyphase filter's edge effects
    t = 8.0 + np.arange(32, 224) / 64.0
    np.testing.assert_allclose(mid, 400.0 + t, atol=0.5)
    fft = CHBMITSeizureDataModule(root=str(corpus), features="fft", cache_dir=str(tmp_path))
    assert (fft.n_times, fft.step_bins) == (128, 32)


def test_fixed_split_keeps_one_child_together(tmp_path: Path) -> None:
    split = CHBMITSeizureDataModule(synthetic=True).default_split()
    assert (len(split.train), len(split.val), len(split.test)) == (18, 3, 3)
    assert sorted(split.train + split.val + split.test) == list(range(1, 25))
    assert {1, 21} <= set(split.train) and 12 in split.train
    assert split.val == STDRO_SPLIT["val"] and split.test == STDRO_SPLIT["test"]
    dm = CHBMITSeizureDataModule(synthetic=True, cache_dir=str(tmp_path),
                                 synthetic_options={"windows_per_subject": 4})
    dm.setup()
    assert dm.subjects == {k: sorted(v) for k, v in STDRO_SPLIT.items()}
