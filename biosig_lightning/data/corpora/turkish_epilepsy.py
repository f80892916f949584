"""Turkish epilepsy EEG (Tasci et al. 2023; Yao et al. Sec. 6.1): generalised epilepsy vs healthy controls.

The corpus (121 participants: 50 with generalised epilepsy, 71 controls; 10,356 recordings of 15 s,
35 channels, 500 Hz) has no on-disk layout described in any public material we could find (searched:
the papers' text, public code and dataset pages). This reader therefore reads a **documented layout**
that a copy of the recordings can be put into without converting the signals:

    <root>/manifest.csv              columns: file, subject, label   (header row required)
    <root>/<file>                    one recording per file, .mat or .edf, path relative to root

* ``subject``: an integer participant id; ``label``: ``epilepsy`` / ``control`` (or ``1`` / ``0``).
* ``.mat`` (MATLAB v5, e.g. ``scipy.io.savemat``): one 2-D numeric array of 35 channels, named
  ``data`` or the only array in the file, ``(35, n)`` or ``(n, 35)``; an optional scalar ``fs`` must
  equal the configured rate (500 Hz).
* ``.edf``: exactly 35 signals at 500 Hz (read by pyedflib, in file order).

Preprocessing (Sec. 6.1): the first ``trim_start`` = 2 s and last ``trim_end`` = 1 s of a recording are
dropped (artifacts), and the rest is cut into non-overlapping ``window_seconds`` = 12 s windows (one
per 15-s recording: 6,000 samples).

Split unit (``unit``): ``subject`` keeps each participant's id (subject-disjoint splits, LOSO);
``recording`` gives every recording its own id (in manifest order), so a ratio split partitions
*recordings* as the paper's default 8:1:1 split does (Sec. 6.1 follows [1, 2-5], which split
segments): recordings of one participant then appear in train and test. That split is **not**
subject-disjoint, by design of the protocol it reproduces; the DataModule says so in its name.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.edf import files_fingerprint, read_header, read_signals
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CLASSES", "N_CHANS", "SFREQ", "TurkishEpilepsy"]

N_CHANS = 35
SFREQ = 500.0
CLASSES = ("control", "epilepsy")
_LABELS = {"control": 0, "healthy": 0, "0": 0, "epilepsy": 1, "patient": 1, "1": 1}


class TurkishEpilepsy:
    """Reader of the manifest layout described in the module docstring."""

    def __init__(self, root: str | Path, window_seconds: float = 12.0, trim_start: float = 2.0,
                 trim_end: float = 1.0, unit: Literal["subject", "recording"] = "subject") -> None:
        self.root = Path(root)
        if unit not in ("subject", "recording"):
            raise ValueError(f"turkish_epilepsy: unit must be 'subject' or 'recording', got {unit!r}")
        if trim_start < 0 or trim_end < 0 or window_seconds <= 0:
            raise ValueError("turkish_epilepsy: trims must be >= 0 s and window_seconds > 0")
        self.window_seconds, self.trim_start, self.trim_end, self.unit = (
            window_seconds,
            trim_start,
            trim_end,
            unit,
        )
        self.spec = self.make_spec(window_seconds)
        self.rows = self._manifest()

    @staticmethod
    def make_spec(window_seconds: float = 12.0) -> CorpusSpec:
        return CorpusSpec("turkish_epilepsy", tuple(f"EEG{i:02d}" for i in range(1, N_CHANS + 1)), SFREQ,
                          int(round(window_seconds * SFREQ)), CLASSES, label_level="subject")

    def _manifest(self) -> list[tuple[Path, int, int]]:
        path = self.root / "manifest.csv"
        if not path.is_file():
            raise DataError(f"turkish_epilepsy: {path} not found; expected a manifest.csv with columns "
                            "file, subject, label next to the recordings")
        rows: list[tuple[Path, int, int]] = []
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = {"file", "subject", "label"} - set(reader.fieldnames or [])
            if missing:
                raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))} (need file, "
                                f"subject, label)")
            for lineno, row in enumerate(reader, start=2):
                rel = Path(row["file"].strip())
                if rel.is_absolute() or ".." in rel.parts:
                    raise DataError(f"{path}:{lineno}: file {rel} must be a path inside the corpus root")
                try:
                    subject = int(row["subject"])
                except ValueError:
                    raise DataError(
                        f"{path}:{lineno}: subject {row['subject']!r} is not an integer id"
                    ) from None
                label = _LABELS.get(row["label"].strip().lower())
                if label is None:
                    raise DataError(f"{path}:{lineno}: label {row['label']!r} is not epilepsy/control (or "
                                    f"1/0)")
                rows.append((self.root / rel, subject, label))
        if not rows:
            raise DataError(f"{path}: no recordings listed")
        per_subject: dict[int, set[int]] = {}
        for _, s, y in rows:
            per_subject.setdefault(s, set()).add(y)
        mixed = sorted(s for s, ys in per_subject.items() if len(ys) > 1)
        if mixed:
            raise DataError(f"{path}: subject(s) {mixed} listed with both labels; a diagnosis is per "
                            f"participant")
        return rows

    def config(self) -> dict[str, Any]:
        return {"corpus": "turkish_epilepsy", "window_seconds": self.window_seconds,
                "trim_start": self.trim_start,
                "trim_end": self.trim_end, "unit": self.unit,
                "manifest": [(str(p.relative_to(self.root)), s, y)
                                                                           for p, s, y in self.rows],
                "files": files_fingerprint([p for p, _, _ in self.rows], self.root)}

    def read_recording(self, path: Path) -> np.ndarray:
        """``(35, n)`` float32 signals of one recording."""
        if path.suffix.lower() == ".mat":
            return _read_mat(path)
        if path.suffix.lower() == ".edf":
            header = read_header(path)
            if len(header.labels) != N_CHANS:
                raise DataError(f"{path}: {len(header.labels)} signals, expected {N_CHANS}")
            return read_signals(path, list(range(N_CHANS)), SFREQ)
        raise DataError(f"{path}: unsupported file type {path.suffix!r} (expected .mat or .edf)")

    def iter_blocks(self) -> Iterator[WindowBlock]:
        n_win = self.spec.n_times
        lo = int(round(self.trim_start * SFREQ))
        for k, (path, subject, label) in enumerate(self.rows, start=1):
            sig = self.read_recording(path)
            hi = sig.shape[1] - int(round(self.trim_end * SFREQ))
            count = max(0, (hi - lo) // n_win)
            if count == 0:
                raise DataError(f"{path}: {sig.shape[1] / SFREQ:g} s is too short for one "
                                f"{self.window_seconds:g}-s "
                                f"window after trimming {self.trim_start:g} s + {self.trim_end:g} s")
            x = np.stack([sig[:, lo + i * n_win: lo + (i + 1) * n_win] for i in range(count)])
            block = WindowBlock(subject=k if self.unit == "recording" else subject,
                                recording=str(path.relative_to(self.root)), x=x,
                                y=np.full(count, label), start=(lo + np.arange(count) * n_win) / SFREQ)
            block.validate(self.spec, str(path))
            yield block


def _read_mat(path: Path) -> np.ndarray:
    from scipy.io import loadmat

    try:
        content = loadmat(str(path))
    except (ValueError, OSError, NotImplementedError) as err:
        raise DataError(f"{path}: not a readable MATLAB v5 file ({err})") from err
    if "fs" in content and float(np.asarray(content["fs"]).squeeze()) != SFREQ:
        raise DataError(f"{path}: fs = {float(np.asarray(content['fs']).squeeze()):g} Hz, expected {SFREQ:g} "
                        f"Hz")
    arrays = {k: v for k, v in content.items() if not k.startswith("__") and isinstance(v, np.ndarray)
              and v.ndim == 2 and np.issubdtype(v.dtype, np.number) and min(v.shape) > 1}
    if "data" in arrays:
        data = arrays["data"]
    elif len(arrays) == 1:
        data = next(iter(arrays.values()))
    else:
        raise DataError(f"{path}: expected one 2-D signal array (named 'data' or alone), found "
                        f"{sorted(arrays) or 'none'}")
    if data.shape[0] != N_CHANS and data.shape[1] == N_CHANS:
        data = data.T
    if data.shape[0] != N_CHANS:
        raise DataError(f"{path}: signal array of shape {data.shape} has no axis of {N_CHANS} channels")
    return np.ascontiguousarray(data, dtype=np.float32)
