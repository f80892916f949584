"""SPDTransNet's corpora: MASS SS3 (the paper's) and Sleep-EDF through the same SPD pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.data.corpora.mass_ss3 import ELECTRODES, MASSSS3
from biosig_lightning.data.corpora.mass_ss3_folds import FOLDS
from biosig_lightning.data.corpora.sleep_edf import EEG_CHANNELS, SleepEDF
from biosig_lightning.data.spd import SPDDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig

__all__ = ["MASSSS3DataModule", "SleepEDFSPDDataModule"]

N_FOLDS = 31


class MASSSS3DataModule(SPDDataModule):
    """MASS SS3 for SPDTransNet: 8 electrodes at 256 Hz, 30 s epochs, W/N1/N2/N3/REM.

    Split: fold ``fold`` of IITNet's 31 (fixed lists, 50/10/2 recordings;
    :mod:`biosig_lightning.data.corpora.mass_ss3_folds`); the search used fold 11. On the synthetic
    stand-in, which has fewer subjects, fold ``fold`` of a seeded subject-level k-fold with
    ``min(31, n_subjects // 2)`` folds (flagged: not IITNet's lists).

    Stand-in scale: real SS3 has 62 subjects x 1 night x ~957 epochs (59,317 scored). The stand-in has
    12 subjects x 1 night x 900 epochs (kind ``sleep``: Markov hypnogram, stage spectra, spindles and
    K-complexes, subject drift): epochs per recording within 1.1x of the real corpus, fewer subjects so
    a CPU builds its tokens in about a minute.

    Args:
        fold: which of the 31 folds (0..30).
        electrodes: electrode names (default the paper's 8).
        **kwargs: :class:`~biosig_lightning.data.spd.SPDDataModule`'s.
    """

    def __init__(self, fold: int = 11, electrodes: list[str] | None = None, **kwargs: Any) -> None:
        if not 0 <= fold < N_FOLDS:
            raise ValueError(f"data.fold must be in 0..{N_FOLDS - 1}, got {fold}")
        self.fold = fold
        self.electrodes = list(electrodes or ELECTRODES)
        super().__init__(**kwargs)

    def raw_spec(self) -> CorpusSpec:
        return MASSSS3.make_spec(self.electrodes)

    def make_reader(self, root: Path) -> CorpusReader:
        return MASSSS3(root, self.electrodes)

    def default_split(self) -> SplitConfig:
        if self.synthetic:
            n = int({**self.synthetic_defaults(), **self.synthetic_options}["n_subjects"])
            k = max(2, min(N_FOLDS, n // 2))
            return SplitConfig(strategy="kfold", n_folds=k, fold=self.fold % k, seed=0, stratify=False)
        f = FOLDS[self.fold]
        return SplitConfig(strategy="fixed", train=list(f["train"]), val=list(f["val"]), test=list(f["test"]),
                           stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return {"kind": "sleep", "n_subjects": 12, "windows_per_subject": 900, "recordings_per_subject": 1}


class SleepEDFSPDDataModule(SPDDataModule):
    """Sleep-EDF (Sleep Cassette) through the SPD pipeline: its 2 EEG derivations -> SPD(3), 6-number tokens.

    At 100 Hz the gamma band (30-45 Hz) still lies below Nyquist. Split: fold ``fold`` of a seeded
    subject-level 31-fold split (flagged: no published fold lists for SPDTransNet on Sleep-EDF).
    Stand-in scale: the Sleep Cassette has 78 subjects x 2 nights x ~1000 epochs after wake cropping;
    the stand-in 8 subjects x 2 nights x 450 epochs (the reader's own stand-in has 120 per subject).
    """

    def __init__(self, fold: int = 0, channels: list[str] | None = None,
                 crop_wake_minutes: float | None = 30.0,
                 **kwargs: Any) -> None:
        self.fold = fold
        self.channels = list(channels or EEG_CHANNELS)
        self.crop_wake_minutes = crop_wake_minutes
        super().__init__(**kwargs)

    def raw_spec(self) -> CorpusSpec:
        return SleepEDF.make_spec(self.channels)

    def make_reader(self, root: Path) -> CorpusReader:
        return SleepEDF(root, channels=self.channels, crop_wake_minutes=self.crop_wake_minutes)

    def default_split(self) -> SplitConfig:
        n = int({**self.synthetic_defaults(),
                 **self.synthetic_options}["n_subjects"]) if self.synthetic else 78
        k = max(2, min(N_FOLDS, n // 2))
        return SplitConfig(strategy="kfold", n_folds=k, fold=self.fold % k, seed=0, stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return {"kind": "sleep", "n_subjects": 8, "windows_per_subject": 900, "recordings_per_subject": 2}
