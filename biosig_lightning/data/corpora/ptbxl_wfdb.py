"""PTB-XL (PhysioNet ``ptb-xl``): 10 s 12-lead ECGs, five diagnostic superclasses.

Layout (PhysioNet ``ptb-xl/1.0.x``)::

    ptbxl_database.csv       one row per ECG: ecg_id, patient_id, scp_codes, strat_fold,
                             filename_lr (records100/...), filename_hr (records500/...)
    scp_statements.csv       index = SCP code; columns diagnostic (1 or empty), diagnostic_class
    records100/NNNNN/NNNNN_lr.{hea,dat}     WFDB records at 100 Hz
    records500/NNNNN/NNNNN_hr.{hea,dat}     WFDB records at 500 Hz

This is the SD-Former PTB-XL setting (paper Table 1: 12 leads, 5 classes, 10 s): one
window per record, the whole record (1000 samples at 100 Hz, 5000 at 500 Hz), leads in
the order I, II, III, AVR, AVL, AVF, V1..V6 (checked and reordered by the header's
signal names, case-insensitively), in the file's mV.

**One label per record** (PTB-XL is multi-label; SD-Former reports single-label macro
F1, so a rule is needed). Every SCP code of the record whose ``scp_statements.csv`` row is
diagnostic maps to its ``diagnostic_class``; the record takes the superclass of its code
with the **highest likelihood** (the value in ``scp_codes``; 0 means "not given" and
still counts, like any other value, for a record whose codes all carry 0). Ties go to
the superclass earliest in :data:`TIE_PRIORITY`, which puts the rarer superclasses of
PTB-XL first (HYP 2,655 < CD 4,907 < STTC 5,250 < MI 5,486 < NORM 9,528 records, Wagner
et al. 2020), so a tie between a pathology and NORM keeps the pathology and the minority
classes are not thinned further. Records with no diagnostic superclass are dropped;
:attr:`PTBXL.dropped` lists their ecg_ids (a warning gives the count).
``scp_codes`` strings are parsed with :func:`ast.literal_eval` (never ``eval``).

**Subjects and split.** Subject id = ``patient_id``. The recommended PTB-XL split
(Wagner et al.; Strodthoff et al. 2021) is by ``strat_fold``: folds 1-8 train, 9
validation, 10 test; the folds are patient-wise, and :func:`strat_fold_split` verifies
that no patient has records in two partitions (it raises otherwise).
"""

from __future__ import annotations

import ast
import csv
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.edf import files_fingerprint
from biosig_lightning.data.corpora.reading import reading
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CLASSES", "LEADS", "PTBXL", "SYNTHETIC_DEFAULTS", "TIE_PRIORITY", "PtbxlRecord", "record_label",
           "strat_fold_split"]

READER_VERSION = 1
CLASSES = ("NORM", "MI", "STTC", "CD", "HYP")
#: tie-break order of superclasses with equal likelihood: rarest first (see the module docstring)
TIE_PRIORITY = ("HYP", "CD", "STTC", "MI", "NORM")
LEADS = ("I", "II", "III", "AVR", "AVL", "AVF", "V1", "V2", "V3", "V4", "V5", "V6")
RECORD_SECONDS = 10
DATABASE = "ptbxl_database.csv"
STATEMENTS = "scp_statements.csv"
LAYOUT = f"{DATABASE}, {STATEMENTS} and records100/ or records500/ (WFDB)"
_DB_COLUMNS = ("ecg_id", "patient_id", "scp_codes", "strat_fold", "filename_lr", "filename_hr")
SPLIT_FOLDS = {"train": tuple(range(1, 9)), "val": (9,), "test": (10,)}

#: options of the synthetic stand-in with this corpus's shape (``SyntheticReader``)
#: ``coupling_edges``: a planted directed graph on the leads, the truth ``biosig graphs`` scores SD-Former's
#: learned graph against (``data/synthetic_coupling.py``)
SYNTHETIC_DEFAULTS: dict[str, Any] = {"kind": "bands", "n_subjects": 20, "windows_per_subject": 40,
                                      "coupling_edges": 6}


@dataclass(frozen=True)
class PtbxlRecord:
    """One ECG row: ids, fold, WFDB record path (no extension) and class index."""

    ecg_id: int
    patient: int
    fold: int
    path: Path
    label: int


