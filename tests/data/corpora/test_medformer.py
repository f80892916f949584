"""Tests for the Medformer-layout reader (APAVA, ADFTD, PTB, PTB-XL), on tiny files in the real layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data.corpora.medformer import (
    ADFTD,
    APAVA,
    PTB,
    PTB_SPLIT_MEDFORMER,
    PTBXL,
    SPECS,
    SPLIT_RULES,
    SYNTHETIC_DEFAULTS,
    MedformerReader,
    read_corpus,
    split_subjects,
)
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, DataError


def _features(spec: CorpusSpec, n: int, seed: int) -> np.ndarray:
    """(n, T, C) windows whose every value is distinct, so a transpose mistake shows."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, spec.n_times, spec.n_chans)).astype(np.float32)


def write_corpus(root: Path, spec: CorpusSpec, windows: dict[int, int], labels: dict[int, int],
                 width: int = 2, label_rows: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """Write ``Feature/feature_<ID>.npy`` and ``Label/label.npy`` exactly as the Medformer notebooks do."""
    (root / "Feature").mkdir(parents=True)
    (root / "Label").mkdir()
    arrays = {}
    for sid, n in windows.items():
        arrays[sid] = _features(spec, n, seed=sid)
        np.save(root / "Feature" / f"feature_{sid:0{width}d}.npy", arrays[sid])
    if label_rows is None:
        # float64, like APAVA's np.zeros((23, 2))
        label_rows = np.array([[labels[s], s] for s in sorted(labels)], dtype=np.float64)
    np.save(root / "Label" / "label.npy", label_rows)
    return arrays


def _apava(tmp_path: Path) -> tuple[Path, dict[int, np.ndarray]]:
    root = tmp_path / "APAVA"
    arrays = write_corpus(root, APAVA, {1: 3, 2: 2, 3: 1, 4: 2}, {1: 1, 2: 0, 3: 1, 4: 0})
    return root, arrays


# ---------------------------------------------------------------------------- specs and rules
def test_specs_match_the_paper_and_the_released_arrays() -> None:
    expected = {  # name: (channels, sfreq, T, classes) — BioFormer Table 1 / App. C.1, Medformer notebooks
        "apava": (16, 256.0, 256, 2), "adftd": (19, 256.0, 256, 3),
        "ptb": (15, 250.0, 300, 2), "ptbxl": (12, 250.0, 250, 5),
    }
    for name, (c, fs, t, k) in expected.items():
        spec = SPECS[name]
        assert (spec.n_chans, spec.sfreq, spec.n_times, spec.n_outputs) == (c, fs, t, k)
        assert spec.label_level == "subject"
        assert len(set(spec.ch_names)) == c
    assert ADFTD.classes == ("CN", "FTD", "AD")  # label_map C:0, F:1, A:2
    assert PTB.modality == PTBXL.modality == "ecg" and APAVA.modality == ADFTD.modality == "eeg"
    assert set(SYNTHETIC_DEFAULTS) == set(SPECS) == set(SPLIT_RULES)
    for d in SYNTHETIC_DEFAULTS.values():
        assert d["signal"] in ("bands", "motif") and d["n_subjects"] >= 5
    # APAVA's fixed split names IDs up to 20, so its stand-in must keep them.
    assert SYNTHETIC_DEFAULTS["apava"]["n_subjects"] >= max(
        SPLIT_RULES["apava"]["val"] + SPLIT_RULES["apava"]["test"]
    )


def test_apava_fixed_split() -> None:
    pairs = [(s, int(s in {1, 3, 6, 8, 9, 11, 12, 13, 15, 17, 19, 21})) for s in range(1, 24)]
    split = split_subjects(SPLIT_RULES["apava"], pairs)
    assert split["val"] == [15, 16, 19, 20] and split["test"] == [1, 2, 17, 18]
    assert len(split["train"]) == 15 and not set(split["train"]) & {1, 2, 15, 16, 17, 18, 19, 20}


def test_per_class_prefix_split_reproduces_the_adftd_counts() -> None:
    # participants.tsv order: AD sub-001..036, CN 037..065, FTD 066..088 (label_map A:2, C:0, F:1)
    pairs = [(s, 2) for s in range(1, 37)] + [(s, 0) for s in range(37, 66)] + [(s, 1) for s in range(66, 89)]
    split = split_subjects(SPLIT_RULES["adftd"], pairs)
    assert (len(split["train"]), len(split["val"]), len(split["test"])) == (51, 18, 19)
    assert split["train"] == list(range(37, 54)) + list(range(66, 79)) + list(range(1, 22))
    assert split["val"] == list(range(54, 60)) + list(range(79, 84)) + list(range(22, 29))
    assert split["test"] == list(range(60, 66)) + list(range(84, 89)) + list(range(29, 37))


def test_ptb_split_ratios_differ_between_bioformer_and_medformer() -> None:
    pairs = [(s, 0) for s in range(1, 21)]
    bio = split_subjects(SPLIT_RULES["ptb"], pairs)
    med = split_subjects(PTB_SPLIT_MEDFORMER, pairs)
    assert [len(bio[k]) for k in ("train", "val", "test")] == [12, 4, 4]
    assert [len(med[k]) for k in ("train", "val", "test")] == [11, 3, 6]


def test_fixed_split_naming_absent_subjects_is_an_error() -> None:
    with pytest.raises(DataError, match=r"\[15, 16, 17, 18, 19, 20\]"):
        split_subjects(SPLIT_RULES["apava"], [(s, 0) for s in range(1, 15)])


# ---------------------------------------------------------------------------- happy paths
def test_reads_blocks_transposed_with_subject_labels(tmp_path: Path) -> None:
    root, arrays = _apava(tmp_path)
    reader = MedformerReader(root, APAVA)
    assert isinstance(reader, CorpusReader)
    blocks = list(reader.iter_blocks())
    assert [b.subject for b in blocks] == [1, 2, 3, 4]
    assert [b.recording for b in blocks] == ["feature_01", "feature_02", "feature_03", "feature_04"]
    for b in blocks:
        src = arrays[b.subject]
        assert b.x.dtype == np.float32 and b.x.shape == (len(src), 16, 256)
        np.testing.assert_array_equal(b.x, src.transpose(0, 2, 1))
        assert b.y.dtype == np.int64
        assert b.y.tolist() == [{1: 1, 2: 0, 3: 1, 4: 0}[b.subject]] * len(src)
        np.testing.assert_allclose(b.start, np.arange(len(src)) * 1.0)  # window index x 1 s
    assert reader.subject_labels() == [(1, 1), (2, 0), (3, 1), (4, 0)]


def test_ids_without_padding_and_ptbxl_width(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a", PTB, {1: 2, 2: 1}, {1: 0, 2: 1}, width=1)
    blocks = list(MedformerReader(tmp_path / "a", PTB).iter_blocks())
    assert [b.recording for b in blocks] == ["feature_1", "feature_2"]
    assert blocks[0].x.shape == (2, 15, 300)
    np.testing.assert_allclose(blocks[0].start, [0.0, 1.2])  # 300 samples at 250 Hz
    np.testing.assert_array_equal(blocks[1].x, a[2].transpose(0, 2, 1))

    write_corpus(tmp_path / "b", PTBXL, {1: 1, 2: 1, 3: 2}, {1: 4, 2: 0, 3: 2}, width=5)
    reader = read_corpus("ptbxl", tmp_path / "b")
    assert [(b.recording, b.y.tolist()) for b in reader.iter_blocks()] == [
        ("feature_00001", [4]), ("feature_00002", [0]), ("feature_00003", [2, 2])]


def test_integer_label_file_and_subject_subset(tmp_path: Path) -> None:
    rows = np.array([[0, 1], [1, 2], [2, 3]], dtype=np.int32)  # ADFTD's notebook saves int32
    write_corpus(tmp_path / "c", ADFTD, {1: 1, 2: 1, 3: 1}, {}, label_rows=rows)
    reader = MedformerReader(tmp_path / "c", ADFTD, subjects=[3, 1])
    assert [(b.subject, int(b.y[0])) for b in reader.iter_blocks()] == [(1, 0), (3, 2)]
    assert reader.config()["options"]["subjects"] == [1, 3]
    with pytest.raises(DataError, match=r"requested subjects \[7\]"):
        MedformerReader(tmp_path / "c", ADFTD, subjects=[7])


def test_per_window_label_rows_are_accepted(tmp_path: Path) -> None:
    rows = np.array([[1, 1], [1, 1], [0, 2]], dtype=np.float64)
    write_corpus(tmp_path / "w", APAVA, {1: 2, 2: 1}, {}, label_rows=rows)
    blocks = list(MedformerReader(tmp_path / "w", APAVA).iter_blocks())
    assert [b.y.tolist() for b in blocks] == [[1, 1], [0]]


def test_config_is_json_and_fingerprint_tracks_files(tmp_path: Path) -> None:
    root, _ = _apava(tmp_path)
    reader = MedformerReader(root, APAVA)
    cfg = reader.config()
    assert json.loads(json.dumps(cfg)) == cfg
    assert cfg["root"] == str(root.resolve()) and cfg["reader"] == "medformer"
    assert cfg["spec"]["n_times"] == 256 and cfg["spec"]["ch_names"][0] == "Fp1"
    assert isinstance(cfg["version"], int) and cfg["options"] == {"subjects": None}
    assert cfg["files"]["n_files"] == 5
    assert MedformerReader(root, APAVA).config() == cfg  # stable
    f = root / "Feature" / "feature_02.npy"
    np.save(f, _features(APAVA, 3, seed=9))
    os.utime(f, ns=(1, 1))
    assert MedformerReader(root, APAVA).config()["files"] != cfg["files"]


# ---------------------------------------------------------------------------- layout errors
def test_missing_root_names_path_and_layout(tmp_path: Path) -> None:
    with pytest.raises(DataError) as e:
        MedformerReader(tmp_path / "nope", APAVA)
    msg = str(e.value)
    assert str(tmp_path / "nope") in msg and "does not exist" in msg
    assert "Feature/feature_<ID>.npy" in msg and "Label/label.npy" in msg


def test_empty_root_lists_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing Feature/, Label/label.npy; expected the Medformer layout"):
        MedformerReader(tmp_path, APAVA)


def test_empty_feature_dir(tmp_path: Path) -> None:
    (tmp_path / "Feature").mkdir()
    (tmp_path / "Label").mkdir()
    np.save(tmp_path / "Label" / "label.npy", np.array([[0, 1]]))
    with pytest.raises(DataError, match=r"Feature: no feature_<ID>.npy files"):
        MedformerReader(tmp_path, APAVA)


@pytest.mark.parametrize("rows, pattern", [
    (np.zeros((3, 3)), r"label.npy: expected shape \(subjects, 2\).*got \(3, 3\)"),
    (np.zeros(3), r"label.npy: expected shape \(subjects, 2\).*got \(3,\)"),
    (np.array([[0, 1], [1.5, 2]]),
     r"label.npy: row 1 holds \[1.5, 2.0\]; labels and subject IDs must be whole"),
    (np.array([[0, 1], [np.nan, 2]]), r"label.npy: row 1 holds"),
    (np.array([[0, 1], [2, 2]]), r"label.npy: row 1 \(subject 2\) has label 2, outside 0..1 \(HC, AD\)"),
    (np.array([[0, 1], [-1, 2]]), r"label.npy: row 1 \(subject 2\) has label -1"),
    (np.array([[0, 2], [1, 1]]),
     r"label.npy: subject IDs must appear in increasing order.*row 1 has subject 1"),
    (np.array(["a", "b"]).reshape(1, 2), r"label.npy: expected a numeric array"),
])
def test_bad_label_file(tmp_path: Path, rows: np.ndarray, pattern: str) -> None:
    write_corpus(tmp_path, APAVA, {1: 1, 2: 1}, {}, label_rows=rows)
    with pytest.raises(DataError, match=pattern):
        MedformerReader(tmp_path, APAVA)


def test_pickled_label_file_is_refused(tmp_path: Path) -> None:
    write_corpus(tmp_path, APAVA, {1: 1}, {1: 0})
    np.save(tmp_path / "Label" / "label.npy", np.array([{"x": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"label.npy: cannot read as a numeric .npy array"):
        MedformerReader(tmp_path, APAVA)


def test_label_row_without_feature_file(tmp_path: Path) -> None:
    write_corpus(tmp_path, APAVA, {1: 1, 2: 1}, {1: 0, 2: 1, 3: 0})
    with pytest.raises(DataError,
                       match=r"label.npy: lists subject 3, but Feature/feature_03.npy does not exist"):
        MedformerReader(tmp_path, APAVA)


def test_feature_file_without_label_row(tmp_path: Path) -> None:
    write_corpus(tmp_path, APAVA, {1: 1, 2: 1, 3: 1}, {1: 0, 2: 1})
    with pytest.raises(DataError, match=r"feature_03.npy: subject 3 has no row in .*label.npy"):
        MedformerReader(tmp_path, APAVA)


def test_non_contiguous_ids(tmp_path: Path) -> None:
    write_corpus(tmp_path, APAVA, {1: 1, 2: 1, 4: 1}, {1: 0, 2: 1, 4: 0})
    with pytest.raises(DataError, match=r"Feature: subject IDs must be contiguous from 1.*missing \[3\]"):
        MedformerReader(tmp_path, APAVA)


def test_duplicate_and_stray_feature_files(tmp_path: Path) -> None:
    write_corpus(tmp_path / "d", APAVA, {1: 1}, {1: 0})
    np.save(tmp_path / "d" / "Feature" / "feature_1.npy", _features(APAVA, 1, 0))
    with pytest.raises(DataError, match=r"feature_1.npy: subject 1 also has feature_01.npy"):
        MedformerReader(tmp_path / "d", APAVA)
    write_corpus(tmp_path / "s", APAVA, {1: 1}, {1: 0})
    np.save(tmp_path / "s" / "Feature" / "extra.npy", np.zeros(1))
    (tmp_path / "s" / "Feature" / ".DS_Store").write_bytes(b"x")  # hidden files are ignored
    with pytest.raises(DataError, match=r"extra.npy: unexpected file in Feature/"):
        MedformerReader(tmp_path / "s", APAVA)


def test_per_window_rows_must_match_window_counts(tmp_path: Path) -> None:
    rows = np.array([[1, 1], [1, 1], [0, 2], [0, 2]], dtype=np.float64)
    write_corpus(tmp_path, APAVA, {1: 3, 2: 2}, {}, label_rows=rows)
    reader = MedformerReader(tmp_path, APAVA)
    with pytest.raises(DataError,
                       match=r"feature_01.npy: 3 windows, but .*label.npy has 2 rows for subject 1"):
        list(reader.iter_blocks())


def test_subject_level_labels_must_be_constant(tmp_path: Path) -> None:
    rows = np.array([[1, 1], [0, 1], [0, 2]], dtype=np.float64)
    write_corpus(tmp_path, APAVA, {1: 2, 2: 1}, {}, label_rows=rows)
    with pytest.raises(DataError, match=r"label.npy: subject 1 has labels 0, 1 on different rows, but apava "
                                        r"labels whole subjects"):
        MedformerReader(tmp_path, APAVA)


# ---------------------------------------------------------------------------- feature-file errors
def _corrupt(tmp_path: Path, arr: np.ndarray) -> MedformerReader:
    write_corpus(tmp_path, APAVA, {1: 1, 2: 1}, {1: 0, 2: 1})
    np.save(tmp_path / "Feature" / "feature_02.npy", arr)
    reader = MedformerReader(tmp_path, APAVA)
    return reader


@pytest.mark.parametrize("arr, pattern", [
    (np.zeros((256, 16), np.float32),
     r"feature_02.npy: expected a 3-D array \(windows, 256 samples, 16 channels\)"
                                      r", got shape \(256, 16\)"),
    (np.zeros((2, 256, 15), np.float32), r"feature_02.npy: expected \(windows, 256, 16\) for apava "
                                         r"\(T=256 samples, C=16 channels\), got \(2, 256, 15\)$"),
    (np.zeros((2, 250, 16), np.float32),
     r"feature_02.npy: expected \(windows, 256, 16\).*got \(2, 250, 16\)$"),
    (np.zeros((2, 16, 256), np.float32), r"got \(2, 16, 256\) \(the file looks transposed"),
    (np.zeros((0, 256, 16), np.float32), r"feature_02.npy: subject 2 has no windows"),
    (np.zeros((1, 256, 16), dtype="U1"), r"feature_02.npy: expected a numeric array"),
])
def test_bad_feature_array(tmp_path: Path, arr: np.ndarray, pattern: str) -> None:
    reader = _corrupt(tmp_path, arr)
    blocks = reader.iter_blocks()
    assert next(blocks).subject == 1  # subject 1 is fine; the error comes with subject 2's file
    with pytest.raises(DataError, match=pattern):
        next(blocks)


def test_non_finite_value_names_file_channel_and_window(tmp_path: Path) -> None:
    arr = _features(APAVA, 3, seed=2)
    arr[1, 100, 2] = np.nan
    reader = _corrupt(tmp_path, arr)
    with pytest.raises(DataError) as e:
        list(reader.iter_blocks())
    msg = str(e.value)
    assert "feature_02.npy" in msg and "subject 2" in msg
    assert f"channel {APAVA.ch_names[2]!r}" in msg and "window 1" in msg


def test_pickled_feature_file_is_refused(tmp_path: Path) -> None:
    write_corpus(tmp_path, APAVA, {1: 1}, {1: 0})
    np.save(tmp_path / "Feature" / "feature_01.npy", np.array([None, {}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"feature_01.npy: cannot read as a numeric .npy array"):
        list(MedformerReader(tmp_path, APAVA).iter_blocks())


def test_read_corpus_rejects_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown Medformer corpus 'tdbrain'"):
        read_corpus("tdbrain", tmp_path)
