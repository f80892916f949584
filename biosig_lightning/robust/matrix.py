"""The recipe x backbone matrix: every recipe trained over every window backbone on one tiny stand-in.

Each cell trains one recipe (plain :class:`~biosig_lightning.tasks.classification.ClassificationTask`
``erm``, each DG plug-in of :mod:`biosig_lightning.robust.dg`,
:class:`~biosig_lightning.robust.stdro.STDROTask`)
around one catalog backbone for a few optimiser steps on the training subjects of :func:`matrix_standin`,
then scores AUROC and cross-entropy on its held-out subjects. Its control is the same cell at ``lr = 0``
(every weight stays at its seeded initialisation, so the control is the untrained network through the
same code); a cell passes when training beats its control (:attr:`Cell.beats_control`). A pair the recipe
refuses (a DG method that needs a
site the backbone does not declare) is reported with the refusal, never trained.

Before scoring, both sides' BatchNorm statistics are re-estimated on the training windows
(:func:`recalibrate_batchnorm`, "precise BN", Wu & Johnson 2021): after eight steps a running average with
momentum 0.1 still holds 43 % of its initial mean 0 / variance 1, and a deep network in eval mode then
reads every held-out window through the wrong scale (DenseCNN's held-out loss explodes while its
training loss falls). A fit of hundreds of steps does not need it.

The steps are the recipes' own: ``training_loss`` of the task (the DG losses, MixStyle/DSU hooks), and
for STDRO its inner maximisation (``inner_maximisation``) before each theta step and an M step
(``m_step``) every ``m_every`` steps, with the correlation graphs of the training windows and one
environment per training subject. They run without a Lightning Trainer, so a whole matrix takes
seconds (``benchmarks/recipe_matrix.py`` writes the docs' table; ``tests/robust/test_recipe_matrix.py``
checks every pair).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.functional.classification import binary_auroc

import biosig_lightning.models  # noqa: F401  (fills the catalog)
from biosig_lightning import recipes
from biosig_lightning.models import catalog
from biosig_lightning.robust.dg import METHODS, DGMethod, DGTask
from biosig_lightning.robust.stdro.cost import correlation_graphs, period_bounds
from biosig_lightning.robust.stdro.task import STDROTask
from biosig_lightning.tasks.classification import ClassificationTask

__all__ = ["CH_NAMES", "RECIPES", "Cell", "MatrixData", "matrix_standin", "recalibrate_batchnorm", "run_cell",
           "run_matrix", "window_backbones"]

#: the rows: every catalog recipe that wraps any backbone (:func:`biosig_lightning.recipes.wrapping_any`),
#: DGTask once per DG method
_ROWS = {"ClassificationTask": ("erm",), "DGTask": tuple(m for m in METHODS if m != "erm"),
         "STDROTask": ("stdro",)}
RECIPES: tuple[str, ...] = tuple(row for r in recipes.wrapping_any() for row in _ROWS[r.name])
#: channel names of the stand-in (10-20 electrodes, so backbones with a distance graph can place them)
CH_NAMES: tuple[str, ...] = ("Fp1", "Fp2", "C3", "C4", "P3", "P4", "O1", "O2")
#: backbones whose input is not a window of samples (SPDTransNet takes SPD token sequences)
NOT_WINDOW = ("SPDTransNet",)
#: per-backbone window lengths where the default is shorter than what the backbone pools
N_TIMES = {"DenseCNN": 704}
# : token sizes for the 64-sample windows (the catalog's test sizes are for longer windows: one 64-sample
# patch,
#: or one token per sample, which the transformers do not learn from in a few steps)
#: The signed-graph pair: four chunks of 16 samples (the paper's six do not divide 64; the stand-in grid uses
#: four on APAVA and CHB-MIT); with the catalog's two chunks the pair does not train in eight steps
KWARGS: dict[str, dict[str, Any]] = {"PatchTST": {"patch_len": 8, "stride": 8},
                                     "TransformerClassifier": {"patch_len": 16},
                                     "SignedGraphClassifier": {"n_chunks": 4}}


@dataclass(frozen=True)
class MatrixData:
    """A tiny stand-in: windows ``x`` (N, C, T), labels ``y``, ``subject`` ids, and which subjects train."""

    x: torch.Tensor
    y: torch.Tensor
    subject: torch.Tensor
    train_subjects: tuple[int, ...]
    sfreq: float

    def split(self, train: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keep = torch.isin(self.subject, torch.tensor(self.train_subjects))
        keep = keep if train else ~keep
        return self.x[keep], self.y[keep], self.subject[keep]


@dataclass(frozen=True)
class Cell:
    """One recipe over one backbone: held-out AUROC and cross-entropy after training and at ``lr = 0``,
    or the recipe's refusal."""

    recipe: str
    backbone: str
    auroc: float | None
    control: float | None
    loss: float | None = None
    control_loss: float | None = None
    refused: str | None = None

    @property
    def beats_control(self) -> bool:
        """Held-out AUROC above the control's, or (both at the ceiling of 1) a lower held-out loss."""
        if self.auroc is None or self.control is None or self.loss is None or self.control_loss is None:
            return False
        if self.auroc > self.control:
            return True
        return self.auroc == self.control == 1.0 and self.loss < self.control_loss


