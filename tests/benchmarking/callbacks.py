"""Callbacks the benchmark tests hand to cells through ``fit_args`` (one ``trainer.callbacks+`` each)."""

from __future__ import annotations

from tests.helpers import PauseForKill, RecordEpochs


class PauseForKillThenRecordEpochs(PauseForKill, RecordEpochs):
    """:class:`~tests.helpers.PauseForKill`, and at the end of a fit ``epochs_trained.json`` in the run
    directory (:class:`~tests.helpers.RecordEpochs`): the epochs in which THIS process ran training batches
    (a resumed fit starts at the checkpoint's next epoch; a fresh restart starts at 0)."""

    def __init__(self, seed: int, epoch: int = 1, seconds: float = 120.0) -> None:
        PauseForKill.__init__(self, seed, epoch, seconds)
        RecordEpochs.__init__(self)
