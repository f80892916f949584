"""``.npy`` files read only after their header is checked against the file's size.

A ``.npy`` header states the array's shape and dtype; ``np.load`` allocates what it states before
reading (or maps it), so a header of a few bytes can ask for terabytes. :func:`load_npy` reads the
header (:func:`numpy.lib.format.read_array_header_1_0` / ``_2_0``), and refuses a file whose data
is not exactly the bytes the header promises, naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.lib import format as npy_format


class NpyError(ValueError):
    """A ``.npy`` file that is not what its header says (one line naming the file)."""


def npy_header(path: str | Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of the ``.npy`` file ``path``, checked against its size."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            major, _ = npy_format.read_magic(fh)
            read = npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0
            shape, _, dtype = read(fh, max_header_size=10_000)
            offset = fh.tell()
    except (ValueError, OSError, EOFError, SyntaxError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise NpyError(
            f"{path}: cannot read as a numeric .npy array (not a readable .npy file: {reason})"
        ) from None
    if dtype.hasobject:
        raise NpyError(
            f"{path}: cannot read as a numeric .npy array (it holds Python objects, dtype {dtype})"
        )
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = path.stat().st_size - offset
    if need != have:
        raise NpyError(f"{path}: cannot read as a numeric .npy array (its header says shape {tuple(shape)} "
                       f"of {dtype}, "
                       f"{need:,} bytes, but the file holds {have:,} bytes of data: truncated or not written "
                       f"by np.save)")
    return tuple(shape), dtype, offset


def load_npy(path: str | Path, mmap_mode: Literal["r"] | None = None) -> Any:
    """``np.load(path, allow_pickle=False, mmap_mode=mmap_mode)`` after :func:`npy_header` checked it."""
    npy_header(path)
    return np.load(path, allow_pickle=False, mmap_mode=mmap_mode)
