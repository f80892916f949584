"""``torch.compile`` of a task's backbone, as an option of every task (``model.init_args.compile``).

A paper model's eager training step is a long chain of small kernels (FBAM's band arithmetic, the
encoders' attention, the recurrent cells), so on a GPU it is bound by kernel launches, not by FLOPs.
Compiling the backbone fuses those chains (TorchInductor) and, with ``compile_mode:
reduce-overhead``, replays the whole step as CUDA graphs. The backbone is compiled in place
(``nn.Module.compile``), so its parameter names, checkpoints and ``state_dict`` keys do not change;
the other entry points a task's step calls (:data:`ENTRY_POINTS`: SD-Former's full objective, the
denoiser pair's ``denoise_all``) are compiled too.

``compile``: ``auto`` (the default: compile when the fit runs on a CUDA device; eager on a CPU,
where compiling costs minutes for a step that is compute-bound anyway), ``true`` or ``false``.
``compile_mode``: ``torch.compile``'s ``mode`` (``null`` = its default, ``reduce-overhead``,
``max-autotune``, ``max-autotune-no-cudagraphs``). Every paper model compiles as one graph
(``tests/models/test_compile_fullgraph.py``); a fit does not insist on it (``fullgraph=False``), so a
user's own backbone with a graph break still trains.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

__all__ = [
    "COMPILE_MODES", "ENTRY_POINTS", "CompileSetting", "check_compile_options", "compile_backbone",
    "wants_compile",
]

CompileSetting = bool | Literal["auto"]
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: backbone methods that tasks' steps call besides ``forward`` (``forward_with_aux``: the ``aux``
#: capability; ``denoise_all``: every denoiser of a pair on one batch, eq. 23)
ENTRY_POINTS = ("forward_with_aux", "denoise_all")


def check_compile_options(setting: CompileSetting, mode: str | None) -> None:
    """One clear error for a bad ``model.init_args.compile`` / ``compile_mode``."""
    if setting not in (True, False, "auto"):
        raise ValueError(f"model.init_args.compile must be true, false or 'auto', got {setting!r}")
    if mode not in COMPILE_MODES:
        raise ValueError(f"model.init_args.compile_mode must be one of {list(COMPILE_MODES)}, got {mode!r}")


def wants_compile(setting: CompileSetting, device: torch.device) -> bool:
    """Whether ``setting`` compiles a backbone that trains on ``device`` (``auto``: on CUDA only)."""
    return device.type == "cuda" if setting == "auto" else bool(setting)


def compile_backbone(backbone: nn.Module, setting: CompileSetting, mode: str | None, device: torch.device,
                     backend: str = "inductor") -> bool:
    """Compile ``backbone`` in place when ``setting`` asks for it on ``device``; returns whether it did.
    ``backend``: ``torch.compile``'s (benchmarks check the plumbing on a CPU with ``aot_eager``)."""
    if not wants_compile(setting, device) or getattr(backbone, "_compiled_call_impl", None) is not None:
        return False
    options: dict[str, Any] = {"mode": mode} if backend == "inductor" else {}
    backbone.compile(backend=backend, dynamic=False, **options)
    for name in ENTRY_POINTS:
        method = getattr(backbone, name, None)
        if callable(method):
            # a plain attribute (nn.Module's __setattr__ is typed for tensors and modules only)
            compiled = torch.compile(method, backend=backend, dynamic=False, **options)
            object.__setattr__(backbone, name, compiled)
    return True
