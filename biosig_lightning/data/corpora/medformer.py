"""Reader for the Medformer preprocessed layout shared by APAVA, ADFTD, PTB and PTB-XL.

BioFormer (Appendix C.1) evaluates on the four medical corpora exactly as the Medformer
authors released them (Medformer README, "Processed data")::

    <root>/Feature/feature_<ID>.npy   float array (n_windows, T, C), all windows of one subject
    <root>/Label/label.npy            (n_subjects, 2) array; column 0 the class, column 1 the
                                      subject ID, 1..n_subjects

The IDs are zero-padded differently per corpus (``feature_01`` for APAVA/ADFTD, ``feature_001``
for PTB, ``feature_00001`` for PTB-XL); any padding is accepted here. The authors' loaders pick
files by natural-sort order and treat file ``j`` as subject ``j + 1`` with label row ``j``, so the
layout implies IDs 1..N, contiguous, in row order; this reader checks that instead of assuming
it, and keys everything by the ID column.

One :class:`~biosig_lightning.data.spec.WindowBlock` is yielded per subject file: windows are
transposed from the files' (n, T, C) to the model's (n, C, T) float32. The corpora are
published pre-windowed (APAVA windows even overlap by half), so ``start`` is the window index
times the window length: it orders the windows, it is not a time in a continuous recording.

Besides the reader the module holds, per corpus, the :class:`CorpusSpec`, the subject split
rule as plain data (:data:`SPLIT_RULES`, applied by :func:`split_subjects`) and the defaults
of the synthetic stand-in (:data:`SYNTHETIC_DEFAULTS`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.npy_files import NpyError, load_npy
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

READER_VERSION = 1

# Channel orders. APAVA's 16 and ADFTD's 19 are 10-20 scalp electrodes; the Medformer notebooks
# keep every channel in the order of the source files, which they never name. APAVA: the 19-
# electrode 10-20 set without the midline Fz/Cz/Pz, in the usual left-to-right, front-to-back
# reading (order not verifiable from the released arrays). ADFTD: the order of OpenNeuro
# ds004504's channels.tsv. PTB: the 15 leads in the order of the PhysioNet PTB record headers
# (12 standard leads + Frank vx, vy, vz). PTB-XL: the 12 leads in the order of its WFDB records.
APAVA_CHANNELS = ("Fp1", "Fp2", "F7", "F3", "F4", "F8", "T3", "C3", "C4", "T4", "T5", "P3", "P4", "T6",
                  "O1", "O2")
ADFTD_CHANNELS = ("Fp1", "Fp2", "F3", "F4", "C3", "C4", "P3", "P4", "O1", "O2", "F7", "F8", "T3", "T4",
                  "T5", "T6", "Fz", "Cz", "Pz")
PTB_CHANNELS = ("i", "ii", "iii", "avr", "avl", "avf", "v1", "v2", "v3", "v4", "v5", "v6", "vx", "vy", "vz")
PTBXL_CHANNELS = ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")

#: Shapes as the model sees them. Sources: BioFormer Table 1 and Appendix C.1 (channels, rates,
#: 1 s windows, class counts), Medformer's preprocessing notebooks and README (T, class codes:
#: APAVA 0 HC / 1 AD; ADFTD label_map C:0, F:1, A:2; PTB 0 HC / 1 MI; PTB-XL NORM, MI, STTC,
#: CD, HYP), PTB's T = 300 (heartbeats zero-padded to 300 samples, as Medformer's PTB loader does).
APAVA = CorpusSpec(name="apava", ch_names=APAVA_CHANNELS, sfreq=256.0, n_times=256,
                   classes=("HC", "AD"), label_level="subject", modality="eeg")
ADFTD = CorpusSpec(name="adftd", ch_names=ADFTD_CHANNELS, sfreq=256.0, n_times=256,
                   classes=("CN", "FTD", "AD"), label_level="subject", modality="eeg")
PTB = CorpusSpec(name="ptb", ch_names=PTB_CHANNELS, sfreq=250.0, n_times=300,
                 classes=("HC", "MI"), label_level="subject", modality="ecg")
PTBXL = CorpusSpec(name="ptbxl", ch_names=PTBXL_CHANNELS, sfreq=250.0, n_times=250,
                   classes=("NORM", "MI", "STTC", "CD", "HYP"), label_level="subject", modality="ecg")

SPECS: dict[str, CorpusSpec] = {s.name: s for s in (APAVA, ADFTD, PTB, PTBXL)}

#: Subject split rules, as data. ``fixed``: the listed IDs go to val/test, every other subject
#: to train. ``per_class_prefix``: for each class, its subjects in label.npy row order; the first
#: int(train_end * n) go to train, up to int(val_end * n) to val, the rest to test. No seed is
#: involved: the authors' split is deterministic (the paper calls ADFTD's "random"; the code is
#: not). BioFormer uses (0.6, 0.8) for PTB; Medformer's code uses (0.55, 0.7) (see
#: :data:`PTB_SPLIT_MEDFORMER`), although its README says 60/20/20.
SPLIT_RULES: dict[str, dict[str, Any]] = {
    "apava": {"kind": "fixed", "val": [15, 16, 19, 20], "test": [1, 2, 17, 18]},
    "adftd": {"kind": "per_class_prefix", "train_end": 0.6, "val_end": 0.8},
    "ptb": {"kind": "per_class_prefix", "train_end": 0.6, "val_end": 0.8},
    "ptbxl": {"kind": "per_class_prefix", "train_end": 0.6, "val_end": 0.8},
}
PTB_SPLIT_MEDFORMER: dict[str, Any] = {"kind": "per_class_prefix", "train_end": 0.55, "val_end": 0.7}

#: Scale of the real corpora, as the Medformer preprocessing released them (BioFormer Table 1):
#: ``(subjects, windows)``; windows per subject is their ratio (APAVA about 260, ADFTD about 793,
#: PTB about 325, PTB-XL about 11).
REAL_SCALE: dict[str, tuple[int, int]] = {
    "apava": (23, 5_967),
    "adftd": (88, 69_752),
    "ptb": (198, 64_356),
    "ptbxl": (17_596, 191_400),
}

#: Defaults for the synthetic stand-in of each corpus (shape comes from the spec), next to the
#: real corpus's scale (:data:`REAL_SCALE`). Subjects are scaled down where the split allows it,
#: windows per subject are kept within a factor of three of the real corpus's, so a model sees a
#: subject as often as it would on the real data (a stand-in of 12 windows per subject, the old
#: APAVA default, is too small for any of the Table 3 backbones to learn from).
#:
#: =========  ======================  ==========================  =====================================
#: corpus     stand-in (subjects x    real (subjects, windows     why the subjects
#:            windows per subject)    per subject)
#: =========  ======================  ==========================  =====================================
#: APAVA      23 x 90                 23, ~260                    the fixed split names IDs up to 20
#: ADFTD      15 x 270                88, ~793                    5 per class: 3 / 1 / 1 per class split
#: PTB        20 x 110                198, ~325                   10 per class
#: PTB-XL     40 x 10                 17,596, ~11                 8 per class
#: =========  ======================  ==========================  =====================================
#:
#: ``signal``: "bands" (class-dependent spectral band power, EEG) or "motif" (class-dependent
#: waveform shape, ECG beats).
#:
#: APAVA's class signal and drift (``band_gain_drift``, ``class_separation``). The class signal
#: of AD EEG is slowing, power moving from the alpha rhythm to theta, and on the real corpus it
#: survives subject drift (every BioFormer Table 2 model is well above chance on APAVA's fixed
#: split) while the subjects stay recognisable (Table 4). At the generator's defaults the
#: stand-in's band-wise gain drift was as large as the class effect and its class peak too weak
#: for a Transformer trained from scratch at Adam 1e-4, so ``band_gain_drift: 0.5`` halves that
#: drift alone (every other drift is unchanged, so subjects stay distinguishable) and
#: ``class_separation: 3`` puts the class peak at the order of a resting alpha peak over the
#: aperiodic floor. The measurements behind both are in docs/results/apava_standin_design.json.
#: ADFTD gets the halved band-gain drift but keeps the default class strength (its paper scores
#: are near chance for every model: F1 ~0.5 for three classes).
SYNTHETIC_DEFAULTS: dict[str, dict[str, Any]] = {
    "apava": {"n_subjects": 23, "windows_per_subject": 90, "signal": "bands", "band_gain_drift": 0.5,
              "class_separation": 3.0},
    "adftd": {"n_subjects": 15, "windows_per_subject": 270, "signal": "bands", "band_gain_drift": 0.5},
    "ptb": {"n_subjects": 20, "windows_per_subject": 110, "signal": "motif"},
    "ptbxl": {"n_subjects": 40, "windows_per_subject": 10, "signal": "motif"},
}

_FEATURE_RE = re.compile(r"^feature_(\d+)\.npy$")


def split_subjects(rule: Mapping[str, Any],
                   subject_labels: Sequence[tuple[int, int]]) -> dict[str, list[int]]:
    """Apply a :data:`SPLIT_RULES` entry to ``(subject, label)`` pairs given in label.npy row order.

    Returns ``{"train": [...], "val": [...], "test": [...]}``. A ``fixed`` rule naming a subject
    that is not present raises :class:`DataError` (a silent shortfall would change the protocol).
    """
    ids = [int(s) for s, _ in subject_labels]
    if rule["kind"] == "fixed":
        val, test = [int(s) for s in rule["val"]], [int(s) for s in rule["test"]]
        missing = sorted(set(val + test) - set(ids))
        if missing:
            raise DataError(f"split rule names subjects {missing} that the corpus does not have "
                            f"(subjects: {min(ids, default=0)}..{max(ids, default=0)})")
        held = set(val) | set(test)
        return {"train": [s for s in ids if s not in held], "val": val, "test": test}
    if rule["kind"] == "per_class_prefix":
        a, b = float(rule["train_end"]), float(rule["val_end"])
        out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for cls in sorted({int(y) for _, y in subject_labels}):
            members = [int(s) for s, y in subject_labels if int(y) == cls]
            n = len(members)
            # int() truncation, as the authors' loaders do.
            out["train"] += members[: int(a * n)]
            out["val"] += members[int(a * n): int(b * n)]
            out["test"] += members[int(b * n):]
        return out
    raise ValueError(f"unknown split rule kind {rule['kind']!r} (expected 'fixed' or 'per_class_prefix')")


class MedformerReader:
    """Reads one corpus in the Medformer ``Feature/`` + ``Label/`` layout.

    Args:
        root: the corpus directory (the one holding ``Feature/`` and ``Label/``).
        spec: the corpus's :class:`CorpusSpec` (one of :data:`SPECS`); the files must match
            its channel count and window length exactly.
        subjects: optional subset of subject IDs to yield (all by default).

    ``label.npy`` normally has one row per subject (the published layout). A derived layout
    with one row per window (rows of one subject contiguous, in window order) is accepted too;
    its row count per subject must then equal the subject's window count, and for a
    subject-level corpus the label must be constant within a subject.

    The layout and the labels are checked at construction; each feature file's shape, window
    count and values are checked when :meth:`iter_blocks` reaches it. Every problem raises one
    :class:`DataError` naming the file.
    """

    def __init__(self, root: str | os.PathLike[str], spec: CorpusSpec,
                 subjects: Sequence[int] | None = None) -> None:
        self.spec = spec
        self.root = Path(root).expanduser().resolve()
        self.feature_dir = self.root / "Feature"
        self.label_path = self.root / "Label" / "label.npy"
        self._check_layout()
        self._files = self._index_feature_files()
        self._row_ids, self._row_labels = self._load_labels()
        self._subject_label, self._window_labels = self._match_labels_to_files()
        if subjects is not None:
            unknown = sorted(set(int(s) for s in subjects) - set(self._files))
            if unknown:
                raise DataError(f"{self.root}: requested subjects {unknown} are not in this corpus "
                                f"(subjects 1..{len(self._files)})")
            self._selected = sorted(set(int(s) for s in subjects))
        else:
            self._selected = sorted(self._files)

    # ----------------------------------------------------------------- layout and labels
    def _expected(self) -> str:
        return (f"expected the Medformer layout for {self.spec.name}: Feature/feature_<ID>.npy "
                f"(one (windows, {self.spec.n_times}, {self.spec.n_chans}) array per subject) "
                f"and Label/label.npy ((subjects, 2): label, subject ID)")

    def _check_layout(self) -> None:
        if not self.root.exists():
            raise DataError(f"{self.root}: corpus root does not exist; {self._expected()}")
        if not self.root.is_dir():
            raise DataError(f"{self.root}: corpus root is not a directory; {self._expected()}")
        missing = [p.relative_to(self.root).as_posix() + ("/" if p.suffix == "" else "")
                   for p in (self.feature_dir, self.label_path) if not p.exists()]
        if missing:
            raise DataError(f"{self.root}: missing {', '.join(missing)}; {self._expected()}")

    def _index_feature_files(self) -> dict[int, Path]:
        files: dict[int, Path] = {}
        for path in sorted(self.feature_dir.iterdir()):
            if path.name.startswith("."):
                continue
            m = _FEATURE_RE.match(path.name)
            if m is None:
                if path.suffix == ".npy":
                    raise DataError(f"{path}: unexpected file in Feature/; subject files are named "
                                    f"feature_<ID>.npy")
                continue
            sid = int(m.group(1))
            if sid in files:
                raise DataError(f"{path}: subject {sid} also has {files[sid].name}; one file per subject")
            files[sid] = path
        if not files:
            raise DataError(f"{self.feature_dir}: no feature_<ID>.npy files; {self._expected()}")
        ids = sorted(files)
        if ids != list(range(1, len(ids) + 1)):
            gaps = sorted(set(range(1, ids[-1] + 1)) - set(ids))
            raise DataError(f"{self.feature_dir}: subject IDs must be contiguous from 1 (the layout maps "
                            f"the j-th file to subject j); got {len(ids)} files with IDs "
                            f"{ids[0]}..{ids[-1]}" + (f", missing {gaps[:10]}" if gaps else ""))
        return files

    def _load_labels(self) -> tuple[np.ndarray, np.ndarray]:
        path = self.label_path
        try:
            arr = load_npy(path)
        except NpyError as e:
            raise DataError(str(e)) from None
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"{path}: cannot read as a numeric .npy array ({e})") from e
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] == 0:
            raise DataError(f"{path}: expected shape (subjects, 2) with columns (label, subject ID), "
                            f"got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.number):
            raise DataError(f"{path}: expected a numeric array, got dtype {arr.dtype}")
        if not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr)):
            row = int(np.argwhere(~np.isfinite(arr) | (arr != np.round(arr)))[0, 0])
            raise DataError(f"{path}: row {row} holds {arr[row].tolist()}; labels and subject IDs must be "
                            f"whole numbers")
        labels, ids = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)
        bad = np.flatnonzero((labels < 0) | (labels >= self.spec.n_outputs))
        if bad.size:
            r = int(bad[0])
            raise DataError(f"{path}: row {r} (subject {ids[r]}) has label {labels[r]}, outside "
                            f"0..{self.spec.n_outputs - 1} ({', '.join(self.spec.classes)})")
        if np.any(np.diff(ids) < 0):
            r = int(np.flatnonzero(np.diff(ids) < 0)[0]) + 1
            raise DataError(f"{path}: subject IDs must appear in increasing order (the layout pairs row "
                            f"order with file order); row {r} has subject {ids[r]} after {ids[r - 1]}")
        return ids, labels

    def _match_labels_to_files(self) -> tuple[dict[int, int], dict[int, np.ndarray] | None]:
        path, ids, labels = self.label_path, self._row_ids, self._row_labels
        in_labels, in_files = set(ids.tolist()), set(self._files)
        no_file = sorted(in_labels - in_files)
        if no_file:
            sid = no_file[0]
            width = len(self._files[min(self._files)].stem) - len("feature_")  # the corpus's zero padding
            raise DataError(f"{path}: lists subject {sid}, but Feature/feature_{sid:0{width}d}.npy does "
                            f"not exist")
        no_row = sorted(in_files - in_labels)
        if no_row:
            raise DataError(f"{self._files[no_row[0]]}: subject {no_row[0]} has no row in {path}")
        if len(ids) == len(in_labels):  # the published layout: one row per subject
            return {int(s): int(y) for s, y in zip(ids, labels, strict=True)}, None
        # one row per window
        per_subject: dict[int, np.ndarray] = {}
        subject_label: dict[int, int] = {}
        for sid in sorted(in_labels):
            ys = labels[ids == sid]
            if self.spec.label_level == "subject" and np.unique(ys).size > 1:
                vals = ", ".join(str(v) for v in np.unique(ys).tolist())
                raise DataError(f"{path}: subject {sid} has labels {vals} on different rows, but "
                                f"{self.spec.name} labels whole subjects")
            per_subject[sid] = ys
            subject_label[sid] = int(ys[0])
        return subject_label, per_subject

    # ----------------------------------------------------------------- public API
    def subject_labels(self) -> list[tuple[int, int]]:
        """``(subject, label)`` pairs in label.npy row order (the order the split rules use)."""
        return [(sid, self._subject_label[sid]) for sid in dict.fromkeys(self._row_ids.tolist())]

    def fingerprint(self) -> dict[str, Any]:
        """A cheap identity of the files read: a hash of every name, size and mtime (no data read)."""
        h = hashlib.sha256()
        total = 0
        paths = [self.label_path] + [self._files[s] for s in sorted(self._files)]
        for p in paths:
            st = p.stat()
            total += st.st_size
            h.update(f"{p.relative_to(self.root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return {"n_files": len(paths), "total_bytes": total, "sha256": h.hexdigest()}

    def config(self) -> dict[str, Any]:
        """Everything that changes the yielded windows, JSON-able (the window cache hashes it)."""
        return {
            "reader": "medformer",
            "version": READER_VERSION,
            "root": str(self.root),
            "spec": self.spec.to_dict(),
            "options": {"subjects": list(self._selected) if len(self._selected) < len(self._files) else None},
            "files": self.fingerprint(),
        }

    def iter_blocks(self) -> Iterator[WindowBlock]:
        """Yield one validated block per subject file, in subject order."""
        for sid in self._selected:
            yield self._read_subject(sid)

    # ----------------------------------------------------------------- one subject
    def _read_subject(self, sid: int) -> WindowBlock:
        path = self._files[sid]
        try:
            arr = load_npy(path, mmap_mode="r")
        except NpyError as e:
            raise DataError(str(e)) from None
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"{path}: cannot read as a numeric .npy array ({e})") from e
        t, c = self.spec.n_times, self.spec.n_chans
        if arr.ndim != 3:
            raise DataError(f"{path}: expected a 3-D array (windows, {t} samples, {c} channels), "
                            f"got shape {arr.shape}")
        n, got_t, got_c = arr.shape
        if got_c != c or got_t != t:
            hint = " (the file looks transposed: Medformer files are (windows, T, C))" \
                if (got_t, got_c) == (c, t) else ""
            raise DataError(f"{path}: expected (windows, {t}, {c}) for {self.spec.name} "
                            f"(T={t} samples, C={c} channels), got {arr.shape}{hint}")
        if n == 0:
            raise DataError(f"{path}: subject {sid} has no windows")
        if not np.issubdtype(arr.dtype, np.number):
            raise DataError(f"{path}: expected a numeric array, got dtype {arr.dtype}")
        if self._window_labels is not None:
            y = self._window_labels[sid]
            if len(y) != n:
                raise DataError(f"{path}: {n} windows, but {self.label_path} has {len(y)} rows for "
                                f"subject {sid}")
        else:
            y = np.full(n, self._subject_label[sid], dtype=np.int64)
        x = np.ascontiguousarray(np.asarray(arr, dtype=np.float32).transpose(0, 2, 1))
        block = WindowBlock(subject=sid, recording=path.stem, x=x, y=y,
                            start=np.arange(n, dtype=np.float64) * self.spec.window_seconds)
        block.validate(self.spec, source=str(path))
        return block


def read_corpus(name: str, root: str | os.PathLike[str], **kwargs: Any) -> MedformerReader:
    """Convenience: ``read_corpus("apava", root)`` is ``MedformerReader(root, SPECS["apava"])``."""
    if name not in SPECS:
        raise ValueError(f"unknown Medformer corpus {name!r}; expected one of {sorted(SPECS)}")
    return MedformerReader(root, SPECS[name], **kwargs)
