"""Windows a user already holds in memory (arrays, an ``mne.Epochs``) as a corpus reader.

:class:`ArrayReader` turns ``x (n, channels, times)``, labels and subject ids into one
:class:`~biosig_lightning.data.spec.WindowBlock` per subject, so in-memory data goes through
the same window cache, subject splits and normalisation as every corpus on disk. The cache key
is a digest of the arrays' bytes, so other data builds another cache and the same data reuses it.
:func:`arrays_from_epochs` reads an ``mne.Epochs`` (or a ``-epo.fif`` file): labels from its
event codes (classes named by ``event_id``), subjects from a metadata column or given ids.
:func:`arrays_from_file` reads an ``.npz`` file (``x``, ``y``, ``subjects``, optional ``sfreq``,
``ch_names``, ``classes``). :func:`arrays_from_braindecode` reads a braindecode windows dataset
(``BaseConcatDataset`` of
``WindowsDataset``/``EEGWindowsDataset``), subjects from each recording's ``description``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.corpora.reading import reading
from biosig_lightning.data.spec import CorpusSpec, DataError, LabelLevel, WindowBlock

__all__ = ["ArrayReader", "arrays_from_braindecode", "arrays_from_epochs", "arrays_from_file"]

READER_VERSION = 1


class ArrayReader:
    """Labelled windows from arrays (see the module docstring).

    Args:
        x: ``(n, n_chans, n_times)`` signals.
        y: ``(n,)`` class indices into ``classes``.
        subjects: ``(n,)`` integer subject ids.
        sfreq: sampling rate in Hz.
        ch_names: channel names (default ``ch0, ch1, ...``).
        classes: class names (default ``"0", "1", ...`` up to the largest label).
        label_level: ``window`` or ``subject`` (one class per subject: stratified splits).
        name: corpus name in run names and results.
    """

    def __init__(self, x: np.ndarray, y: Sequence[int], subjects: Sequence[int], sfreq: float,
                 ch_names: Sequence[str] | None = None, classes: Sequence[str] | None = None,
                 label_level: LabelLevel = "window", name: str = "arrays") -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.y = np.asarray(y, dtype=np.int64).reshape(-1)
        self.subjects = np.asarray(subjects).reshape(-1)
        if self.x.ndim != 3:
            raise DataError(f"{name}: x must have shape (windows, channels, times), got {self.x.shape}")
        n = len(self.x)
        if len(self.y) != n or len(self.subjects) != n:
            raise DataError(f"{name}: {n} windows but {len(self.y)} labels and {len(self.subjects)} subject "
                            f"ids")
        if not np.issubdtype(self.subjects.dtype, np.integer):
            raise DataError(f"{name}: subject ids must be integers, got dtype {self.subjects.dtype}")
        if n and self.y.min() < 0:
            raise DataError(f"{name}: negative label {int(self.y.min())}")
        names = tuple(ch_names) if ch_names is not None else tuple(f"ch{i}" for i in range(self.x.shape[1]))
        k = int(self.y.max()) + 1 if n else 0
        self.spec = CorpusSpec(
            name=name,
            ch_names=names,
            sfreq=float(sfreq),
            n_times=int(self.x.shape[2]),
            classes=tuple(classes) if classes is not None else tuple(str(i) for i in range(k)),
            label_level=label_level,
        )
        if label_level == "subject":
            for sid in np.unique(self.subjects):
                if len(np.unique(self.y[self.subjects == sid])) > 1:
                    raise DataError(f"{name}: label_level='subject' but subject {int(sid)} has windows of "
                                    f"several classes")

    def config(self) -> dict[str, Any]:
        digest = hashlib.blake2b(digest_size=16)
        for arr in (self.x, self.y, self.subjects.astype(np.int64)):
            digest.update(str(arr.shape).encode())
            digest.update(np.ascontiguousarray(arr).data.cast("B"))
        return {"reader": "arrays", "version": READER_VERSION, "spec": self.spec.to_dict(),
                "data": digest.hexdigest()}

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for sid in np.unique(self.subjects):
            rows = np.flatnonzero(self.subjects == sid)
            block = WindowBlock(subject=int(sid), recording=f"{self.spec.name}-subject{int(sid)}",
                                x=self.x[rows],
                                y=self.y[rows], start=rows.astype(np.float64) * self.spec.window_seconds)
            block.validate(self.spec, f"{self.spec.name} arrays")
            yield block


def arrays_from_epochs(epochs: Any, subjects: Sequence[int] | None = None, subject_column: str = "subject",
                       ) -> dict[str, Any]:
    """``ArrayReader`` arguments from an ``mne.Epochs`` or the path of a ``-epo.fif`` file.

    Labels are the epochs' event codes in ascending order, named by ``event_id``; subjects are
    ``subjects`` or the ``subject_column`` of ``epochs.metadata`` (one clear error when neither exists).
    """
    import mne

    epochs_arg = epochs
    if isinstance(epochs, str | Path):
        path = Path(epochs).expanduser()
        if not path.is_file():
            raise DataError(f"epochs: {path} not found (data.init_args.epochs)")
        with reading(path, "epochs file"):
            epochs = mne.read_epochs(path, preload=True, verbose="error")
    if subjects is None:
        meta = epochs.metadata
        if meta is None or subject_column not in meta:
            raise DataError(f"epochs: no subject ids: give subjects, or a metadata column {subject_column!r} "
                            f"(metadata columns: "
                            f"{', '.join(meta.columns) if meta is not None else 'no metadata'})")
        subjects = meta[subject_column].to_numpy()
    codes = epochs.events[:, 2]
    names = {code: name for name, code in epochs.event_id.items()}
    order = sorted(int(c) for c in np.unique(codes))
    if len(order) < 2:
        where = f"epochs {path}" if isinstance(epochs_arg, str | Path) else "epochs"
        only = ", ".join(f"{names.get(c, c)} (event code {c})" for c in order) or "no events"
        raise DataError(f"{where}: one class only ({only}); a classifier needs at least two event codes")
    return {"x": epochs.get_data(copy=True), "y": np.searchsorted(order, codes),
            "subjects": np.asarray(subjects),
            "sfreq": float(epochs.info["sfreq"]), "ch_names": list(epochs.ch_names),
            "classes": [names.get(c, str(c)) for c in order]}


def arrays_from_file(path: str | Path, sfreq: float | None = None) -> dict[str, Any]:
    """``ArrayReader`` arguments from an ``.npz`` file written by ``numpy.savez``.

    The file holds ``x`` ``(windows, channels, times)``, ``y`` (class index per window) and ``subjects``
    (integer id per window), and may hold ``sfreq``, ``ch_names`` and ``classes``; ``sfreq`` given here
    wins over the file's (one of the two is required).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"arrays: {file} not found (data.init_args.file)")
    with np.load(file, allow_pickle=False) as npz:
        missing = [k for k in ("x", "y", "subjects") if k not in npz.files]
        if missing:
            raise DataError(f"arrays: {file} lacks array(s) {', '.join(missing)} (it holds "
                            f"{', '.join(npz.files)})")
        if sfreq is None and "sfreq" not in npz.files:
            raise DataError(f"arrays: {file} holds no sfreq; give data.init_args.sfreq")
        out: dict[str, Any] = {k: npz[k] for k in ("x", "y", "subjects")}
        out["sfreq"] = float(sfreq if sfreq is not None else npz["sfreq"])
        for key in ("ch_names", "classes"):
            if key in npz.files:
                out[key] = [str(v) for v in npz[key]]
    return out


