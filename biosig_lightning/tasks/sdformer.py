"""SD-Former's two-phase training recipe (Sharma, Secs. 4 and 6.1) as one Lightning run.

The paper trains in two phases:

* **Phase 1** (up to ``phase1_epochs = 50``) minimises the composite objective of Sec. 4,
  ``L = L_task + l_recon L_recon + l_dep L_dep + l_dag L_dag + l_sparse L_sparse`` with
  ``l = (0.1, 0.1, 0.5, 0.01)`` (Sec. 6.1); the four terms come unweighted from
  :meth:`biosig_lightning.models.sdformer.SDFormer.forward_with_aux`.
* **Phase 2** (up to ``phase2_epochs = 30``) is "classification-only refinement": ``L_task``
  alone, with the graph path (tokenizer and inferencer) frozen (``phase2_graph``).

Optimisation (Sec. 6.1): AdamW, lr ``1e-3``, weight decay ``1e-2``, cosine decay after a
5-epoch linear warm-up, gradient clipping at norm 1.0 (``trainer.gradient_clip_val``),
early stopping, checkpoint selection by validation AUROC on CHB-MIT and validation macro
F1 elsewhere (``monitor``). There is no public code; how :class:`SDFormerTask` reads what the
paper leaves open (one run with two phases, a fresh optimiser per phase, phase 2 from phase 1's best
weights, the graph frozen in phase 2, model selection across phases, resume, the logged graph density
and acyclicity, the random-graph control) is in its docstring.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, EarlyStopping
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from biosig_lightning.models.modules.learned_graphs import notears_acyclicity, random_dag
from biosig_lightning.tasks.classification import ClassificationTask, warmup_cosine

if TYPE_CHECKING:
    from biosig_lightning.models.sdformer import SDFormer

__all__ = ["AUX_TERMS", "SDFormerTask", "learned_edge_density", "resolve_learned_run"]

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


def _is_learned_run(results: Path) -> bool:
    try:
        res = json.loads(results.read_text())
        backbone = res["config"]["model"]["init_args"]["backbone"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (
        res.get("model") == "SDFormer"
        and (backbone.get("init_args") or {}).get("graph", "learned") == "learned"
    )


def resolve_learned_run(run_dir: str | Path) -> Path:
    """The learned SD-Former run that ``graph_density_from: auto`` means for a random-graph run in
    ``run_dir``.

    ``run_dir`` is ``<parent>/<experiment>/<version>``. The *base experiment* is ``<experiment>``
    without its ``+random_graph*`` parts (``biosig repeat`` names a variant
    ``<base>+<override stem>``, so ``sdformer_sleepedf+random_graph`` -> ``sdformer_sleepedf``);
    an auto-named ``biosig fit`` run shares its experiment name with the learned run already.

    * ``biosig repeat`` layout (``<version>`` is ``seed_<s>``): the run of the same seed,
      ``<parent>/<base>/seed_<s>``, which must have finished (``results.json``). Each seed of
      the control is thus matched to the learned graph of the same seed.
    * otherwise (``biosig fit``, ``version_*``): the newest (by ``results.json`` time)
      finished learned-graph SD-Former run in ``<parent>/<base>/version_*``, this run aside.

    Raises ``ValueError`` naming where it looked when there is no such run.
    """
    run_dir = Path(run_dir)
    experiment, version, parent = run_dir.parent.name, run_dir.name, run_dir.parent.parent
    base = (
        "+".join(part for part in experiment.split("+") if not part.startswith("random_graph")) or experiment
    )
    hint = ("run the learned model first (same configs without random_graph.yaml), or set "
            "model.init_args.graph_density_from to its run directory")
    if version.startswith("seed_"):
        results = parent / base / version / "results.json"
        if not results.is_file():
            raise ValueError(f"graph_density_from: auto: no finished learned run at {results} (the same seed "
                             f"of the "
                             f"base experiment {base!r}); {hint}")
        if not _is_learned_run(results):
            raise ValueError(f"graph_density_from: auto: {results.parent} is not a learned-graph SD-Former "
                             f"run; {hint}")
        return results.parent
    found = [r for r in (parent / base).glob("version_*/results.json")
             if r.parent.resolve() != run_dir.resolve() and _is_learned_run(r)]
    if not found:
        raise ValueError(f"graph_density_from: auto: no finished learned-graph SD-Former run in "
                         f"{parent / base}/version_*/results.json; {hint}")
    return max(found, key=lambda r: r.stat().st_mtime).parent


def learned_edge_density(path: str | Path) -> tuple[float, int]:
    """``(density, n_nodes)`` of a finished learned-graph SD-Former run.

    ``path`` is the run directory (its single ``checkpoints/best*.ckpt`` is read) or a
    checkpoint file written by :class:`SDFormerTask`. ``density`` is the mean validation
    edge density of the epoch that checkpoint was saved in (the selected model).
    """
    ckpt = _checkpoint_file(Path(path).expanduser())
    state = torch.load(ckpt, map_location="cpu", weights_only=True).get(_CKPT_KEY)
    if not isinstance(state, dict) or state.get("val_edge_density") is None:
        raise ValueError(f"graph_density_from: {ckpt} holds no validation edge density (not a checkpoint of "
                         f"an "
                         "SDFormerTask run that validated)")
    if state.get("graph") != "learned":
        raise ValueError(f"graph_density_from: {ckpt} is a graph={state.get('graph')!r} run; the density "
                         f"must "
                         "come from a learned-graph SD-Former")
    return float(state["val_edge_density"]), int(state["n_nodes"])


class SDFormerTask(ClassificationTask):
    """Two-phase SD-Former training: composite objective, then classification-only refinement.

    What the paper leaves open is read as follows.

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
    * **The graph in phase 2** (``phase2_graph``). With ``"frozen"`` (default) the graph
      function ``x -> A(x)`` keeps the weights phase 1 ended with (its best, by
      ``phase2_init``): the tokenizer and the dependency inferencer stop requiring gradients (so
      the fresh phase-2 optimiser does not hold them) and stay in eval mode (no dropout, BatchNorm
      on its running statistics), so the graph of an input is fixed for the whole phase
      (:meth:`~biosig_lightning.models.sdformer.SDFormer.freeze_graph`); the transformer and the
      head refine. *Why:* the structure is what phase 1 learns under the DAG and sparsity
      penalties; phase 2 drops those penalties, and a graph still trained there is trained by the
      task alone. On the stand-ins a graph still trained in phase 2 turned dense and cyclic, and
      freezing the inferencer alone did not stop it (docs/papers/sdformer.md). We read
      "switches to classification-only refinement" as refining the classifier on the structure
      phase 1 learned, which is how the paper's introduction describes the protocol: it "separates
      structural representation learning from classifier refinement" (Sec. 1); the tokenizer is
      part of that structural representation (it makes the nodes the graph is inferred on).
      ``"learned"`` trains everything in phase 2 from the task loss alone (the literal reading
      where only the loss changes).
    * **Model selection across both phases.** The checkpoint tested at the end is the best by
      ``monitor`` over the whole run, so a phase-1 model is kept when refinement does not beat
      it on validation.
    * **Resume.** The phase, its first epoch, its early-stopping state and the phase-1 best
      weights are saved in every checkpoint (key ``"sdformer_phase"``) and restored by
      ``--ckpt_path last``; the schedule reads the phase when it is evaluated, so the restored
      optimiser and scheduler continue the right phase.
    * **Graph density and acyclicity.** ``{train,val,test}/edge_density`` (the fraction of the
      ``M (M - 1)`` ordered node pairs that are edges, batch mean) and ``{train,val,test}/dag``
      (NOTEARS ``h(A)`` of the hard graphs, batch mean; 0 iff every graph is a DAG) are logged
      each epoch; the test values land in ``results.json``. The checkpoint stores the
      validation density and ``h(A)`` of its epoch.
    * **Random-graph control** (Sec. 8: "random graphs with matched sparsity"). The
      ``graph="random"`` backbone draws a fixed random DAG with ``graph_density``. To match
      the learned graph, ``graph_density_from`` names a finished learned SD-Former run (its
      directory, whose ``checkpoints/best*.ckpt`` is read, or a checkpoint file); at the start
      of ``fit`` the backbone's graph is redrawn with exactly
      ``round(d M (M - 1))`` edges, ``d`` the validation edge density of that run's selected
      checkpoint, with seed ``random_graph_seed``. Validation, not test, windows measure ``d``
      so the control's configuration never looks at test data. ``graph_density_from: auto``
      (what ``experiments/sdformer/variants/random_graph.yaml`` sets) finds that run from this
      run's own directory (:func:`resolve_learned_run`): the same seed of the base experiment
      under ``biosig repeat``, the newest learned run of the same experiment under ``biosig fit``.

    Args:
        backbone: an :class:`~biosig_lightning.models.sdformer.SDFormer` (anything with
            ``forward_with_aux(x)`` returning logits and the four auxiliary terms).
        warmup_epochs: linear warm-up of phase 1 (paper: 5; :class:`ClassificationTask`'s default is 0).
        task_args: every other :class:`ClassificationTask` argument, passed on unchanged with its
            default: ``n_outputs``, ``optimizer``, ``lr``, ``weight_decay``, ``betas``, ``scheduler``,
            ``min_lr_ratio``, ``label_smoothing``, ``monitor``, ``mode`` (paper: AdamW, 1e-3, 1e-2,
            cosine; ``monitor`` ``val/auroc`` on CHB-MIT, ``val/f1`` otherwise) and
            ``early_stopping_patience``, here per phase (``None`` ends each phase at its epoch cap only).
        lambda_recon, lambda_dep, lambda_dag, lambda_sparse: phase-1 weights of the
            auxiliary terms (paper: 0.1, 0.1, 0.5, 0.01); zero weights are ablations.
        phase1_epochs, phase2_epochs: maximum epochs of each phase (paper: 50, 30).
            ``phase2_epochs = 0`` trains phase 1 only.
        phase2_init: ``"best"`` (phase 1's best weights by ``monitor``) or ``"last"``.
        phase2_warmup_epochs: warm-up of phase 2's fresh schedule (``None``: ``warmup_epochs``).
        phase2_graph: ``"frozen"`` (phase 1's graph inferencer is kept fixed in phase 2) or
            ``"learned"`` (it keeps training from the task loss); see above.
        graph_density_from: learned SD-Former run (directory or checkpoint) whose
            validation edge density the ``graph="random"`` backbone is redrawn to match, or
            ``"auto"``: the learned run of the same base experiment (:func:`resolve_learned_run`).
        random_graph_seed: seed of that redrawn random DAG.
    """

    backbone: SDFormer  # the interface this task uses (forward_with_aux, the graph parts)

    def __init__(
        self,
        backbone: nn.Module,
        warmup_epochs: float = 5.0,
        lambda_recon: float = 0.1,
        lambda_dep: float = 0.1,
        lambda_dag: float = 0.5,
        lambda_sparse: float = 0.01,
        phase1_epochs: int = 50,
        phase2_epochs: int = 30,
        phase2_init: Literal["best", "last"] = "best",
        phase2_warmup_epochs: float | None = None,
        phase2_graph: Literal["frozen", "learned"] = "frozen",
        graph_density_from: str | None = None,
        random_graph_seed: int = 0,
        **task_args: Any,
    ) -> None:
        # the other ClassificationTask arguments pass through unchanged (jsonargparse follows **task_args into
        # ClassificationTask.__init__, so --print_config lists them); only the warm-up default differs (paper:
        # 5)
        super().__init__(backbone, warmup_epochs=warmup_epochs, **task_args)
        early_stopping_patience = self.hparams.early_stopping_patience
        if not callable(getattr(backbone, "forward_with_aux", None)):
            raise TypeError(f"SDFormerTask needs a backbone with forward_with_aux(x) (an SDFormer), "
                            f"got {type(backbone).__name__}")
        weights = dict(recon=lambda_recon, dep=lambda_dep, dag=lambda_dag, sparse=lambda_sparse)
        for name, value in weights.items():
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"model.init_args.lambda_{name} must be >= 0, got {value}")
        if not isinstance(phase1_epochs, int) or phase1_epochs < 1:
            raise ValueError(f"model.init_args.phase1_epochs must be a positive integer, got "
                             f"{phase1_epochs!r}")
        if not isinstance(phase2_epochs, int) or phase2_epochs < 0:
            raise ValueError(f"model.init_args.phase2_epochs must be an integer >= 0, got {phase2_epochs!r}")
        if phase2_init not in ("best", "last"):
            raise ValueError(f"model.init_args.phase2_init must be 'best' or 'last', got {phase2_init!r}")
        if phase2_graph not in ("frozen", "learned"):
            raise ValueError(f"model.init_args.phase2_graph must be 'frozen' or 'learned', got "
                             f"{phase2_graph!r}")
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
        self._val_dag: float | None = None
        self.matched_graph_density: float | None = None
        self.matched_graph_source: str | None = None
        self._steps_per_epoch = 1

    # ---- objective ---------------------------------------------------------------------------
    def loss_weights(self) -> dict[str, float]:
        """Weights of the auxiliary terms in the current phase (all zero in phase 2)."""
        if self.phase == 1:
            return dict(self.aux_weights)
        return dict.fromkeys(AUX_TERMS, 0.0)

    def training_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     torch.Tensor, dict[str, torch.Tensor]]:
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

    # ---- graph density and acyclicity in evaluation -------------------------------------------
    def _graph_stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch means of the hard graphs' edge density and NOTEARS ``h(A)``."""
        bb = self.backbone
        if getattr(bb, "inferencer", None) is None:
            assert bb.fixed_adjacency is not None  # the graph is fixed
            adjacency = bb.fixed_adjacency.unsqueeze(0)
        else:
            adjacency = bb.infer_graph(bb.tokenizer(x)[0])[0]
        hard = (adjacency.detach() > 0.5).float()
        m = hard.shape[-1]
        return hard.sum(dim=(-2, -1)).mean() / max(m * (m - 1), 1), notears_acyclicity(hard).mean()

    def _log_graph(self, stage: str, batch: dict[str, torch.Tensor]) -> None:
        density, dag = self._graph_stats(batch["x"])
        n = batch["y"].shape[0]
        self.log(f"{stage}/edge_density", density, on_epoch=True, sync_dist=True, batch_size=n)
        self.log(f"{stage}/dag", dag, on_epoch=True, sync_dist=True, batch_size=n)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().validation_step(batch, batch_idx)
        self._log_graph("val", batch)
        return loss

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().test_step(batch, batch_idx)
        self._log_graph("test", batch)
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

    def lr_schedule(self) -> Callable[[int], float]:
        """Per-phase schedule (:meth:`lr_factor`); counts the optimiser steps of one epoch first."""
        trainer = self.trainer
        _ = trainer.estimated_stepping_batches  # makes Lightning load the train loader and count its batches
        batches = trainer.num_training_batches
        if not math.isfinite(batches):
            raise ValueError("SDFormerTask's per-phase cosine schedule needs a train loader of known length")
        self._steps_per_epoch = max(1, math.ceil(batches / trainer.accumulate_grad_batches))
        # the lambda reads the phase when called, so a scheduler restored from a checkpoint
        # continues the phase it was saved in whatever the restore order (a lambda, not the bound
        # method: LambdaLR leaves lambdas out of its state dict)
        return lambda step: self.lr_factor(step)

    def configure_callbacks(self) -> list[Callback]:
        # early stopping is per phase and done by this task (a phase-1 stop is a switch)
        return [cb for cb in super().configure_callbacks() if not isinstance(cb, EarlyStopping)]

    # ---- phases -------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        source = self.hparams.graph_density_from
        if stage == "fit" and source is not None:
            if source == "auto":
                log_dir = self.trainer.log_dir
                if not log_dir:
                    raise ValueError("graph_density_from: auto needs a logger (it looks beside this run's "
                                     "directory); set graph_density_from to a learned run directory")
                source = str(resolve_learned_run(log_dir))
            self._match_random_graph(source)

    def _match_random_graph(self, source: str) -> None:
        density, n_nodes = learned_edge_density(source)
        bb = self.backbone
        if n_nodes != bb.n_nodes:
            raise ValueError(f"graph_density_from: {source} has a {n_nodes}-node graph, this backbone "
                             f"{bb.n_nodes} nodes (same corpus and band_pooling expected)")
        if density > 0.5:
            raise ValueError(f"graph_density_from: the learned graph of {source} has density {density:.4f} > "
                             f"0.5, "
                             "more than any DAG can match")
        graph = random_dag(bb.n_nodes, density, self.hparams.random_graph_seed)
        assert bb.fixed_adjacency is not None  # graph="random" keeps a fixed graph
        bb.fixed_adjacency.copy_(graph.to(bb.fixed_adjacency))
        self.matched_graph_density = density
        self.matched_graph_source = str(source)
        rank_zero_info(f"random graph redrawn to the learned density {density:.4f} of {source}: "
                       f"{int(graph.sum())} edges on {bb.n_nodes} nodes")

    def on_fit_start(self) -> None:
        super().on_fit_start()
        budget = self.hparams.phase1_epochs + self.hparams.phase2_epochs
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and 0 <= max_epochs < budget:
            rank_zero_warn(f"trainer.max_epochs={max_epochs} is below phase1_epochs + phase2_epochs = "
                           f"{budget}: "
                           "the two-phase recipe will be cut short")

    def on_train_epoch_start(self) -> None:
        self._validated = False

    def on_train_epoch_end(self) -> None:
        # runs after this epoch's validation and before the checkpoint callbacks, so a
        # checkpoint of the switch epoch already holds the new phase
        density = self.trainer.callback_metrics.get("val/edge_density")
        if self._validated and density is not None:
            self._val_edge_density = float(density)
            dag = self.trainer.callback_metrics.get("val/dag")
            self._val_dag = float(dag) if dag is not None else None
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
        self._freeze_graph_in_phase2()
        rank_zero_info(f"SD-Former phase 1 ended after epoch {self.current_epoch} ({reason}); phase 2 "
                       f"(classification only, fresh optimiser, graph {self.hparams.phase2_graph}) starts "
                       f"from "
                       f"phase 1's {self.hparams.phase2_init} weights")
        # a new optimiser with no moments and a new warm-up + cosine schedule; it holds only the
        # parameters that still require gradients, so a frozen inferencer is left out
        self.trainer.strategy.setup_optimizers(self.trainer)

    def _freeze_graph_in_phase2(self) -> None:
        freeze = getattr(self.backbone, "freeze_graph", None)
        if self.phase == 2 and self.hparams.phase2_graph == "frozen" and callable(freeze):
            freeze(True)

    def on_fit_end(self) -> None:
        # the freeze is training state: a test or an export after fit sees the whole model as trainable
        release = getattr(self.backbone, "freeze_graph", None)
        if callable(release):
            release(False)

    # ---- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[_CKPT_KEY] = {
            "phase": self.phase,
            "phase_start_epoch": self.phase_start_epoch,
            "best": self._best,
            "wait": self._wait,
            "phase1_best_state": self._phase1_best_state,
            "val_edge_density": self._val_edge_density,
            "val_dag": self._val_dag,
            "matched_graph_density": self.matched_graph_density,
            "matched_graph_source": self.matched_graph_source,
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
        self._val_dag = state.get("val_dag")
        self.matched_graph_density = state.get("matched_graph_density")
        self.matched_graph_source = state.get("matched_graph_source")
        # resuming phase 2: freeze before the optimiser is rebuilt, so it matches the saved one (its
        # state holds no inferencer parameters); a test loading this checkpoint does not freeze
        if self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING:
            self._freeze_graph_in_phase2()
