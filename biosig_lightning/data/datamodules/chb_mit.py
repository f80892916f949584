"""CHB-MIT scalp EEG: bipolar montage at 256 Hz, seizure / background windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from biosig_lightning.data.corpora.chb_mit import CHBMIT, SUBJECT_GROUPS, SYNTHETIC_DEFAULTS
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig


class CHBMITDataModule(BiosignalDataModule):
    """Window-level seizure detection; chb01 and chb21 (one child) always share a split.

    The pair is a corpus group (:data:`SUBJECT_GROUPS`): split groups set in
    ``data.init_args.split.groups`` are added to it (overlapping groups merge), never replace it.

    Args:
        montage: ``"23"`` (SD-Former) or ``"18"`` (the standard double banana).
        window_seconds, stride_seconds: windowing (non-overlapping by default).
        max_files_per_subject, background_ratio: keep the corpus manageable (see the reader).
    """

    subject_groups = SUBJECT_GROUPS

    def __init__(self, montage: Literal["18", "23"] = "23", window_seconds: float = 2.0,
                 stride_seconds: float | None = None, max_files_per_subject: int | None = None,
                 background_ratio: float | None = None, **kwargs: Any) -> None:
        self.montage, self.window_seconds, self.stride_seconds = montage, window_seconds, stride_seconds
        self.max_files_per_subject, self.background_ratio = max_files_per_subject, background_ratio
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return CHBMIT.make_spec(self.montage, self.window_seconds)

    def make_reader(self, root: Path) -> CorpusReader:
        return CHBMIT(root, montage=self.montage, window_seconds=self.window_seconds,
                      stride_seconds=self.stride_seconds, max_files_per_subject=self.max_files_per_subject,
                      background_ratio=self.background_ratio)

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="ratio", ratios=(0.6, 0.2, 0.2), seed=0, stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(SYNTHETIC_DEFAULTS)
