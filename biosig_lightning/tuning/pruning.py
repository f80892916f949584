"""The Lightning callback that reports a trial's validation metric to Optuna and prunes on its word."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.tuning.errors import FatalTrialError, TuneError
from biosig_lightning.tuning.storage import open_storage

#: written into every trial's run directory when it starts training (``biosig report`` knows the name)
TRIAL_MARKER = "tune_trial.json"


class OptunaPruning(Callback):
    """Reports ``metric`` to the trial after each validation epoch and prunes on the pruner's word.

    Also keeps the best value seen (by ``direction``), the objective when no checkpoint callback
    monitors ``metric``.

    A trial may itself train with several processes (``--trainer.strategy ddp_spawn
    --trainer.devices 2``). Then only rank 0 talks to the study (one report per epoch, not one per
    process), its prune decision is broadcast so every rank stops at the same epoch, and the
    decision and best value travel back to the tuning process in ``callback_metrics``
    (``optuna/pruned_epoch``, ``optuna/best``), which Lightning returns from spawned workers. The
    callback is pickled into spawned workers without its ``Trial`` (whose storage holds a
    database connection); a worker reopens the trial from ``storage_url``.

    A trial that another worker has failed meanwhile (its heartbeat looked lost) cannot take reports
    any more: then every rank stops after this epoch, as for a prune, and ``optuna/taken_over_epoch``
    tells the tuning process, which ends the trial without telling the study
    (:class:`~.coordination.TrialTakenOver`).
    """

    def __init__(self, trial: optuna.Trial, metric: str, direction: str,
                 storage_url: str | None = None) -> None:
        self.trial: optuna.Trial | None = trial
        self.metric, self.direction, self.storage_url = metric, direction, storage_url
        self._study_name, self._trial_id = trial.study.study_name, trial._trial_id
        self._trial_number = getattr(trial, "number", None)
        self.best: float | None = None
        self.taken_over_epoch: int | None = None  # the epoch after which another worker's FAIL was seen

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["trial"] = None
        return state

    def _trial(self) -> optuna.Trial:
        if self.trial is None:
            if self.storage_url is None:
                raise TuneError("OptunaPruning was copied into another process without a storage URL")
            study = optuna.load_study(study_name=self._study_name, storage=open_storage(self.storage_url))
            self.trial = optuna.trial.Trial(study, self._trial_id)
        return self.trial

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # a trial's run ends without results.json (tune scores it on validation); this file says so, and
        # `biosig report` does not list the run as an interrupted fit to resume
        log_dir = trainer.log_dir  # on every rank: under DDP, Trainer.log_dir is a broadcast
        if trainer.is_global_zero and log_dir:
            atomic_write_json(Path(log_dir) / TRIAL_MARKER,
                              {"study": self._study_name, "trial": self._trial_number})

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        logged = trainer.callback_metrics.get(self.metric)
        if logged is None:
            raise FatalTrialError(f"--metric {self.metric!r} was not logged; logged: "
                                  f"{sorted(trainer.callback_metrics)}")
        value = float(logged)
        epoch = trainer.current_epoch
        if math.isfinite(value) and (
            self.best is None or (value > self.best if self.direction == "maximize" else value < self.best)
        ):
            self.best = value
        decision = ""
        if trainer.is_global_zero:
            trial = self._trial()
            try:
                trial.report(value, step=epoch)
                decision = "prune" if trial.should_prune() else ""
            except optuna.exceptions.UpdateFinishedTrialError:
                decision = "taken over"  # another worker failed this trial: it ends here, untold
        if trainer.world_size > 1:
            decision = str(trainer.strategy.broadcast(decision, src=0))
        if self.best is not None:
            trainer.callback_metrics["optuna/best"] = torch.tensor(self.best)
        if decision == "taken over":
            self.taken_over_epoch = epoch
            trainer.callback_metrics["optuna/taken_over_epoch"] = torch.tensor(epoch)
            trainer.should_stop = True  # every rank ends the epoch normally: checkpoints and logs stay
            return
        if not decision:
            return
        if trainer.world_size == 1:
            raise optuna.TrialPruned(f"pruned at epoch {epoch}: {self.metric}={value:.4f}")
        # an exception in one spawned rank would leave the others waiting in a collective
        trainer.callback_metrics["optuna/pruned_epoch"] = torch.tensor(epoch)
        trainer.should_stop = True


