"""numba, the optional compiler of the CPU kernels (``pip install biosig-lightning[fast]``).

The kernels that use it (:mod:`biosig_lightning.features.jacobi`,
:mod:`biosig_lightning.models.spdtransnet.map_kernels`) fall back to torch where it is absent or where
``BIOSIG_NUMBA=0`` is set in the environment, with the same results to round-off.
"""

from __future__ import annotations

import os
from types import ModuleType

try:
    import numba
except ImportError:
    numba = None

__all__ = ["enabled", "numba"]


def enabled(module: ModuleType | None = numba) -> bool:
    """Whether kernels compiled by ``module`` (numba, ``None`` where absent) may run here."""
    return module is not None and os.environ.get("BIOSIG_NUMBA", "1") != "0"
