"""The tasks' optimisers take the fused multi-tensor path: a step is O(1) dispatches in the parameters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.utils._python_dispatch import TorchDispatchMode

from biosig_lightning.models.baselines import CNN1D
from biosig_lightning.tasks import ClassificationTask
from biosig_lightning.tasks.optimizers import multi_tensor_optimizer


class _Count(TorchDispatchMode):
    """Non-view operators dispatched while active (each a kernel launch on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.calls += 0 if func.is_view else 1
        return func(*args, **(kwargs or {}))


def _step_calls(n_blocks: int, optimizer: str) -> tuple[int, int, torch.optim.Optimizer]:
    net = CNN1D(n_chans=2, n_outputs=3, n_times=32, sfreq=32.0, width=8, n_blocks=n_blocks)
    task = ClassificationTask(backbone=net, n_outputs=3, optimizer=optimizer)
    opt = task.build_optimizer()
    task.training_loss({"x": torch.randn(4, 2, 32), "y": torch.tensor([0, 1, 2, 1])})[0].backward()
    opt.step()  # the moments are created lazily at the first step
    counter = _Count()
    with counter:
        opt.step()
    return counter.calls, sum(1 for p in task.parameters() if p.requires_grad), opt


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
def test_task_optimizer_step_is_constant_in_parameter_tensors(optimizer: str) -> None:
    small, n_small, opt = _step_calls(1, optimizer)
    large, n_large, _ = _step_calls(4, optimizer)
    assert n_large >= n_small + 6  # the deeper net has more parameter tensors ...
    assert large == small <= 6  # ... and its step dispatches exactly as many calls: no per-tensor loop
    assert opt.param_groups[0]["fused"] is True  # this PyTorch has the CPU kernel (>= 2.4)


class _NoFusedKernel(torch.optim.AdamW):
    """AdamW as PyTorch builds it where the device or version has no fused kernel: it raises."""

    def __init__(self, params, fused: bool | None = None, **kwargs) -> None:  # noqa: ANN001
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be of supported devices")
        super().__init__(params, **kwargs)


@pytest.mark.parametrize("plugin", [MixedPrecision("bf16-mixed", "cpu"),
                                    MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
def test_mixed_precision_and_missing_kernel_fall_back_to_foreach(plugin: MixedPrecision) -> None:
    params = [torch.nn.Parameter(torch.randn(3))]
    # Lightning's MixedPrecision.clip_gradients refuses a fused optimiser, and the paper YAMLs clip
    opt = multi_tensor_optimizer(torch.optim.AdamW, params, trainer=SimpleNamespace(precision_plugin=plugin),
                                 lr=1e-3)
    assert opt.param_groups[0]["foreach"] is True and not opt.param_groups[0]["fused"]
    opt = multi_tensor_optimizer(_NoFusedKernel, params, lr=1e-3)
    assert opt.param_groups[0]["foreach"] is True and not opt.param_groups[0]["fused"]
