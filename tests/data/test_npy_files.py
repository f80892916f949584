"""``.npy`` files: a header that claims more than the file holds is refused in one line before any
allocation; a well-formed file loads unchanged."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data.npy_files import NpyError, load_npy


def _npy_with_header(path: Path, shape: tuple[int, ...], data: bytes) -> Path:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + data)
    return path


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_npy_header_claiming_more_than_the_file_holds_is_refused(
    tmp_path: Path, mmap_mode: str | None
) -> None:
    path = _npy_with_header(tmp_path / "huge.npy", (10**12, 4), bytes(64))
    with pytest.raises(NpyError,
                       match=r"huge.npy: .*shape \(1000000000000, 4\) of float32, 16,000,000,000,000 bytes, "
                                       r"but the file holds 64 bytes"):
        load_npy(path, mmap_mode=mmap_mode)


def test_a_well_formed_npy_loads_unchanged(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    np.testing.assert_array_equal(load_npy(tmp_path / "x.npy"), x)
    np.testing.assert_array_equal(load_npy(tmp_path / "x.npy", mmap_mode="r"), x)
    assert os.path.getsize(tmp_path / "x.npy") > 48
