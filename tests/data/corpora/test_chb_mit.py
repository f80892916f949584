"""CHB-MIT reader on a real-format fixture: tiny 256 Hz EDFs and chbNN-summary.txt files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pyedflib import highlevel

from biosig_lightning.data.corpora.chb_mit import (
    CHANNELS_18,
    CHANNELS_23,
    CHBMIT,
    SUBJECT_GROUPS,
    SYNTHETIC_DEFAULTS,
    parse_summary,
    resolve_channels,
)
from biosig_lightning.data.spec import CorpusReader, DataError

FS = 256
SECONDS = 30
# the 23 labels as CHB-MIT EDFs carry them: T8-P8 twice (channels 15 and 23)
FILE_23 = list(CHANNELS_18) + ["P7-T7", "T7-FT9", "FT9-FT10", "FT10-T8", "T8-P8"]

CHB01_SUMMARY = """Data Sampling Rate: 256 Hz
*************************

Channels in EDF Files:
**********************
{channels}

File Name: chb01_01.edf
File Start Time: 11:42:54
File End Time: 12:42:54
Number of Seizures in File: 0

File Name: chb01_03.edf
File Start Time: 13:43:04
File End Time: 14:43:04
Number of Seizures in File: 1
Seizure Start Time: 10 seconds
Seizure End Time:   15 seconds
"""

CHB21_SUMMARY = """Data Sampling Rate: 256 Hz
*************************

Channels in EDF Files:
**********************
{channels}

File Name: chb21_01.edf
File Start Time: 22:03:16
File End Time: 24:03:16
Number of Seizures in File: 2
Seizure 1 Start Time: 3 seconds
Seizure 1 End Time: 4 seconds
Seizure 2 Start Time: 21 seconds
Seizure 2 End Time: 25 seconds

Channels changed:
Channel 1: FP1-F7
Channel 2: -
Channel 3: F7-T7

