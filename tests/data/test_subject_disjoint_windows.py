"""Every corpus DataModule, on its synthetic stand-in: each window it serves belongs to one person, and
that person's windows all lie in one split.

A window's true subject is recovered without the split code and without the cache's subject column:
each window the stand-in reader yields while the cache is built is keyed by the digest of its bytes,
and each window a split serves (the cache row its batch names) is looked up there. The SPD
DataModules cache tokens computed from the windows, not the windows, so their rows are traced back
through the recording the reader yielded them in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import biosig_lightning.data.datamodules as datamodules
from biosig_lightning.data.spd import SPDDataModule
from tests.data.window_subjects import SPLITS, assert_each_person_in_one_split, window_digest

OWN_DATA = {
    "ArrayDataModule",
    "ArrayFileDataModule",
    "EpochsDataModule",
    "BIDSDataModule",
}  # tests/data/datamodules/test_own_data_subjects.py
ABSTRACT = {"MedformerDataModule"}  # a base: each corpus below it is listed
CORPORA = sorted(n for n in datamodules.__all__ if n not in OWN_DATA | ABSTRACT)
# : stand-in options: few windows (and, for the slow generators, few subjects) that still fill the default
# split
SMALL = {"TUSZDataModule": {"windows_per_subject": 6},
         "SleepEDFSPDDataModule": {"n_subjects": 4, "windows_per_subject": 2, "recordings_per_subject": 2},
         "TUABDataModule": {"n_subjects": 6, "windows_per_subject": 2},
         "TurkishEpilepsyDataModule": {"n_subjects": 10, "windows_per_subject": 2},
         "DODHDataModule": {"n_subjects": 6, "windows_per_subject": 4}}


class Witness:
    """The DataModule's own reader, noting ``{window digest: subject}`` of every window it yields."""

    def __init__(self, reader) -> None:
        self.reader, self.spec, self.owner, self.recording_owner = reader, reader.spec, {}, {}

    def config(self) -> dict:
        return self.reader.config()

    def iter_blocks(self):
        for block in self.reader.iter_blocks():
            self.recording_owner[str(block.recording)] = int(block.subject)
            for window in block.x:
                key = window_digest(window)
                assert self.owner.setdefault(key, int(block.subject)) == int(block.subject), (
                    "two people, one window"
                )
            yield block


@pytest.mark.parametrize("name", CORPORA)
def test_one_person_never_reaches_two_splits(name: str, tmp_path: Path) -> None:
    cls = getattr(datamodules, name)
    if name == "MASSSS3DataModule":
        pytest.skip("MASS-SS3's fold lists need its 62 subjects; its SPD path is SleepEDFSPDDataModule's, "
                    "checked here")
    dm = cls(synthetic=True, normalization="none", cache_dir=str(tmp_path), batch_size=512,
             synthetic_options=SMALL.get(name, {"windows_per_subject": 3}))
    witness = Witness(dm.reader())
    dm.reader = lambda: witness  # the cache is built once, from these blocks
    dm.setup()
    by_split = {}
    for split in SPLITS:
        loader = {"train": dm.train_dataloader, "val": dm.val_dataloader, "test": dm.test_dataloader}[split]()
        index = np.sort(np.concatenate([batch["index"].numpy() for batch in loader]))
        if isinstance(dm, SPDDataModule):
            names = [dm.cache.recording_names[r] for r in np.asarray(dm.cache.recordings[index])]
            by_split[split] = {witness.recording_owner[n] for n in names}
        else:
            by_split[split] = {witness.owner[window_digest(w)] for w in np.asarray(dm.cache.signals[index])}
    people = set(witness.recording_owner.values())
    assert_each_person_in_one_split(by_split, people & set().union(*by_split.values()))
