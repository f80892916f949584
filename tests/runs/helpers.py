"""A task the run-directory tests hand to ``biosig fit`` by class path."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from biosig_lightning.tasks import ClassificationTask


class BarrierTask(ClassificationTask):
    """:class:`ClassificationTask` that holds its fit in ``prepare_data`` until ``barrier_count``
    processes have arrived (a barrier on files in ``barrier_dir``).

    ``prepare_data`` runs after a fit has settled which run directory it uses and before its
    loggers create anything there, so two fits released together are two ``biosig fit`` started
    at the same moment, whatever the scheduler did before.
    """

    def __init__(self, backbone: Any, barrier_dir: str = "",
                 barrier_count: int = 2, **task_args: Any) -> None:
        super().__init__(backbone, **task_args)
        self.barrier_dir, self.barrier_count = Path(barrier_dir), barrier_count

    def prepare_data(self) -> None:
        self.barrier_dir.mkdir(parents=True, exist_ok=True)
        (self.barrier_dir / str(os.getpid())).touch()
        deadline = time.monotonic() + 120.0
        while len(list(self.barrier_dir.iterdir())) < self.barrier_count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"BarrierTask: fewer than {self.barrier_count} processes in "
                                   f"{self.barrier_dir}")
            time.sleep(0.02)
