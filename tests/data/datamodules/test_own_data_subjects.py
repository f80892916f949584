"""A user's own data never puts one person in two splits, checked window by window.

Each fixture writes its subject into the signal itself: channel ``SUB`` holds the constant
``subject * UNIT`` (the other channels are noise), so every window a split serves names its person
without the reader, the cache or the split code. The fixtures hold what real data holds and the
older fixtures did not: several sessions and runs per subject (BIDS, written with mne-bids),
subjects interleaved row by row (arrays and ``mne.Epochs``), and the same arrays re-run after their
subject ids were corrected (the cache must not serve the old ids).
"""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest

from biosig_lightning.data.datamodules import (
    ArrayDataModule,
    ArrayFileDataModule,
    BIDSDataModule,
    EpochsDataModule,
)
from biosig_lightning.data.splits import SplitConfig
from tests.data.window_subjects import assert_each_person_in_one_split, true_subjects_by_split

SFREQ = 50.0
N_TIMES = 50  # 1-s windows
UNIT = 1e-5  # volts per subject number on the SUB channel
CHANNELS = ["C3", "C4", "SUB"]
PEOPLE = (3, 5, 8, 11)


def _in_signal(windows: np.ndarray) -> np.ndarray:
    """Each window's subject, read from its ``SUB`` channel."""
    return np.rint(windows[:, CHANNELS.index("SUB")].mean(axis=-1) / UNIT).astype(int)


def _windows(rng: np.random.Generator, subjects: np.ndarray) -> np.ndarray:
    x = rng.normal(0.0, UNIT / 10, (len(subjects), len(CHANNELS), N_TIMES))
    x[:, CHANNELS.index("SUB")] = subjects[:, None] * UNIT
    return x


def _splits() -> list[SplitConfig]:
    """A ratio split and every leave-one-subject-out fold over four people."""
    return [SplitConfig(strategy="ratio", ratios=(0.5, 0.25, 0.25), seed=0, stratify=False),
            *(SplitConfig(strategy="loso", fold=k, val=None,
                          val_ratio=0.34, stratify=False) for k in range(4))]


@pytest.fixture(scope="module")
def bids_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four people, each with two sessions, the second of them with two runs: three recordings a person."""
    import mne_bids

    root = tmp_path_factory.mktemp("bids_sessions")
    rng = np.random.default_rng(0)
    n_events = 4
    for person in PEOPLE:
        for session, runs in (("a", (1,)), ("b", (1, 2))):
            for run in runs:
                data = np.concatenate(list(_windows(rng, np.full(n_events, person))), axis=-1)
                raw = mne.io.RawArray(data, mne.create_info(CHANNELS, SFREQ, "eeg"), verbose="error")
                raw.set_annotations(mne.Annotations(onset=[float(i) for i in range(n_events)],
                                                    duration=[0.5] * n_events,
                                                    description=["left", "right"] * (n_events // 2)))
                path = mne_bids.BIDSPath(subject=f"{person:02d}", session=session, run=run, task="mi",
                                         datatype="eeg", root=root)
                mne_bids.write_raw_bids(raw, path, format="BrainVision", allow_preload=True, verbose="error")
    return root


def test_bids_sessions_and_runs_of_one_person_stay_in_one_split(bids_root: Path, tmp_path: Path) -> None:
    for cfg in _splits():
        dm = BIDSDataModule(root=str(bids_root), task="mi", window_seconds=1.0, normalization="none",
                            cache_dir=str(tmp_path), split=cfg, batch_size=64)
        by_split = true_subjects_by_split(dm, _in_signal)
        assert_each_person_in_one_split(by_split, set(PEOPLE))
        assert (
            sum(len(d) for d in dm.datasets.values()) == len(PEOPLE) * 3 * 4
        )  # every window of every recording


def _interleaved(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows cycle through the people (3, 5, 8, 11, 3, 5, ...): no person's rows are contiguous."""
    rng = np.random.default_rng(seed)
    subjects = np.tile(np.asarray(PEOPLE), 6)
    return _windows(rng, subjects).astype(np.float32), np.arange(len(subjects)) % 2, subjects


def test_interleaved_array_rows_stay_with_their_person(tmp_path: Path) -> None:
    x, y, subjects = _interleaved()
    for cfg in _splits():
        dm = ArrayDataModule(x, y, subjects, sfreq=SFREQ, ch_names=CHANNELS, normalization="none",
                             cache_dir=str(tmp_path), split=cfg, batch_size=64)
        assert_each_person_in_one_split(true_subjects_by_split(dm, _in_signal), set(PEOPLE))


def test_interleaved_rows_of_an_npz_file_stay_with_their_person(tmp_path: Path) -> None:
    x, y, subjects = _interleaved(seed=1)
    np.savez(tmp_path / "mine.npz", x=x, y=y, subjects=subjects, sfreq=SFREQ, ch_names=np.asarray(CHANNELS))
    for cfg in _splits():
        dm = ArrayFileDataModule(str(tmp_path / "mine.npz"), normalization="none", cache_dir=str(tmp_path),
                                 split=cfg, batch_size=64)
        assert_each_person_in_one_split(true_subjects_by_split(dm, _in_signal), set(PEOPLE))


def test_corrected_ids_over_the_same_arrays_are_not_served_from_the_old_cache(tmp_path: Path) -> None:
    x, y, subjects = _interleaved()
    # first run: ids numbered per half of the recording (each person split in two ids), as a
    # per-session numbering gives; its cache is built and used
    wrong = np.where(np.arange(len(subjects)) < len(subjects) // 2, subjects, subjects + 100)
    first = ArrayDataModule(x, y, wrong, sfreq=SFREQ, ch_names=CHANNELS, normalization="none",
                            cache_dir=str(tmp_path), batch_size=64)
    first.setup()
    # the same arrays with the corrected ids: every split of the re-run holds whole people
    for cfg in _splits():
        dm = ArrayDataModule(x, y, subjects, sfreq=SFREQ, ch_names=CHANNELS, normalization="none",
                             cache_dir=str(tmp_path), split=cfg, batch_size=64)
        assert_each_person_in_one_split(true_subjects_by_split(dm, _in_signal), set(PEOPLE))


def test_epochs_file_with_interleaved_subjects_keeps_each_person_in_one_split(tmp_path: Path) -> None:
    import pandas as pd

    x, y, subjects = _interleaved(seed=1)
    events = np.column_stack([np.arange(len(y)) * N_TIMES, np.zeros(len(y), int), y + 1])
    epochs = mne.EpochsArray(x.astype(np.float64), mne.create_info(CHANNELS, SFREQ, "eeg"), events=events,
                             event_id={"left": 1, "right": 2}, metadata=pd.DataFrame({"subject": subjects}),
                             verbose="error")
    path = tmp_path / "mine-epo.fif"
    epochs.save(path, verbose="error")
    for cfg in _splits():
        dm = EpochsDataModule(epochs=str(path), normalization="none", cache_dir=str(tmp_path / "cache"),
                              split=cfg,
                              batch_size=64)
        assert_each_person_in_one_split(true_subjects_by_split(dm, _in_signal), set(PEOPLE))
