"""BCI Competition IV 2a / 2b (BNCI .mat or competition GDF), C3/Cz/C4, downsampled by 4."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from biosig_lightning.data.corpora.bci_iv import SPECS, SPLIT_RULE, SYNTHETIC_DEFAULTS, BCIIVReader
from biosig_lightning.data.datamodules.medformer import synthetic_options
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig


class BCIIVDataModule(BiosignalDataModule):
    """Motor imagery, window-level labels; subjects {6, 8} validate and {7, 9} test (BioFormer C.1).

    Args:
        dataset: ``2a`` (four classes) or ``2b`` (left/right hand).
        format: ``auto`` (BNCI .mat if present, else GDF), ``mat`` or ``gdf``.
        labels_dir: where the evaluation-session true labels (``A0xE.mat``) live for GDF.
    """

    def __init__(self, dataset: Literal["2a", "2b"] = "2a", format: Literal["auto", "mat", "gdf"] = "auto",
                 labels_dir: str | None = None, **kwargs: Any) -> None:
        self.dataset, self.format, self.labels_dir = dataset, format, labels_dir
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return SPECS[self.dataset]

    def make_reader(self, root: Path) -> CorpusReader:
        return BCIIVReader(root, self.dataset, format=self.format, labels_dir=self.labels_dir)

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="fixed", val=list(SPLIT_RULE["val"]), test=list(SPLIT_RULE["test"]))

    def synthetic_defaults(self) -> dict[str, Any]:
        return synthetic_options(SYNTHETIC_DEFAULTS[self.dataset])
