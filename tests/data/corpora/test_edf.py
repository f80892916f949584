"""EDF reading: a looping symlink and a truncated file are one line each, with nothing else printed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from pyedflib import highlevel

from biosig_lightning.data.corpora.edf import files_fingerprint, read_header
from biosig_lightning.data.spec import DataError


def test_a_self_referencing_symlink_is_named(tmp_path: Path) -> None:
    loop = tmp_path / "sub-01.edf"
    os.symlink(loop.name, loop)
    with pytest.raises(DataError, match=rf"^{loop}: a symbolic link that loops$"):
        files_fingerprint([loop], tmp_path)
    with pytest.raises(DataError, match=rf"^{loop}: a symbolic link that loops$"):
        read_header(loop)


def test_a_truncated_edf_is_one_line_and_the_library_prints_nothing(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    whole = tmp_path / "whole.edf"
    headers = highlevel.make_signal_headers(["C3", "C4"], sample_frequency=64)
    assert highlevel.write_edf(str(whole), [np.zeros(640), np.ones(640)], headers)
    cut = tmp_path / "cut.edf"
    cut.write_bytes(whole.read_bytes()[:1500])
    capfd.readouterr()
    with pytest.raises(DataError, match=rf"^{cut}: not a readable EDF/EDF\+ file"):
        read_header(cut)
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == "", printed
