"""SD-Former's two-phase training recipe (Sharma, Secs. 4 and 6.1) as one Lightning run.

The paper trains in two phases:

* **Phase 1** (up to ``phase1_epochs = 50``) minimises the composite objective of Sec. 4,
  ``L = L_task + l_recon L_recon + l_dep L_dep + l_dag L_dag + l_sparse L_sparse`` with
  ``l = (0.1, 0.1, 0.5, 0.01)`` (Sec. 6.1); the four terms come unweighted from
  :meth:`biosig_lightning.models.sdformer.SDFormer.forward_with_aux`.
* **Phase 2** (up to ``phase2_epochs = 30``) is "classification-only refinement": ``L_task``
  alone. The graph keeps learning from the task loss through the straight-through
  gradient (the model has no phase switch of its own).

Optimisation (Sec. 6.1): AdamW, lr ``1e-3``, weight decay ``1e-2``, cosine decay after a
5-epoch linear warm-up, gradient clipping at norm 1.0 (``trainer.gradient_clip_val``),
early stopping, checkpoint selection by validation AUROC on CHB-MIT and validation macro
F1 elsewhere (``monitor``). There is no public code, so what the paper leaves open is
read as follows.

* **One run, two phases.** The task switches itself at the end of a training epoch (after
  that epoch's validation): the switch happens when phase 1 reaches ``phase1_epochs``
  epochs or when its own early stopping fires (``early_stopping_patience`` epochs without
  a strict improvement of ``monitor``, Lightning's ``EarlyStopping`` rule). Phase 2 then
  has its own early stopping with the same patience, and the task stops training when it
  fires or when phase 2 reaches ``phase2_epochs``. ``trainer.max_epochs`` is only an outer
  cap (set it to ``phase1_epochs + phase2_epochs``); a smaller one cuts the recipe short,
  with a warning. Lightning's ``EarlyStopping`` is not used, because its stop in phase 1
  must become a switch.
* **Fresh optimiser and schedule per phase.** Each phase gets a new AdamW (no moment
  estimates carried over) and its own warm-up + cosine schedule spanning that phase's
  epoch budget; ``phase2_warmup_epochs`` defaults to ``warmup_epochs`` (5), because the
  warm-up exists to keep a fresh Adam's first, poorly estimated steps small, which holds
  again at the restart. The schedule is laid out over the phase's *maximum* length, so an
  early switch leaves phase 1's cosine unfinished, as with any early stopping.
* **Phase 2 starts from phase 1's best weights** (``phase2_init = "best"``, by
  ``monitor``): when phase 1 ends by early stopping, its last weights are ``patience``
  epochs past the best and, by the stopping rule itself, worse on validation, so refining
  them would start from a state the recipe has already rejected. ``"last"`` keeps the
  final phase-1 weights (the reading where phase 2 simply continues). The best weights are
  held in memory (and in checkpoints while phase 1 runs), independent of the checkpoint
  callback; a run without validation has no best and continues from the last weights.
* **Model selection across both phases.** The checkpoint tested at the end is the best by
  ``monitor`` over the whole run, so a phase-1 model is kept when refinement does not beat
  it on validation.
* **Resume.** The phase, its first epoch, its early-stopping state and the phase-1 best
  weights are saved in every checkpoint (key ``"sdformer_phase"``) and restored by
  ``--ckpt_path last``; the schedule reads the phase when it is evaluated, so the restored
  optimiser and scheduler continue the right phase.
* **Graph density.** ``{train,val,test}/edge_density`` (the fraction of the ``M (M - 1)``
  ordered node pairs that are edges, batch mean) is logged; ``test/edge_density`` lands in
  ``results.json``. The checkpoint stores the validation density of its epoch.
* **Random-graph control** (Sec. 8: "random graphs with matched sparsity"). The
  ``graph="random"`` backbone draws a fixed random DAG with ``graph_density``. To match
  the learned graph, ``graph_density_from`` names a finished learned SD-Former run (its
  directory, whose ``checkpoints/best*.ckpt`` is read, or a checkpoint file); at the start
  of ``fit`` the backbone's graph is redrawn with exactly
  ``round(d M (M - 1))`` edges, ``d`` the validation edge density of that run's selected
  checkpoint, with seed ``random_graph_seed``. Validation, not test, windows measure ``d``
  so the control's configuration never looks at test data.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, EarlyStopping
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from biosig_lightning.models.sdformer import random_dag
from biosig_lightning.tasks.classification import ClassificationTask, warmup_cosine

__all__ = ["AUX_TERMS", "SDFormerTask", "learned_edge_density"]

#: the auxiliary terms of Sec. 4, in the order of the objective
AUX_TERMS = ("recon", "dep", "dag", "sparse")
_CKPT_KEY = "sdformer_phase"


def _checkpoint_file(path: Path) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise ValueError(f"graph_density_from: {path} does not exist (expected a learned SD-Former run "
                         "directory or its checkpoint file)")
    found = sorted(path.glob("checkpoints/best*.ckpt"))
    if len(found) != 1:
        raise ValueError(f"graph_density_from: expected exactly one checkpoints/best*.ckpt under {path}, "
                         f"found {len(found)}")
    return found[0]


def learned_edge_density(path: str | Path) -> tuple[float, int]:
    """``(density, n_nodes)`` of a finished learned-graph SD-Former run.

    ``path`` is the run directory (its single ``checkpoints/best*.ckpt`` is read) or a
    checkpoint file written by :class:`SDFormerTask`. ``density`` is the mean validation
    edge density of the epoch that checkpoint was saved in (the selected model).
    """
    ckpt = _checkpoint_file(Path(path).expanduser())
    state = torch.load(ckpt, map_location="cpu", weights_only=True).get(_CKPT_KEY)
    if not isinstance(state, dict) or state.get("val_edge_density") is None:
        raise ValueError(f"graph_density_from: {ckpt} holds no validation edge density (not a checkpoint of an "
                         "SDFormerTask run that validated)")
    if state.get("graph") != "learned":
        raise ValueError(f"graph_density_from: {ckpt} is a graph={state.get('graph')!r} run; the density must "
                         "come from a learned-graph SD-Former")
    return float(state["val_edge_density"]), int(state["n_nodes"])


class SDFormerTask(ClassificationTask):
    """Two-phase SD-Former training: composite objective, then classification-only refinement.

    Args:
        backbone: an :class:`~biosig_lightning.models.sdformer.SDFormer` (anything with
            ``forward_with_aux(x)`` returning logits and the four auxiliary terms).
        n_outputs, optimizer, lr, weight_decay, betas, scheduler, min_lr_ratio,
            label_smoothing, monitor, mode: as :class:`ClassificationTask` (paper: AdamW,
            1e-3, 1e-2, cosine; ``monitor`` ``val/auroc`` on CHB-MIT, ``val/f1`` otherwise).
        warmup_epochs: linear warm-up of phase 1 (paper: 5).
        early_stopping_patience: per-phase patience in epochs; ``None`` ends each phase at
            its epoch cap only.
        lambda_recon, lambda_dep, lambda_dag, lambda_sparse: phase-1 weights of the
            auxiliary terms (paper: 0.1, 0.1, 0.5, 0.01); zero weights are ablations.
        phase1_epochs, phase2_epochs: maximum epochs of each phase (paper: 50, 30).
            ``phase2_epochs = 0`` trains phase 1 only.
        phase2_init: ``"best"`` (phase 1's best weights by ``monitor``) or ``"last"``.
        phase2_warmup_epochs: warm-up of phase 2's fresh schedule (``None``: ``warmup_epochs``).
        graph_density_from: learned SD-Former run (directory or checkpoint) whose
            validation edge density the ``graph="random"`` backbone is redrawn to match.
        random_graph_seed: seed of that redrawn random DAG.
    """

    def __init__(
        self,
        backbone: nn.Module,
        n_outputs: int = 2,
        optimizer: Literal["adamw", "adam"] = "adamw",
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        scheduler: Literal["cosine", "none"] = "cosine",
        warmup_epochs: float = 5.0,
        min_lr_ratio: float = 0.0,
        label_smoothing: float = 0.0,
        monitor: str = "val/f1",
        mode: Literal["max", "min"] = "max",
        early_stopping_patience: int | None = 10,
        lambda_recon: float = 0.1,
        lambda_dep: float = 0.1,
        lambda_dag: float = 0.5,
        lambda_sparse: float = 0.01,
        phase1_epochs: int = 50,
        phase2_epochs: int = 30,
        phase2_init: Literal["best", "last"] = "best",
        phase2_warmup_epochs: float | None = None,
        graph_density_from: str | None = None,
        random_graph_seed: int = 0,
    ) -> None:
        super().__init__(backbone=backbone, n_outputs=n_outputs, optimizer=optimizer, lr=lr,
                         weight_decay=weight_decay, betas=betas, scheduler=scheduler, warmup_epochs=warmup_epochs,
                         min_lr_ratio=min_lr_ratio, label_smoothing=label_smoothing, monitor=monitor, mode=mode,
                         early_stopping_patience=early_stopping_patience)
        if not callable(getattr(backbone, "forward_with_aux", None)):
            raise TypeError(f"SDFormerTask needs a backbone with forward_with_aux(x) (an SDFormer), "
                            f"got {type(backbone).__name__}")
        weights = dict(recon=lambda_recon, dep=lambda_dep, dag=lambda_dag, sparse=lambda_sparse)
        for name, value in weights.items():
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"model.init_args.lambda_{name} must be >= 0, got {value}")
        if not isinstance(phase1_epochs, int) or phase1_epochs < 1:
            raise ValueError(f"model.init_args.phase1_epochs must be a positive integer, got {phase1_epochs!r}")
        if not isinstance(phase2_epochs, int) or phase2_epochs < 0:
            raise ValueError(f"model.init_args.phase2_epochs must be an integer >= 0, got {phase2_epochs!r}")
        if phase2_init not in ("best", "last"):
            raise ValueError(f"model.init_args.phase2_init must be 'best' or 'last', got {phase2_init!r}")
        if early_stopping_patience is not None and early_stopping_patience < 0:
            raise ValueError(f"model.init_args.early_stopping_patience must be >= 0 or null, "
                             f"got {early_stopping_patience}")
        if graph_density_from is not None and getattr(backbone, "graph", None) != "random":
            raise ValueError("model.init_args.graph_density_from matches the density of a random graph: set "
                             "model.init_args.backbone.init_args.graph: random")
        self.aux_weights = weights
        # phase state (saved in checkpoints)
        self.phase = 1
        self.phase_start_epoch = 0
        self._best: float | None = None
        self._wait = 0
        self._phase1_best_state: dict[str, torch.Tensor] | None = None
        self._validated = False
        self._val_edge_density: float | None = None
        self.matched_graph_density: float | None = None
        self._steps_per_epoch = 1

    # ---- objective ---------------------------------------------------------------------------
    def loss_weights(self) -> dict[str, float]:
        """Weights of the auxiliary terms in the current phase (all zero in phase 2)."""
        if self.phase == 1:
            return dict(self.aux_weights)
        return dict.fromkeys(AUX_TERMS, 0.0)

    def training_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        out = self.backbone.forward_with_aux(batch["x"])
        task = F.cross_entropy(out.logits, batch["y"], label_smoothing=self.hparams.label_smoothing)
        terms = out.losses()
        loss = task
        for name, weight in self.loss_weights().items():
            # a zero-weight term is left out rather than multiplied by 0: an overflowing
            # acyclicity value (inf) times 0 would turn the loss into NaN
            if weight:
                loss = loss + weight * terms[name]
        extra = {"task_loss": task.detach(), **{k: v.detach() for k, v in terms.items()},
                 "edge_density": out.edge_density.detach(),
                 "phase": torch.tensor(float(self.phase), device=task.device)}
        return loss, out.logits, extra

    # ---- graph density in evaluation ----------------------------------------------------------
    def _edge_density(self, x: torch.Tensor) -> torch.Tensor:
        bb = self.backbone
        if getattr(bb, "inferencer", None) is None:
            adjacency = bb.fixed_adjacency.unsqueeze(0)
        else:
            adjacency = bb.infer_graph(bb.tokenizer(x)[0])[0]
        m = adjacency.shape[-1]
        return (adjacency.detach() > 0.5).float().sum(dim=(-2, -1)).mean() / max(m * (m - 1), 1)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().validation_step(batch, batch_idx)
        self.log("val/edge_density", self._edge_density(batch["x"]), on_epoch=True, sync_dist=True,
                 batch_size=batch["y"].shape[0])
        return loss

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().test_step(batch, batch_idx)
        self.log("test/edge_density", self._edge_density(batch["x"]), on_epoch=True, sync_dist=True,
                 batch_size=batch["y"].shape[0])
        return loss

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        if not self.trainer.sanity_checking:
            self._validated = True

    # ---- optimisation --------------------------------------------------------------------------
    def phase_epochs(self, phase: int | None = None) -> int:
        """Epoch budget of ``phase`` (default: the current one)."""
        return self.hparams.phase1_epochs if (phase or self.phase) == 1 else self.hparams.phase2_epochs

    def lr_factor(self, step: int) -> float:
        """LR multiplier at ``step`` of the current phase: warm-up, then cosine over the phase budget."""
        hp = self.hparams
        warmup_epochs = hp.warmup_epochs
        if self.phase == 2 and hp.phase2_warmup_epochs is not None:
            warmup_epochs = hp.phase2_warmup_epochs
        total = max(1, self.phase_epochs() * self._steps_per_epoch)
        warmup = int(round(warmup_epochs * self._steps_per_epoch))
        return warmup_cosine(step, warmup, total, hp.min_lr_ratio)

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        opt = self.build_optimizer()
        if hp.scheduler == "none":
            return opt
        if hp.scheduler != "cosine":
            raise ValueError(f"model.init_args.scheduler must be 'cosine' or 'none', got {hp.scheduler!r}")
        trainer = self.trainer
        _ = trainer.estimated_stepping_batches  # makes Lightning load the train loader and count its batches
        batches = trainer.num_training_batches
        if not math.isfinite(batches):
            raise ValueError("SDFormerTask's per-phase cosine schedule needs a train loader of known length")
        self._steps_per_epoch = max(1, math.ceil(batches / trainer.accumulate_grad_batches))
        # the lambda reads the phase when called, so a scheduler restored from a checkpoint
        # continues the phase it was saved in whatever the restore order
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: self.lr_factor(step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_callbacks(self) -> list[Callback]:
        # early stopping is per phase and done by this task (a phase-1 stop is a switch)
        return [cb for cb in super().configure_callbacks() if not isinstance(cb, EarlyStopping)]

    # ---- phases -------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if stage == "fit" and self.hparams.graph_density_from is not None:
            self._match_random_graph(self.hparams.graph_density_from)

    def _match_random_graph(self, source: str) -> None:
        density, n_nodes = learned_edge_density(source)
        bb = self.backbone
        if n_nodes != bb.n_nodes:
            raise ValueError(f"graph_density_from: {source} has a {n_nodes}-node graph, this backbone "
                             f"{bb.n_nodes} nodes (same corpus and band_pooling expected)")
        if density > 0.5:
            raise ValueError(f"graph_density_from: the learned graph of {source} has density {density:.4f} > 0.5, "
                             "more than any DAG can match")
        graph = random_dag(bb.n_nodes, density, self.hparams.random_graph_seed)
        bb.fixed_adjacency.copy_(graph.to(bb.fixed_adjacency))
        self.matched_graph_density = density
        rank_zero_info(f"random graph redrawn to the learned density {density:.4f} of {source}: "
                       f"{int(graph.sum())} edges on {bb.n_nodes} nodes")

    def on_fit_start(self) -> None:
        budget = self.hparams.phase1_epochs + self.hparams.phase2_epochs
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and 0 <= max_epochs < budget:
            rank_zero_warn(f"trainer.max_epochs={max_epochs} is below phase1_epochs + phase2_epochs = {budget}: "
                           "the two-phase recipe will be cut short")

    def on_train_epoch_start(self) -> None:
        self._validated = False

    def on_train_epoch_end(self) -> None:
        # runs after this epoch's validation and before the checkpoint callbacks, so a
        # checkpoint of the switch epoch already holds the new phase
        density = self.trainer.callback_metrics.get("val/edge_density")
        if self._validated and density is not None:
            self._val_edge_density = float(density)
        improved = self._update_early_stopping()
        if self.phase == 1 and improved and self.hparams.phase2_init == "best":
            self._phase1_best_state = {k: v.detach().to("cpu", copy=True)
                                       for k, v in self.backbone.state_dict().items()}
        patience = self.hparams.early_stopping_patience
        exhausted = self.current_epoch - self.phase_start_epoch + 1 >= self.phase_epochs()
        # Lightning's EarlyStopping rule: stop once `patience` validations in a row did not improve
        stalled = patience is not None and self._wait > 0 and self._wait >= patience
        if not (exhausted or stalled):
            return
        reason = "epoch cap" if exhausted else f"no {self.hparams.monitor} improvement in {patience} epochs"
        if self.phase == 1 and self.hparams.phase2_epochs > 0:
            self._start_phase2(reason)
        else:
            rank_zero_info(f"SD-Former phase {self.phase} ended after epoch {self.current_epoch} ({reason}); "
                           "training done")
            self.trainer.should_stop = True

    def _update_early_stopping(self) -> bool:
        """Track the best ``monitor`` value of the current phase; returns whether it improved."""
        if not self._validated:
            return False
        value = self.trainer.callback_metrics.get(self.hparams.monitor)
        if value is None:
            raise RuntimeError(f"SDFormerTask: monitor {self.hparams.monitor!r} was not logged in validation "
                               f"(logged: {sorted(self.trainer.callback_metrics)})")
        score = float(value)
        if math.isnan(score):
            better = False
        elif self._best is None:
            better = True
        else:
            better = score > self._best if self.hparams.mode == "max" else score < self._best
        if better:
            self._best, self._wait = score, 0
        else:
            self._wait += 1
        return better

    def _start_phase2(self, reason: str) -> None:
        if self.hparams.phase2_init == "best" and self._phase1_best_state is not None:
            self.backbone.load_state_dict(self._phase1_best_state)
        self._phase1_best_state = None
        self.phase = 2
        self.phase_start_epoch = self.current_epoch + 1
        self._best, self._wait = None, 0
        rank_zero_info(f"SD-Former phase 1 ended after epoch {self.current_epoch} ({reason}); phase 2 "
                       f"(classification only, fresh optimiser) starts from phase 1's {self.hparams.phase2_init} "
                       "weights")
        # a new optimiser with no moments and a new warm-up + cosine schedule
        self.trainer.strategy.setup_optimizers(self.trainer)

    # ---- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[_CKPT_KEY] = {
            "phase": self.phase,
            "phase_start_epoch": self.phase_start_epoch,
            "best": self._best,
            "wait": self._wait,
            "phase1_best_state": self._phase1_best_state,
            "val_edge_density": self._val_edge_density,
            "matched_graph_density": self.matched_graph_density,
            "graph": getattr(self.backbone, "graph", None),
            "n_nodes": getattr(self.backbone, "n_nodes", None),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get(_CKPT_KEY)
        if state is None:
            return  # weights from another task: start in phase 1
        self.phase = int(state["phase"])
        self.phase_start_epoch = int(state["phase_start_epoch"])
        self._best = state["best"]
        self._wait = int(state["wait"])
        best_state = state.get("phase1_best_state")
        self._phase1_best_state = copy.copy(best_state) if best_state is not None else None
        self._val_edge_density = state.get("val_edge_density")
        self.matched_graph_density = state.get("matched_graph_density")
