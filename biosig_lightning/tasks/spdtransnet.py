"""SPDTransNet's training recipe (the authors' code, github MathieuSeraphim/SPDTransNet).

Cross-entropy with label smoothing 0.1 on the central epoch; ``Adam(lr, betas=(0.9, 0.999), eps=1e-7,
weight_decay=1e-5)`` (coupled L2); ``ExponentialLR(gamma=0.94)`` stepped every training epoch;
selection and early stopping on validation macro-F1 (``val/f1``) or the N1 F1 (``val/f1_n1``, the
paper's L = 29 choice). Besides the common metrics it logs ``{val,test}/f1_n1`` and
``{val,test}/macro_acc`` (mean per-class recall), Table 1's three columns with ``f1``.

``cpu_kernels: true`` (``--model.init_args.cpu_kernels true``) trains the backbone's encoder layers
through the optional CPU kernels of :mod:`biosig_lightning.accel` when the run is on a CPU (off by
default; ignored on GPUs, where the plain layers run).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn
from torchmetrics.functional.classification import multiclass_f1_score, multiclass_recall

from biosig_lightning import accel
from biosig_lightning.tasks.classification import ClassificationTask
from biosig_lightning.tasks.optimizers import multi_tensor_optimizer

__all__ = ["SPDTransNetTask"]


class SPDTransNetTask(ClassificationTask):
    """:class:`ClassificationTask` with SPDTransNet's optimiser, schedule and Table 1 metrics.

    Args:
        gamma: ``ExponentialLR`` decay per training epoch (0.94).
        adam_eps: Adam's epsilon (1e-7).
        n1_class: index of N1 among the classes (1 in W, N1, N2, N3, REM).
        cpu_kernels: on a CPU, train through :func:`biosig_lightning.accel.enable_spdtransnet_cpu`.
        **kwargs: :class:`ClassificationTask`'s (``lr``, ``weight_decay``, ``label_smoothing``,
        ``monitor``...).
    """

    def __init__(self, backbone: nn.Module, n_outputs: int = 5, lr: float = 5.804e-5,
                 weight_decay: float = 1e-5,
                 label_smoothing: float = 0.1, gamma: float = 0.94, adam_eps: float = 1e-7, n1_class: int = 1,
                 monitor: str = "val/f1", mode: Literal["max", "min"] = "max",
                 early_stopping_patience: int | None = 20, cpu_kernels: bool = False, **kwargs: Any) -> None:
        kwargs.pop("optimizer", None)
        kwargs.pop("scheduler", None)
        super().__init__(backbone=backbone, n_outputs=n_outputs, optimizer="adam", lr=lr,
                         weight_decay=weight_decay,
                         scheduler="none", label_smoothing=label_smoothing, monitor=monitor, mode=mode,
                         early_stopping_patience=early_stopping_patience, **kwargs)
        self.gamma, self.adam_eps, self.n1_class = gamma, adam_eps, n1_class
        self.cpu_kernels = cpu_kernels

    def on_fit_start(self) -> None:
        """Switch the backbone to the CPU kernels when asked (``cpu_kernels``) and training runs on a CPU."""
        super().on_fit_start()
        if self.cpu_kernels and self.device.type == "cpu":
            accel.enable_spdtransnet_cpu(self.backbone)

    def epoch_metrics(self, probs: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Table 1's N1 F1 and macro accuracy (mean per-class recall) of the epoch's windows, each once."""
        k = self.n_outputs
        pred = probs.argmax(-1)
        per_class = multiclass_f1_score(pred, y, num_classes=k, average=None)
        return {"f1_n1": per_class[self.n1_class],
                "macro_acc": multiclass_recall(pred, y, num_classes=k, average="macro")}

    def build_optimizer(self) -> torch.optim.Optimizer:
        params = [p for p in self.parameters() if p.requires_grad]
        return multi_tensor_optimizer(torch.optim.Adam, params, trainer=self._trainer, lr=self.hparams.lr,
                                      betas=tuple(self.hparams.betas), eps=self.adam_eps,
                                      weight_decay=self.hparams.weight_decay)

    def configure_optimizers(self) -> Any:
        opt = self.build_optimizer()
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=self.gamma)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
