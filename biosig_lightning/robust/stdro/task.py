"""STDRO as a training recipe that wraps any backbone (paper Sec. 3.3, Algorithm 1, Appendix A-C).

:class:`STDROTask` is a :class:`~biosig_lightning.robust.dg.DGTask` (hence a
:class:`~biosig_lightning.tasks.classification.ClassificationTask`: same metrics, checkpoint
selection, early stopping and ``results.json``) with manual optimisation. Its DG ``method``
(default ``erm``) composes: ``method: grl`` gives STDRO + GRL (the theta step's loss on the
adversarial batch is the DG loss), ``method: erm`` plain STDRO. Evaluation is always the plain
backbone on clean inputs (no adversary at validation/test time).

One training step (Algorithm 1, inner loop):

1. Inner maximisation (eq. 4, Sinha et al.'s Lagrangian relaxation, Appendix A): from
   ``X~_0 = X``, ``m`` gradient-ascent steps
   ``X~_{k+1} = X~_k + eps_x * d/dX~ [ l(theta; X~_k, Y) - lambda c_w(X~_k, X) ]``
   with ``c_w`` of eq. 2 (:mod:`.cost`). Labels never move (infinite label cost).
2. A theta step on ``(X~_m, Y)`` with the task's optimiser and LR schedule.

Every ``N_theta`` theta steps an M step (Algorithm 1, outer loop): ``R`` of eq. 5 (mean
environment loss + ``alpha`` * worst-minus-best environment gap + ``beta`` * temporal
smoothness of ``A_t = W_t M_t``), its gradient w.r.t. ``M`` by the hypergradient approximation
of eq. 6-8, one Adam step on ``M`` (Sec. 4.2), then ``Proj_M`` (:func:`.cost.project_m`).

Table 6 rows (``variant``):

==================  ===========  ============  =========================================
variant             ``W_t``      M learned     Table 6 row
==================  ===========  ============  =========================================
``dro``             ``I``        no            +DRO (WRM, identity cost, Sinha et al.)
``spatiotemporal``  corr. graph  no            +DRO w/ spatiotemporal W
``stability``       ``I``        yes           +DRO w/ stability-induced W
``stdro``           corr. graph  yes           +STDRO (full)
==================  ===========  ============  =========================================

The readings (the stability row, the schedule of Appendix C, the hypergradient of eq. 6-8 and
Appendix B, the environments, the ascent) and how DDP is handled are in :class:`STDROTask`'s docstring.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torch.utils.data import DataLoader

from biosig_lightning.atomic_io import atomic_write_bytes
from biosig_lightning.robust.dg import DGTask
from biosig_lightning.robust.stdro.cost import (
    Projection,
    correlation_graphs,
    cost_gradient,
    period_bounds,
    period_columns,
    project_m,
    smoothness,
    transport_cost,
)
from biosig_lightning.robust.stdro.environments import EnvironmentKind, patient_environments

__all__ = ["STILL_ADVERSARY", "VARIANTS", "STDROTask", "Variant"]

Variant = Literal["dro", "spatiotemporal", "stability", "stdro"]
#: below this mean ``train/adv_move`` over a fit's last epoch the adversary left the windows where they were
#: (the theta step is ERM's), and the fit says so
STILL_ADVERSARY = 1e-3
VARIANTS: dict[str, tuple[bool, bool]] = {  # variant -> (correlation graph W_t, learn M)
    "dro": (False, False), "spatiotemporal": (True, False), "stability": (False, True), "stdro": (True, True),
}


def _all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        if op == "mean":
            t /= dist.get_world_size()
    return t


class STDROTask(DGTask):
    """Spatiotemporal DRO around any backbone (the module docstring has the algorithm).

    Reading (stability row): "initialised by the Wasserstein distance and only optimised by the
    stability objective": ``W_t = I`` and ``M`` learned by ``R``; its ablation YAML sets
    ``beta: 0`` (no temporal-continuity term, which is a spatiotemporal property).

    Reading (schedule, Appendix C): Algorithm 1's outer loop runs ``N`` times and its inner loop
    ``N_theta`` times with ``N * N_theta`` = the baseline's *epoch* count, so a theta "iteration"
    is an epoch and M is updated once every ``N_theta`` epochs, ``N`` times in all. The paper uses
    the same letter for the number of periods (4); ``n_outer`` defaults to ``n_periods`` and
    ``n_theta`` to ``max_epochs // n_outer``. ``n_theta_unit: step`` instead counts optimiser
    steps (an M step every ``n_theta`` theta steps, our reading).

    Reading (hypergradient, eq. 6-8 and Appendix B): chaining eq. 10 (theta moves by
    ``-eps_theta grad_theta l(theta^i; X~^i)`` at every theta step ``i`` of the block) with eq. 11
    (``X~`` moves by ``-2 eps_x lambda (X~^k - X)`` per ascent step ``k`` for a unit change of the
    cost weight; for an asymmetric ``A_t`` the derivative of ``lambda c_w`` is
    ``lambda (A_t + A_t^T) delta``), the first term of eq. 6 for period ``t`` is::

        dA/dA_t ~= eps_theta eps_x lambda sum_i [ V_i D_i^T + D_i V_i^T ]   (restricted to period t)
        V_i = d/dX~ < grad_theta A(theta), grad_theta l(theta; X~^i_m, Y) >     (C x columns)
        D_i = sum_{k=0}^{m-1} (X~^i_k - X^i)                                    (C x columns)

    and ``dA/dM_t = W_t^T dA/dA_t`` (``A_t = W_t M_t``). ``grad_theta A`` is taken at the current
    theta on the clean windows of the buffered batches, grouped by environment (the environment
    losses ``l^e`` of eq. 5 are clean losses of training patients). The sum over the block's theta
    steps is estimated from the last ``hyper_buffer`` steps (their ``X, X~_m, D``, kept on the
    device) evaluated at the current theta, times ``steps_in_block / hyper_buffer``. The mixed
    second derivative ``V`` is a Hessian-vector product: by central finite differences along
    ``grad_theta A`` (``hvp: finite_difference``, DARTS' trick: two extra input-gradients, works
    for backbones without double backward such as cuDNN RNNs) or exactly by double backward
    (``hvp: exact``). The smoothness term's gradient is exact (autograd).

    Reading (environments): every *training* patient is mapped to an environment by
    :func:`.environments.patient_environments` (``environments: kmeans``: ``K`` groups by k-means over
    per-patient mean spectra; ``subject``: one per patient), or by the DataModule's own
    ``environments(k, seed)`` where it defines one; batches carry ``subject``. An environment absent
    from the buffered batches is left out of that M step's mean and gap.

    Reading (ascent): the per-sample suprema ``S_lambda(theta; (X, y))`` are independent, so the
    ascent climbs the *sum* over the batch of ``l - lambda c_w`` (each sample its own gradient,
    independent of the batch size); the backbone is in eval mode during the ascent and the M
    step (dropout would make the ascent and the finite differences noisy, and BatchNorm running
    statistics must not see the adversarial iterates).

    Reading (backtracking): Appendix A and Algorithm 1 take ``m`` plain steps of a fixed ``eps_x``, so
    ``ascent_backtracks`` is 0 by default. A positive value halves, per sample, a step that lowers that
    sample's ``l - lambda c_w`` (:meth:`inner_maximisation`): a safeguard of ours for a backbone whose
    loss is far less smooth than ``lambda`` (Sinha et al.'s ascent assumes ``lambda`` above the loss's
    smoothness), set explicitly where a grid needs it.

    DDP: the inner loop and the theta step run per rank (theta's gradients are averaged by DDP as
    usual); the M step's environment sums/counts, ``grad_theta A`` and the hypergradient are
    all-reduced, and the Adam state of ``M`` is identical on every rank, so every rank ends with
    the same ``M``.

    Args:
        backbone, **kwargs: as :class:`DGTask` / :class:`ClassificationTask` (optimiser, LR,
            schedule, monitor, early stopping, ``method`` for STDRO + DG).
        variant: Table 6 row: ``dro``, ``spatiotemporal``, ``stability`` or ``stdro``.
        n_periods: ``N`` periods of the clip (Sec. 3.2.1; 4 in the paper, Table 8 sweeps 2/4/6).
        ascent_steps: ``m`` (Appendix A, ``{5, 10, 15, 20}``).
        ascent_lr: ``eps_x``, the ascent step size.
        ascent_backtracks: halvings of a step that lowers a sample's ascent objective (0, the
            default: the paper's plain fixed steps; Reading (backtracking) above).
        penalty: ``lambda`` of eq. 4.
        alpha: weight of the environment gap in eq. 5 (Table 9; 0.5 best).
        beta: weight of temporal smoothness in eq. 5 (Table 10; 2e-4 best).
        n_environments: ``K`` patient groups (Table 7: 4 or 6).
        env_seed: seed of the k-means that forms the environments.
        environments: ``kmeans`` (the paper's patient groups) or ``subject`` (one environment per
            training patient; ``n_environments`` is then unused).
        gap: ``max_min`` (eq. 5, ``max_{p,q} l^p - l^q``) or ``max_mean``.
        smooth: ``squared`` (eq. 3, Algorithm 1) or ``frobenius`` (eq. 5).
        m_lr: ``eps_M``, Adam's learning rate for ``M``.
        n_outer, n_theta, n_theta_unit: the schedule (Reading (schedule) above).
        projection: ``psd`` or ``diag`` (:func:`~biosig_lightning.robust.stdro.cost.project_m`).
        eig_floor: ``mu`` of the projections (and of ``W_t``).
        hvp: ``finite_difference`` or ``exact`` (Reading (hypergradient) above).
        fd_radius: finite-difference radius relative to ``||grad_theta A||`` (DARTS: 0.01).
        hyper_buffer: theta steps kept for the M step.
        step_bins: bins per time step of step-major features; ``None`` reads the DataModule's
            ``step_bins`` (0, raw samples, when it has none).
        clean_weight: weight of the clean loss mixed into the theta step (0: the paper's
            theta step on ``(X~_m, Y)`` only).
        grad_clip: gradient-norm clipping of the theta step (manual optimisation does not
            use ``trainer.gradient_clip_val``); ``None`` switches it off.
        graph_max_windows: build ``W_t`` from at most this many training windows (``None``: all).
    """

    recipe_label = "STDRO"

    def __init__(
        self,
        backbone: nn.Module,
        variant: Variant = "stdro",
        n_periods: int = 4,
        ascent_steps: int = 5,
        ascent_lr: float = 0.1,
        penalty: float = 1.0,
        alpha: float = 0.5,
        beta: float = 2e-4,
        n_environments: int = 6,
        env_seed: int = 0,
        gap: Literal["max_min", "max_mean"] = "max_min",
        smooth: Literal["squared", "frobenius"] = "squared",
        m_lr: float = 1e-3,
        n_outer: int | None = None,
        n_theta: int | None = None,
        n_theta_unit: Literal["epoch", "step"] = "epoch",
        projection: Projection = "psd",
        eig_floor: float = 1e-3,
        hvp: Literal["finite_difference", "exact"] = "finite_difference",
        fd_radius: float = 0.01,
        hyper_buffer: int = 8,
        step_bins: int | None = None,
        clean_weight: float = 0.0,
        grad_clip: float | None = None,
        graph_max_windows: int | None = None,
        environments: EnvironmentKind = "kmeans",
        ascent_backtracks: int = 0,
        **kwargs: Any,
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"model.init_args.variant must be one of {'/'.join(VARIANTS)}, got {variant!r}")
        checks = {"n_periods": n_periods, "ascent_steps": ascent_steps + 1, "n_environments": n_environments,
                  "hyper_buffer": hyper_buffer}
        for key, value in checks.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model.init_args.{key} must be a positive integer, got {value!r}")
        for key, rate in {"ascent_lr": ascent_lr, "penalty": penalty, "alpha": alpha, "beta": beta,
                          "m_lr": m_lr, "clean_weight": clean_weight, "eig_floor": eig_floor}.items():
            if rate < 0:
                raise ValueError(f"model.init_args.{key} must be >= 0, got {rate}")
        if gap not in ("max_min", "max_mean"):
            raise ValueError(f"model.init_args.gap must be 'max_min' or 'max_mean', got {gap!r}")
        if smooth not in ("squared", "frobenius"):
            raise ValueError(f"model.init_args.smooth must be 'squared' or 'frobenius', got {smooth!r}")
        if n_theta_unit not in ("epoch", "step"):
            raise ValueError(f"model.init_args.n_theta_unit must be 'epoch' or 'step', got {n_theta_unit!r}")
        if hvp not in ("finite_difference", "exact"):
            raise ValueError(f"model.init_args.hvp must be 'finite_difference' or 'exact', got {hvp!r}")
        if not isinstance(ascent_backtracks, int) or ascent_backtracks < 0:
            raise ValueError(f"model.init_args.ascent_backtracks must be an integer >= 0, got "
                             f"{ascent_backtracks!r}")
        if environments not in ("kmeans", "subject"):
            raise ValueError(f"model.init_args.environments must be 'kmeans' or 'subject', got "
                             f"{environments!r}")
        if projection not in ("psd", "diag"):
            raise ValueError(f"model.init_args.projection must be 'psd' or 'diag', got {projection!r}")
        super().__init__(backbone, **kwargs)
        self.save_hyperparameters(ignore=["backbone"])
        self.automatic_optimization = False
        self.variant = variant
        self.use_graph, self.learn_m = VARIANTS[variant]
        # shapes are known once the data is: (N, C, C) after setup or a checkpoint load
        self.register_buffer("w_graph", torch.empty(0))
        self.register_buffer("m_weight", torch.empty(0))
        self.register_buffer("env_subjects", torch.empty(0, dtype=torch.long))
        self.register_buffer("env_ids", torch.empty(0, dtype=torch.long))
        self.bounds: list[tuple[int, int]] = []
        self._m_opt: torch.optim.Adam | None = None
        self._buffer: deque[dict[str, torch.Tensor]] = deque(maxlen=hyper_buffer)
        self._block_steps = 0
        self.m_history: list[dict[str, Any]] = []
        self._moves: list[torch.Tensor] = []  # this epoch's train/adv_move, read once at its end
        self.last_epoch_move: float | None = None

    def configure_callbacks(self) -> Any:
        """The parent's callbacks; a ``trainer.gradient_clip_val`` becomes the theta step's ``grad_clip``.

        Manual optimisation cannot use the Trainer's clipping, so a config written for the plain
        recipe (which clips through the Trainer) would fail to start; its clipping value is moved to
        the theta step here (``grad_clip``, if not given), before Lightning checks the configuration.
        """
        trainer = self._trainer
        clip = getattr(trainer, "gradient_clip_val", None) if trainer is not None else None
        if clip:
            if self.hparams.grad_clip is None:
                self.hparams.grad_clip = float(clip)
            assert trainer is not None  # clip came from it
            trainer.gradient_clip_val = None
        return super().configure_callbacks()

    # ---- state ---------------------------------------------------------------------------------
    def covariate_weight(self) -> torch.Tensor:
        """``A_t = W_t M_t`` for every period, ``(N, C, C)``."""
        if self.w_graph.numel() == 0:
            raise RuntimeError(
                "STDROTask: the period graphs are not built yet (setup('fit') or a checkpoint)"
            )
        return self.w_graph @ self.m_weight

    def init_cost(self, w: torch.Tensor, bounds: list[tuple[int, int]]) -> None:
        """Set ``W_t`` (``(N, C, C)``), ``M_t = I`` and the periods; (re)starts Adam on ``M``."""
        if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[0] != len(bounds):
            raise ValueError(f"STDROTask: W must be (N={len(bounds)}, C, C), got {tuple(w.shape)}")
        self.bounds = list(bounds)
        self.w_graph = w.detach().clone().to(self.device)
        self.m_weight = torch.eye(w.shape[1],
                                  device=self.device, dtype=w.dtype).expand_as(self.w_graph).clone()
        self._m_opt = torch.optim.Adam([self.m_weight], lr=self.hparams.m_lr)
        self.m_history = [{"epoch": 0, "step": 0, "a": self.covariate_weight().detach().cpu()}]

    def set_environments(self, mapping: Mapping[int, int]) -> None:
        """Training subject -> environment index (from ``datamodule.environments``)."""
        if not mapping:
            raise ValueError("STDROTask: the environment map is empty")
        ids = sorted(int(s) for s in mapping)
        self.env_subjects = torch.tensor(ids, dtype=torch.long, device=self.device)
        self.env_ids = torch.tensor([int(mapping[s]) for s in ids], dtype=torch.long, device=self.device)

    def _bounds_for(self, x: torch.Tensor) -> list[tuple[int, int]]:
        if not self.bounds:
            self.bounds = period_bounds(x.shape[-1], self.hparams.n_periods, self._step_bins())
        return self.bounds

    def _step_bins(self) -> int:
        if self.hparams.step_bins is not None:
            return int(self.hparams.step_bins)
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        return int(getattr(dm, "step_bins", 0) or 0)

    def setup(self, stage: str) -> None:
        """Build ``W_t`` from the training windows and read the environments (Algorithm 1's Initialize)."""
        super().setup(stage)
        if stage != "fit" or self.w_graph.numel() > 0:
            return
        dm = getattr(self.trainer, "datamodule", None)
        dataset = getattr(dm, "train_dataset", None)
        if dataset is None:
            dataset = (getattr(dm, "datasets", None) or {}).get("train")
        if dataset is None:
            raise ValueError(f"STDROTask needs the DataModule's training windows (train_dataset); "
                             f"{type(dm).__name__} has none after setup('fit')")
        first = dataset[0]["x"]
        c, t = int(first.shape[-2]), int(first.shape[-1])
        bounds = period_bounds(t, self.hparams.n_periods, self._step_bins())
        if self.use_graph:
            w = correlation_graphs(self._windows(dataset), bounds, self.hparams.eig_floor)
        else:
            w = torch.eye(c).expand(len(bounds), c, c).clone()
        self.init_cost(w, bounds)
        if self.learn_m:
            hp = self.hparams
            own = getattr(dm, "environments", None)
            if callable(own) and hp.environments == "kmeans":
                mapping = own(hp.n_environments, hp.env_seed)
            else:
                mapping = patient_environments(dm, hp.n_environments, hp.env_seed, hp.environments,
                                               self._step_bins())
            self.set_environments(mapping)

    def _windows(self, dataset: Any) -> Any:
        limit = self.hparams.graph_max_windows
        n = len(dataset) if limit is None else min(limit, len(dataset))
        loader = DataLoader(torch.utils.data.Subset(dataset, range(n)), batch_size=256,
                            collate_fn=_stack_x)
        return iter(loader)

    def _theta_block(self) -> int:
        hp = self.hparams
        if hp.n_theta is not None:
            return int(hp.n_theta)
        if hp.n_theta_unit == "step":
            raise ValueError("model.init_args.n_theta is required with n_theta_unit: step")
        n_outer = hp.n_outer or hp.n_periods
        epochs = self.trainer.max_epochs if self._trainer is not None and self.trainer.max_epochs else n_outer
        return max(1, int(epochs) // int(n_outer))

    # ---- inner maximisation (eq. 4, Appendix A) ---------------------------------------------
    def inner_maximisation(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(X~_m, D)`` with ``D = sum_{k<m} (X~_k - X)`` (the sum eq. 8 needs); labels never move.

        Cost (Appendix C: an STDRO step is about ``m + 1`` ERM steps): each ascent step is one
        forward and one backward to the input only. The backbone's parameters are frozen for the
        loop (:func:`_input_gradients_only`), so no parameter graph is recorded and no weight
        gradient formed; the input gradient is the same computation, bit for bit.

        Backtracking (``ascent_backtracks > 0``): a step that lowers a sample's objective
        ``phi = l - lambda c_w`` is halved for that sample, up to ``ascent_backtracks`` times, and
        dropped if it still does (the sample stays where it was). With ``lambda`` below the loss's
        input smoothness (a backbone whose logits are in the thousands) a fixed ``eps_x`` overshoots
        past every margin and the adversarial loss, hence the theta gradient, is exactly 0 (Sinha
        et al.'s ascent assumes ``lambda`` above that constant). A step that raises ``phi`` is taken
        as is, so for a well-scaled backbone the iterates are those of the plain ascent; the check
        costs one more forward/backward (the last iterate's) per theta step.
        """
        hp = self.hparams
        a = self.covariate_weight().detach()
        bounds = self._bounds_for(x)
        x = x.detach()
        sym = a + a.transpose(-1, -2)

        def evaluate(z: torch.Tensor, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
            """Per-sample ``phi`` and its input gradient at ``z`` (rows ``rows`` of the batch); ``phi`` only
            steers the backtracking, so without it ``phi`` is the loss alone and the cost is not formed."""
            x0, y0 = (x, y) if rows is None else (x[rows], y[rows])
            z = z.detach().requires_grad_(True)
            per = F.cross_entropy(self.backbone(z), y0, reduction="none")
            (grad,) = torch.autograd.grad(per.sum(), z)
            delta = z.detach() - x0
            # d/dX~ of lambda c_w (eq. 2) in closed form: lambda (A_t + A_t^T) delta on each period; both
            # terms are 0 at X~_0 = X, and computing them there reads nothing back to the host
            grad = grad - hp.penalty * cost_gradient(delta, sym, bounds)
            if hp.ascent_backtracks:
                per = per.detach() - hp.penalty * transport_cost(z.detach(), x0, a, bounds)
            return per.detach(), grad

        x_adv = x.clone()
        d_sum = torch.zeros_like(x)
        prev: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (X~, phi, ascent direction)
        with _input_gradients_only(self.backbone), torch.enable_grad():
            for k in range(hp.ascent_steps + (1 if hp.ascent_backtracks else 0)):
                phi, grad = evaluate(x_adv)
                if prev is not None and hp.ascent_backtracks:
                    x_adv, phi, grad = self._backtrack(evaluate, prev, x_adv, phi, grad)
                if k == hp.ascent_steps:  # the last iterate, checked
                    break
                if k > 0:
                    d_sum += x_adv - x
                prev = (x_adv, phi, grad)
                x_adv = (x_adv + hp.ascent_lr * grad).detach()
        return x_adv.detach(), d_sum

    def _backtrack(self, evaluate: Any, prev: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                   x_new: torch.Tensor,
                   phi: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Halve the step of every sample whose ``phi`` fell (see :meth:`inner_maximisation`)."""
        x_old, phi_old, direction = prev
        worse = phi < phi_old
        step = self.hparams.ascent_lr
        x_new, phi, grad = x_new.clone(), phi.clone(), grad.clone()
        for _ in range(self.hparams.ascent_backtracks):
            if not bool(worse.any()):
                return x_new, phi, grad
            rows = torch.nonzero(worse).flatten()
            step = step / 2
            cand = x_old[rows] + step * direction[rows]
            phi_c, grad_c = evaluate(cand, rows)
            x_new[rows], phi[rows], grad[rows] = cand, phi_c, grad_c
            worse = torch.zeros_like(worse).index_fill(0, rows[phi_c < phi_old[rows]], True)
        rows = torch.nonzero(worse).flatten()  # still worse: the sample keeps its previous iterate
        x_new[rows], phi[rows], grad[rows] = x_old[rows], phi_old[rows], direction[rows]
        return x_new, phi, grad

    # ---- theta step ----------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        hp = self.hparams
        # the one optimiser of configure_optimizers: a LightningOptimizer, an instance of its class
        opt = cast(torch.optim.Optimizer, self.optimizers())
        x, y = batch["x"], batch["y"]
        x_adv, d_sum = self.inner_maximisation(x, y)
        loss, logits, extra = self.training_loss({**batch, "x": x_adv})
        if hp.clean_weight > 0:
            clean, _, _ = self.training_loss(batch)
            loss = loss + hp.clean_weight * clean
        opt.zero_grad()
        self.manual_backward(loss)
        if hp.grad_clip is not None:
            self.clip_gradients(opt, gradient_clip_val=hp.grad_clip, gradient_clip_algorithm="norm")
        opt.step()
        sched = cast("torch.optim.lr_scheduler.LRScheduler | None", self.lr_schedulers())  # its one scheduler
        if sched is not None:
            sched.step()
        n = y.shape[0]
        with torch.no_grad():
            cost = transport_cost(x_adv, x, self.covariate_weight(), self._bounds_for(x)).mean()
            # how far the adversary moved, relative to the batch: near 0, the theta step is ERM's
            move = ((x_adv - x).pow(2).mean() / x.pow(2).mean().clamp_min(1e-24)).sqrt()
        self.log("train/loss", loss.detach(), prog_bar=True, on_step=True, on_epoch=True, batch_size=n)
        self.log("train/acc", (logits.argmax(-1) == y).float().mean(), on_step=False,
                 on_epoch=True, batch_size=n)
        self.log("train/adv_cost", cost, on_step=False, on_epoch=True, batch_size=n)
        self.log("train/adv_move", move, on_step=False, on_epoch=True, batch_size=n)
        self._moves.append(move)
        for key, value in extra.items():
            self.log(f"train/{key}", value, on_step=False, on_epoch=True, batch_size=n)
        if self.learn_m:
            self._buffer.append({"x": x.detach(), "x_adv": x_adv, "d": d_sum, "y": y.detach(),
                                 "subject": batch["subject"].detach()})
            self._block_steps += 1
            if hp.n_theta_unit == "step" and self._block_steps >= self._theta_block():
                self.m_step()
        return loss.detach()

    def on_train_epoch_end(self) -> None:
        if self._moves:
            self.last_epoch_move = float(_all_reduce(torch.stack(self._moves).mean(), op="mean"))
            self._moves = []
        if (self.learn_m and self.hparams.n_theta_unit == "epoch"
                and (self.current_epoch + 1) % self._theta_block() == 0):
            self.m_step()

    # ---- M step (eq. 5-8) -------------------------------------------------------------------------------
    def _environment_of(self, subjects: torch.Tensor) -> torch.Tensor:
        ids = self.env_subjects
        pos = torch.searchsorted(ids, subjects).clamp_max(ids.numel() - 1)
        if bool((ids[pos] != subjects).any()):
            raise ValueError(f"STDROTask: batch subjects "
                             f"{sorted(set(subjects[ids[pos] != subjects].tolist()))} "
                             "have no environment (not training patients?)")
        return self.env_ids[pos]

    def environment_objective(self, records: list[dict[str, torch.Tensor]], params: list[torch.Tensor],
                              ) -> tuple[list[torch.Tensor], dict[str, float]]:
        """``grad_theta A`` (eq. 5 without the smoothness) over ``params``, and the environment statistics.

        ``A``'s gradient is that of a surrogate ``sum_e w_e l^e`` whose weights ``w_e`` (the mean's
        ``1 / |E|`` plus ``alpha`` on the worst and minus ``alpha`` on the best environment) come from a
        first, gradient-free pass over the records; the second pass backpropagates one record at a
        time. One forward graph at a time: a backbone that writes its weights in its forward (EEGNet's
        max-norm projection) would invalidate the graphs of the other records. Environment sums and
        counts are all-reduced, so under DDP the sum over ranks of the gradients is the gradient of
        the global ``A``.
        """
        n_env = int(self.env_ids.max()) + 1
        local = torch.zeros(n_env, device=self.device)
        counts = torch.zeros(n_env, device=self.device)
        with torch.no_grad():
            for rec in records:
                per = F.cross_entropy(self.backbone(rec["x"]), rec["y"], reduction="none")
                env = self._environment_of(rec["subject"])
                local = local.index_add(0, env, per)
                counts = counts.index_add(0, env, torch.ones_like(per))
        sums = _all_reduce(local.clone())
        counts = _all_reduce(counts)
        present = counts > 0
        losses = torch.where(present, sums / counts.clamp_min(1), torch.zeros_like(sums))
        weights = present.float() / present.sum().clamp_min(1)
        hi = torch.where(present, losses, torch.full_like(losses, -torch.inf)).argmax()
        lo = torch.where(present, losses, torch.full_like(losses, torch.inf)).argmin()
        if self.hparams.gap == "max_min":
            gap = losses[hi] - losses[lo]
            weights = weights + self.hparams.alpha * (F.one_hot(hi, n_env) - F.one_hot(lo, n_env)).float()
        else:
            gap = losses[hi] - losses[present].mean()
            weights = weights + self.hparams.alpha * (
                F.one_hot(hi, n_env).float() - present.float() / present.sum()
            )
        scale = weights / counts.clamp_min(1)
        grads = [torch.zeros_like(p) for p in params]
        with torch.enable_grad():
            for rec in records:
                per = F.cross_entropy(self.backbone(rec["x"]), rec["y"], reduction="none")
                part = (scale[self._environment_of(rec["subject"])] * per).sum()
                for total, gi in zip(grads,
                                     torch.autograd.grad(part, params, allow_unused=True), strict=True):
                    if gi is not None:
                        total += gi
        stats = {"env_mean": float(losses[present].mean()), "env_gap": float(gap)}
        return grads, stats

    def _input_hvp(self, params: list[torch.Tensor], g: list[torch.Tensor], rec: dict[str, torch.Tensor],
                   ) -> torch.Tensor:
        """``V = d/dX~ <g, grad_theta l(theta; X~, Y)>`` at ``X~ = rec['x_adv']`` (batch-mean loss)."""
        x_adv = rec["x_adv"].detach().requires_grad_(True)

        def input_grad() -> torch.Tensor:
            with _input_gradients_only(self.backbone, eval_mode=False), torch.enable_grad():
                loss = F.cross_entropy(self.backbone(x_adv), rec["y"])
                return torch.autograd.grad(loss, x_adv)[0]

        if self.hparams.hvp == "exact":
            with torch.enable_grad():
                loss = F.cross_entropy(self.backbone(x_adv), rec["y"])
                grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
                inner = cast(torch.Tensor, sum((gi * hi).sum() for gi, hi in zip(grads, g, strict=True)
                                               if gi is not None))
                return torch.autograd.grad(inner, x_adv)[0]
        norm = torch.sqrt(cast(torch.Tensor, sum((gi * gi).sum() for gi in g))).clamp_min(1e-12)
        r = self.hparams.fd_radius / norm
        saved = [p.detach().clone() for p in params]
        try:
            with torch.no_grad():
                for p, gi in zip(params, g, strict=True):
                    p.add_(gi, alpha=float(r))
            plus = input_grad()
            with torch.no_grad():
                for p, s, gi in zip(params, saved, g, strict=True):
                    p.copy_(s).sub_(gi, alpha=float(r))
            minus = input_grad()
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved, strict=True):
                    p.copy_(s)
        return (plus - minus) / (2 * r)

    def hypergradient(self, records: list[dict[str, torch.Tensor]], steps_in_block: int,
                      ) -> tuple[torch.Tensor, dict[str, float]]:
        """``dR/dM`` of eq. 6-8 (:class:`STDROTask`), ``(N, C, C)``, identical on every rank."""
        hp = self.hparams
        params: list[torch.Tensor] = [p for p in self.backbone.parameters() if p.requires_grad]
        was_training = self.backbone.training
        self.backbone.eval()
        try:
            grads, stats = self.environment_objective(records, params)
            g = [_all_reduce(gi.detach().clone()) for gi in grads]
            w = self.w_graph
            n_periods, c = w.shape[0], w.shape[1]
            g_a = torch.zeros(n_periods, c, c, device=w.device, dtype=torch.float64)
            for rec in records:
                v = self._input_hvp(params, g, rec).detach()
                for t, (start, stop) in enumerate(self.bounds):
                    vm = _flat(v, start, stop)
                    dm = _flat(rec["d"], start, stop)
                    g_a[t] += (vm @ dm.T + dm @ vm.T).double()
        finally:
            self.backbone.train(was_training)
        opt = cast(torch.optim.Optimizer, self.optimizers()) if self._trainer is not None else None
        lr = float(opt.param_groups[0]["lr"]) if opt is not None else float(hp.lr)
        scale = lr * hp.ascent_lr * hp.penalty * steps_in_block / max(1, len(records))
        g_a = _all_reduce(g_a * scale, op="mean").to(w.dtype)
        grad_m = w.transpose(-1, -2) @ g_a
        if hp.beta > 0:
            m = self.m_weight.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                smooth = smoothness(w @ m, squared=hp.smooth == "squared")
                (g_smooth,) = torch.autograd.grad(smooth, m)
            grad_m = grad_m + hp.beta * g_smooth
            stats["smoothness"] = float(smooth.detach())
        return grad_m, stats

    def m_step(self) -> dict[str, float]:
        """One M update of Algorithm 1: hypergradient, Adam on M, ``Proj_M``; clears the block."""
        records = list(self._buffer)
        steps, self._block_steps = self._block_steps, 0
        self._buffer.clear()
        if not records or self._m_opt is None:
            return {}
        grad_m, stats = self.hypergradient(records, max(steps, len(records)))
        self._m_opt.zero_grad()
        self.m_weight.grad = grad_m.detach().clone()
        self._m_opt.step()
        self.m_weight.grad = None
        with torch.no_grad():
            self.m_weight.copy_(project_m(self.m_weight, self.w_graph,
                                          self.hparams.projection, self.hparams.eig_floor))
        stats["m_change"] = float(
            (self.m_weight - torch.eye(self.m_weight.shape[-1], device=self.device)).abs().mean()
        )
        if self._trainer is not None:
            for key, value in stats.items():
                self.log(f"stdro/{key}", value, on_step=False, on_epoch=True, sync_dist=False)
        self.m_history.append({"epoch": int(self.current_epoch) + 1 if self._trainer is not None else 0,
                               "step": int(self.global_step) if self._trainer is not None else 0,
                               "a": self.covariate_weight().detach().cpu()})
        return stats

    # ---- persistence ------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._m_opt is not None:
            checkpoint["stdro_m_optimizer"] = self._m_opt.state_dict()
        checkpoint["stdro_bounds"] = [list(b) for b in self.bounds]
        checkpoint["stdro_m_history"] = [{**h, "a": h["a"].tolist()} for h in self.m_history]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.bounds = [tuple(b) for b in checkpoint.get("stdro_bounds", [])]
        self.m_history = [{**h, "a": torch.tensor(h["a"])} for h in checkpoint.get("stdro_m_history", [])]
        state = checkpoint.get("stdro_m_optimizer")
        if state is not None:
            self._m_opt = torch.optim.Adam([self.m_weight], lr=self.hparams.m_lr)
            self._m_opt.load_state_dict(state)

    def load_state_dict(self, state_dict: Mapping[str, Any],
                        strict: bool = True, assign: bool = False) -> Any:
        """Load weights; the lazily-shaped STDRO buffers take the checkpoint's shapes."""
        for name in ("w_graph", "m_weight", "env_subjects", "env_ids"):
            if name in state_dict and getattr(self, name).shape != state_dict[name].shape:
                setattr(self, name, torch.empty_like(state_dict[name], device=self.device))
        out = super().load_state_dict(state_dict, strict=strict, assign=assign)
        if self.m_weight.numel() and self._m_opt is None:
            self._m_opt = torch.optim.Adam([self.m_weight], lr=self.hparams.m_lr)
        return out

    def on_fit_end(self) -> None:
        """Write ``stdro_weights.npz`` (``W``, ``M`` and ``A_t`` after every M step) for Fig. 2; warn when
        the adversary barely moved the windows (:data:`STILL_ADVERSARY`): the fit was then ERM's."""
        move = self.last_epoch_move
        if move is not None and move < STILL_ADVERSARY:
            rank_zero_warn(
                f"STDRO: the adversary moved the training windows by {move:.1e} of their RMS over the last "
                f"epoch (train/adv_move), so the theta steps were ERM's; a smaller model.init_args.penalty "
                f"(lambda={self.hparams.penalty:g}, with ascent_lr about 0.1 / lambda) lets it move them")
        log_dir = self.trainer.log_dir if self._trainer is not None else None
        if not log_dir or not self.trainer.is_global_zero or self.w_graph.numel() == 0:
            return
        atomic_write_bytes(Path(log_dir) / "stdro_weights.npz", weights_npz(self))


def weights_npz(task: STDROTask) -> bytes:
    """``W`` (N,C,C), ``M`` (N,C,C), ``history`` (H,N,C,C) of ``A_t`` with its ``epochs``, as npz bytes."""
    buf = io.BytesIO()
    history = task.m_history or [{"epoch": 0, "a": task.covariate_weight().detach().cpu()}]
    np.savez(buf, w=task.w_graph.detach().cpu().numpy(), m=task.m_weight.detach().cpu().numpy(),
             history=np.stack([np.asarray(h["a"]) for h in history]),
             epochs=np.asarray([int(h["epoch"]) for h in history]), variant=np.asarray(task.variant))
    return buf.getvalue()


@contextmanager
def _input_gradients_only(module: nn.Module, eval_mode: bool = True) -> Iterator[None]:
    """Within: ``module``'s trainable parameters have ``requires_grad`` off (and, with ``eval_mode``,
    the module is in eval mode); both are restored on exit, also on an error.

    Why: the ascent steps and the finite-difference HVP need ``d loss / d input`` only. With the
    parameters trainable, autograd records every op's parameter side (saved inputs of each weight
    matmul, views of the weights) although ``torch.autograd.grad(loss, x)`` never uses it; frozen,
    the forward records the input path alone. The input gradient is the same computation. Under
    DDP the parameters' gradient accumulators (which hold DDP's hooks) are untouched: toggling
    ``requires_grad`` of a leaf keeps its accumulator.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    was_training = module.training
    try:
        for p in params:
            p.requires_grad_(False)
        if eval_mode and was_training:
            module.eval()
        yield
    finally:
        for p in params:
            p.requires_grad_(True)
        if eval_mode and was_training:
            module.train(True)


def _stack_x(items: Any) -> torch.Tensor:
    """The ``x`` of a list of items, or of a batch a dataset's ``__getitems__`` already collated."""
    if isinstance(items, Mapping):
        return torch.as_tensor(items["x"])
    return torch.stack([torch.as_tensor(i["x"]) for i in items])


def _flat(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """``x[..., :, start:stop]`` of a batch as ``(C, batch * columns)``."""
    cols = period_columns(x, start, stop)
    return cols.transpose(0, 1).reshape(cols.shape[1], -1)
