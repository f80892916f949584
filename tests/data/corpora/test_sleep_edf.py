"""Sleep-EDF Expanded (Sleep Cassette) reader on real-format EDF / EDF+ fixtures."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyedflib
import pytest
from pyedflib import highlevel

from biosig_lightning.data.corpora import edf as edf_module
from biosig_lightning.data.corpora.edf import files_fingerprint, read_annotations, read_header, read_signals
from biosig_lightning.data.corpora.sleep_edf import CLASSES, SYNTHETIC_DEFAULTS, SleepEDF
from biosig_lightning.data.spec import CorpusReader, DataError
from biosig_lightning.testing.sleep_edf import FS, START, write_hypnogram

# (onset, duration, text) of the main night: 20 min of PSG, hypnogram running past its end
MAIN_HYPNOGRAM = [
    (0, 600, "Sleep stage W"),      # epochs 0..570
    (600, 60, "Sleep stage 1"),     # 600, 630
    (660, 90, "Sleep stage 2"),     # 660, 690, 720
    (750, 60, "Sleep stage 3"),     # 750, 780
    (810, 30, "Sleep stage 4"),     # 810
    (840, 30, "Movement time"),     # dropped
    (870, 60, "Sleep stage R"),     # 870, 900
    (930, 30, "Sleep stage ?"),     # dropped
    (960, 240, "Sleep stage W"),    # 960..1170
    (1200, 300, "Sleep stage ?"),   # past the PSG end
]


def write_psg(path: Path, seconds: int, start: datetime = START, channels: dict[str, int] | None = None,
              offset: float = 0.0) -> None:
    """A PSG whose EEG encodes time: channel 0 = t + offset, channel 1 = -(t + offset) (seconds)."""
    channels = channels or {"EEG Fpz-Cz": FS, "EEG Pz-Oz": FS, "Resp oro-nasal": 1}
    signals, headers = [], []
    for k, (label, fs) in enumerate(channels.items()):
        t = np.arange(seconds * fs) / fs + offset
        sig = t if k == 0 else (-t if k == 1 else np.zeros_like(t))
        signals.append(sig)
        headers.append(highlevel.make_signal_header(label, sample_frequency=fs, physical_min=-2000,
                                                    physical_max=2000))
    assert highlevel.write_edf(str(path), signals, headers, header=highlevel.make_header(startdate=start))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sleep") / "sleep-cassette"
    root.mkdir()
    write_psg(root / "SC4001E0-PSG.edf", 1200)
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", MAIN_HYPNOGRAM)
    # second night of subject 00
    write_psg(root / "SC4002E0-PSG.edf", 300)
    write_hypnogram(root / "SC4002EC-Hypnogram.edf", [(0, 120, "Sleep stage W"), (120, 90, "Sleep stage 2"),
                                                      (210, 90, "Sleep stage W")])
    # subject 01: the hypnogram starts 60 s after the PSG
    write_psg(root / "SC4011E0-PSG.edf", 300)
    write_hypnogram(root / "SC4011EH-Hypnogram.edf", [(0, 60, "Sleep stage 1"), (60, 60, "Sleep stage R")],
                    start=START + timedelta(seconds=60))
    (root / "RECORDS").write_text("SC4001E0-PSG.edf\n")  # unrelated files are ignored
    return root


def blocks(reader: SleepEDF) -> dict[str, object]:
    return {b.recording: b for b in reader.iter_blocks()}


def test_spec_and_synthetic_defaults() -> None:
    spec = SleepEDF.make_spec()
    assert (spec.n_chans, spec.sfreq, spec.n_times, spec.n_outputs) == (2, 100.0, 3000, 5)
    assert spec.ch_names == ("EEG Fpz-Cz", "EEG Pz-Oz") and spec.classes == CLASSES == (
        "W",
        "N1",
        "N2",
        "N3",
        "REM",
    )
    assert spec.label_level == "window"
    assert SYNTHETIC_DEFAULTS["kind"] == "sleep" and SYNTHETIC_DEFAULTS["n_subjects"] == 8
    assert SYNTHETIC_DEFAULTS["recordings_per_subject"] == 2


def test_full_night_without_cropping(corpus: Path) -> None:
    reader = SleepEDF(corpus.parent, crop_wake_minutes=None)  # the parent of sleep-cassette/ works too
    assert isinstance(reader, CorpusReader)
    b = blocks(reader)["SC4001E0-PSG"]
    expected_starts = ([30.0 * k for k in range(20)] + [600, 630, 660, 690, 720, 750, 780, 810, 870, 900]
                       + [960 + 30.0 * k for k in range(8)])
    expected_labels = [0] * 20 + [1, 1, 2, 2, 2, 3, 3, 3, 4, 4] + [0] * 8
    np.testing.assert_allclose(b.start, expected_starts)
    np.testing.assert_array_equal(b.y, expected_labels)
    assert b.x.shape == (38, 2, 3000) and b.x.dtype == np.float32
    # each window holds the signal from its epoch start on: channel 0 is t, channel 1 is -t
    np.testing.assert_allclose(b.x[:, 0, 0], expected_starts, atol=0.1)
    np.testing.assert_allclose(b.x[:, 1, -1], -(np.asarray(expected_starts) + 29.99), atol=0.1)
    assert b.subject == 0


def test_wake_cropped_around_sleep(corpus: Path) -> None:
    b = blocks(SleepEDF(corpus, crop_wake_minutes=2))["SC4001E0-PSG"]
    # sleep spans 600..930 s: 120 s of wake kept on each side
    np.testing.assert_allclose(b.start, [480, 510, 540, 570, 600, 630, 660, 690, 720, 750, 780, 810, 870, 900,
                                         960, 990, 1020])
    assert b.y[:4].tolist() == [0] * 4 and b.y[-3:].tolist() == [0] * 3
    zero = blocks(SleepEDF(corpus, crop_wake_minutes=0))["SC4001E0-PSG"]
    assert zero.start[0] == 600 and zero.start[-1] == 900


def test_default_crop_is_thirty_minutes(corpus: Path) -> None:
    reader = SleepEDF(corpus)
    assert reader.crop_wake_minutes == 30 and reader.config()["crop_wake_minutes"] == 30
    # 30 min exceeds this night's wake, so every scored epoch stays
    assert len(blocks(reader)["SC4001E0-PSG"].y) == 38


def test_both_nights_share_the_subject_and_hypnogram_start_is_honoured(corpus: Path) -> None:
    b = blocks(SleepEDF(corpus, crop_wake_minutes=None))
    assert sorted(b) == ["SC4001E0-PSG", "SC4002E0-PSG", "SC4011E0-PSG"]
    assert b["SC4001E0-PSG"].subject == b["SC4002E0-PSG"].subject == 0
    assert b["SC4011E0-PSG"].subject == 1
    late = b["SC4011E0-PSG"]
    np.testing.assert_allclose(late.start, [60, 90, 120, 150])
    np.testing.assert_array_equal(late.y, [1, 1, 4, 4])
    np.testing.assert_allclose(late.x[:, 0, 0], [60, 90, 120, 150], atol=0.1)


def test_subject_filter_and_single_channel(corpus: Path) -> None:
    reader = SleepEDF(corpus, channels=["EEG Fpz-Cz"], subjects=[1], crop_wake_minutes=None)
    assert reader.spec.n_chans == 1
    (b,) = list(reader.iter_blocks())
    assert b.recording == "SC4011E0-PSG" and b.x.shape == (4, 1, 3000)
    with pytest.raises(DataError, match=r"none of subjects \[7\]"):
        SleepEDF(corpus, subjects=[7])


def test_config_is_json_and_fingerprints_files(corpus: Path) -> None:
    reader = SleepEDF(corpus)
    cfg = reader.config()
    json.dumps(cfg)
    assert cfg["root"] == str(corpus.resolve()) and cfg["channels"] == ["EEG Fpz-Cz", "EEG Pz-Oz"]
    assert cfg["files"]["n_files"] == 6
    hyp = corpus / "SC4002EC-Hypnogram.edf"
    st = hyp.stat()
    try:
        os.utime(hyp, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert SleepEDF(corpus).config()["files"] != cfg["files"]
    finally:
        os.utime(hyp, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert SleepEDF(corpus).config() == cfg


# ---- errors ------------------------------------------------------------------------------------
def test_missing_and_empty_root(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist.*SC4ssN\?\?-PSG\.edf"):
        SleepEDF(tmp_path / "nowhere")
    with pytest.raises(DataError, match=rf"no Sleep Cassette recordings in {tmp_path}.*SC4ssN\?\?-PSG\.edf"):
        SleepEDF(tmp_path)


def test_psg_without_hypnogram(tmp_path: Path) -> None:
    write_psg(tmp_path / "SC4001E0-PSG.edf", 60)
    with pytest.raises(DataError,
                       match=r"SC4001E0-PSG\.edf: no hypnogram: expected SC4001\?\?-Hypnogram\.edf"):
        SleepEDF(tmp_path)


def test_missing_channel(tmp_path: Path) -> None:
    write_psg(tmp_path / "SC4001E0-PSG.edf", 60, channels={"EEG Fpz-Cz": FS, "EOG horizontal": FS})
    write_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf", [(0, 60, "Sleep stage 2")])
    with pytest.raises(DataError,
                       match=r"SC4001E0-PSG\.edf: missing channel 'EEG Pz-Oz' \(channels: EEG Fpz-Cz"):
        list(SleepEDF(tmp_path).iter_blocks())


def test_wrong_sampling_rate(tmp_path: Path) -> None:
    write_psg(tmp_path / "SC4001E0-PSG.edf", 60, channels={"EEG Fpz-Cz": FS, "EEG Pz-Oz": 200})
    write_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf", [(0, 60, "Sleep stage 2")])
    with pytest.raises(DataError,
                       match=r"SC4001E0-PSG\.edf: channel 'EEG Pz-Oz' is sampled at 200 Hz, expected 100 Hz"):
        list(SleepEDF(tmp_path).iter_blocks())


def test_unknown_annotation(tmp_path: Path) -> None:
    write_psg(tmp_path / "SC4001E0-PSG.edf", 60)
    write_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf",
                    [(0, 30, "Sleep stage 2"), (30, 30, "Sleep stage X")])
    with pytest.raises(DataError,
                       match=r"SC4001EC-Hypnogram\.edf: unknown annotation 'Sleep stage X' at 30 s"):
        list(SleepEDF(tmp_path).iter_blocks())


def test_overlapping_stages_and_no_sleep(tmp_path: Path) -> None:
    write_psg(tmp_path / "SC4001E0-PSG.edf", 120)
    write_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf",
                    [(0, 60, "Sleep stage 2"), (45, 30, "Sleep stage 3")])
    with pytest.raises(DataError, match=r"overlapping stage annotations at 30 s and 45 s"):
        list(SleepEDF(tmp_path).iter_blocks())
    write_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf", [(0, 120, "Sleep stage W")])
    with pytest.raises(DataError, match=r"no sleep epoch .* crop_wake_minutes=None"):
        list(SleepEDF(tmp_path).iter_blocks())
    assert len(next(SleepEDF(tmp_path, crop_wake_minutes=None).iter_blocks()).y) == 4


def test_unreadable_edf_and_nan_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "broken.edf"
    bad.write_bytes(b"not an edf at all")
    with pytest.raises(DataError, match=r"broken\.edf: not a readable EDF"):
        read_header(bad)
    with pytest.raises(DataError, match=r"missing\.edf: EDF file not found"):
        read_annotations(tmp_path / "missing.edf")
    good = tmp_path / "SC4001E0-PSG.edf"
    write_psg(good, 60)
    assert read_signals(good, [0, 1], FS).shape == (2, 6000)
    original = edf_module._read_records

    def with_nan(path: Path, reader: pyedflib.EdfReader, indices: list[int]) -> list[np.ndarray] | None:
        sigs = original(path, reader, indices)
        assert sigs is not None
        sigs[1][5] = np.nan
        return sigs

    monkeypatch.setattr(edf_module, "_read_records", with_nan)
    with pytest.raises(DataError, match=r"SC4001E0-PSG\.edf: channel 'EEG Pz-Oz' contains NaN/Inf"):
        read_signals(good, [0, 1], FS)


def test_fingerprint_names_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    fp = files_fingerprint([tmp_path / "a.txt"], tmp_path)
    assert fp["n_files"] == 1 and len(fp["sha256"]) == 64
    with pytest.raises(DataError, match=r"b\.txt: file not found"):
        files_fingerprint([tmp_path / "a.txt", tmp_path / "b.txt"], tmp_path)


def test_real_layout_corpus_reads_back_its_hypnogram(tmp_path: Path) -> None:
    """The shared writer's nights (merged stage runs, stage 4, movement and unscored epochs, other channels
    at 1 Hz, hypnogram letters other than the PSG's) read back as the stages it wrote, stage 4 as N3."""
    from biosig_lightning.testing.sleep_edf import write_corpus

    kept = write_corpus(tmp_path, [(0, 1), (0, 2), (3, 1)], n_epochs=24, seed=2)
    assert sorted(p.name for p in tmp_path.iterdir())[:2] == ["SC4001E0-PSG.edf", "SC4001EC-Hypnogram.edf"]
    assert (tmp_path / "SC4002EH-Hypnogram.edf").is_file()
    b = blocks(SleepEDF(tmp_path))
    assert sorted(b) == ["SC4001E0-PSG", "SC4002E0-PSG", "SC4031E0-PSG"]
    np.testing.assert_array_equal(np.concatenate([b["SC4001E0-PSG"].y, b["SC4002E0-PSG"].y]), kept[0])
    np.testing.assert_array_equal(b["SC4031E0-PSG"].y, kept[3])
    assert len(kept[3]) == 22 and 3 in kept[3]
    texts = {note.text for note in read_annotations(tmp_path / "SC4031EJ-Hypnogram.edf")[1]}
    assert {"Sleep stage 3", "Sleep stage 4", "Movement time", "Sleep stage ?"} <= texts
    # the movement (epoch 8) and unscored (epoch 16) epochs leave gaps in the start times
    np.testing.assert_allclose(np.diff(b["SC4031E0-PSG"].start)[[7, 14]], [60.0, 60.0])
