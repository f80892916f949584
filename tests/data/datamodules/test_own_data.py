"""A user's own data: a BIDS dataset written by mne-bids, an ``mne.Epochs`` file and in-memory arrays,
trained end to end through ``biosig fit`` with subject-disjoint splits."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import mne
import numpy as np
import pytest
import yaml

from biosig_lightning.cli import main
from biosig_lightning.data.corpora.bids import BIDSReader
from biosig_lightning.data.datamodules import ArrayDataModule, BIDSDataModule
from biosig_lightning.data.spec import DataError
from biosig_lightning.data.splits import SplitConfig

SFREQ = 100.0
CHANNELS = ["C3", "C4", "Cz", "Pz"]
N_SUBJECTS = 6
EVENTS_PER_SUBJECT = 20
CLASSES = ("left", "right")


def _signals(rng: np.random.Generator, labels: list[int]) -> np.ndarray:
    """One second per label: noise, plus a 10 Hz rhythm on C3 for ``left`` (0) and on C4 for ``right`` (1)."""
    t = np.arange(int(SFREQ)) / SFREQ
    out = rng.normal(0.0, 1.0, (len(labels), len(CHANNELS), int(SFREQ)))
    for i, lab in enumerate(labels):
        out[i, lab] += 3.0 * np.sin(2 * np.pi * 10.0 * t + rng.uniform(0, 2 * np.pi))
    return out * 1e-5


@pytest.fixture(scope="module")
def bids_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 subjects, one 40-s recording each with an event every 2 s (alternating classes); participants.tsv
    gets a ``group`` column (subjects 1-3 control, 4-6 patient)."""
    import mne_bids

    root = tmp_path_factory.mktemp("bids")
    rng = np.random.default_rng(0)
    for sub in range(1, N_SUBJECTS + 1):
        labels = [i % 2 for i in range(EVENTS_PER_SUBJECT)]
        windows = _signals(rng, labels)
        data = np.zeros((len(CHANNELS), int(2 * SFREQ * EVENTS_PER_SUBJECT)))
        for i, w in enumerate(windows):  # the labelled second, then a second of noise
            data[:, int(2 * i * SFREQ):int((2 * i + 1) * SFREQ)] = w
            data[:, int((2 * i + 1) * SFREQ) : int((2 * i + 2) * SFREQ)] = rng.normal(
                0, 1e-5, (len(CHANNELS), int(SFREQ))
            )
        raw = mne.io.RawArray(data, mne.create_info(CHANNELS, SFREQ, "eeg"), verbose="error")
        raw.set_annotations(mne.Annotations(onset=[2.0 * i for i in range(EVENTS_PER_SUBJECT)],
                                            duration=[1.0] * EVENTS_PER_SUBJECT,
                                            description=[CLASSES[lab] for lab in labels]))
        path = mne_bids.BIDSPath(subject=f"{sub:02d}", task="mi", datatype="eeg", root=root)
        mne_bids.write_raw_bids(raw, path, format="BrainVision", allow_preload=True, verbose="error")
    tsv = root / "participants.tsv"
    with open(tsv, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for row in rows:
        row["group"] = "control" if int(row["participant_id"].removeprefix("sub-")) <= 3 else "patient"
    with open(tsv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return root


def _epochs(seed: int = 1) -> mne.EpochsArray:
    """The same two classes as 1-s epochs of 6 subjects, subject ids in the metadata."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    labels = [i % 2 for i in range(EVENTS_PER_SUBJECT)] * N_SUBJECTS
    subjects = np.repeat(np.arange(1, N_SUBJECTS + 1), EVENTS_PER_SUBJECT)
    events = np.column_stack([np.arange(len(labels)) * 200,
                              np.zeros(len(labels), int), np.asarray(labels) + 1])
    return mne.EpochsArray(_signals(rng, labels), mne.create_info(CHANNELS, SFREQ, "eeg"), events=events,
                           event_id={"left": 1, "right": 2}, metadata=pd.DataFrame({"subject": subjects}),
                           verbose="error")


def _fit(tmp: Path, data: dict, capsys: pytest.CaptureFixture[str], name: str) -> dict:
    config = {
        "seed_everything": 0,
        "trainer": {"max_epochs": 5, "log_every_n_steps": 1, "accelerator": "cpu", "devices": 1,
                    "enable_model_summary": False,
                    "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(tmp / "runs"), "name": name}}},
        "model": {"class_path": "ClassificationTask",
                  "init_args": {"backbone": {"class_path": "biosig_lightning.models.baselines.CNN1D",
                                             "init_args": {"width": 8, "n_blocks": 2, "convs_per_block": 1}},
                                "lr": 1.0e-2, "monitor": "val/f1", "mode": "max"}},
        "data": data,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("results: "), out[-5:]
    return json.loads(Path(out[-1].split("results: ", 1)[1]).read_text())


def _assert_disjoint_and_learned(res: dict, subjects: set[int]) -> None:
    train, val, test = (set(res["subjects"][k]) for k in ("train", "val", "test"))
    assert train and val and test
    assert train | val | test == subjects
    # each split serves exactly its subjects' windows (every subject holds EVENTS_PER_SUBJECT): no window of
    # a subject strays into another split; that every window's person sits in one split is pinned window by
    # window in test_own_data_subjects.py
    assert {k: res["windows"][k] for k in ("train", "val", "test")} == {
        k: EVENTS_PER_SUBJECT * len(res["subjects"][k]) for k in ("train", "val", "test")}
    # balanced classes: chance is 0.5; a window whose label is read from the wrong event (or the wrong
    # subject) leaves the rhythm unlearnable and the accuracy near 0.5
    assert res["metrics"]["test/acc"] >= 0.9, res["metrics"]


def test_bids_events_trains_through_biosig_fit(bids_root: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    res = _fit(tmp_path, {"class_path": "BIDSDataModule",
                          "init_args": {"root": str(bids_root), "task": "mi", "window_seconds": 1.0,
                                        "batch_size": 16, "cache_dir": str(tmp_path / "cache")}},
               capsys, "bids")
    assert res["dataset"] == "bids"
    assert (
        res["windows"]["train"] + res["windows"]["val"] + res["windows"]["test"]
        == N_SUBJECTS * EVENTS_PER_SUBJECT
    )
    _assert_disjoint_and_learned(res, set(range(1, N_SUBJECTS + 1)))


def test_epochs_file_trains_through_biosig_fit_with_kfold(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine-epo.fif"
    _epochs().save(path, verbose="error")
    res = _fit(tmp_path, {"class_path": "EpochsDataModule",
                          "init_args": {"epochs": str(path), "batch_size": 16,
                                        "cache_dir": str(tmp_path / "cache"),
                                        "split": {"strategy": "kfold", "n_folds": 3, "fold": 1}}},
               capsys, "epochs")
    assert res["dataset"] == "epochs"
    _assert_disjoint_and_learned(res, set(range(1, N_SUBJECTS + 1)))


def test_bids_reader_shape_subjects_and_event_labels(bids_root: Path) -> None:
    reader = BIDSReader(bids_root, task="mi", window_seconds=1.0)
    assert (
        reader.spec.ch_names == tuple(CHANNELS) and reader.spec.sfreq == SFREQ and reader.spec.n_times == 100
    )
    assert reader.classes == CLASSES and reader.spec.label_level == "window"
    blocks = list(reader.iter_blocks())
    assert [b.subject for b in blocks] == list(range(1, N_SUBJECTS + 1))
    for b in blocks:
        assert b.y.tolist() == [i % 2 for i in range(EVENTS_PER_SUBJECT)]
        assert b.start.tolist() == [2.0 * i for i in range(EVENTS_PER_SUBJECT)]
        # the rhythm sits on the labelled class's channel: the window was cut at its event
        power = (b.x ** 2).mean(axis=2)
        assert (power[np.arange(len(b.y)), b.y] > 3 * power[np.arange(len(b.y)), 1 - b.y]).all()


def test_bids_participants_column_labels_subjects(bids_root: Path, tmp_path: Path) -> None:
    dm = BIDSDataModule(root=str(bids_root), labels="participants", participants_column="group",
                        window_seconds=2.0, cache_dir=str(tmp_path))
    assert dm.spec.classes == ("control", "patient") and dm.spec.label_level == "subject"
    dm.setup()
    for split in ("train", "val", "test"):  # stratified by subject class: each split holds both groups
        subjects = dm.subjects[split]
        assert {s <= 3 for s in subjects} == {True, False}, (split, subjects)
    labels = np.asarray(dm.cache.labels)
    subjects = np.asarray(dm.cache.subjects)
    assert (labels == (subjects > 3)).all()
    assert len(labels) == N_SUBJECTS * 20  # 40 s cut into back-to-back 2-s windows


def test_bids_bad_column_names_the_column(bids_root: Path) -> None:
    with pytest.raises(DataError, match=r"no column 'diagnosis'.*participant_id"):
        BIDSReader(bids_root, labels="participants", participants_column="diagnosis")


def test_in_memory_epochs_same_splits_cache_and_normalisation(tmp_path: Path) -> None:
    epochs = _epochs()
    dm = ArrayDataModule.from_epochs(epochs, cache_dir=str(tmp_path), normalization="channel",
                                     split=SplitConfig(strategy="loso", fold=2))
    assert (dm.n_chans, dm.n_times, dm.sfreq, dm.spec.classes) == (4, 100, SFREQ, CLASSES)
    dm.setup()
    assert dm.subjects["test"] == [3] and 3 not in dm.subjects["train"] + dm.subjects["val"]
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape[1:] == (4, 100) and set(batch["subject"].tolist()) <= set(dm.subjects["train"])
    # channel statistics come from the training subjects only
    train = np.asarray(dm.cache.signals[dm.datasets["train"].indices], dtype=np.float64)
    np.testing.assert_allclose(dm.datasets["train"].stats["mean"],
                               train.mean(axis=(0, 2)), rtol=1e-4, atol=1e-12)
    # the same arrays reuse their cache; other arrays get their own
    again = ArrayDataModule.from_epochs(epochs, cache_dir=str(tmp_path))
    assert again.cache.dir == dm.cache.dir
    other = ArrayDataModule.from_epochs(_epochs(seed=2), cache_dir=str(tmp_path))
    assert other.cache.dir != dm.cache.dir


def test_arrays_refuse_mismatched_lengths() -> None:
    with pytest.raises(DataError, match="10 windows but 9 labels and 10 subject ids"):
        ArrayDataModule(np.zeros((10, 2, 8)), [0] * 9, [1] * 10, sfreq=8.0)


def test_braindecode_windows_dataset_keeps_subjects_and_targets(tmp_path: Path) -> None:
    import braindecode  # a pinned dev dependency
    from braindecode.datasets import create_from_X_y

    assert braindecode.__version__
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3, 200)).astype(np.float32)  # 6 recordings of 2 s at 100 Hz
    dataset = create_from_X_y(x, [0, 1, 0, 1, 1, 0], drop_last_window=False, sfreq=100.0,
                              ch_names=["a", "b", "c"],
                              window_size_samples=100, window_stride_samples=100)
    dataset.set_description({"subject": [1, 1, 2, 2, 3, 3]}, overwrite=True)
    dm = ArrayDataModule.from_braindecode(dataset, cache_dir=str(tmp_path))
    assert (dm.n_chans, dm.n_times, dm.sfreq, dm.ch_names) == (3, 100, 100.0, ["a", "b", "c"])
    reader = dm.reader()
    assert reader.subjects.tolist() == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert reader.y.tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0]
    np.testing.assert_allclose(reader.x[3], x[1][:, 100:], rtol=1e-6)  # recording 1, second window