def matrix_standin(n_times: int = 64, n_subjects: int = 6, windows: int = 8, sfreq: float = 64.0,
                   seed: int = 0) -> MatrixData:
    """Two classes told apart by the frequency of a shared rhythm (6 vs 14 Hz), each subject with its own
    channel gains, phase and noise level; subjects ``1..n-2`` train, the last two are held out."""
    rng = np.random.default_rng(seed)
    c = len(CH_NAMES)
    t = np.arange(n_times) / sfreq
    xs, ys, ss = [], [], []
    for s in range(1, n_subjects + 1):
        gains = rng.uniform(0.5, 1.5, size=(c, 1))
        noise = rng.uniform(0.5, 1.0)
        for w in range(windows):
            label = w % 2
            freq = 6.0 if label == 0 else 14.0
            rhythm = np.sin(2 * np.pi * (freq * t + rng.uniform()))
            x = gains * rhythm + noise * rng.standard_normal((c, n_times))
            xs.append((x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6))
            ys.append(label)
            ss.append(s)
    return MatrixData(torch.tensor(np.stack(xs), dtype=torch.float32), torch.tensor(ys), torch.tensor(ss),
                      tuple(range(1, n_subjects - 1)), sfreq)


def window_backbones() -> list[str]:
    """Every catalog backbone that takes a window of samples."""
    return [n for n in catalog.names() if n not in NOT_WINDOW]


def _backbone(name: str, data: MatrixData) -> nn.Module:
    entry = catalog.get(name)
    kwargs = {**dict(entry.test_kwargs), **KWARGS.get(name, {})}
    params = inspect.signature(entry.cls).parameters
    if "chs_info" in params:
        kwargs["chs_info"] = [{"ch_name": n} for n in CH_NAMES]
    elif "ch_names" in params:
        kwargs["ch_names"] = list(CH_NAMES)
    return entry.cls(n_chans=data.x.shape[1], n_outputs=2, n_times=data.x.shape[2],
                     sfreq=data.sfreq, **kwargs)


def _task(recipe: str, backbone: nn.Module, lr: float) -> ClassificationTask:
    common: dict[str, Any] = dict(n_outputs=2, optimizer="adam", lr=lr, weight_decay=0.0, scheduler="none")
    if recipe == "erm":
        return ClassificationTask(backbone, **common)
    if recipe == "stdro":
        return STDROTask(backbone, n_periods=2, ascent_steps=3, ascent_lr=0.1,
                         environments="subject", **common)
    return DGTask(backbone, method=cast(DGMethod, recipe), style_p=1.0, disc_hidden=8, disc_layers=1,
                  **common)


