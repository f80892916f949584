"""SPDTransNet's tokens from another corpus's raw windows: same windows and subjects as the corpus, one
token grid per window, neighbouring windows of the same recording as context."""

from __future__ import annotations

import numpy as np
import pytest

from biosig_lightning.data.datamodules import APAVADataModule
from biosig_lightning.data.spd_windows import SPDWindowsDataModule, subwindows_for
from biosig_lightning.data.splits import SplitConfig

OPTIONS = {"n_subjects": 6, "windows_per_subject": 5}
SPLIT = SplitConfig(strategy="ratio", ratios=(0.5, 0.25, 0.25), seed=0)


def test_spd_tokens_of_apava_windows_keep_its_windows_subjects_and_order(tmp_path) -> None:
    dm = SPDWindowsDataModule(corpus="biosig_lightning.data.datamodules.APAVADataModule", synthetic=True,
                              synthetic_options=OPTIONS, split=SPLIT,
                              whitening="train", cache_dir=str(tmp_path))
    raw = APAVADataModule(synthetic=True, synthetic_options=OPTIONS, split=SPLIT, cache_dir=str(tmp_path))
    dm.setup()
    raw.setup()
    # 16 electrodes -> SPD(17) tokens of 153 numbers; 1-s windows -> one subwindow; 7 frequency channels, L =
    # 3
    assert (dm.n_subwindows, dm.n_times, dm.n_chans) == (1, 153, 3 * 7)
    assert dm.subjects == raw.subjects  # the corpus's own split (APAVA stratifies by subject label)
    for split in ("train", "val", "test"):
        ids = sorted(dm.cache.subjects[dm.datasets[split].indices].tolist())
        assert ids == sorted(
            raw.cache.subjects[raw.datasets[split].indices].tolist()
        )  # every window, no trim
    test = dm.datasets["test"]
    batch = test.__getitems__(list(range(len(test))))
    assert batch["x"].shape == (len(test), 21, 153) and np.isfinite(batch["x"].numpy()).all()
    # context: the centre's own tokens in the middle, the previous / next window of its recording around it
    cache = dm.cache
    for row, idx in enumerate(batch["index"].tolist()):
        rec, start = int(cache.recordings[idx]), float(cache.starts[idx])
        same = np.flatnonzero(np.asarray(cache.recordings) == rec)
        by_start = {float(cache.starts[j]): j for j in same}
        want = [by_start.get(start + d, idx) for d in (-1.0, 0.0, 1.0)]  # recording ends repeat the centre
        got = batch["x"][row].reshape(3, 7, 153)
        for pos, j in enumerate(want):
            assert np.array_equal(got[pos].numpy(), np.asarray(cache.signals[j]))


def test_subwindows_follow_the_window_length_and_one_channel_is_refused(tmp_path) -> None:
    assert subwindows_for(APAVADataModule(synthetic=True).spec) == 1
    from biosig_lightning.data.datamodules import CHBMITDataModule, SleepEDFDataModule

    assert subwindows_for(CHBMITDataModule(synthetic=True).spec) == 2
    assert subwindows_for(SleepEDFDataModule(synthetic=True).spec) == 30
    with pytest.raises(ValueError, match="at least two channels"):
        SPDWindowsDataModule(corpus="biosig_lightning.data.datamodules.SleepEDFDataModule",
                             corpus_args={"channels": ["EEG Fpz-Cz"]},
                             synthetic=True, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="dotted class path"):
        SPDWindowsDataModule(corpus="APAVADataModule", synthetic=True, cache_dir=str(tmp_path))


def test_whitening_follows_the_label_level_and_refuses_recording_for_subject_labels(tmp_path) -> None:
    # APAVA labels whole subjects (one recording each): a recording's own reference is its class's mean
    apava = "biosig_lightning.data.datamodules.APAVADataModule"
    assert SPDWindowsDataModule(corpus=apava, synthetic=True, cache_dir=str(tmp_path)).whitening == "train"
    with pytest.raises(ValueError, match="whitening=recording on apava.*labels are per subject"):
        SPDWindowsDataModule(corpus=apava, synthetic=True, whitening="recording", cache_dir=str(tmp_path))
    # sleep stages change within a night: the paper's per-recording reference
    sleep = SPDWindowsDataModule(corpus="biosig_lightning.data.datamodules.SleepEDFDataModule",
                                 synthetic=True, cache_dir=str(tmp_path))
    assert sleep.whitening == "recording"


def test_diagonal_tokens_keep_each_matrix_diagonal_and_zero_the_rest(tmp_path) -> None:
    import torch

    from biosig_lightning.data.spd_windows import diagonal_entries
    from biosig_lightning.features.spd import tokens_from_sym

    # the mask picks exactly a symmetric matrix's diagonal out of its token
    sym = torch.arange(1.0, 17.0).reshape(4, 4)
    sym = sym + sym.T
    assert torch.equal(tokens_from_sym(sym)[torch.from_numpy(diagonal_entries(10))], sym.diagonal())
    kwargs = dict(corpus="biosig_lightning.data.datamodules.APAVADataModule", synthetic=True,
                  synthetic_options=OPTIONS, split=SPLIT, whitening="train", cache_dir=str(tmp_path))
    full, diag = SPDWindowsDataModule(**kwargs), SPDWindowsDataModule(tokens="diagonal", **kwargs)
    full.setup()
    diag.setup()
    keep = diagonal_entries(153)
    assert keep.sum() == 17  # SPD(17): 16 electrodes and the augmentation's corner
    for split in ("train", "test"):
        rows = list(range(len(full.datasets[split])))
        x_full = full.datasets[split].__getitems__(rows)["x"].numpy()
        batch = diag.datasets[split].__getitems__(rows)
        x = batch["x"].numpy()
        assert x.shape == x_full.shape and np.abs(x_full[..., ~keep]).min() > 0
        assert np.array_equal(x[..., keep], x_full[..., keep]) and not x[..., ~keep].any()
    loaded = next(iter(diag.test_dataloader()))["x"].numpy()  # what the model is fed
    assert loaded[..., keep].any() and not loaded[..., ~keep].any()
    with pytest.raises(ValueError, match="tokens must be 'full' or 'diagonal'"):
        SPDWindowsDataModule(tokens="offdiagonal", **kwargs)