def _read_csv(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    if not path.is_file():
        raise DataError(f"ptbxl: {path} not found; expected {LAYOUT}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
        return list(reader)


def _inside(root: Path, name: str) -> bool:
    """Whether the record path ``name`` (from the database) is relative and stays below ``root``."""
    path = Path(name)
    return (
        not path.is_absolute()
        and ".." not in path.parts
        and (root / path).resolve().is_relative_to(root.resolve())
    )


def _int_field(path: Path, row_no: int, row: dict[str, str], key: str) -> int:
    value = (row.get(key) or "").strip()
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not np.isfinite(number) or number != int(number):
        raise DataError(f"{path}: row {row_no}: {key} = {value!r} is not an integer")
    return int(number)


def read_statements(path: str | Path) -> dict[str, str | None]:
    """Every SCP code of ``scp_statements.csv`` -> its diagnostic superclass (``None`` if not diagnostic)."""
    path = Path(path)
    rows = _read_csv(path, ("diagnostic", "diagnostic_class"))
    out: dict[str, str | None] = {}
    for row_no, row in enumerate(rows, start=2):
        code = (row.get("") or "").strip()  # the unnamed index column
        if not code:
            raise DataError(f"{path}: row {row_no}: empty SCP code in the first (index) column")
        flag = (row["diagnostic"] or "").strip()
        if flag in ("", "0", "0.0"):  # rhythm and form statements carry no superclass
            out[code] = None
            continue
        if flag not in ("1", "1.0"):
            raise DataError(f"{path}: row {row_no} ({code}): diagnostic = {flag!r}, expected 1 or empty")
        cls = (row["diagnostic_class"] or "").strip()
        if cls not in CLASSES:
            raise DataError(f"{path}: row {row_no} ({code}): diagnostic_class {cls!r} is not one of "
                            f"{', '.join(CLASSES)}")
        out[code] = cls
    return out


def parse_scp_codes(text: str, where: str) -> dict[str, float]:
    """``"{'NORM': 100.0, 'SR': 0.0}"`` -> dict, with :func:`ast.literal_eval`."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as err:
        raise DataError(f"{where}: scp_codes {text!r} is not a dict literal") from err
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise DataError(f"{where}: scp_codes {text!r} is not a dict of code -> likelihood")
    return {k: float(v) for k, v in value.items()}


def record_label(codes: dict[str, float], statements: dict[str, str | None],
                 tie_priority: Sequence[str] = TIE_PRIORITY) -> str | None:
    """The record's superclass: highest likelihood, ties by ``tie_priority``; ``None`` if none."""
    best: dict[str, float] = {}
    for code, likelihood in codes.items():
        cls = statements.get(code)
        if cls is not None:
            best[cls] = max(best.get(cls, -np.inf), likelihood)
    if not best:
        return None
    top = max(best.values())
    return next(c for c in tie_priority if best.get(c) == top)


def strat_fold_split(database_csv: str | Path, patients: Sequence[int] | None = None) -> dict[str, list[int]]:
    """Patient ids of the recommended PTB-XL split: strat_fold 1-8 train, 9 val, 10 test.

    Raises :class:`DataError` if a patient has records in two partitions (PTB-XL's folds
    are patient-wise, so that would mean a changed or corrupted database file) or a fold
    is outside 1..10. ``patients``, if given, restricts the lists to those ids.
    """
    path = Path(database_csv)
    rows = _read_csv(path, ("patient_id", "strat_fold"))
    where: dict[int, str] = {}
    fold_of = {f: name for name, folds in SPLIT_FOLDS.items() for f in folds}
    for row_no, row in enumerate(rows, start=2):
        patient = _int_field(path, row_no, row, "patient_id")
        fold = _int_field(path, row_no, row, "strat_fold")
        if fold not in fold_of:
            raise DataError(f"{path}: row {row_no}: strat_fold {fold} outside 1..10")
        part = fold_of[fold]
        if where.setdefault(patient, part) != part:
            raise DataError(f"{path}: patient {patient} has records in both {where[patient]!r} and {part!r} "
                            f"folds (row {row_no}, strat_fold {fold}); PTB-XL folds should be patient-wise")
    keep = set(patients) if patients is not None else None
    return {name: sorted(p for p, part in where.items() if part == name and (keep is None or p in keep))
            for name in SPLIT_FOLDS}


class PTBXL:
    """Reader for PTB-XL (see the module docstring).

    Args:
        root: the PTB-XL folder (with ``ptbxl_database.csv``).
        sampling_rate: 100 (``records100/``) or 500 (``records500/``).
        tie_priority: superclass order that breaks likelihood ties.
    """

    def __init__(self, root: str | Path, sampling_rate: Literal[100, 500] = 100,
                 tie_priority: Sequence[str] = TIE_PRIORITY) -> None:
        if sampling_rate not in (100, 500):
            raise ValueError(f"ptbxl: sampling_rate must be 100 or 500, got {sampling_rate!r}")
        if sorted(tie_priority) != sorted(CLASSES):
            raise ValueError(f"ptbxl: tie_priority must order exactly {', '.join(CLASSES)}, got "
                             f"{list(tie_priority)}")
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise DataError(f"ptbxl: corpus root {self.root} does not exist or is not a folder; expected "
                            f"{LAYOUT}")
        self.sampling_rate = int(sampling_rate)
        self.tie_priority = tuple(tie_priority)
        self.spec = self.make_spec(self.sampling_rate)
        self.records, self.dropped = self._load_records()

    @staticmethod
    def make_spec(sampling_rate: int = 100) -> CorpusSpec:
        """The corpus shape at ``sampling_rate``; reads no file."""
        return CorpusSpec(name="ptbxl", ch_names=LEADS, sfreq=float(sampling_rate),
                          n_times=RECORD_SECONDS * int(sampling_rate), classes=CLASSES, label_level="window",
                          modality="ecg")

    def _load_records(self) -> tuple[list[PtbxlRecord], list[int]]:
        db = self.root / DATABASE
        statements = read_statements(self.root / STATEMENTS)
        rows = _read_csv(db, _DB_COLUMNS)
        column = "filename_lr" if self.sampling_rate == 100 else "filename_hr"
        records, dropped = [], []
        for row_no, row in enumerate(rows, start=2):
            ecg_id = _int_field(db, row_no, row, "ecg_id")
            where = f"{db}: row {row_no} (ecg_id {ecg_id})"
            codes = parse_scp_codes(row["scp_codes"], where)
            for code in codes:
                if code not in statements:
                    raise DataError(f"{where}: unknown SCP code {code!r} (not in {STATEMENTS})")
            cls = record_label(codes, statements, self.tie_priority)
            if cls is None:
                dropped.append(ecg_id)
                continue
            fold = _int_field(db, row_no, row, "strat_fold")
            filename = (row[column] or "").strip()
            if not filename:
                raise DataError(f"{where}: empty {column}")
            if not _inside(self.root, filename):
                raise DataError(f"{where}: {column} {filename!r} leads outside the corpus root {self.root} "
                                f"(records "
                                "are named relative to it, such as records100/00000/00001_lr)")
            records.append(PtbxlRecord(ecg_id=ecg_id, patient=_int_field(db, row_no, row, "patient_id"),
                                       fold=fold,
                                       path=self.root / filename, label=CLASSES.index(cls)))
        if not records:
            raise DataError(f"{db}: no record with a diagnostic superclass ({', '.join(CLASSES)})")
        if dropped:
            warnings.warn(f"ptbxl: {len(dropped)} of {len(rows)} records have no diagnostic superclass and "
                          f"are "
                          "dropped", stacklevel=3)
        return records, dropped

    def strat_fold_split(self) -> dict[str, list[int]]:
        """:func:`strat_fold_split` restricted to patients with at least one kept record."""
        return strat_fold_split(self.root / DATABASE, patients=sorted({r.patient for r in self.records}))

    def config(self) -> dict[str, Any]:
        files = [self.root / DATABASE, self.root / STATEMENTS]
        for r in self.records:
            files += [r.path.with_name(r.path.name + ".hea"), r.path.with_name(r.path.name + ".dat")]
        return {
            "corpus": "ptbxl",
            "reader_version": READER_VERSION,
            "root": str(self.root),
            "sampling_rate": self.sampling_rate,
            "tie_priority": list(self.tie_priority),
            "files": files_fingerprint(files, self.root),
        }

    def read_record(self, record: PtbxlRecord) -> np.ndarray:
        """The ``(12, n_times)`` float32 signal of ``record``, leads in :data:`LEADS` order."""
        import wfdb

        if not record.path.with_name(record.path.name + ".hea").is_file():
            raise DataError(f"{record.path}.hea: WFDB header not found (ecg_id {record.ecg_id}); expected "
                            f"{LAYOUT}")
        with reading(record.path, "WFDB record"):
            signal, fields = wfdb.rdsamp(str(record.path))
        fs = float(fields["fs"])
        if abs(fs - self.sampling_rate) > 1e-6:
            raise DataError(f"{record.path}: sampled at {fs:g} Hz, expected {self.sampling_rate} Hz")
        names = [str(n).strip().upper() for n in fields["sig_name"]]
        missing = [lead for lead in LEADS if lead not in names]
        if missing:
            raise DataError(f"{record.path}: missing lead(s) {', '.join(missing)} (signals: "
                            f"{', '.join(fields['sig_name'])})")
        x = np.asarray(signal, dtype=np.float64).T[[names.index(lead) for lead in LEADS]]
        if x.shape[1] != self.spec.n_times:
            raise DataError(f"{record.path}: {x.shape[1]} samples, expected {self.spec.n_times} "
                            f"({RECORD_SECONDS} s at {self.sampling_rate} Hz)")
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise DataError(f"{record.path}: lead {LEADS[int(np.argmax(bad))]!r} contains NaN/Inf")
        return x.astype(np.float32)

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for record in self.records:
            x = self.read_record(record)
            block = WindowBlock(subject=record.patient, recording=record.path.name, x=x[None],
                                y=np.array([record.label]), start=np.zeros(1))
            block.validate(self.spec, source=str(record.path))
            yield block
