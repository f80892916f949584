"""DOD-H (Dreem Open Dataset, healthy): 30-s epochs of 16 PSG channels at 250 Hz, five sleep stages.

Layout (the public ``dreem-dod-h`` bucket, one file per record)::

    <uuid>.h5
        hypnogram                 (n_epochs,) int: -1 not scored, 0 Wake, 1 N1, 2 N2, 3 N3, 4 REM
        signals/<modality>/<ch>   (n_epochs * 7500,) float, one dataset per channel
                                  (eeg/C3_M2 ... eeg/FP2_O2, eog/EOG1, eog/EOG2, emg/EMG, emg/ECG)
        attrs: record_id, description (JSON list of {"name", "path", "fs", "domain", ...})

Channels are found by name under any ``signals/<modality>/`` group (the modality group of
ECG is ``emg`` in DOD-H). A channel's rate comes from its entry in the ``description``
attribute when one names its path, else 250 Hz is assumed; a rate other than 250 Hz, a
missing channel or hypnogram, or a signal whose length is not the hypnogram's epochs x
7500 samples is one :class:`DataError` naming the file and channel. Unscored epochs
(-1) are left out, as GraphS4mer and dreem-learning-open do.

Records are subjects (25 healthy sleepers, one night each); their integer ids are the
1-based positions of the sorted file names, so ``subject 3`` is the third UUID in
alphabetical order (:attr:`DODH.record_ids` maps them back).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.data.corpora.edf import files_fingerprint
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

__all__ = ["CHANNELS", "CLASSES", "DODH", "EPOCH_SECONDS", "SFREQ"]

READER_VERSION = 1
SFREQ = 250.0
EPOCH_SECONDS = 30
CHANNELS = ("C3_M2", "F3_F4", "F3_M2", "F3_O1", "F4_M1", "F4_O2", "FP1_F3", "FP1_M2", "FP1_O1", "FP2_F4",
            "FP2_M1",
            "FP2_O2", "ECG", "EMG", "EOG1", "EOG2")
"""The 16 channels GraphS4mer (and STDRO's Table 5) use, in its order."""
CLASSES = ("W", "N1", "N2", "N3", "REM")
LAYOUT = "<uuid>.h5 with 'hypnogram' and 'signals/<modality>/<channel>' datasets"


class DODH:
    """Reader for DOD-H records (see the module docstring).

    Args:
        root: the folder holding the ``<uuid>.h5`` records.
        channels: channel names to read (default: the 16 of :data:`CHANNELS`).
    """

    def __init__(self, root: str | Path, channels: tuple[str, ...] = CHANNELS) -> None:
        self.channels = tuple(channels)
        self.spec = self.make_spec(self.channels)
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise DataError(f"dodh: corpus root {self.root} does not exist or is not a folder; expected "
                            f"{LAYOUT}")
        self.files = sorted(p for p in self.root.iterdir() if p.is_file() and p.suffix == ".h5")
        if not self.files:
            raise DataError(f"dodh: no .h5 records in {self.root}; expected {LAYOUT}")
        self.record_ids = {i: p.stem for i, p in enumerate(self.files, start=1)}

    @staticmethod
    def make_spec(channels: tuple[str, ...] = CHANNELS) -> CorpusSpec:
        return CorpusSpec(name="dodh", ch_names=tuple(channels), sfreq=SFREQ,
                          n_times=int(EPOCH_SECONDS * SFREQ),
                          classes=CLASSES, label_level="window", modality="eeg")

    def config(self) -> dict[str, Any]:
        return {"corpus": "dodh", "reader_version": READER_VERSION, "root": str(self.root),
                "channels": list(self.channels), "files": files_fingerprint(self.files, self.root)}

    @staticmethod
    def _rates(f: Any, path: Path) -> dict[str, float]:
        raw = f.attrs.get("description")
        if raw is None:
            return {}
        try:
            entries = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
        except (ValueError, UnicodeDecodeError) as err:
            raise DataError(f"{path}: the 'description' attribute is not JSON ({err})") from err
        rates = {}
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and "path" in entry and "fs" in entry:
                rates[str(entry["path"]).strip("/")] = float(entry["fs"])
        return rates

    def read_record(self, path: Path, subject: int) -> WindowBlock:
        import h5py

        epoch = int(EPOCH_SECONDS * SFREQ)
        try:
            f = h5py.File(path, "r")
        except OSError as err:
            raise DataError(f"{path}: not a readable HDF5 file ({err})") from err
        with f:
            if "hypnogram" not in f:
                raise DataError(f"{path}: no 'hypnogram' dataset; expected {LAYOUT}")
            hyp = np.asarray(f["hypnogram"][()], dtype=np.int64).reshape(-1)
            bad = sorted(set(np.unique(hyp).tolist()) - {-1, 0, 1, 2, 3, 4})
            if bad:
                raise DataError(f"{path}: hypnogram values {bad} outside -1..4")
            if "signals" not in f:
                raise DataError(f"{path}: no 'signals' group; expected {LAYOUT}")
            where = {name: f"signals/{mod}/{name}" for mod in f["signals"] for name in f["signals"][mod]}
            rates = self._rates(f, path)
            rows = []
            for ch in self.channels:
                if ch not in where:
                    raise DataError(f"{path}: channel {ch!r} not found under signals/<modality>/ "
                                    f"(has {', '.join(sorted(where))})")
                fs = rates.get(where[ch], SFREQ)
                if abs(fs - SFREQ) > 1e-6:
                    raise DataError(f"{path}: channel {ch!r} is sampled at {fs:g} Hz, expected {SFREQ:g} Hz")
                sig = np.asarray(f[where[ch]][()], dtype=np.float32).reshape(-1)
                if len(sig) != len(hyp) * epoch:
                    raise DataError(f"{path}: channel {ch!r} has {len(sig)} samples, expected {len(hyp)} "
                                    f"epochs x "
                                    f"{epoch} = {len(hyp) * epoch}")
                rows.append(sig)
        keep = np.flatnonzero(hyp >= 0)
        x = np.stack(rows).reshape(len(self.channels), len(hyp), epoch)[:, keep].transpose(1, 0, 2)
        block = WindowBlock(subject=subject, recording=path.stem, x=x, y=hyp[keep],
                            start=keep.astype(np.float64) * EPOCH_SECONDS)
        block.validate(self.spec, source=str(path))
        return block

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for subject, path in enumerate(self.files, start=1):
            yield self.read_record(path, subject)
