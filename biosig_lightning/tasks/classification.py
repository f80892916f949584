"""The generic classification LightningModule: any nn.Module backbone, one recipe.

Paper-specific recipes (two-phase SD-Former training, domain-generalisation losses,
robust objectives) subclass :class:`ClassificationTask` and override
:meth:`ClassificationTask.training_loss`; metrics, optimisation, checkpoint selection
and early stopping stay here, so every method is evaluated the same way.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.parsing import AttributeDict
from torch import nn

from biosig_lightning.atomic_io import atomic_write_bytes
from biosig_lightning.metrics import (
    DEFAULT_THRESHOLD,
    PositiveScores,
    best_f1_threshold,
    build_extra_metrics,
    build_metrics,
    threshold_metrics,
)
from biosig_lightning.tasks.compile import CompileSetting, check_compile_options, compile_backbone
from biosig_lightning.tasks.optimizers import multi_tensor_optimizer


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """LR multiplier: linear warm-up from ~0 to 1 over ``warmup_steps``, then cosine to ``min_ratio``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _first_of_each_window(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rows of ``outputs`` with the first occurrence of each ``index`` (window id), in index order.

    The DistributedSampler pads uneven shards by repeating windows from the start of the
    (unshuffled) test set; the repeats carry the same window index and prediction.
    """
    index = outputs["index"]
    uniq, inverse = torch.unique(index, sorted=True, return_inverse=True)
    first = torch.full((uniq.numel(),), index.numel(), dtype=torch.long, device=index.device)
    first.scatter_reduce_(0, inverse, torch.arange(index.numel(), device=index.device), reduce="amin")
    return {k: v[first] for k, v in outputs.items()}


class ClassificationTask(LightningModule):
    """Cross-entropy classification of windows with a pluggable backbone.

    Args:
        backbone: any ``nn.Module`` mapping ``x`` to logits; LightningCLI fills its
            ``n_chans``/``n_outputs``/``n_times``/``sfreq`` from the DataModule.
        n_outputs: number of classes (linked from the DataModule).
        optimizer: ``adamw`` or ``adam``.
        lr, weight_decay, betas: optimiser settings.
        scheduler: ``cosine`` (per-step cosine decay after a linear warm-up) or ``none``.
        warmup_epochs: length of the linear warm-up, in epochs (fractions allowed).
        min_lr_ratio: final LR of the cosine schedule as a fraction of ``lr``.
        label_smoothing: cross-entropy label smoothing.
        monitor, mode: validation metric that selects the best checkpoint and drives early
            stopping (``val/f1``/``max`` by default; ``val/auroc``, ``val/loss``/``min``...).
        early_stopping_patience: epochs without improvement before stopping; ``None``
            switches early stopping off.
        eval_metrics: paper metrics added to the standard ones (see :mod:`biosig_lightning.metrics`):
            ``detection`` (decision threshold = best F1 on the validation PR curve, kept in
            the checkpoint as ``decision_threshold`` and reused on test: ``det_*`` keys),
            ``classification`` (``weighted_f1``...), ``sleep`` (``macro_f1``); ``default``
            adds none.
        early_stopping_min_delta: the least change of ``monitor`` that counts as an
            improvement for early stopping (BioFormer's authors' code: 1e-5).
        compile, compile_mode: ``torch.compile`` the backbone when the fit starts (``auto``, the
            default: on CUDA devices only; ``true``; ``false``), with ``torch.compile``'s ``mode``
            (``reduce-overhead`` adds CUDA graphs); see :mod:`biosig_lightning.tasks.compile`.
    """

    #: a recipe that is its own method around any backbone names itself here, so ``biosig report`` keeps
    #: its rows apart from the plain backbone's (``DCRNN +STDRO`` beside ``DCRNN``); None for plain training
    recipe_label: str | None = None
    #: save_hyperparameters() makes it an AttributeDict (Lightning types it as any MutableMapping)
    hparams: AttributeDict
    decision_threshold: torch.Tensor  # buffer of a binary task

    def __init__(
        self,
        backbone: nn.Module,
        n_outputs: int = 2,
        optimizer: Literal["adamw", "adam"] = "adamw",
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        scheduler: Literal["cosine", "none"] = "cosine",
        warmup_epochs: float = 0.0,
        min_lr_ratio: float = 0.0,
        label_smoothing: float = 0.0,
        monitor: str = "val/f1",
        mode: Literal["max", "min"] = "max",
        early_stopping_patience: int | None = 10,
        eval_metrics: Literal["default", "detection", "classification", "sleep"] = "default",
        early_stopping_min_delta: float = 0.0,
        compile: CompileSetting = "auto",  # noqa: A002 (the option's name in YAMLs)
        compile_mode: str | None = None,
    ) -> None:
        super().__init__()
        check_compile_options(compile, compile_mode)
        if early_stopping_min_delta < 0:
            raise ValueError(f"model.init_args.early_stopping_min_delta must be >= 0, got "
                             f"{early_stopping_min_delta}")
        if mode not in ("max", "min"):
            raise ValueError(f"model.init_args.mode must be 'max' or 'min', got {mode!r}")
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone
        self.n_outputs = n_outputs
        # validation and test metrics are computed once per epoch from every rank's gathered,
        # de-duplicated windows (:meth:`_score_epoch`), so they are never synced again
        self.val_metrics = build_metrics(n_outputs, prefix="val/", sync_on_compute=False)
        self.test_metrics = build_metrics(n_outputs, prefix="test/", sync_on_compute=False)
        self._init_eval_metrics(eval_metrics, n_outputs)
        self._eval_outputs: list[dict[str, torch.Tensor]] = []
        self.test_predictions: dict[str, torch.Tensor] | None = None

    def _init_eval_metrics(self, kind: str, n_outputs: int) -> None:
        self.eval_metrics = kind
        # filled once per epoch from the gathered, de-duplicated windows: never synced again
        self.val_extra = build_extra_metrics(kind, n_outputs, prefix="val/", sync_on_compute=False)
        self.test_extra = build_extra_metrics(kind, n_outputs, prefix="test/", sync_on_compute=False)
        if kind == "detection":
            self.val_scores, self.test_scores = (
                PositiveScores(sync_on_compute=False),
                PositiveScores(sync_on_compute=False),
            )
            # part of the state dict, so the best checkpoint carries the threshold of its own validation
            self.register_buffer("decision_threshold", torch.tensor(DEFAULT_THRESHOLD, dtype=torch.float64))

    def on_fit_start(self) -> None:
        """Compile what the training step runs when ``compile`` asks for it on this device (the model is on
        it now)."""
        super().on_fit_start()
        self.compile_for_fit()

    def compile_for_fit(self, setting: CompileSetting | None = None, backend: str = "inductor") -> None:
        """Compile, in place, the modules this task's steps call: the backbone.

        Args:
            setting: one of ``compile``'s values (``None``: the task's own).
            backend: ``torch.compile``'s (benchmarks and tests on a CPU).
        """
        setting = self.hparams.get("compile", "auto") if setting is None else setting
        compile_backbone(self.backbone, setting, self.hparams.get("compile_mode"), self.device, backend)

    # ---- forward and loss ------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def training_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     torch.Tensor, dict[str, torch.Tensor]]:
        """Loss of one training batch; returns ``(loss, logits, extra terms to log)``.

        Recipes that add auxiliary objectives override this method.
        """
        logits = self(batch["x"])
        loss = F.cross_entropy(logits, batch["y"], label_smoothing=self.hparams.label_smoothing)
        return loss, logits, {}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, extra = self.training_loss(batch)
        n = batch["y"].shape[0]
        acc = (logits.argmax(-1) == batch["y"]).float().mean()
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=n)
        self.log("train/acc", acc, on_step=False, on_epoch=True, batch_size=n)
        for key, value in extra.items():
            self.log(f"train/{key}", value, on_step=False, on_epoch=True, batch_size=n)
        return loss

    def _eval_step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["x"])
        losses = F.cross_entropy(logits.float(), batch["y"], reduction="none")
        # scored once per window at the epoch's end (_score_epoch): under DDP the DistributedSampler pads
        # uneven shards with repeated windows, which must count once in validation (checkpoint selection,
        # early stopping, the detection threshold) as in test
        self._eval_outputs.append({"probs": logits.detach().float().softmax(-1), "y": batch["y"],
                                   "subject": batch["subject"],
                                   "index": batch["index"], "loss": losses.detach()})
        return losses.mean()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._eval_step(batch, "test")

    def on_validation_epoch_start(self) -> None:
        self._eval_outputs = []

    def on_test_epoch_start(self) -> None:
        self._eval_outputs = []

    def on_validation_epoch_end(self) -> None:
        self._score_epoch("val")

    def on_test_epoch_end(self) -> None:
        windows = self._score_epoch("test")
        if windows is not None:
            self.test_predictions = {k: v.cpu() for k, v in windows.items()}
            self._save_test_predictions()

    def _epoch_windows(self) -> dict[str, torch.Tensor] | None:
        """This epoch's scored windows, every rank's, each window once (in index order under DDP)."""
        if not self._eval_outputs:
            return None
        local = {k: torch.cat([o[k] for o in self._eval_outputs]) for k in self._eval_outputs[0]}
        self._eval_outputs = []
        if self.trainer.world_size > 1:
            # every rank gets every rank's windows (the padded shards are of equal length)
            gathered = {k: cast(torch.Tensor, self.all_gather(v)) for k, v in local.items()}
            local = _first_of_each_window({k: v.reshape(-1, *v.shape[2:]) for k, v in gathered.items()})
        return local

    def _score_epoch(self, stage: str) -> dict[str, torch.Tensor] | None:
        """Log ``stage``'s metrics from the epoch's windows; returns them (without the losses).

        Every rank holds the same windows, so the metrics are computed locally and never synced
        (that would count them world_size times): one process and N processes log the same numbers.
        """
        windows = self._epoch_windows()
        if windows is None:
            return None
        losses = windows.pop("loss")
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        metrics.reset()
        metrics.update(windows["probs"], windows["y"])
        self.log_dict(metrics.compute())
        metrics.reset()
        self.log(f"{stage}/loss", losses.mean(), prog_bar=stage == "val")
        extra = self.val_extra if stage == "val" else self.test_extra
        if extra is not None:
            extra.update(windows["probs"], windows["y"])
        if self.eval_metrics == "detection":
            (self.val_scores if stage == "val" else self.test_scores).update(
                windows["probs"][:, 1], windows["y"]
            )
        self._log_extra(stage)
        extra_values = self.epoch_metrics(windows["probs"], windows["y"])
        if extra_values:
            self.log_dict({f"{stage}/{k}": v for k, v in extra_values.items()})
        return windows

    def epoch_metrics(self, probs: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Recipe-specific metrics of one epoch's de-duplicated windows (keys without the stage prefix)."""
        return {}

    def _log_extra(self, stage: str) -> None:
        """Log the opt-in metrics of ``stage``; on validation, tune the detection threshold first."""
        extra = self.val_extra if stage == "val" else self.test_extra
        if extra is not None:
            self.log_dict(extra.compute())
            extra.reset()
        if self.eval_metrics != "detection":
            return
        store = self.val_scores if stage == "val" else self.test_scores
        scores, target = store.compute()
        store.reset()
        trainer = self._trainer
        if stage == "val" and not (trainer is not None and trainer.sanity_checking):
            self.decision_threshold.fill_(best_f1_threshold(scores, target))
        values = threshold_metrics(scores, target, float(self.decision_threshold))
        self.log_dict({f"{stage}/{k}": float(v) for k, v in values.items()})

    def _save_test_predictions(self) -> None:
        # written from inside the (possibly spawned) rank 0 so the CLI can build the confusion
        # matrix and reliability diagram whatever the strategy
        log_dir = self.trainer.log_dir
        if not self.trainer.is_global_zero or not log_dir or self.test_predictions is None:
            return
        buf = io.BytesIO()
        arrays: dict[str, Any] = {k: v.numpy() for k, v in self.test_predictions.items()}  # (savez's stub)
        np.savez(buf, **arrays)
        atomic_write_bytes(Path(log_dir) / "test_predictions.npz", buf.getvalue())

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        probs = self(batch["x"]).float().softmax(-1)
        return {"probs": probs, "pred": probs.argmax(-1), "y": batch["y"], "subject": batch["subject"],
                "index": batch["index"]}

    # ---- optimisation ------------------------------------------------------------------------
    def build_optimizer(self) -> torch.optim.Optimizer:
        """The configured optimiser over all trainable parameters (also used by ``biosig profile``), fused
        where PyTorch has the kernel (:func:`~biosig_lightning.tasks.optimizers.multi_tensor_optimizer`)."""
        hp = self.hparams
        params = self.parameter_groups()
        classes = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}
        if hp.optimizer in classes:
            return multi_tensor_optimizer(classes[hp.optimizer], params, trainer=self._trainer, lr=hp.lr,
                                          weight_decay=hp.weight_decay, betas=tuple(hp.betas))
        raise ValueError(f"model.init_args.optimizer must be 'adamw' or 'adam', got {hp.optimizer!r}")

    def parameter_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups: one, every trainable parameter at ``lr``. A recipe that gives
        some parameters their own learning rate returns more (each group's ``lr`` over the task's)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad]}]

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        opt = self.build_optimizer()
        if hp.scheduler == "none":
            return opt
        if hp.scheduler != "cosine":
            raise ValueError(f"model.init_args.scheduler must be 'cosine' or 'none', got {hp.scheduler!r}")
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_schedule())
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def lr_schedule(self) -> Callable[[int], float]:
        """The LR multiplier per optimiser step of the cosine schedule (the trainer is attached):
        linear warm-up over ``warmup_epochs``, then cosine decay to ``min_lr_ratio`` over the whole fit.
        Recipes with their own schedule (SD-Former's phases) override this."""
        hp = self.hparams
        total = int(self.trainer.estimated_stepping_batches)
        max_epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        warmup = int(round(hp.warmup_epochs * total / max_epochs))
        return lambda step: warmup_cosine(step, warmup, total, hp.min_lr_ratio)

    def configure_callbacks(self) -> list[Callback]:
        hp = self.hparams
        # the metric name holds a "/", so it stays out of the file name (it would make a folder)
        callbacks: list[Callback] = [
            ModelCheckpoint(monitor=hp.monitor, mode=hp.mode, save_top_k=1,
                            filename="best-epoch{epoch:03d}", auto_insert_metric_name=False,
                            save_on_train_epoch_end=True),
            # its own callback: Lightning 2.6 refreshes save_last only in epochs that improved the
            # monitor, which would lose every later epoch on a crash. Saved at the end of the training
            # epoch (after its validation) so --ckpt_path last resumes with the next epoch.
            ModelCheckpoint(monitor=None, save_top_k=1, filename="last", enable_version_counter=False,
                            save_on_train_epoch_end=True),
        ]
        if hp.early_stopping_patience is not None:
            callbacks.append(EarlyStopping(monitor=hp.monitor, mode=hp.mode,
                                           patience=hp.early_stopping_patience,
                                           min_delta=hp.get("early_stopping_min_delta", 0.0)))
        return callbacks

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.backbone.parameters() if p.requires_grad)
