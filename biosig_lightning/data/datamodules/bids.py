"""``BIDSDataModule``: bring a BIDS dataset (read by mne-bids) to any backbone and split strategy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.data.corpora.bids import BIDSReader, LabelSource
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, DataError
from biosig_lightning.data.splits import SplitConfig


class BIDSDataModule(BiosignalDataModule):
    """A BIDS dataset as subject-disjoint windows (:class:`~biosig_lightning.data.corpora.bids.BIDSReader`).

    Unlike the corpus DataModules, the shape is read from the dataset when the module is built
    (channels and rate of the first recording, classes from ``events.tsv`` or ``participants.tsv``),
    and linked into the backbone like any other.

    Args:
        root: the BIDS root.
        task, datatype, labels, participants_column, classes, window_seconds, sfreq, channels, name:
            see :class:`~biosig_lightning.data.corpora.bids.BIDSReader`.

    Default split: 60/20/20 over subjects, stratified when labels are per subject; any
    ``split`` (``ratio``, ``kfold``, ``loso``, ``fixed`` with BIDS subject numbers) works.
    """

    def __init__(self, root: str | None = None, task: str | None = None, datatype: str = "eeg",
                 labels: LabelSource = "events", participants_column: str | None = None,
                 classes: list[str] | None = None, window_seconds: float = 2.0, sfreq: float | None = None,
                 channels: list[str] | None = None, name: str = "bids", **kwargs: Any) -> None:
        if not root:
            raise DataError("BIDSDataModule: set data.init_args.root to the BIDS root folder")
        self._bids = BIDSReader(root, task=task, datatype=datatype, labels=labels,
                                participants_column=participants_column, classes=classes,
                                window_seconds=window_seconds, sfreq=sfreq, channels=channels, name=name)
        super().__init__(root=root, **kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return self._bids.spec

    def make_reader(self, root: Path) -> CorpusReader:
        return self._bids

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="ratio", ratios=(0.6, 0.2, 0.2), seed=0,
                           stratify=self.spec.label_level == "subject")
