"""Class-conditioned denoiser training for reconstruction-error classification (Yao et al., Sec. 5, App. E.4).

:class:`DenoiserPairTask` trains the denoisers of a
:class:`~biosig_lightning.models.signed_graph.SignedGraphClassifier` (one per class) on noisy / clean pairs:
a window ``x`` of class ``c`` is corrupted with AWGN, ``y = x + sigma_n n`` (eq. 18, ``sigma_n =
backbone.noise_std``), and

* ``loss="contrastive"`` (eq. 23, the paper's): denoiser ``c`` minimises
  ``||x_c - Psi_c(y_c)||^2 + max(rho - ||x_c' - Psi_c(y_c')||^2, 0)``, ``x_c'`` the window of another
  class closest to ``x_c`` in Euclidean distance;
* ``loss="mse"`` (eq. 21; Table 3's "single MSE" ablation): the first term only.

Validation and test classify the clean windows by the smaller reconstruction error (eq. 22, the backbone's
logits). ``val/denoise_loss`` (the objective on the validation windows, noise from a fixed seed) drives
checkpoint selection in the shipped configs (App. E.4: "early stopping ... based on validation performance").

Readings:

* Norms are per-element means (MSE), so ``rho = 1`` (App. E.4) is on the scale of the unit-variance windows
  (with sums over all ``C x T`` samples the hinge would never act). On that scale ``rho = 1`` asks denoiser
  ``c`` to miss the other class's clean window by as much as an all-zero output does; a ``margin`` between
  ``sigma_n^2`` (the error of returning the noisy window) and 1 asks for less.
* ``cutoff_lr``: a cutoff ``omega`` (eq. 31) is one scalar in eigenvalue units and Adam moves it by about
  its learning rate per step; App. E.4 trains for thousands of steps, a shorter budget can give the
  cutoffs a larger rate of their own.
* The close pairs of eq. 23 are formed inside each batch (a window with no other class in its batch has no
  hinge term); each term is averaged over the windows it covers and the denoisers' losses are added.
* ``train/acc`` is the eq. 22 classification of the *noisy* training windows.
* Polarity (Sec. 3.1): eq. 5 selects polarities with "a set of training signals", so each denoiser's come
  from its own class's training windows, re-estimated at every epoch start (``polarity_windows``); at
  evaluation every input is filtered on its denoiser's class signs (Table 2's point: the denoisers differ
  in the sign structure they keep).
* Any corpus (``spatial_graph: montage``): the spatial graph comes from the DataModule's channel names
  (:func:`~biosig_lightning.features.montage.spatial_graph_mask`: 10-20 distances, else a ring), one
  denoiser per class; the paper's pair is the two-class case.
* App. E.4's schedule (Adam 1e-3; cosine warm restarts, ``T_0 = 5`` epochs, ``T_mult = 1``, minimum 1e-5),
  stepped per epoch; ``restart_period: null`` uses :class:`ClassificationTask`'s ``scheduler``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from biosig_lightning.features.montage import spatial_graph_mask
from biosig_lightning.tasks.classification import ClassificationTask
from biosig_lightning.tasks.compile import CompileSetting, compile_backbone

__all__ = ["DenoiserPairTask", "contrastive_pairs"]


def contrastive_pairs(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """For each window the index of the closest window (Euclidean) of another class, or -1 if none."""
    flat = x.reshape(x.shape[0], -1)
    dist = torch.cdist(flat, flat)
    dist = dist.masked_fill(y.unsqueeze(0) == y.unsqueeze(1), float("inf"))
    best = dist.argmin(dim=1)
    return torch.where(torch.isfinite(dist.min(dim=1).values), best, torch.full_like(best, -1))


def _masked_means(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per row, the mean of ``values`` where ``weights`` is 1; 0 for a row without any."""
    return (values * weights).sum(1) / weights.sum(1).clamp_min(1)


