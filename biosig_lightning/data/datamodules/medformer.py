"""APAVA, ADFTD, PTB and PTB-XL in the Medformer preprocessed layout (BioFormer's corpora)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.data.corpora.medformer import SPECS, SPLIT_RULES, SYNTHETIC_DEFAULTS, MedformerReader
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig


def synthetic_options(defaults: dict[str, Any]) -> dict[str, Any]:
    """Reader tables name the signal kind ``signal``; the generator calls it ``kind``."""
    out = dict(defaults)
    if "signal" in out:
        out["kind"] = out.pop("signal")
    return out


class MedformerDataModule(BiosignalDataModule):
    """Base for the four Medformer-layout corpora; subclasses only name their corpus.

    The default split is the paper's (BioFormer Appendix C.1): APAVA's fixed lists, and for
    the others each class's subjects in ascending id order cut 60/20/20, which reproduces
    the authors' deterministic split.
    """

    corpus: str = ""

    def corpus_spec(self) -> CorpusSpec:
        return SPECS[self.corpus]

    def make_reader(self, root: Path) -> CorpusReader:
        return MedformerReader(root, self.spec)

    def default_split(self) -> SplitConfig:
        rule = SPLIT_RULES[self.corpus]
        if rule["kind"] == "fixed":
            return SplitConfig(strategy="fixed", val=list(rule["val"]), test=list(rule["test"]))
        train, val_end = rule["train_end"], rule["val_end"]
        return SplitConfig(strategy="ratio", ratios=(train, val_end - train, 1.0 - val_end), shuffle=False,
                           stratify=True)

    def synthetic_defaults(self) -> dict[str, Any]:
        return synthetic_options(SYNTHETIC_DEFAULTS[self.corpus])


class APAVADataModule(MedformerDataModule):
    """APAVA (Alzheimer's EEG): 23 subjects, 16 channels, 256 Hz, 1 s windows, subject labels."""

    corpus = "apava"


class ADFTDDataModule(MedformerDataModule):
    """ADFTD (AD / FTD / control EEG): 88 subjects, 19 channels, 256 Hz, 1 s windows."""

    corpus = "adftd"


class PTBDataModule(MedformerDataModule):
    """PTB (myocardial infarction ECG): 15 leads, 250 Hz, heartbeat-centred windows."""

    corpus = "ptb"


class PTBXLMedformerDataModule(MedformerDataModule):
    """PTB-XL as Medformer preprocessed it: 12 leads, 250 Hz, 1 s windows, subject labels."""

    corpus = "ptbxl"
