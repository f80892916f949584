"""Sleep-EDF Expanded, Sleep Cassette: Fpz-Cz and Pz-Oz, 30 s epochs, five stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.data.corpora.sleep_edf import EEG_CHANNELS, SYNTHETIC_DEFAULTS, SleepEDF
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig


class SleepEDFDataModule(BiosignalDataModule):
    """Sleep staging; a subject's two nights share its id, so they always share a split.

    Args:
        channels: EDF channel labels to read.
        crop_wake_minutes: wake kept before the first and after the last sleep epoch
            (``None`` keeps the whole night).
    """

    def __init__(self, channels: list[str] | None = None, crop_wake_minutes: float | None = 30.0,
                 **kwargs: Any) -> None:
        self.channels = list(channels or EEG_CHANNELS)
        self.crop_wake_minutes = crop_wake_minutes
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return SleepEDF.make_spec(self.channels)

    def make_reader(self, root: Path) -> CorpusReader:
        return SleepEDF(root, channels=self.channels, crop_wake_minutes=self.crop_wake_minutes)

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="ratio", ratios=(0.6, 0.2, 0.2), seed=0, stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(SYNTHETIC_DEFAULTS)
