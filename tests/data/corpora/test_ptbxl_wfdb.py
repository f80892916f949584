"""PTB-XL reader on a real-format fixture: WFDB records (wfdb.wrsamp) and the two CSVs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import wfdb

from biosig_lightning.data.corpora.ptbxl_wfdb import (
    CLASSES,
    LEADS,
    PTBXL,
    SYNTHETIC_DEFAULTS,
    record_label,
    strat_fold_split,
)
from biosig_lightning.data.spec import CorpusReader, DataError

STATEMENTS = [  # code, diagnostic, diagnostic_class (a subset of the real scp_statements.csv)
    ("NDT", "1.0", "STTC"), ("NORM", "1.0", "NORM"), ("IMI", "1.0", "MI"), ("LVH", "1.0", "HYP"),
    ("CLBBB", "1.0", "CD"), ("ISCAL", "1.0", "STTC"), ("SR", "", ""), ("LVOLT", "", ""),
]
# ecg_id, patient_id, scp_codes, strat_fold -> expected superclass (None: dropped)
ROWS = [
    (1, 101, "{'NORM': 100.0, 'SR': 0.0}", 1, "NORM"),
    (2, 101, "{'IMI': 35.0, 'NORM': 80.0, 'SR': 0.0}", 1, "NORM"),   # highest likelihood wins
    (3, 202, "{'IMI': 100.0, 'LVH': 100.0}", 9, "HYP"),              # tie: rarer HYP before MI
    (4, 303, "{'SR': 0.0, 'LVOLT': 100.0}", 10, None),               # no diagnostic code
    (5, 303, "{'NDT': 50.0, 'CLBBB': 100.0}", 10, "CD"),
    (6, 404, "{'NORM': 0.0, 'ISCAL': 0.0}", 5, "STTC"),              # tie at 0: STTC before NORM
    (7, 505, "{'SR': 0.0}", 2, None),                                 # patient with no kept record
]


def write_record(root: Path, ecg_id: int, fs: int, names: list[str] | None = None, n: int | None = None,
                 nan: bool = False) -> None:
    """Lead ``k`` holds ``k + ecg_id / 10 + ramp``, so leads and records can be told apart."""
    names = names or [lead if lead[0] != "A" else "a" + lead[1:] for lead in LEADS]  # aVR/aVL/aVF as in Cxx
    n = n or 10 * fs
    ramp = np.linspace(0, 0.5, n)
    sig = np.stack([k + ecg_id / 10 + ramp for k in range(len(names))], axis=1)
    if nan:
        sig[7, 3] = np.nan
    suffix = "lr" if fs == 100 else "hr"
    folder = root / f"records{100 if fs == 100 else 500}" / "00000"
    folder.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(f"{ecg_id:05d}_{suffix}", fs=fs, units=["mV"] * len(names), sig_name=names, p_signal=sig,
                fmt=["16"] * len(names), write_dir=str(folder))


def write_csvs(root: Path, rows: list[tuple] = ROWS) -> None:
    with open(root / "ptbxl_database.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ecg_id", "patient_id", "age", "sex", "scp_codes", "strat_fold",
                    "filename_lr", "filename_hr"])
        for ecg_id, patient, codes, fold, *_ in rows:
            w.writerow([ecg_id, f"{patient}.0", 56.0, 1, codes, fold, f"records100/00000/{ecg_id:05d}_lr",
                        f"records500/00000/{ecg_id:05d}_hr"])
    with open(root / "scp_statements.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["", "description", "diagnostic", "form", "rhythm",
                    "diagnostic_class", "diagnostic_subclass"])
        for code, diag, cls in STATEMENTS:
            w.writerow([code, f"{code} statement", diag, "", "", cls, cls])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ptbxl")
    write_csvs(root)
    for ecg_id, *_, label in ROWS:
        if label is not None:
            write_record(root, ecg_id, 100)
    write_record(root, 3, 500)
    return root


def test_spec_and_synthetic_defaults() -> None:
    spec = PTBXL.make_spec(100)
    assert (spec.n_chans, spec.sfreq, spec.n_times, spec.classes) == (12, 100.0, 1000, CLASSES)
    assert spec.ch_names == LEADS and spec.modality == "ecg" and CLASSES == ("NORM",
                                                                             "MI", "STTC", "CD", "HYP")
    assert PTBXL.make_spec(500).n_times == 5000
    assert SYNTHETIC_DEFAULTS["kind"] == "bands" and SYNTHETIC_DEFAULTS["n_subjects"] == 20


def test_superclass_rule() -> None:
    statements = {"NORM": "NORM", "IMI": "MI", "LVH": "HYP", "NDT": "STTC", "CLBBB": "CD", "SR": None}
    assert record_label({"NORM": 100.0, "IMI": 15.0}, statements) == "NORM"
    assert record_label({"NORM": 50.0, "IMI": 50.0, "NDT": 50.0}, statements) == "STTC"
    assert record_label({"IMI": 80.0, "LVH": 80.0, "CLBBB": 80.0}, statements) == "HYP"
    assert record_label({"SR": 0.0}, statements) is None
    assert record_label({"IMI": 80.0, "LVH": 80.0}, statements, ("MI", "HYP", "CD", "STTC", "NORM")) == "MI"


def test_records_labels_and_signals(corpus: Path) -> None:
    with pytest.warns(UserWarning, match="2 of 7 records have no diagnostic superclass"):
        reader = PTBXL(corpus)
    assert isinstance(reader, CorpusReader)
    assert reader.dropped == [4, 7]
    blocks = list(reader.iter_blocks())
    assert [b.recording for b in blocks] == ["00001_lr", "00002_lr", "00003_lr", "00005_lr", "00006_lr"]
    assert [b.subject for b in blocks] == [101, 101, 202, 303, 404]
    expected = [CLASSES.index(label) for *_, label in ROWS if label is not None]
    assert [int(b.y[0]) for b in blocks] == expected
    for b in blocks:
        assert b.x.shape == (1, 12, 1000) and b.x.dtype == np.float32 and b.start.tolist() == [0.0]
    # leads come back in LEADS order (the files spell aVR/aVL/aVF)
    ecg_id = 6
    np.testing.assert_allclose(blocks[4].x[0, :, 0], np.arange(12) + ecg_id / 10, atol=1e-3)
    np.testing.assert_allclose(blocks[4].x[0, 0, -1], ecg_id / 10 + 0.5, atol=1e-3)


def test_500_hz(corpus: Path) -> None:
    with pytest.warns(UserWarning, match="no diagnostic superclass"):
        reader = PTBXL(corpus, sampling_rate=500)
    assert reader.spec.n_times == 5000
    assert reader.read_record(reader.records[2]).shape == (12, 5000)
    with pytest.raises(DataError, match=r"00001_hr\.hea: WFDB header not found \(ecg_id 1\)"):
        reader.read_record(reader.records[0])
    with pytest.raises(DataError, match=r"00001_hr\.hea: file not found"):
        reader.config()


def test_reordered_leads(tmp_path: Path) -> None:
    write_csvs(tmp_path, ROWS[:1])
    shuffled = list(reversed(LEADS))
    write_record(tmp_path, 1, 100, names=shuffled)
    (b,) = list(PTBXL(tmp_path).iter_blocks())
    # file column j held value j for lead shuffled[j]; reordering must undo the shuffle
    np.testing.assert_allclose(b.x[0, :, 0], [shuffled.index(lead) + 0.1 for lead in LEADS], atol=1e-3)


def test_strat_fold_split(corpus: Path) -> None:
    split = strat_fold_split(corpus / "ptbxl_database.csv")
    assert split == {"train": [101, 404, 505], "val": [202], "test": [303]}
    with pytest.warns(UserWarning):
        reader = PTBXL(corpus)
    assert reader.strat_fold_split() == {"train": [101, 404], "val": [202], "test": [303]}


def test_straddling_patient_is_an_error(tmp_path: Path) -> None:
    rows = ROWS[:2] + [(9, 101, "{'NORM': 100.0}", 9, "NORM")]
    write_csvs(tmp_path, rows)
    with pytest.raises(DataError,
                       match=r"patient 101 has records in both 'train' and 'val' folds \(row 4, strat_fold "
                             r"9\)"):
        strat_fold_split(tmp_path / "ptbxl_database.csv")


def test_config(corpus: Path) -> None:
    with pytest.warns(UserWarning):
        cfg = PTBXL(corpus).config()
    json.dumps(cfg)
    assert cfg["root"] == str(corpus.resolve()) and cfg["sampling_rate"] == 100
    assert cfg["files"]["n_files"] == 2 + 2 * 5


# ---- errors ------------------------------------------------------------------------------------
def test_root_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist.*ptbxl_database\.csv"):
        PTBXL(tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"scp_statements\.csv not found; expected ptbxl_database\.csv"):
        PTBXL(tmp_path)


def test_csv_errors(tmp_path: Path) -> None:
    write_csvs(tmp_path, [(1, 101, "{'NORM': 100.0", 1, "NORM")])
    with pytest.raises(DataError, match=r"row 2 \(ecg_id 1\): scp_codes .* is not a dict literal"):
        PTBXL(tmp_path)
    write_csvs(tmp_path, [(1, 101, "__import__('os').getcwd()", 1, "NORM")])
    with pytest.raises(DataError, match="is not a dict literal"):
        PTBXL(tmp_path)
    write_csvs(tmp_path, [(1, 101, "{'NORM': 'high'}", 1, "NORM")])
    with pytest.raises(DataError, match="is not a dict of code -> likelihood"):
        PTBXL(tmp_path)
    write_csvs(tmp_path, [(1, 101, "{'XYZ': 100.0}", 1, "NORM")])
    with pytest.raises(DataError,
                       match=r"row 2 \(ecg_id 1\): unknown SCP code 'XYZ' \(not in scp_statements\.csv\)"):
        PTBXL(tmp_path)
    write_csvs(tmp_path, [(1, "x", "{'NORM': 100.0}", 1, "NORM")])
    with pytest.raises(DataError, match=r"row 2: patient_id = 'x.0' is not an integer"):
        strat_fold_split(tmp_path / "ptbxl_database.csv")
    write_csvs(tmp_path, [(1, 101, "{'SR': 0.0}", 1, None)])
    with pytest.raises(DataError, match="no record with a diagnostic superclass"):
        PTBXL(tmp_path)
    (tmp_path / "ptbxl_database.csv").write_text("ecg_id,patient_id\n1,2\n")
    with pytest.raises(DataError, match=r"ptbxl_database\.csv: missing column\(s\) scp_codes, strat_fold"):
        PTBXL(tmp_path)


def _one_record(tmp_path: Path, **kwargs: object) -> PTBXL:
    write_csvs(tmp_path, ROWS[:1])
    write_record(tmp_path, 1, **kwargs)  # type: ignore[arg-type]
    return PTBXL(tmp_path)


def test_wrong_sampling_rate(tmp_path: Path) -> None:
    reader = _one_record(tmp_path, fs=100)
    wfdb.wrsamp("00001_lr", fs=250, units=["mV"] * 12, sig_name=list(LEADS), p_signal=np.zeros((1000, 12)),
                fmt=["16"] * 12, write_dir=str(tmp_path / "records100" / "00000"))
    with pytest.raises(DataError, match=r"00001_lr: sampled at 250 Hz, expected 100 Hz"):
        list(reader.iter_blocks())


def test_missing_lead(tmp_path: Path) -> None:
    reader = _one_record(tmp_path, fs=100, names=[*LEADS[:11], "V7"])
    with pytest.raises(DataError, match=r"00001_lr: missing lead\(s\) V6 \(signals: I, II"):
        list(reader.iter_blocks())


def test_wrong_length(tmp_path: Path) -> None:
    reader = _one_record(tmp_path, fs=100, n=900)
    with pytest.raises(DataError, match=r"00001_lr: 900 samples, expected 1000 \(10 s at 100 Hz\)"):
        list(reader.iter_blocks())


def test_nan_lead(tmp_path: Path) -> None:
    reader = _one_record(tmp_path, fs=100, nan=True)
    with pytest.raises(DataError, match=r"00001_lr: lead 'AVR' contains NaN/Inf"):
        list(reader.iter_blocks())


def test_unreadable_record(tmp_path: Path) -> None:
    reader = _one_record(tmp_path, fs=100)
    (tmp_path / "records100" / "00000" / "00001_lr.hea").write_text("garbage\n")
    with pytest.raises(DataError, match=r"00001_lr: cannot read WFDB record"):
        list(reader.iter_blocks())


def test_bad_options(corpus: Path) -> None:
    with pytest.raises(ValueError, match="sampling_rate must be 100 or 500"):
        PTBXL(corpus, sampling_rate=250)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tie_priority must order exactly"):
        PTBXL(corpus, tie_priority=("NORM", "MI"))