def _prepare(task: ClassificationTask, data: MatrixData) -> None:
    x, _, _ = data.split(train=True)
    if isinstance(task, STDROTask):
        bounds = period_bounds(x.shape[-1], task.hparams.n_periods)
        task.init_cost(correlation_graphs(iter([x]), bounds, task.hparams.eig_floor), bounds)
        task.set_environments({s: i for i, s in enumerate(data.train_subjects)})
    elif isinstance(task, DGTask) and task.method == "grl":
        task._build_discriminator(list(data.train_subjects))


def _step(task: ClassificationTask, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> None:
    if isinstance(task, STDROTask):
        x_adv, d_sum = task.inner_maximisation(batch["x"], batch["y"])
        loss, _, _ = task.training_loss({**batch, "x": x_adv})
        if task.learn_m:
            task._buffer.append({"x": batch["x"], "x_adv": x_adv, "d": d_sum, "y": batch["y"],
                                 "subject": batch["subject"]})
            task._block_steps += 1
    else:
        loss, _, _ = task.training_loss(batch)
    opt.zero_grad()
    loss.backward()
    opt.step()


def recalibrate_batchnorm(model: nn.Module, x: torch.Tensor, batch_size: int = 16) -> None:
    """Replace every BatchNorm layer's running statistics by their average over ``x`` (train-mode passes,
    no gradients; the layers' momentum is restored afterwards). A no-op for a model without BatchNorm."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not layers:
        return
    momenta = [m.momentum for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the passes below
    was_training = model.training
    model.train()
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            model(x[i:i + batch_size])
    for m, momentum in zip(layers, momenta, strict=True):
        m.momentum = momentum
    model.train(was_training)


def _held_out(task: ClassificationTask, data: MatrixData) -> tuple[float, float]:
    """``(AUROC, mean cross-entropy)`` on the held-out subjects."""
    x, y, _ = data.split(train=False)
    task.eval()
    with torch.no_grad():
        logits = task(x).double()
    probs = torch.softmax(logits, dim=-1)[:, 1]
    return float(binary_auroc(probs, y)), float(F.cross_entropy(logits, y))


def _train(recipe: str, name: str, data: MatrixData, lr: float, steps: int, batch_size: int, m_every: int,
           seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    task = _task(recipe, _backbone(name, data), lr)
    _prepare(task, data)
    opt = task.build_optimizer()
    x, y, s = data.split(train=True)
    gen = torch.Generator().manual_seed(seed)
    task.train()
    for step in range(steps):
        rows = torch.randperm(len(y), generator=gen)[:batch_size]
        _step(task, opt, {"x": x[rows], "y": y[rows], "subject": s[rows], "index": rows})
        if isinstance(task, STDROTask) and task.learn_m and (step + 1) % m_every == 0:
            task.m_step()
    recalibrate_batchnorm(task, x)
    return _held_out(task, data)


def run_cell(recipe: str, name: str, data: MatrixData | None = None, lr: float = 1e-2, steps: int = 8,
             batch_size: int = 16, m_every: int = 4, seed: int = 0) -> Cell:
    """Train ``recipe`` over backbone ``name`` and its ``lr = 0`` control (module docstring)."""
    data = data or matrix_standin(N_TIMES.get(name, 64))
    try:
        auroc, loss = _train(recipe, name, data, lr, steps, batch_size, m_every, seed)
    except ValueError as err:  # the recipe refuses the backbone when it is built
        return Cell(recipe, name, None, None, refused=str(err).splitlines()[0])
    control, control_loss = _train(recipe, name, data, 0.0, steps, batch_size, m_every, seed)
    return Cell(recipe, name, auroc, control, loss, control_loss)


def run_matrix(backbones: Iterable[str] | None = None,
               recipes: Iterable[str] = RECIPES, **kwargs: Any) -> list[Cell]:
    """Every recipe over every window backbone (``kwargs``: :func:`run_cell`'s)."""
    cells: list[Cell] = []
    for name in backbones or window_backbones():
        data = matrix_standin(N_TIMES.get(name, 64))
        cells.extend(run_cell(r, name, data, **kwargs) for r in recipes)
    return cells
