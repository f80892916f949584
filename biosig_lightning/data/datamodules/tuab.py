"""TUH Abnormal EEG (21 channels, 250 Hz, 24-s windows; normal vs abnormal), patient-disjoint splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.corpora.tuab import TUAB
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig
from biosig_lightning.data.synthetic_epilepsy import SignedEEGStandIn

#: stand-in scale. Real corpus: 2,993 recordings of 2,329 patients, one window each (~1.3 per patient).
#: Stand-in: 60 patients x 2 windows (within 3x), 21 x 6000 windows (504 kB each, 60 MB of cache).
SYNTHETIC_DEFAULTS: dict[str, Any] = {"n_subjects": 60, "windows_per_subject": 2, "class1_fraction": 0.5}


class TUABDataModule(BiosignalDataModule):
    """TUAB (:mod:`biosig_lightning.data.corpora.tuab`) or its stand-in; splits keep patients whole.

    Args:
        protocol: ``official`` (test = the ``eval`` folder's patients, validation = ``val_fraction`` of
            the ``train`` folder's patients drawn with ``split_seed``) or ``ratio`` (70/30 over patients,
            Yao et al. App. G after [43]; validation = ``val_fraction`` of the 70 %). An explicit
            ``split`` overrides both. The stand-in has no folders: ``official`` falls back to ``ratio``.
        window_seconds, sfreq, windows_per_recording, offset_seconds: see the reader.
    """

    def __init__(self, protocol: Literal["official", "ratio"] = "ratio", window_seconds: float = 24.0,
                 sfreq: float = 250.0, windows_per_recording: int = 1, offset_seconds: float = 60.0,
                 val_fraction: float = 0.1, split_seed: int = 0, **kwargs: Any) -> None:
        if protocol not in ("official", "ratio"):
            raise ValueError(f"data.init_args.protocol must be 'official' or 'ratio', got {protocol!r}")
        if not 0 < val_fraction < 1:
            raise ValueError(f"data.init_args.val_fraction must be in (0, 1), got {val_fraction!r}")
        self.protocol, self.window_seconds, self.tuab_sfreq = protocol, window_seconds, sfreq
        self.windows_per_recording, self.offset_seconds = windows_per_recording, offset_seconds
        self.val_fraction, self.split_seed = val_fraction, split_seed
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return TUAB.make_spec(self.window_seconds, self.tuab_sfreq)

    def reader(self) -> CorpusReader:
        if self.synthetic:
            return SignedEEGStandIn(self.spec, **{**self.synthetic_defaults(), **self.synthetic_options})
        return super().reader()

    def make_reader(self, root: Path) -> CorpusReader:
        return TUAB(root, self.window_seconds, self.tuab_sfreq,
                    self.windows_per_recording, self.offset_seconds)

    def default_split(self) -> SplitConfig:
        reader = self.reader()
        if self.protocol == "official" and isinstance(reader, TUAB):
            folders = reader.patient_folders()
            train = np.random.default_rng(self.split_seed).permutation(folders["train"]).tolist()
            n_val = max(1, int(round(self.val_fraction * len(train))))
            return SplitConfig(strategy="fixed", val=sorted(train[:n_val]),
                               test=folders["eval"], stratify=False)
        v = 0.7 * self.val_fraction
        return SplitConfig(strategy="ratio", ratios=(0.7 - v, v, 0.3), seed=self.split_seed, stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(SYNTHETIC_DEFAULTS)
