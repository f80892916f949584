"""Train-step throughput of the baseline backbones: the rate the loader has to keep up with.

One step is what a training epoch repeats: ``zero_grad``, forward, cross-entropy, backward
and an AdamW step (``lr=1e-3, weight_decay=1e-2``, the defaults of
:class:`~biosig_lightning.tasks.ClassificationTask`). Each model is timed twice:

* ``bare``: the ``nn.Module`` and ``torch.nn.functional.cross_entropy`` directly;
* ``task``: through ``ClassificationTask.training_loss`` and ``build_optimizer`` (what
  ``training_step`` runs, less Lightning's logging), to show the task adds nothing measurable.

The batch is a fixed random tensor of the loader's shape: the loader is timed separately,
so here only the model's compute counts. The figure is the median over up to ``steps``
steps after ``warmup`` untimed ones; with ``budget_s`` set, timing stops early (after at
least ``min_steps``) once that many seconds are spent, so a slow model on a busy machine
does not run for many minutes. ``--quick`` times batch 16 to stay under a minute; the
Transformer's samples per second are higher there than at batch 64 (its 256-token attention
maps grow with the batch), so quick ratios are a smoke check, not the reported figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.models.baselines import CNN1D, TransformerClassifier
from biosig_lightning.tasks import ClassificationTask

#: the backbones timed, at their default sizes
MODELS: dict[str, type[nn.Module]] = {"CNN1D": CNN1D, "TransformerClassifier": TransformerClassifier}


def _time_steps(step: Callable[[], None], warmup: int, steps: int, budget_s: float | None,
                min_steps: int) -> list[float]:
    """Seconds of up to ``steps`` timed steps; stops early, after ``min_steps``, once ``budget_s`` is
    spent."""
    for _ in range(warmup):
        step()
    times: list[float] = []
    while len(times) < steps:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if budget_s is not None and len(times) >= min_steps and sum(times) > budget_s:
            break
    return times


def bench_model(name: str, n_chans: int = 16, n_times: int = 256, n_outputs: int = 2, sfreq: float = 256.0,
                batch_size: int = 64, warmup: int = 3, steps: int = 20, via_task: bool = True,
                budget_s: float | None = None, min_steps: int = 3, seed: int = 0) -> dict[str, Any]:
    """Milliseconds per train step and samples per second of one baseline (see the module docstring)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, n_chans, n_times, generator=gen)
    y = torch.randint(0, n_outputs, (batch_size,), generator=gen)
    backbone = MODELS[name](n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq)
    backbone.train()
    out: dict[str, Any] = {"params": sum(p.numel() for p in backbone.parameters() if p.requires_grad)}

    opt = torch.optim.AdamW(backbone.parameters(), lr=1e-3, weight_decay=1e-2)

    def bare_step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(backbone(x), y).backward()
        opt.step()

    paths: dict[str, Callable[[], None]] = {"bare": bare_step}
    if via_task:
        task = ClassificationTask(backbone=backbone, n_outputs=n_outputs)
        task.train()
        task_opt = task.build_optimizer()
        batch = {"x": x, "y": y}

        def task_step() -> None:
            task_opt.zero_grad(set_to_none=True)
            task.training_loss(batch)[0].backward()
            task_opt.step()

        paths["task"] = task_step

    for path, step in paths.items():
        # the task path runs the already warmed-up backbone: one untimed step warms its optimiser
        times = _time_steps(step, warmup if path == "bare" else min(warmup, 1), steps, budget_s, min_steps)
        ms = float(np.median(times)) * 1000
        out[path] = {"ms_per_step_median": ms, "ms_per_step_min": min(times) * 1000,
                     "ms_per_step_max": max(times) * 1000, "samples_per_s": batch_size / (ms / 1000),
                     "steps": len(times), "warmup": warmup if path == "bare" else min(warmup, 1)}
    return out


def bench_train_steps(batch_size: int = 64, warmup: int = 3, steps: int = 20, via_task: bool = True,
                      budget_s: float | None = None, min_steps: int = 3, log: Callable[[str], None] = print,
                      **shape: Any) -> dict[str, Any]:
    """:func:`bench_model` for every entry of :data:`MODELS`."""
    results = {}
    for name in MODELS:
        log(f"train step: {name}")
        results[name] = bench_model(name, batch_size=batch_size, warmup=warmup, steps=steps,
                                    via_task=via_task, budget_s=budget_s, min_steps=min_steps, **shape)
        log(f"train step: {name} {results[name]['bare']['ms_per_step_median']:.1f} ms/step")
    return results
