"""Optional CPU backend: what this CPU can accelerate, and the kernels that use it.

numba is the optional compiler of the CPU kernels (``pip install biosig-lightning[fast]``); kernels that
use it fall back to torch where it is absent or where ``BIOSIG_NUMBA=0`` is set in the environment,
with the same results to round-off. Native bfloat16 decides whether ``bf16-mixed`` pays on a CPU.

The kernels: :mod:`biosig_lightning.accel.jacobi` (the SPD preprocessing's batched eigendecompositions,
used by :mod:`biosig_lightning.features.spd` whenever numba is there) and SPDTransNet's CPU training
kernels (:mod:`biosig_lightning.accel.spdtransnet`, :mod:`biosig_lightning.accel.map_kernels`), switched on in
one
place, :func:`enable_spdtransnet_cpu` (the task's ``cpu_kernels: true``); the model itself is plain torch
and never imports this package.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = ["bf16_cpu_warning", "cpu_native_bf16", "enable_spdtransnet_cpu", "enabled", "numba"]


def __getattr__(name: str) -> Any:
    """``accel.numba``: the numba module, or None where it is not installed; imported on first use, since
    importing numba is a noticeable part of a command's start-up and only the kernels need it."""
    if name == "numba":
        try:
            import numba
        except ImportError:
            numba = None  # type: ignore[assignment]  # not installed: the torch path runs
        globals()["numba"] = numba
        return numba
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NUMBA = object()  # enabled()'s default: this environment's numba


def enabled(module: ModuleType | None | object = _NUMBA) -> bool:
    """Whether kernels compiled by ``module`` (numba, ``None`` where absent) may run here."""
    if module is _NUMBA:
        module = __getattr__("numba")
    return module is not None and os.environ.get("BIOSIG_NUMBA", "1") != "0"


def cpu_native_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU multiplies bfloat16 in hardware (the ``avx512_bf16`` or ``amx_bf16`` flag of Linux's
    ``/proc/cpuinfo``); ``None`` where that file cannot be read (another OS: unknown)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def bf16_cpu_warning(precision: str, device_type: str, native: bool | None) -> str | None:
    """The warning for a bfloat16 run on a CPU that emulates bfloat16 (``native`` False), else ``None``.

    Without the instructions, oneDNN converts to float32 around each product, and a ``bf16-mixed`` step
    can take longer than a float32 one.
    """
    if device_type != "cpu" or not str(precision).startswith("bf16") or native is not False:
        return None
    return (f"trainer.precision={precision} on a CPU without bfloat16 instructions (no avx512_bf16 or "
            f"amx_bf16 "
            "in /proc/cpuinfo): bfloat16 products are emulated and may be slower than float32; "
            "drop --trainer.precision to train in float32")


def enable_spdtransnet_cpu(model: nn.Module) -> int:
    """Run SPDTransNet's encoder layers inside ``model`` through the CPU kernels of
    :mod:`biosig_lightning.accel.spdtransnet` (same parameters, same mathematics); returns how many
    layers were switched. For a model that trains on a CPU: the kernels are CPU-only."""
    from biosig_lightning.accel import spdtransnet

    return spdtransnet.enable(model)
