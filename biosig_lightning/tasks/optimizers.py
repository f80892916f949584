"""The tasks' optimisers on PyTorch's multi-tensor path: one fused kernel per step, not one per parameter.

PyTorch's default ``Adam``/``AdamW`` on a CPU loops over the parameters in Python, and on any device
its ``foreach`` path still reads each parameter's step count back to the host (``.item()``) for the
bias correction; a model with hundreds of parameter tensors then spends hundreds of launches and host
syncs per optimiser step. ``fused=True`` updates every parameter of a device and dtype in one kernel
(``torch._fused_adam_``/``_fused_adamw_``), with the step count kept on the device, which is also what
lets CUDA graphs capture the step.

:func:`multi_tensor_optimizer` asks for ``fused=True`` and falls back to ``foreach=True`` where the
installed PyTorch or the parameters' device or dtype has no fused kernel (PyTorch raises at
construction then), and under Lightning's automatic mixed precision (``16-mixed``, ``bf16-mixed``):
its ``MixedPrecision`` plugin refuses to clip the gradients of a fused optimiser (which could unscale
them itself), and the paper YAMLs clip. ``foreach`` is one dispatch per operation for all parameters
too; on CUDA its per-parameter step counts stay on the host, so they cost no device sync. The update
is the same algorithm either way (PyTorch's fused and ``foreach`` paths agree with its loop to float
rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from lightning.pytorch.plugins.precision import MixedPrecision

__all__ = ["fused_allowed", "multi_tensor_optimizer"]


def fused_allowed(trainer: Any) -> bool:
    """Whether ``trainer`` (or ``None``) lets a fused optimiser clip its gradients: not under
    Lightning's ``MixedPrecision`` plugin (``16-mixed``, ``bf16-mixed``)."""
    plugin = getattr(trainer, "precision_plugin", None) if trainer is not None else None
    return not isinstance(plugin, MixedPrecision)


def multi_tensor_optimizer(cls: Callable[..., torch.optim.Optimizer],
                           params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], *,
                           trainer: Any = None, **kwargs: Any) -> torch.optim.Optimizer:
    """``cls(params, **kwargs)`` with ``fused=True`` where supported, else ``foreach=True``.

    Args:
        cls: an optimiser class with a ``fused`` and a ``foreach`` argument (``Adam``, ``AdamW``, ``SGD``).
        params: the trainable parameters, or parameter groups (on the device they train on: Lightning
            moves the model before it calls ``configure_optimizers``).
        trainer: the attached Trainer, if any; mixed precision selects ``foreach``.
        **kwargs: the optimiser's hyper-parameters.
    """
    groups: list[Any] = list(params)  # read twice when the fused kernel is refused
    if fused_allowed(trainer):
        try:
            return cls(groups, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):
            pass  # no fused kernel for this PyTorch, device or dtype: the foreach path below
    return cls(groups, foreach=True, **kwargs)
