"""Reader for BCI Competition IV datasets 2a and 2b (motor imagery), as BioFormer uses them.

BioFormer (Appendix C.1) keeps the three channels C3, Cz and C4, merges every session of a
subject, downsamples by a factor of 4 (250 Hz -> 62.5 Hz) and splits subjects {6, 8} to
validation and {7, 9} to test. Two public releases are read:

``format="mat"``: the BNCI Horizon 2020 release (datasets 001-2014 and 004-2014), as MOABB
and TorchEEG download it: ``A01T.mat``/``A01E.mat`` .. ``A09E.mat`` (2a) and
``B01T.mat``/``B01E.mat`` .. ``B09E.mat`` (2b; ``T`` holds sessions 1-3, ``E`` sessions 4-5).
Each file has a cell array ``data`` of runs; a run is a struct with ``X`` (samples x channels,
microvolts), ``trial`` (1-based sample of each trial *start*, the fixation cross), ``y``
(labels 1..K), ``fs``, ``classes`` and ``artifacts`` (1 = trial marked by the experts).
Runs without trials (EOG calibration) are skipped. Labels of the evaluation sessions are
included.

``format="gdf"``: the competition GDF files ``A0{s}T.gdf``/``A0{s}E.gdf`` (2a) and
``B0{s}0{k}T.gdf`` (k = 1..3) / ``B0{s}0{k}E.gdf`` (k = 4, 5) (2b), read with
:func:`mne.io.read_raw_gdf`. Events are annotations: 768 trial start, 769/770/771/772 cue
left/right/foot/tongue (2b: 769/770 only), 783 cue of unknown class (evaluation sessions),
1023 rejected trial. The labels of 783 cues come from the competition's true-label files
``<file stem>.mat`` (variable ``classlabel``, 1..K, in trial order), looked up in
``labels_dir`` (default: ``root``). Channels are found by name: ``EEG-C3`` (2a) and
``EEG:C3`` (2b) both map to ``C3``.

Both formats yield the same windows: a cue-locked window ``[cue + tmin, cue + tmax)``; the
cue lies 2 s after the trial start in 2a and 3 s after it in 2b (competition descriptions),
which is how the .mat trial starts are turned into cues. BioFormer does not state the window;
its data comes from the MMCNN preprocessing, whose 2a trials are 1000 samples (4 s at 250 Hz).
The default is therefore ``[cue, cue + 4 s)``: 1000 samples, 250 after decimation. Signals are
in microvolts (MNE's volts are scaled back).

Decimation is anti-aliased like :func:`scipy.signal.decimate` (order-8 Chebyshev type I
low-pass at 0.8 x the new Nyquist frequency, applied forward and backward so it adds no phase
shift), then every ``decimation``-th sample is kept; its 0.05 dB passband ripple per pass
scales frequencies below the cut-off by 0.989 to 1.0 (DC: 0.989). The filter runs on the trial window plus
up to 0.5 s of real signal on each side, so its edge transients fall outside the window.

Trials marked as artifacts/rejected are kept by default: BioFormer's Table 1 counts 5,184
2a windows, i.e. all 9 x 2 x 288 trials. ``drop_rejected=True`` removes them.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import io as sio
from scipy import signal
from scipy.io.matlab import MatReadError

from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

READER_VERSION = 1

Dataset = Literal["2a", "2b"]
Format = Literal["auto", "mat", "gdf"]

SUBJECTS = tuple(range(1, 10))
RAW_SFREQ = 250.0
CHANNELS = ("C3", "Cz", "C4")

#: Default shapes: 3 channels, 62.5 Hz after decimating 250 Hz by 4, 4 s = 250 samples.
#: Sources: BioFormer Table 1 (3 channels, M-4 / M-2 classes), Appendix C.1 (C3, Cz, C4;
#: 250 Hz; downsampled by a factor of 4); the window length is this reader's default (see above).
BCI2A = CorpusSpec(name="bci_iv_2a", ch_names=CHANNELS, sfreq=RAW_SFREQ / 4, n_times=250,
                   classes=("left_hand", "right_hand", "feet", "tongue"), label_level="window",
                   modality="eeg")
BCI2B = CorpusSpec(name="bci_iv_2b", ch_names=CHANNELS, sfreq=RAW_SFREQ / 4, n_times=250,
                   classes=("left_hand", "right_hand"), label_level="window", modality="eeg")
SPECS: dict[str, CorpusSpec] = {"2a": BCI2A, "2b": BCI2B}

#: Subject split (BioFormer Appendix C.1 and its loaders): fixed lists, the rest train.
SPLIT_RULE: dict[str, Any] = {"kind": "fixed", "val": [6, 8], "test": [7, 9]}

#: Synthetic stand-in defaults. All 9 subjects are kept because the fixed split names 6..9.
SYNTHETIC_DEFAULTS: dict[str, dict[str, Any]] = {
    "2a": {"n_subjects": 9, "windows_per_subject": 48, "signal": "bands"},
    "2b": {"n_subjects": 9, "windows_per_subject": 48, "signal": "bands"},
}


@dataclass(frozen=True)
class _Layout:
    """What differs between 2a and 2b."""

    prefix: str
    cue_after_start_s: float  # cue onset relative to the trial start (768 / .mat ``trial``)
    mat_n_channels: int  # columns of ``X`` in the BNCI release (EEG + 3 EOG)
    mat_channel_index: tuple[int, int, int]  # C3, Cz, C4 columns in the BNCI release
    cue_codes: dict[str, int]  # GDF annotation -> class index
    class_words: tuple[tuple[str, ...], ...]  # accepted words in the .mat ``classes`` field


_LAYOUTS: dict[str, _Layout] = {
    # 2a BNCI column order: Fz FC3 FC1 FCz FC2 FC4 C5 C3 C1 Cz C2 C4 C6 CP3 CP1 CPz CP2 CP4 P1 Pz P2
    # POz, then EOG x 3 (BNCI 001-2014 description).
    "2a": _Layout("A", 2.0, 25, (7, 9, 11), {"769": 0, "770": 1, "771": 2, "772": 3},
                  (("left",), ("right",), ("foot", "feet"), ("tongue",))),
    # 2b: C3 Cz C4, then EOG x 3.
    "2b": _Layout("B", 3.0, 6, (0, 1, 2), {"769": 0, "770": 1}, (("left",), ("right",))),
}

_TRIAL_START, _UNKNOWN_CUE, _REJECTED = "768", "783", "1023"
_MAT_ERRORS = (MatReadError, ValueError, OSError, NotImplementedError, TypeError)
_CONTEXT_S = 0.5


def _norm_channel(name: str) -> str:
    return re.sub(r"^EEG[\s:_-]*", "", name.strip(), flags=re.IGNORECASE).upper()


def _antialias_sos(q: int) -> np.ndarray:
    # The IIR design scipy.signal.decimate uses by default.
    return signal.cheby1(8, 0.05, 0.8 / q, output="sos")


class BCIIVReader:
    """Reads BCI Competition IV 2a or 2b into cue-locked C3/Cz/C4 windows.

    Args:
        root: directory holding the release files (flat).
        dataset: ``"2a"`` (4 classes) or ``"2b"`` (2 classes).
        format: ``"mat"`` (BNCI Horizon), ``"gdf"`` (competition GDF), or ``"auto"``: the BNCI
            .mat files when present, else the GDF files.
        labels_dir: where the true-label files (``A01E.mat``, ``B0104E.mat``... with
            ``classlabel``) live, for GDF evaluation sessions; default ``root``.
        tmin, tmax: window relative to the cue, in seconds (default 0 to 4 s).
        decimation: integer downsampling factor (default 4: 250 Hz -> 62.5 Hz).
        subjects: subset of 1..9 (default all).
        drop_rejected: drop trials the experts marked (``artifacts`` / event 1023).

    One :class:`WindowBlock` is yielded per continuous recording: per run for the .mat release
    (``recording="A01T_run4"``), per file for GDF (``recording="A01T"``); ``start`` is the
    window start in seconds from that recording's start.
    """

    def __init__(self, root: str | os.PathLike[str], dataset: Dataset, format: Format = "auto",
                 labels_dir: str | os.PathLike[str] | None = None, tmin: float = 0.0, tmax: float = 4.0,
                 decimation: int = 4, subjects: Sequence[int] | None = None,
                 drop_rejected: bool = False) -> None:
        if dataset not in _LAYOUTS:
            raise ValueError(f"dataset must be '2a' or '2b', got {dataset!r}")
        if format not in ("auto", "mat", "gdf"):
            raise ValueError(f"format must be 'auto', 'mat' or 'gdf', got {format!r}")
        if int(decimation) != decimation or decimation < 1:
            raise ValueError(f"decimation must be a positive integer, got {decimation!r}")
        n_raw = (tmax - tmin) * RAW_SFREQ
        if n_raw <= 0 or abs(n_raw - round(n_raw)) > 1e-6:
            raise ValueError(f"tmax - tmin must be a positive whole number of samples at {RAW_SFREQ:g} Hz, "
                             f"got tmin={tmin}, tmax={tmax}")
        self.dataset = dataset
        self.layout = _LAYOUTS[dataset]
        self.tmin, self.tmax, self.decimation = float(tmin), float(tmax), int(decimation)
        self.drop_rejected = bool(drop_rejected)
        self.n_raw = int(round(n_raw))
        self.spec = replace(SPECS[dataset], sfreq=RAW_SFREQ / self.decimation,
                            n_times=len(range(0, self.n_raw, self.decimation)))
        self.subjects = tuple(sorted(set(int(s) for s in (subjects or SUBJECTS))))
        bad = [s for s in self.subjects if s not in SUBJECTS]
        if bad:
            raise ValueError(f"subjects must be within 1..9, got {bad}")
        self.root = Path(root).expanduser().resolve()
        self.labels_dir = Path(labels_dir).expanduser().resolve() if labels_dir is not None else self.root
        if not self.root.is_dir():
            raise DataError(f"{self.root}: BCI IV {dataset} root does not exist or is not a directory; "
                            f"expected {self._expected('mat')} or {self._expected('gdf')}")
        self.format = self._resolve_format(format)
        self._files = self._expected_files(self.format)
        missing = [p.name for p in self._files if not p.is_file()]
        if missing:
            raise DataError(f"{self.root}: missing {', '.join(missing)}; expected "
                            f"{self._expected(self.format)}")
        self._sos = _antialias_sos(self.decimation) if self.decimation > 1 else None

    # ----------------------------------------------------------------- files
    def _names(self, fmt: str, subject: int) -> list[str]:
        p = self.layout.prefix
        if fmt == "mat":
            return [f"{p}{subject:02d}T.mat", f"{p}{subject:02d}E.mat"]
        if self.dataset == "2a":
            return [f"A{subject:02d}T.gdf", f"A{subject:02d}E.gdf"]
        return [f"B{subject:02d}{k:02d}{'T' if k <= 3 else 'E'}.gdf" for k in range(1, 6)]

    def _expected(self, fmt: str) -> str:
        if fmt == "mat":
            return (f"the BNCI Horizon .mat files {self.layout.prefix}01T.mat, {self.layout.prefix}01E.mat "
                    f".. "
                    f"{self.layout.prefix}09E.mat (struct array 'data' of runs)")
        if self.dataset == "2a":
            return "the competition GDF files A01T.gdf, A01E.gdf .. A09E.gdf"
        return "the competition GDF files B0101T.gdf .. B0103T.gdf, B0104E.gdf, B0105E.gdf .. B0905E.gdf"

    def _expected_files(self, fmt: str) -> list[Path]:
        return [self.root / n for s in self.subjects for n in self._names(fmt, s)]

    def _resolve_format(self, fmt: Format) -> str:
        if fmt != "auto":
            return fmt
        # The 2a true-label files share the BNCI names (A01E.mat), so a .mat only counts as the
        # BNCI release when it holds the 'data' variable.
        for p in self._expected_files("mat"):
            if p.is_file() and "data" in _mat_variables(p):
                return "mat"
        if any(p.is_file() for p in self._expected_files("gdf")):
            return "gdf"
        raise DataError(f"{self.root}: no BCI IV {self.dataset} files found; expected "
                        f"{self._expected('mat')} "
                        f"or {self._expected('gdf')}")

    # ----------------------------------------------------------------- public API
    def fingerprint(self) -> dict[str, Any]:
        """A cheap identity of the files read: a hash of every name, size and mtime (no data read)."""
        h = hashlib.sha256()
        total = 0
        for p in self._files:
            st = p.stat()
            total += st.st_size
            h.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return {"n_files": len(self._files), "total_bytes": total, "sha256": h.hexdigest()}

    def config(self) -> dict[str, Any]:
        """Everything that changes the yielded windows, JSON-able (the window cache hashes it)."""
        return {
            "reader": "bci_iv",
            "version": READER_VERSION,
            "root": str(self.root),
            "spec": self.spec.to_dict(),
            "options": {
                "dataset": self.dataset, "format": self.format, "tmin": self.tmin, "tmax": self.tmax,
                "decimation": self.decimation, "subjects": list(self.subjects),
                "drop_rejected": self.drop_rejected,
                "labels_dir": str(self.labels_dir) if self.format == "gdf" else None,
            },
            "files": self.fingerprint(),
        }

    def iter_blocks(self) -> Iterator[WindowBlock]:
        """Yield validated blocks, subject by subject, sessions in release order."""
        for path in self._files:
            match = re.match(r"[AB](\d{2})", path.name)
            assert match is not None  # _expected_files names every file A01T... / B01T...
            subject = int(match.group(1))
            reader = self._mat_blocks if self.format == "mat" else self._gdf_blocks
            yield from reader(path, subject)

    # ----------------------------------------------------------------- BNCI .mat
    def _mat_blocks(self, path: Path, subject: int) -> Iterator[WindowBlock]:
        try:
            mat = sio.loadmat(path, squeeze_me=True, struct_as_record=False)
        except _MAT_ERRORS as e:
            raise DataError(f"{path}: cannot read as a MATLAB v5 file ({e})") from e
        if "data" not in mat:
            keys = sorted(k for k in mat if not k.startswith("__"))
            raise DataError(f"{path}: no variable 'data' (found {keys}); expected the BNCI Horizon release"
                            + (" — this looks like a true-label file; use format='gdf' with labels_dir"
                               if "classlabel" in keys else ""))
        runs = np.atleast_1d(mat["data"])
        n_found = 0
        for r, run in enumerate(runs, start=1):
            where = f"{path} (run {r})"
            for field in ("X", "trial", "y", "fs"):
                if not hasattr(run, field):
                    raise DataError(f"{where}: run struct lacks field '{field}'")
            trial = np.atleast_1d(np.asarray(run.trial)).astype(np.int64).reshape(-1)
            if trial.size == 0:
                continue  # EOG calibration run
            y = np.atleast_1d(np.asarray(run.y)).reshape(-1)
            if y.size != trial.size:
                raise DataError(f"{where}: {trial.size} trial onsets but {y.size} labels")
            X = np.asarray(run.X, dtype=np.float64)
            if X.ndim != 2 or X.shape[1] != self.layout.mat_n_channels:
                raise DataError(f"{where}: X has shape {X.shape}; expected (samples, "
                                f"{self.layout.mat_n_channels}) for BCI IV {self.dataset}")
            self._check_fs(float(np.asarray(run.fs)), where)
            self._check_classes(run, where)
            labels = self._labels_from_codes(y, where)
            rejected = np.zeros(trial.size, dtype=bool)
            if self.drop_rejected:
                if not hasattr(run, "artifacts"):
                    raise DataError(f"{where}: drop_rejected=True but the run has no 'artifacts' field")
                rejected = np.atleast_1d(np.asarray(run.artifacts)).reshape(-1).astype(bool)
                if rejected.size != trial.size:
                    raise DataError(f"{where}: {trial.size} trials but {rejected.size} artifact flags")
            cues = trial - 1 + int(round(self.layout.cue_after_start_s * RAW_SFREQ))
            sig = X[:, list(self.layout.mat_channel_index)]
            n_found += 1
            yield self._block(sig, cues[~rejected], labels[~rejected], subject, f"{path.stem}_run{r}",
                              where, trial_numbers=np.flatnonzero(~rejected) + 1)
        if n_found == 0:
            raise DataError(f"{path}: no run with trials in 'data'")

    def _check_classes(self, run: Any, where: str) -> None:
        if not hasattr(run, "classes"):
            return
        names = [str(c).lower() for c in np.atleast_1d(np.asarray(run.classes)).reshape(-1)]
        words = self.layout.class_words
        ok = len(names) == len(words) and all(any(w in n for w in ws) for n,
                                              ws in zip(names, words, strict=True))
        if not ok:
            raise DataError(f"{where}: classes {names} do not match BCI IV {self.dataset}'s "
                            f"{list(self.spec.classes)} (labels would be mapped wrongly)")

    def _labels_from_codes(self, y: np.ndarray, where: str) -> np.ndarray:
        if not np.array_equal(y, np.round(y)) or y.min() < 1 or y.max() > self.spec.n_outputs:
            bad = y[(y != np.round(y)) | (y < 1) | (y > self.spec.n_outputs)][0]
            raise DataError(f"{where}: label {bad:g} outside 1..{self.spec.n_outputs} "
                            f"({', '.join(self.spec.classes)})")
        return y.astype(np.int64) - 1

    def _check_fs(self, fs: float, where: str) -> None:
        if abs(fs - RAW_SFREQ) > 1e-6:
            raise DataError(f"{where}: sampling rate {fs:g} Hz; BCI IV {self.dataset} is recorded at "
                            f"{RAW_SFREQ:g} Hz")

    # ----------------------------------------------------------------- competition GDF
    def _gdf_blocks(self, path: Path, subject: int) -> Iterator[WindowBlock]:
        import mne

        try:
            raw = mne.io.read_raw_gdf(path, preload=False, verbose="error")
        except Exception as e:  # mne raises a variety of types for a malformed file
            raise DataError(f"{path}: cannot read as GDF ({type(e).__name__}: {e})") from e
        self._check_fs(float(raw.info["sfreq"]), str(path))
        by_norm = {_norm_channel(n): i for i, n in enumerate(raw.ch_names)}
        picks = []
        for ch in CHANNELS:
            if ch.upper() not in by_norm:
                raise DataError(f"{path}: no channel {ch} (looked for EEG-{ch} / EEG:{ch}); channels: "
                                f"{', '.join(raw.ch_names)}")
            picks.append(by_norm[ch.upper()])
        sig = raw.get_data(picks=picks).T * 1e6  # MNE returns volts; the .mat release is in µV

        ann = raw.annotations
        desc = np.array([str(d).strip() for d in ann.description])
        onset = np.rint(np.asarray(ann.onset) * RAW_SFREQ).astype(np.int64)
        cue_mask = np.isin(desc, list(self.layout.cue_codes) + [_UNKNOWN_CUE])
        cues, cue_desc = onset[cue_mask], desc[cue_mask]
        if cues.size == 0:
            raise DataError(f"{path}: no cue events "
                            f"({', '.join(list(self.layout.cue_codes) + [_UNKNOWN_CUE])}) "
                            f"in the annotations")
        starts = np.sort(onset[desc == _TRIAL_START])
        if starts.size == 0:
            raise DataError(f"{path}: no trial-start events ({_TRIAL_START}) in the annotations")
        trial_of_cue = np.searchsorted(starts, cues, side="right") - 1
        if np.any(trial_of_cue < 0):
            raise DataError(f"{path}: cue at {cues[trial_of_cue < 0][0] / RAW_SFREQ:g} s precedes every "
                            f"trial-start event ({_TRIAL_START})")
        rejected_trials = np.searchsorted(starts, onset[desc == _REJECTED], side="right") - 1
        rejected = np.isin(trial_of_cue, rejected_trials)

        known = np.array([self.layout.cue_codes.get(d, -1) for d in cue_desc], dtype=np.int64)
        labels = self._gdf_labels(path, known)
        keep = ~rejected if self.drop_rejected else np.ones(cues.size, dtype=bool)
        yield self._block(sig, cues[keep], labels[keep], subject, path.stem, str(path),
                          trial_numbers=np.flatnonzero(keep) + 1)

    def _gdf_labels(self, path: Path, known: np.ndarray) -> np.ndarray:
        """Cue labels, completing unknown (783) cues from the true-label file ``<stem>.mat``."""
        label_path = self.labels_dir / f"{path.stem}.mat"
        unknown = known < 0
        if not unknown.any() and not label_path.is_file():
            return known
        if not label_path.is_file():
            raise DataError(f"{path}: {int(unknown.sum())} of {known.size} cues are {_UNKNOWN_CUE} (class "
                            f"not "
                            f"in the file); their labels come from the true-label file {label_path.name} "
                            f"(variable 'classlabel'), which is missing from {self.labels_dir} "
                            f"(set labels_dir)")
        try:
            mat = sio.loadmat(label_path, squeeze_me=True)
        except _MAT_ERRORS as e:
            raise DataError(f"{label_path}: cannot read as a MATLAB v5 file ({e})") from e
        if "classlabel" not in mat:
            keys = sorted(k for k in mat if not k.startswith("__"))
            raise DataError(f"{label_path}: no variable 'classlabel' (found {keys})")
        true = np.atleast_1d(np.asarray(mat["classlabel"], dtype=np.float64)).reshape(-1)
        if true.size != known.size:
            raise DataError(f"{label_path}: {true.size} labels in 'classlabel', but {path.name} has "
                            f"{known.size} cues")
        true = self._labels_from_codes(true, str(label_path))
        clash = ~unknown & (known != true)
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            raise DataError(f"{label_path}: trial {i + 1} labelled {self.spec.classes[true[i]]}, but "
                            f"{path.name}'s cue says {self.spec.classes[known[i]]}")
        return true

    # ----------------------------------------------------------------- windows
    def _block(self, sig: np.ndarray, cues: np.ndarray, labels: np.ndarray, subject: int,
               recording: str, where: str, trial_numbers: np.ndarray) -> WindowBlock:
        """Cut ``[cue + tmin, cue + tmax)`` from ``sig`` (samples x 3, 250 Hz) and decimate."""
        n_samples = sig.shape[0]
        a0 = int(round(self.tmin * RAW_SFREQ))
        ctx = int(round(_CONTEXT_S * RAW_SFREQ))
        x = np.empty((len(cues), len(CHANNELS), self.spec.n_times), dtype=np.float32)
        for k, (cue, tno) in enumerate(zip(cues, trial_numbers, strict=True)):
            a, b = int(cue) + a0, int(cue) + a0 + self.n_raw
            if a < 0 or b > n_samples:
                raise DataError(f"{where}: trial {tno} window [{a / RAW_SFREQ:g}, {b / RAW_SFREQ:g}) s lies "
                                f"outside the recording (0 to {n_samples / RAW_SFREQ:g} s)")
            window = sig[a:b]
            if not np.isfinite(window).all():
                ch = int(np.flatnonzero(~np.isfinite(window).all(axis=0))[0])
                t = a + int(np.flatnonzero(~np.isfinite(window[:, ch]))[0])
                raise DataError(f"{where}: NaN/Inf in channel {CHANNELS[ch]!r} in trial {tno} "
                                f"(t={t / RAW_SFREQ:g} s)")
            if self._sos is None:
                x[k] = window.T
                continue
            lo, hi = max(0, a - ctx), min(n_samples, b + ctx)
            seg = sig[lo:hi]
            if not np.isfinite(seg).all():  # context is a courtesy; never let it poison the window
                lo, hi, seg = a, b, window
            filtered = signal.sosfiltfilt(self._sos, seg, axis=0)
            x[k] = filtered[a - lo: b - lo: self.decimation].T
        start = (cues + a0).astype(np.float64) / RAW_SFREQ
        block = WindowBlock(subject=subject, recording=recording, x=x, y=labels, start=start)
        block.validate(self.spec, source=where)
        return block


def _mat_variables(path: Path) -> set[str]:
    try:
        return {name for name, _, _ in sio.whosmat(path)}
    except _MAT_ERRORS:
        return set()
