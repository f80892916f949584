"""DOD-H (Dreem Open Dataset, healthy): sleep staging on 16 PSG channels, 30-s epochs at 250 Hz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biosig_lightning.data.corpora.dodh import DODH
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig
from biosig_lightning.data.transforms import Normalization


class DODHDataModule(BiosignalDataModule):
    """DOD-H for STDRO's Table 5 (GraphS4mer's protocol): 15 / 5 / 5 records, five stages.

    The split is a seeded 60/20/20 record split (``split_seed``), which gives 15/5/5 of the
    25 records; GraphS4mer's own record lists live in its repository's file markers and are
    not reproduced here (pass them as ``split: {strategy: fixed, ...}`` with the subject ids
    of :attr:`DODH.record_ids` to use them). Metrics: macro-F1 and Cohen's kappa
    (``model.init_args.eval_metrics: sleep``).

    Synthetic stand-in (kind ``sleep``: a stage Markov chain with stage-specific spectra,
    spindles and K-complexes, subject drift): 25 records x 30 epochs. Real DOD-H: 25
    records x ~990 scored epochs. The stand-in is ~33x smaller per record because each
    epoch is 16 x 7500 samples (480 KB): the real per-record count would be ~12 GB of
    cache; 30 epochs keep it at ~360 MB. Each record is a 15-min stretch from anywhere in
    the night (``sleep_start: stationary``), so REM and N3 occur although no record is a
    whole night.
    """

    def __init__(self, split_seed: int = 0, normalization: Normalization = "window", **kwargs: Any) -> None:
        self.split_seed = int(split_seed)
        super().__init__(normalization=normalization, **kwargs)

    def corpus_spec(self) -> CorpusSpec:
        return DODH.make_spec()

    def make_reader(self, root: Path) -> CorpusReader:
        return DODH(root)

    def default_split(self) -> SplitConfig:
        return SplitConfig(strategy="ratio", ratios=(0.6, 0.2, 0.2), seed=self.split_seed, stratify=False)

    def synthetic_defaults(self) -> dict[str, Any]:
        return {"kind": "sleep", "n_subjects": 25, "windows_per_subject": 30, "sleep_start": "stationary"}