class DenoiserPairTask(ClassificationTask):
    """Train one denoiser per class (eq. 21 / 23), classify by reconstruction error (eq. 22).

    Args:
        backbone: a model with ``denoisers`` (one per class, ``nn.ModuleList``) and ``noise_std``,
            e.g. :class:`~biosig_lightning.models.signed_graph.SignedGraphClassifier`.
        loss: ``contrastive`` (eq. 23) or ``mse`` (eq. 21, Table 3's ablation).
        margin: ``rho`` of eq. 23 (App. E.4: 1.0).
        restart_period, restart_mult, min_lr: cosine annealing with warm restarts (App. E.4), in epochs;
            ``restart_period=None`` uses the parent's ``scheduler``.
        val_noise_seed: seed of the noise added to validation windows for ``val/denoise_loss``.
        polarity_windows: at the start of every training epoch each denoiser re-estimates its per-block
            polarities (eq. 5) from up to this many clean training windows of its class, taken from the
            start of the (seeded, shuffled) training loader; 0 leaves them to the backbone (per input).
        spatial_graph: ``backbone`` (the backbone's own spatial edges) or ``montage`` (from the
            corpus's channel names at setup, see the module docstring).
        cutoff_lr: the learning rate of the denoisers' cutoffs (see the module docstring); ``None``
            trains them at ``lr`` with every other parameter.
        calibration_windows: before every validation of a fit, the backbone's per-class error offsets
            (``fit_error_offsets``: each class's prior and normalising constant, which eq. 22 leaves out)
            are estimated from up to this many clean training windows per class; 0 (the default) keeps
            eq. 22 as the paper states it.
        **kwargs: everything :class:`ClassificationTask` takes (``n_outputs``, ``optimizer``, ``lr``,
            ``monitor``, ...).
    """

    backbone: Any  # duck-typed: ``denoisers`` and ``noise_std`` (Args)

    def __init__(self, backbone: nn.Module, loss: Literal["contrastive", "mse"] = "contrastive",
                 margin: float = 1.0, restart_period: int | None = 5, restart_mult: int = 1,
                 min_lr: float = 1e-5, val_noise_seed: int = 0, polarity_windows: int = 32,
                 spatial_graph: Literal["backbone", "montage"] = "backbone", cutoff_lr: float | None = None,
                 calibration_windows: int = 0, **kwargs: Any) -> None:
        super().__init__(backbone=backbone, **kwargs)
        denoisers = getattr(backbone, "denoisers", None)
        if not isinstance(denoisers, nn.ModuleList) or not hasattr(backbone, "noise_std"):
            raise TypeError(f"DenoiserPairTask needs a backbone with one denoiser per class (denoisers) and "
                            f"noise_std, e.g. SignedGraphClassifier; got {type(backbone).__name__}")
        if len(denoisers) != self.n_outputs:
            raise ValueError(f"DenoiserPairTask: the backbone has {len(denoisers)} denoisers but n_outputs="
                             f"{self.n_outputs}")
        if loss not in ("contrastive", "mse"):
            raise ValueError(f"model.init_args.loss must be 'contrastive' or 'mse', got {loss!r}")
        if not margin > 0:
            raise ValueError(f"model.init_args.margin (rho of eq. 23) must be > 0, got {margin!r}")
        if restart_period is not None and (restart_period < 1 or restart_mult < 1):
            raise ValueError("model.init_args.restart_period and restart_mult must be >= 1")
        if restart_period is not None and self.hparams.scheduler != "none":
            raise ValueError("model.init_args.restart_period (warm restarts) and scheduler "
                             f"{self.hparams.scheduler!r} both set a schedule; set scheduler: none")
        self.loss_kind, self.margin = loss, float(margin)
        self.restart_period, self.restart_mult, self.min_lr = restart_period, restart_mult, min_lr
        self.val_noise_seed = val_noise_seed
        if polarity_windows < 0:
            raise ValueError(f"model.init_args.polarity_windows must be >= 0, got {polarity_windows}")
        self.polarity_windows = polarity_windows
        if spatial_graph not in ("backbone", "montage"):
            raise ValueError(f"model.init_args.spatial_graph must be 'backbone' or 'montage', got "
                             f"{spatial_graph!r}")
        self.spatial_graph = spatial_graph
        self.spatial_rule = "backbone"
        if cutoff_lr is not None and not cutoff_lr > 0:
            raise ValueError(f"model.init_args.cutoff_lr must be > 0 (or null), got {cutoff_lr!r}")
        self.cutoff_lr = cutoff_lr
        if calibration_windows < 0:
            raise ValueError(f"model.init_args.calibration_windows must be >= 0, got {calibration_windows}")
        if calibration_windows and not hasattr(backbone, "fit_error_offsets"):
            raise ValueError(f"model.init_args.calibration_windows needs a backbone with fit_error_offsets "
                             f"(SignedGraphClassifier); {type(backbone).__name__} has none")
        self.calibration_windows = calibration_windows

    # ---- the corpus's spatial graph ----------------------------------------------------------
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.spatial_graph == "montage":
            dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
            names = getattr(dm, "ch_names", None) or getattr(self.backbone, "ch_names", None)
            self.use_channel_graph(names)

    def use_channel_graph(self, ch_names: list[str] | None) -> str:
        """Set every denoiser's spatial edges from ``ch_names`` (see the module docstring); returns the
        rule."""
        n = int(self.backbone.denoisers[0].spatial_mask.shape[0])
        mask, rule = spatial_graph_mask(list(ch_names) if ch_names else None, n)
        for den in self.backbone.denoisers:
            den.set_spatial_mask(torch.from_numpy(mask))
        self.spatial_rule = rule
        return rule

    def compile_for_fit(self, setting: CompileSetting | None = None, backend: str = "inductor") -> None:
        """The backbone, with its ``denoise_all`` (what the training step calls, eq. 23); a backbone
        without one: each denoiser, which the step then calls on its own."""
        super().compile_for_fit(setting, backend)
        if callable(getattr(self.backbone, "denoise_all", None)):
            return
        setting = self.hparams.get("compile", "auto") if setting is None else setting
        for denoiser in self.backbone.denoisers:
            compile_backbone(denoiser, setting, self.hparams.get("compile_mode"), self.device, backend)

    # ---- class polarities (Sec. 3.1, eq. 5) ---------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        fit = getattr(self.backbone, "fit_polarity", None)
        if self.polarity_windows and fit is not None:
            windows = self._class_windows(self.polarity_windows)
            if windows is not None:
                fit(*windows)

    # ---- eq. 22's per-class constants (SignedGraphClassifier.fit_error_offsets) ---------------
    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        if self.calibration_windows and self.trainer.state.fn == "fit":
            windows = self._class_windows(self.calibration_windows)
            if windows is not None:
                self.backbone.fit_error_offsets(*windows)

    def _class_windows(self, want: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Up to ``want`` clean training windows per class with their labels, from the start of the (seeded,
        shuffled) training loader; ``None`` without a DataModule."""
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None:
            return None
        xs: list[torch.Tensor] = []
        ys: list[torch.Tensor] = []
        counts = torch.zeros(self.n_outputs, dtype=torch.long)
        for batch in dm.train_dataloader():
            keep = torch.zeros_like(batch["y"], dtype=torch.bool)
            for c in range(self.n_outputs):
                idx = torch.nonzero(batch["y"] == c).flatten()[: max(0, want - int(counts[c]))]
                keep[idx] = True
                counts[c] += len(idx)
            xs.append(batch["x"][keep])
            ys.append(batch["y"][keep])
            if bool((counts >= want).all()):
                break
        return torch.cat(xs).to(self.device), torch.cat(ys).to(self.device)

    # ---- objective ---------------------------------------------------------------------------
    def denoising_loss(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, logits of the noisy windows, terms)`` for clean ``x``, labels ``y`` and unit ``noise``.

        Per class ``c``: the mean of ``||x - Psi_c(y)||^2`` over its own windows (eq. 21) and, with the
        contrastive loss, of ``max(0, rho - ||x' - Psi_c(y')||^2)`` over their partners ``x'`` (eq. 23); a
        class without windows (or partners) in the batch adds nothing. Written with masks, not selections,
        so the step never waits for the device (no host reads, no data-dependent shapes).
        """
        bb = self.backbone
        sigma = float(bb.noise_std)
        noisy = x + sigma * noise
        denoise_all = getattr(bb, "denoise_all", None)
        # (K, B, C, T): every class's estimate
        outs = denoise_all(noisy) if denoise_all else torch.stack([d(noisy) for d in bb.denoisers])
        stacked = (noisy - outs).square().sum((2, 3)).T  # (B, K)
        mse = (x - outs).square().mean((2, 3))  # (K, B): ||x - Psi_c(y)||^2 per element, every window
        own = (y == torch.arange(outs.shape[0], device=y.device).unsqueeze(1)).to(mse.dtype)  # (K, B)
        fit = _masked_means(mse, own).sum()
        hinge = x.new_zeros(())
        if self.loss_kind == "contrastive":
            pair = contrastive_pairs(x, y)  # (B,) the partner of each window, -1 for none
            partner_mse = mse.gather(1, pair.clamp_min(0).expand_as(mse))
            with_partner = own * (pair >= 0).to(mse.dtype)
            hinge = _masked_means((self.margin - partner_mse).clamp_min(0), with_partner).sum()
        to_logits = getattr(bb, "error_logits", None)  # the backbone's own scale, else the window's
        logits = to_logits(stacked, noisy) if to_logits else -stacked / (2 * sigma ** 2)
        return fit + hinge, logits, {"denoise_mse": fit.detach(), "hinge": hinge.detach()}

    def training_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     torch.Tensor, dict[str, torch.Tensor]]:
        x = batch["x"]
        return self.denoising_loss(x, batch["y"], torch.randn_like(x))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = batch["x"]
        gen = torch.Generator(device="cpu").manual_seed(self.val_noise_seed * 1_000_003 + batch_idx)
        noise = torch.randn(x.shape, generator=gen).to(x.device, x.dtype)
        loss, _, _ = self.denoising_loss(x, batch["y"], noise)
        self.log("val/denoise_loss", loss, prog_bar=True, on_epoch=True,
                 batch_size=x.shape[0], sync_dist=True)
        return super().validation_step(batch, batch_idx)

    # ---- optimisation ------------------------------------------------------------------------
    def parameter_groups(self) -> list[dict[str, Any]]:
        """Every trainable parameter at ``lr``, the denoisers' cutoffs at ``cutoff_lr`` where it is set."""
        if self.cutoff_lr is None:
            return super().parameter_groups()
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        cutoffs = [p for n, p in named if n.rsplit(".", 1)[-1] == "cutoffs"]
        if not cutoffs:
            raise ValueError("model.init_args.cutoff_lr is set but the backbone's denoisers have no cutoffs")
        return [{"params": [p for n, p in named if n.rsplit(".", 1)[-1] != "cutoffs"]},
                {"params": cutoffs, "lr": self.cutoff_lr}]

    def configure_optimizers(self) -> Any:
        if self.restart_period is None:
            return super().configure_optimizers()
        opt = self.build_optimizer()
        sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            opt, T_0=self.restart_period, T_mult=self.restart_mult, eta_min=self.min_lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
