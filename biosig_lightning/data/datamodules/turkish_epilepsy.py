"""Turkish epilepsy EEG (35 channels, 500 Hz, 12-s windows; generalised epilepsy vs control)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from biosig_lightning.data.corpora.turkish_epilepsy import TurkishEpilepsy
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig
from biosig_lightning.data.synthetic_epilepsy import SignedEEGStandIn

#: stand-in scale. Real corpus: 121 participants, 10,356 windows (~86 per participant). Stand-in: 12
# : participants x 30 windows (86 / 30 < 3x); each 35 x 6000 window is 840 kB, so 360 windows = 300 MB of
# cache.
SYNTHETIC_DEFAULTS: dict[str, Any] = {"n_subjects": 12, "windows_per_subject": 30,
                                      "class1_fraction": 50 / 121}


class TurkishEpilepsyDataModule(BiosignalDataModule):
    """Turkish epilepsy EEG (Yao et al. Sec. 6.1) from the manifest layout of
    :mod:`biosig_lightning.data.corpora.turkish_epilepsy`, or its stand-in
    (:class:`~biosig_lightning.data.synthetic_epilepsy.SignedEEGStandIn`).

    Args:
        unit: ``recording`` (the paper's default 8:1:1 split over recordings; NOT subject-disjoint:
            a participant's recordings are spread over train/val/test, as in the protocol of [1-5]) or
            ``subject`` (participants kept whole: LOSO and subject-disjoint ratio splits).
        window_seconds, trim_start, trim_end: 12-s windows after dropping 2 s / 1 s (Sec. 6.1).

    Default split: stratified ratio 8:1:1 over the ``unit`` (set ``split.strategy: loso`` for LOSO).
    """

    def __init__(self, unit: Literal["subject", "recording"] = "subject", window_seconds: float = 12.0,
                 trim_start: float = 2.0, trim_end: float = 1.0, **kwargs: Any) -> None:
        if unit not in ("subject", "recording"):
            raise ValueError(f"data.init_args.unit must be 'subject' or 'recording', got {unit!r}")
        self.unit, self.window_seconds, self.trim_start, self.trim_end = (
            unit,
            window_seconds,
            trim_start,
            trim_end,
        )
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return TurkishEpilepsy.make_spec(self.window_seconds)

    @property
    def dataset_name(self) -> str:
        name = super().dataset_name
        return name if self.unit == "subject" else f"{name}-recording-split"

    def reader(self) -> CorpusReader:
        if self.synthetic:
            return SignedEEGStandIn(self.spec, unit=self.unit,
                                    **{**self.synthetic_defaults(), **self.synthetic_options})
        return super().reader()

    def make_reader(self, root: Path) -> CorpusReader:
        return TurkishEpilepsy(root, self.window_seconds, self.trim_start, self.trim_end, self.unit)

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="ratio", ratios=(0.8, 0.1, 0.1), seed=0, stratify=True)

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(SYNTHETIC_DEFAULTS)