File Name: chb21_02.edf
File Start Time: 25:03:20
File End Time: 26:03:20
Number of Seizures in File: 0
"""


def channel_block(labels: list[str]) -> str:
    return "\n".join(f"Channel {i}: {name}" for i, name in enumerate(labels, start=1))


def write_edf(path: Path, labels: list[str], fs: int = FS, seconds: int = SECONDS) -> None:
    """Channel ``k`` holds ``100 k + t`` (t in seconds), so windows can be located by value."""
    t = np.arange(seconds * fs) / fs
    signals = [100.0 * k + t for k in range(len(labels))]
    headers = [highlevel.make_signal_header(lbl, sample_frequency=fs, physical_min=-100, physical_max=3000)
               for lbl in labels]
    assert highlevel.write_edf(str(path), signals, headers)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chbmit")
    chb01, chb21 = root / "chb01", root / "chb21"
    chb01.mkdir()
    chb21.mkdir()
    (chb01 / "chb01-summary.txt").write_text(CHB01_SUMMARY.format(channels=channel_block(FILE_23)))
    write_edf(chb01 / "chb01_01.edf", FILE_23 + ["-", "ECG"])  # dummy and extra channels are ignored
    write_edf(chb01 / "chb01_03.edf", FILE_23)
    write_edf(chb01 / "chb01_99.edf", FILE_23)  # not in the summary: seizures unknown
    (chb21 / "chb21-summary.txt").write_text(CHB21_SUMMARY.format(channels=channel_block(FILE_23)))
    # MNE-style disambiguated duplicates, channels in another order and lower case
    mne_style = [lbl.lower() for lbl in reversed(FILE_23[:-1])] + ["T8-P8-1"]
    mne_style[mne_style.index("t8-p8")] = "T8-P8-0"
    write_edf(chb21 / "chb21_01.edf", mne_style)
    write_edf(chb21 / "chb21_02.edf", [lbl for lbl in FILE_23 if lbl != "FZ-CZ"])
    (root / "RECORDS").write_text("chb01/chb01_01.edf\n")
    return root


def by_name(reader: CHBMIT) -> dict[str, object]:
    with pytest.warns(UserWarning, match="left out"):
        return {b.recording: b for b in reader.iter_blocks()}


def test_spec_constants_and_synthetic_defaults() -> None:
    spec = CHBMIT.make_spec()
    assert (spec.n_chans, spec.sfreq, spec.n_times, spec.classes) == (23, 256.0, 512,
                                                                      ("background", "seizure"))
    assert spec.ch_names == CHANNELS_23 and len(set(spec.ch_names)) == 23
    assert CHBMIT.make_spec("18", 4.0, 64).n_times == 256
    assert SUBJECT_GROUPS == [[1, 21]]
    assert SYNTHETIC_DEFAULTS["kind"] == "seizure" and SYNTHETIC_DEFAULTS["n_subjects"] == 6
    with pytest.raises(ValueError, match="whole number of samples"):
        CHBMIT.make_spec("23", 0.3, 256)


def test_parse_summary_both_spellings_and_channel_blocks(corpus: Path) -> None:
    chb21 = parse_summary(corpus / "chb21" / "chb21-summary.txt")
    assert list(chb21) == ["chb21_01.edf", "chb21_02.edf"]
    assert chb21["chb21_01.edf"].seizures == [(3.0, 4.0), (21.0, 25.0)]
    assert chb21["chb21_01.edf"].channels == tuple(FILE_23)
    assert chb21["chb21_02.edf"].seizures == [] and chb21["chb21_02.edf"].channels == ("FP1-F7", "-", "F7-T7")
    chb01 = parse_summary(corpus / "chb01" / "chb01-summary.txt")
    assert chb01["chb01_03.edf"].seizures == [(10.0, 15.0)] and chb01["chb01_03.edf"].n_declared == 1


def test_resolve_channels_duplicates() -> None:
    labels = ["FP1-F7", "T8-P8", "fz-cz", "T8-P8", "-"]
    assert resolve_channels(labels, ["T8-P8", "T8-P8-1", "FZ-CZ", "T8-P8-2"]) == ([1, 3, 2], ["T8-P8-2"])
    assert resolve_channels(["T8-P8-0", "T8-P8-1"], ["T8-P8-1", "T8-P8"]) == ([1, 0], [])


def test_windows_labels_and_skips(corpus: Path) -> None:
    reader = CHBMIT(corpus)
    assert isinstance(reader, CorpusReader)
    blocks = by_name(reader)
    assert sorted(blocks) == ["chb01_01", "chb01_03", "chb21_01"]
    assert {s.path: s.reason for s in reader.skipped} == {
        "chb01/chb01_99.edf": "not listed in chb01-summary.txt",
        "chb21/chb21_02.edf": "lacks channel(s) FZ-CZ",
    }
    b = blocks["chb01_03"]
    assert b.subject == 1 and b.x.shape == (15, 23, 512) and b.x.dtype == np.float32
    np.testing.assert_allclose(b.start, np.arange(15) * 2.0)
    # seizure [10, 15): windows starting at 10, 12 and 14 overlap it; [8, 10) only touches it
    assert np.flatnonzero(b.y).tolist() == [5, 6, 7]
    # channel k holds 100 k + t: check window position and channel order (23rd = second T8-P8)
    np.testing.assert_allclose(b.x[:, :, 0], 100.0 * np.arange(23)[None] + b.start[:, None], atol=0.1)
    assert blocks["chb01_01"].y.sum() == 0 and len(blocks["chb01_01"].y) == 15
    # chb21_01: labels were written in reverse order, lower case, with T8-P8-0 / T8-P8-1
    c = blocks["chb21_01"]
    assert c.subject == 21
    assert np.flatnonzero(c.y).tolist() == [1, 10, 11, 12]
    file_pos = {name: i for i, name in enumerate(reversed(FILE_23[:-1]))}
    expected = [100.0 * file_pos[name] for name in CHANNELS_18 + ("P7-T7",
                                                                  "T7-FT9", "FT9-FT10", "FT10-T8")] + [2200.0]
    np.testing.assert_allclose(c.x[0, :, 0], expected, atol=0.1)


def test_overlapping_stride_and_18_channels(corpus: Path) -> None:
    reader = CHBMIT(corpus, montage="18", window_seconds=4, stride_seconds=1, subjects=[1])
    b = by_name(reader)["chb01_03"]
    assert b.x.shape == (27, 18, 1024)
    # [s, s+4) overlaps [10, 15) for s = 7..14
    assert np.flatnonzero(b.y).tolist() == list(range(7, 15))


def test_resampling(corpus: Path) -> None:
    reader = CHBMIT(corpus, montage="18", window_seconds=4, subjects=[1], resample_to=64)
    assert (reader.spec.sfreq, reader.spec.n_times) == (64.0, 256)
    b = by_name(reader)["chb01_03"]
    assert b.x.shape == (7, 18, 256)
    # a ramp stays a ramp away from the edges
    np.testing.assert_allclose(b.x[3, 0, 10:20], 12 + np.arange(10, 20) / 64, atol=0.05)


def test_max_files_and_background_ratio(corpus: Path) -> None:
    first = CHBMIT(corpus, subjects=[1], max_files_per_subject=1)
    assert list(by_name(first)) == ["chb01_03"]  # the seizure file wins the cap
    ratio = CHBMIT(corpus, subjects=[1], background_ratio=1.0)
    blocks = by_name(ratio)
    y = np.concatenate([blocks[k].y for k in sorted(blocks)])
    assert y.sum() == 3 and (y == 0).sum() == 3  # 3 seizure windows, 3 of 27 background windows
    # evenly spaced over the 15 background windows of chb01_01 then the 12 of chb01_03:
    # background indices 0, 13 (chb01_01 at 0 s and 26 s) and 26 (the last of chb01_03, 28 s)
    assert blocks["chb01_01"].start.tolist() == [0.0, 26.0]
    np.testing.assert_allclose(blocks["chb01_03"].start, [10, 12, 14, 28])
    none = CHBMIT(corpus, subjects=[1], background_ratio=0.0)
    assert sum(len(b.y) for b in by_name(none).values()) == 3


def test_config(corpus: Path) -> None:
    reader = CHBMIT(corpus, background_ratio=2.0)
    cfg = reader.config()
    json.dumps(cfg)
    assert cfg["root"] == str(corpus.resolve()) and cfg["channels"] == list(CHANNELS_23)
    assert cfg["window_seconds"] == 2.0 and cfg["stride_seconds"] == 2.0 and cfg["background_ratio"] == 2.0
    assert cfg["files"]["n_files"] == 7  # 2 summaries + 5 EDFs
    assert CHBMIT(corpus, window_seconds=4).config()["files"] == cfg["files"]


# ---- errors ------------------------------------------------------------------------------------
def test_root_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist.*chbNN/chbNN_MM\.edf"):
        CHBMIT(tmp_path / "nowhere")
    with pytest.raises(DataError, match=rf"no chbNN folders in {tmp_path}; expected chbNN/chbNN_MM\.edf"):
        CHBMIT(tmp_path)
    (tmp_path / "chb03").mkdir()
    with pytest.raises(DataError, match=r"chb03: missing chb03-summary\.txt"):
        CHBMIT(tmp_path)


def _summary_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "chb05-summary.txt"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        parse_summary(path)
    return str(err.value)


def test_summary_errors(tmp_path: Path) -> None:
    head = "File Name: chb05_01.edf\nNumber of Seizures in File: 1\n"
    msg = _summary_error(tmp_path, head + "Seizure Start Time: 10 seconds\nSeizure Ende Time: 20 seconds\n")
    assert "chb05-summary.txt:4: cannot parse summary line 'Seizure Ende Time: 20 seconds'" in msg
    msg = _summary_error(tmp_path, head + "Seizure Start Time: 10 seconds\nSeizure End Time: 20 seconds\n"
                         "Seizure Start Time: 30 seconds\nSeizure End Time: 40 seconds\n")
    assert "chb05-summary.txt:1: chb05_01.edf declares 1 seizures but lists 2" in msg
    msg = _summary_error(tmp_path, head + "Seizure End Time: 20 seconds\n")
    assert "chb05-summary.txt:3: seizure end time without a start time" in msg
    msg = _summary_error(tmp_path, head + "Seizure Start Time: 20 seconds\nSeizure End Time: 20 seconds\n")
    assert "chb05-summary.txt:4: seizure of chb05_01.edf ends at 20 s, not after its start 20 s" in msg
    msg = _summary_error(tmp_path, head + "Seizure Start Time: 20 seconds\n\nFile Name: chb05_02.edf\n")
    assert "chb05-summary.txt:3: seizure start of chb05_01.edf has no end time" in msg
    msg = _summary_error(tmp_path, "Seizure Start Time: 20 seconds\n")
    assert "chb05-summary.txt:1: 'Seizure Start Time: 20 seconds' before any 'File Name:' line" in msg
    msg = _summary_error(tmp_path, "File Name: chb05_01.edf\nNumber of Seizures in File: 0\n"
                         "File Name: chb05_01.edf\nNumber of Seizures in File: 0\n")
    assert "chb05-summary.txt:3: chb05_01.edf is listed twice (first at line 1)" in msg
    msg = _summary_error(tmp_path, "Channel 1: FP1-F7\n")
    assert "chb05-summary.txt:1: channel line 'Channel 1: FP1-F7' outside a 'Channels' block" in msg
    msg = _summary_error(tmp_path, "File Name: chb05_01.edf\n")
    assert "chb05-summary.txt:1: chb05_01.edf has no 'Number of Seizures in File' line" in msg


def _one_file_corpus(tmp_path: Path, summary: str, fs: int = FS) -> Path:
    folder = tmp_path / "chb05"
    folder.mkdir()
    (folder / "chb05-summary.txt").write_text(summary)
    write_edf(folder / "chb05_01.edf", FILE_23, fs=fs, seconds=10)
    return tmp_path


def test_wrong_sampling_rate(tmp_path: Path) -> None:
    root = _one_file_corpus(tmp_path, "File Name: chb05_01.edf\nNumber of Seizures in File: 0\n", fs=128)
    with pytest.raises(DataError,
                       match=r"chb05_01\.edf: channel 'FP1-F7' is sampled at 128 Hz, expected 256 Hz"):
        list(CHBMIT(root).iter_blocks())


def test_seizure_after_the_recording(tmp_path: Path) -> None:
    root = _one_file_corpus(tmp_path, "File Name: chb05_01.edf\nNumber of Seizures in File: 1\n"
                                      "Seizure 1 Start Time: 5 seconds\nSeizure 1 End Time: 60 seconds\n")
    with pytest.raises(DataError,
                       match=r"chb05-summary\.txt:1: seizure 5-60 s of chb05_01\.edf ends after the "
                                        r"recording \(10 s\)"):
        list(CHBMIT(root).iter_blocks())


def test_bad_options(corpus: Path) -> None:
    with pytest.raises(ValueError, match="montage must be"):
        CHBMIT(corpus, montage="19")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window_seconds and stride_seconds must be > 0"):
        CHBMIT(corpus, stride_seconds=0)
    with pytest.raises(ValueError, match="max_files_per_subject"):
        CHBMIT(corpus, max_files_per_subject=0)


# ---- the DataModule keeps chb01 and chb21 together -------------------------------------------------
SPLITS = [dict(strategy="ratio", seed=seed) for seed in range(6)] + [
    dict(strategy="kfold", n_folds=5, fold=fold, seed=seed) for fold in range(5) for seed in (0, 1)] + [
    dict(strategy="loso", fold=fold, seed=1) for fold in (0, 5, 17)]


@pytest.mark.parametrize("user_groups", [None, [[2, 3]], [[21, 5], [7, 8]]],
                         ids=["none", "disjoint", "overlapping"])
def test_datamodule_keeps_one_child_in_one_split(tmp_path: Path, user_groups: list[list[int]] | None) -> None:
    # 21 stand-in subjects, so ids 1 and 21 both exist. A user's own split groups used to *replace* the
    # corpus's [[1, 21]] (one child recorded twice), putting chb01 and chb21 in different partitions.
    from biosig_lightning.data.datamodules import CHBMITDataModule
    from biosig_lightning.data.splits import SplitConfig

    cache = str(tmp_path / "cache")
    separated = []
    for options in SPLITS:
        split = SplitConfig(stratify=False, groups=user_groups, **options)
        dm = CHBMITDataModule(synthetic=True, synthetic_options={"n_subjects": 21, "windows_per_subject": 2},
                              cache_dir=cache, split=split)
        dm.setup()
        where = {s: name for name, subjects in dm.subjects.items() for s in subjects}
        assert len(where) == 21, options
        if where[1] != where[21]:
            separated.append(options)
        for group in user_groups or []:  # the user's own groups hold too
            assert len({where[s] for s in group}) == 1, (options, group)
    assert separated == [], f"chb01 and chb21 split apart under {separated}"
