"""Any EEG (or MEG/iEEG) dataset in BIDS, read with mne-bids into labelled windows.

BIDS (Pernet et al. 2019, "EEG-BIDS", Sci. Data 6:103) is the layout most public EEG is now
shared in: ``sub-<label>/[ses-<label>/]eeg/sub-<label>_task-<label>_eeg.<ext>`` with
``_events.tsv`` and ``_channels.tsv`` beside each recording and ``participants.tsv`` at the
root. :func:`mne_bids.read_raw_bids` reads a recording together with its sidecars, so events
become the raw's annotations and channel types come from ``channels.tsv``.

Labels come from one of two places:

* ``labels="events"``: each event whose ``trial_type`` is one of the classes starts a window of
  ``window_seconds`` (window-level labels: motor imagery, ERPs, sleep stages);
* ``labels="participants"``: the ``participants_column`` value of the subject labels every
  window of its recordings, cut back to back from the start (subject-level labels: a diagnosis).

Subjects are the BIDS subject labels: ``sub-07`` is subject 7 when every label is a number,
otherwise subjects are numbered 1, 2, ... in sorted label order (:attr:`BIDSReader.subject_ids`
maps them back). Channels are the first recording's (or ``channels``); a recording that lacks
one is a :class:`DataError` naming the file and the channel. With ``sfreq`` set every recording
is resampled to it. Signals stay in volts (the default per-window normalisation makes the unit
irrelevant to a model).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.edf import files_fingerprint
from biosig_lightning.data.corpora.reading import reading
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["EXTENSIONS", "BIDSReader", "LabelSource"]

READER_VERSION = 1
LabelSource = Literal["events", "participants"]
#: raw-data extensions mne-bids reads (one per recording is picked, in this order of preference)
EXTENSIONS = (".vhdr", ".edf", ".bdf", ".set", ".fif", ".cnt", ".mef", ".nwb", ".con", ".sqd", ".ds")


def _mne_bids() -> Any:
    try:
        import mne_bids
    except ImportError:  # a declared dependency; an environment without it gets the reason, in one line
        raise DataError("BIDS data needs mne-bids: pip install mne-bids") from None
    return mne_bids


def _read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


class BIDSReader:
    """Windows of a BIDS dataset (see the module docstring).

    Args:
        root: the BIDS root (holds ``dataset_description.json`` and ``sub-*``).
        task: only recordings of this task (default: every task).
        datatype: ``eeg`` (default), ``meg`` or ``ieeg``.
        labels: ``events`` or ``participants``.
        participants_column: the ``participants.tsv`` column holding the class (``labels="participants"``).
        classes: class names in label order; default: every value found, sorted.
        window_seconds: window length in seconds.
        sfreq: resample every recording to this rate; default: the first recording's rate.
        channels: channels in model order; default: the first recording's.
        name: corpus name in run names and results.
    """

    def __init__(self, root: str | Path, task: str | None = None, datatype: str = "eeg",
                 labels: LabelSource = "events", participants_column: str | None = None,
                 classes: list[str] | None = None, window_seconds: float = 2.0, sfreq: float | None = None,
                 channels: list[str] | None = None, name: str = "bids") -> None:
        self.root = Path(root).expanduser().resolve()
        if not (self.root / "dataset_description.json").is_file():
            raise DataError(f"bids: {self.root} is not a BIDS root (no dataset_description.json) "
                            f"(data.init_args.root)")
        if labels not in ("events", "participants"):
            raise DataError(f"bids: data.init_args.labels must be 'events' or 'participants', got {labels!r}")
        if labels == "participants" and not participants_column:
            raise DataError("bids: labels='participants' needs data.init_args.participants_column "
                            "(the participants.tsv column holding each subject's class)")
        if not window_seconds > 0:
            raise DataError(f"bids: data.init_args.window_seconds must be positive, got {window_seconds}")
        self.task, self.datatype, self.labels = task, datatype, labels
        self.participants_column = participants_column
        self.window_seconds = float(window_seconds)
        self.paths = self._recordings()
        labels_ = sorted({p.subject for p in self.paths})
        numeric = all(s.isdigit() for s in labels_)
        #: integer subject id -> BIDS subject label
        self.subject_ids: dict[int, str] = {(int(s) if numeric else i + 1): s for i, s in enumerate(labels_)}
        self._subject_of = {s: i for i, s in self.subject_ids.items()}
        self._participant_class = self._participants() if labels == "participants" else {}
        found = (
            sorted(set(self._participant_class.values())) if labels == "participants" else self._event_types()
        )
        self.classes = tuple(classes) if classes else tuple(found)
        if len(self.classes) < 2:
            source = (f"participants.tsv column {participants_column!r}" if labels == "participants"
                      else "events.tsv trial_type")
            named = ", ".join(self.classes) or "none"
            raise DataError(f"bids: {self.root}: fewer than two classes ({named}) in {source}")
        with reading(self.paths[0].fpath, "the BIDS recording"):
            first = _mne_bids().read_raw_bids(self.paths[0], verbose="error")
        self.native_sfreq = float(first.info["sfreq"])
        self.sfreq = float(sfreq) if sfreq else self.native_sfreq
        self.channels = tuple(channels) if channels else tuple(first.ch_names)
        self.spec = CorpusSpec(name=name, ch_names=self.channels, sfreq=self.sfreq,
                               n_times=int(round(self.window_seconds * self.sfreq)), classes=self.classes,
                               label_level="subject" if labels == "participants" else "window",
                               modality=datatype)

    # ---- what is there ----------------------------------------------------------------------------
    def _recordings(self) -> list[Any]:
        mne_bids = _mne_bids()
        paths = mne_bids.find_matching_paths(self.root, tasks=self.task, datatypes=self.datatype,
                                             suffixes=self.datatype, extensions=list(EXTENSIONS))
        chosen: dict[str, Any] = {}
        for p in sorted(paths, key=lambda p: EXTENSIONS.index(p.extension)):
            chosen.setdefault(p.copy().update(extension=None, check=False).basename, p)
        if not chosen:
            raise DataError(f"bids: no {self.datatype} "
                            f"recordings{' of task ' + self.task if self.task else ''} "
                            f"under {self.root} (looked for sub-*/**/{self.datatype}/*_{self.datatype}"
                            f"{{{','.join(EXTENSIONS)}}})")
        return [chosen[k] for k in sorted(chosen)]

    def _participants(self) -> dict[str, str]:
        assert self.participants_column is not None  # labels='participants' requires it (__init__)
        path = self.root / "participants.tsv"
        if not path.is_file():
            raise DataError(f"bids: {path} not found (labels='participants')")
        rows = _read_tsv(path)
        if rows and self.participants_column not in rows[0]:
            raise DataError(f"bids: {path}: no column {self.participants_column!r} "
                            f"(columns: {', '.join(rows[0])}) (data.init_args.participants_column)")
        out = {}
        for row in rows:
            value = (row.get(self.participants_column) or "").strip()
            if value and value.lower() != "n/a":
                out[row["participant_id"].removeprefix("sub-")] = value
        return out

    def _events_file(self, bids_path: Any) -> Path:
        return Path(bids_path.copy().update(suffix="events", extension=".tsv", check=False).fpath)

    def _event_types(self) -> list[str]:
        types: set[str] = set()
        for p in self.paths:
            events = self._events_file(p)
            if not events.is_file():
                raise DataError(
                    f"bids: {events} not found: labels='events' needs an events.tsv per recording"
                )
            for row in _read_tsv(events):
                value = (row.get("trial_type") or "").strip()
                if value and value.lower() != "n/a":
                    types.add(value)
        return sorted(types)

    def config(self) -> dict[str, Any]:
        files = [Path(p.fpath) for p in self.paths]
        if self.labels == "events":
            files += [self._events_file(p) for p in self.paths]
        else:
            files.append(self.root / "participants.tsv")
        return {"reader": "bids", "version": READER_VERSION, "root": str(self.root), "task": self.task,
                "datatype": self.datatype, "labels": self.labels,
                "participants_column": self.participants_column,
                "classes": list(self.classes), "window_seconds": self.window_seconds, "sfreq": self.sfreq,
                "channels": list(self.channels), "files": files_fingerprint(files, self.root)}

    # ---- windows ------------------------------------------------------------------------------------
    def iter_blocks(self) -> Iterator[WindowBlock]:
        mne_bids = _mne_bids()
        import mne  # here: importing this module (every DataModule does) must not load MNE

        n_times = self.spec.n_times
        for p in self.paths:
            where = str(Path(p.fpath).relative_to(self.root))
            if self.labels == "participants" and p.subject not in self._participant_class:
                continue  # a subject without a class in the column is not part of the labelled corpus
            with reading(p.fpath, "the BIDS recording"):
                raw = mne_bids.read_raw_bids(p, verbose="error")
                missing = [c for c in self.channels if c not in raw.ch_names]
                if missing:
                    raise DataError(f"bids: {where}: channel {missing[0]!r} missing (has "
                                    f"{', '.join(raw.ch_names)})")
                raw.pick(list(self.channels))
                raw.load_data(verbose="error")
                if raw.info["sfreq"] != self.sfreq:
                    raw.resample(self.sfreq, verbose="error")
                data = raw.get_data().astype(np.float32)
                present = {c: i + 1 for i,
                           c in enumerate(self.classes) if c in set(raw.annotations.description)}
                events = (mne.events_from_annotations(raw, event_id=present, verbose="error")[0]
                          if present and self.labels == "events" else np.zeros((0, 3), dtype=np.int64))
            if self.labels == "events":
                starts, ys = [], []
                for sample, _, code in events:
                    s = int(sample - raw.first_samp)
                    if 0 <= s and s + n_times <= data.shape[1]:
                        starts.append(s)
                        ys.append(int(code) - 1)
            else:
                label = self._participant_class[p.subject]
                if label not in self.classes:
                    raise DataError(f"bids: participants.tsv: sub-{p.subject} has {self.participants_column}="
                                    f"{label!r}, not one of {', '.join(self.classes)}")
                starts = list(range(0, data.shape[1] - n_times + 1, n_times))
                ys = [self.classes.index(label)] * len(starts)
            if not starts:
                continue
            x = np.stack([data[:, s:s + n_times] for s in starts])
            block = WindowBlock(subject=self._subject_of[p.subject], recording=p.basename, x=x,
                                y=np.asarray(ys),
                                start=np.asarray(starts, dtype=np.float64) / self.sfreq)
            block.validate(self.spec, where)
            yield block
