"""The objective of a study: one fresh ``BiosigCLI`` run per trial, scored by its best validation metric."""

from __future__ import annotations

import contextlib
import io
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import optuna
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from biosig_lightning.runs.biosig_cli import BiosigCLI
from biosig_lightning.tuning.coordination import TrialTakenOver, worker_identity
from biosig_lightning.tuning.errors import FatalTrialError, TrialPreempted, TuneError
from biosig_lightning.tuning.pruning import OptunaPruning
from biosig_lightning.tuning.search_space import override_args, parser_reason, suggest
from biosig_lightning.tuning.trial_setup import check_launcher

# biosig's own argv is not LightningCLI's: the args it gets are the complete fit arguments
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")


class Objective:
    """The Optuna objective: one fresh BiosigCLI run per trial, scored by best ``metric``.

    ``fatal`` holds the first :class:`FatalTrialError` a trial hit (recorded on that trial as
    usual), which :func:`tune` turns into the worker's own error instead of trying again.
    ``preempted`` is the number of a trial stopped by SIGTERM (Lightning's ``SIGTERMException``):
    FAIL, and enqueued again with its parameters (user attribute ``retry_of``), so that a rerun of the
    command runs that configuration again before sampling new ones.
    """

    def __init__(self, config_args: list[str], space: dict[str, BaseDistribution], metric: str,
                 direction: str,
                 n_trials: int, runs_dir: Path, storage_url: str | None = None) -> None:
        self.config_args, self.space, self.metric, self.direction = config_args, space, metric, direction
        self.n_trials, self.runs_dir, self.storage_url = n_trials, runs_dir, storage_url
        self.worker = worker_identity()["worker"]
        self.fatal: FatalTrialError | None = None
        self.preempted: int | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        ahead = [t for t in trial.study.get_trials(deepcopy=False,
                                                   states=(TrialState.COMPLETE, TrialState.RUNNING))
                 if t.number < trial.number]
        if len(ahead) >= self.n_trials:
            trial.set_user_attr("skipped",
                                f"{len(ahead)} earlier trials already fill --n-trials {self.n_trials}")
            raise Surplus()
        for key, value in worker_identity().items():  # host:pid, and when that process started
            trial.set_user_attr(key, value)
        cli: BiosigCLI | None = None
        params: dict[str, Any] = {}
        try:
            params = {key: suggest(trial, key, dist) for key, dist in self.space.items()}
            args = [*self.config_args, *override_args(params),
                    f"--run.save_dir={self.runs_dir}", f"--run.name=trial_{trial.number}",
                    f"--run.group={trial.study.study_name}"]
            cli = trial_cli(args)
            check_launcher(cli.trainer, cli.trainer.strategy.__class__.__name__)
            pruning = OptunaPruning(trial, self.metric, self.direction, storage_url=self.storage_url)
            cli.trainer.callbacks.append(pruning)  # type: ignore[attr-defined]  # set by Lightning's connector
            trial.set_user_attr("run_dir", str(cli.trainer.log_dir))
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            returned = cli.trainer.callback_metrics  # from rank 0 of a spawned multi-process trial too
            if "optuna/taken_over_epoch" in returned:
                raise TrialTakenOver(trial.number,
                                     f"stopped after epoch {int(returned['optuna/taken_over_epoch'])}",
                                     cli.trainer.log_dir)
            if "optuna/pruned_epoch" in returned:
                raise optuna.TrialPruned(f"pruned at epoch {int(returned['optuna/pruned_epoch'])}")
            ckpt = next((cb for cb in cli.trainer.checkpoint_callbacks
                         if isinstance(cb, ModelCheckpoint) and cb.monitor == self.metric), None)
            score: Any  # the checkpoint's tensor, or a float from the metrics
            score = ckpt.best_model_score if ckpt is not None and ckpt.best_model_score is not None else None
            if score is None:
                score = returned.get("optuna/best", pruning.best)
            if score is None or not math.isfinite(float(score)):
                raise TuneError(f"trial {trial.number}: no finite {self.metric} was reached")
            if ckpt is not None and ckpt.best_model_path:
                trial.set_user_attr("best_checkpoint", ckpt.best_model_path)
            if trial.storage.get_trial(trial._trial_id).state != TrialState.RUNNING:
                raise TrialTakenOver(trial.number, "finished training", cli.trainer.log_dir)
            return float(score)
        except (optuna.TrialPruned, TrialTakenOver):
            raise
        except optuna.exceptions.UpdateFinishedTrialError:  # failed by another worker after its last epoch
            raise TrialTakenOver(trial.number, "finished training",
                                 cli.trainer.log_dir if cli else None) from None
        except SIGTERMException:  # a SystemExit: Optuna would leave the trial RUNNING and the process exit 0
            self.preempted = trial.number
            trial.set_user_attr("error", "preempted (SIGTERM); queued again with the same parameters")
            trial.study.enqueue_trial(params, user_attrs={"retry_of": trial.number})
            raise TrialPreempted(f"trial {trial.number} preempted (SIGTERM)") from None
        except BaseException as err:  # recorded on the trial; optuna marks it FAIL
            try:
                trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:2000])
            except optuna.exceptions.UpdateFinishedTrialError:
                raise TrialTakenOver(trial.number, f"ended by {type(err).__name__}: {err}",
                                     cli.trainer.log_dir if cli else None) from None
            if isinstance(err, FatalTrialError):
                self.fatal = self.fatal or err
            raise
        finally:
            if cli is not None:
                finish_wandb(cli.trainer, trial, params)


def trial_cli(args: list[str]) -> BiosigCLI:
    """The trial's CLI; a value the parser rejects is an error of this trial, not the end of the worker."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            cli = BiosigCLI(args=args, run=False)
    except SystemExit as exc:  # jsonargparse exits; Optuna would leave the trial RUNNING
        reason = exc.code if isinstance(exc.code, str) else parser_reason(err.getvalue())
        raise TuneError(f"biosig fit rejected the trial's config: {reason}") from None
    sys.stderr.write(err.getvalue())  # warnings of a config that parsed stay visible
    return cli


def make_objective(config_args: list[str], space: dict[str, BaseDistribution], metric: str, direction: str,
                   n_trials: int, runs_dir: Path, storage_url: str | None = None) -> Objective:
    """The trial function :func:`tune` optimises (see :class:`Objective`)."""
    return Objective(config_args, space, metric, direction, n_trials, runs_dir, storage_url)


def finish_wandb(trainer: Trainer, trial: optuna.Trial, params: dict[str, Any]) -> None:
    """Close the trial's wandb run (else the next trial would reuse it), tagged with its parameters."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            try:
                run = lg.experiment
                run.summary["optuna/trial"] = trial.number
                run.config.update({"optuna_params": params}, allow_val_change=True)
                run.finish()
            except Exception as err:  # a dashboard problem must not fail the trial
                print(f"wandb: could not close trial {trial.number}'s run: {err}", file=sys.stderr)


class Surplus(Exception):
    """A trial started after the study's N slots were taken by other workers."""

