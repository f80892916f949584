"""PTB-XL from its WFDB release: 12 leads, 10 s records, five diagnostic superclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

from biosig_lightning.data.corpora.ptbxl_wfdb import PTBXL, SYNTHETIC_DEFAULTS
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig


class PTBXLDataModule(BiosignalDataModule):
    """Patient-disjoint PTB-XL; the default split is the recommended strat_fold 1-8 / 9 / 10.

    Args:
        sampling_rate: 100 (``records100/``) or 500 (``records500/``).
    """

    def __init__(self, sampling_rate: Literal[100, 500] = 100, **kwargs: Any) -> None:
        self.sampling_rate = sampling_rate
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return PTBXL.make_spec(self.sampling_rate)

    def make_reader(self, root: Path) -> CorpusReader:
        return PTBXL(root, sampling_rate=self.sampling_rate)

    def default_split(self) -> SplitConfig:
        if self.synthetic:
            return SplitConfig(strategy="ratio", ratios=(0.8, 0.1, 0.1), seed=0, stratify=False)
        folds = cast(PTBXL, self.reader()).strat_fold_split()  # make_reader's PTBXL (not synthetic)
        return SplitConfig(strategy="fixed", train=folds["train"], val=folds["val"], test=folds["test"])

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(SYNTHETIC_DEFAULTS)