def arrays_from_braindecode(dataset: Any, subject_field: str = "subject") -> dict[str, Any]:
    """``ArrayReader`` arguments from a braindecode windows dataset (0.8 or 1.x): every window of every
    recording (``dataset.datasets``), its target as the label and ``description[subject_field]`` as the
    subject."""
    xs, ys, subjects = [], [], []
    sfreq, ch_names = None, None
    for k, recording in enumerate(getattr(dataset, "datasets", [dataset])):
        description = getattr(recording, "description", None)
        if description is None or subject_field not in description:
            raise DataError(f"braindecode dataset: recording {k} has no description[{subject_field!r}] "
                            "(set it with dataset.set_description({...}))")
        signal = getattr(recording, "windows", None) or getattr(recording, "raw", None)
        if signal is not None and sfreq is None:
            sfreq, ch_names = float(signal.info["sfreq"]), list(signal.ch_names)
        for i in range(len(recording)):
            x, y = recording[i][:2]
            xs.append(np.asarray(x, dtype=np.float32))
            ys.append(int(y))
            subjects.append(int(description[subject_field]))
    if sfreq is None:
        raise DataError("braindecode dataset: no recording with an mne raw or epochs to read the rate from")
    return {"x": np.stack(xs), "y": np.asarray(ys), "subjects": np.asarray(subjects), "sfreq": sfreq,
            "ch_names": ch_names}
