"""EDF reading: a looping symlink and a truncated file are one line each, with nothing else printed; the
one-pass record reader gives pyedflib's values bit for bit."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyedflib
import pytest
from pyedflib import highlevel

from biosig_lightning.data.corpora import edf
from biosig_lightning.data.corpora.edf import files_fingerprint, read_header, read_signals
from biosig_lightning.data.spec import DataError


def test_a_self_referencing_symlink_is_named(tmp_path: Path) -> None:
    loop = tmp_path / "sub-01.edf"
    os.symlink(loop.name, loop)
    with pytest.raises(DataError, match=rf"^{loop}: a symbolic link that loops$"):
        files_fingerprint([loop], tmp_path)
    with pytest.raises(DataError, match=rf"^{loop}: a symbolic link that loops$"):
        read_header(loop)


def test_a_truncated_edf_is_one_line_and_the_library_prints_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
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


def test_the_record_reader_equals_pyedflib_bit_for_bit_and_steps_aside_for_other_files(
    tmp_path: Path,
) -> None:
    # an EDF+ file with an annotation signal between records, two rates, asymmetric physical/digital ranges
    path = tmp_path / "mixed.edf"
    rng = np.random.default_rng(0)
    headers = highlevel.make_signal_headers(["A", "B", "C"], sample_frequency=100, physical_min=-187.3,
                                            physical_max=241.9, digital_min=-2048, digital_max=2047)
    headers[2]["sample_frequency"] = 1
    signals = [rng.uniform(-180, 240, 1000), rng.uniform(-180, 240, 1000), rng.uniform(-180, 240, 10)]
    assert highlevel.write_edf(str(path), signals, headers, header={"annotations": [[1.0, 0.0, "x"]]})
    reader = pyedflib.EdfReader(str(path))
    try:
        assert reader.filetype == 1 and reader.signals_in_file == 3  # EDF+, the annotation signal not counted
        ours = edf._read_records(path, reader, [2, 0, 1])
        assert ours is not None
        theirs = {i: reader.readSignal(i) for i in range(3)}
        for got, i in zip(ours, [2, 0, 1], strict=True):
            assert got.dtype == np.float64 and np.array_equal(got, theirs[i]), i
    finally:
        reader.close()
    assert np.array_equal(read_signals(path, [1, 0], 100.0),
                          np.stack([theirs[1], theirs[0]]).astype(np.float32))
    # a header that does not describe the bytes (one byte more) goes back to pyedflib's reader
    longer = tmp_path / "longer.edf"
    longer.write_bytes(path.read_bytes() + b"\0")
    reader = pyedflib.EdfReader(str(longer))
    try:
        assert edf._read_records(longer, reader, [0]) is None
    finally:
        reader.close()


def test_recordings_of_keeps_the_chosen_subjects_and_names_a_selection_matching_none(tmp_path: Path) -> None:
    import re
    from types import SimpleNamespace

    recs = [SimpleNamespace(subject=s, night=n) for s in (1, 2, 3) for n in (1, 2)]
    assert edf.recordings_of(recs, None, "sleep_edf", tmp_path) == (None, recs)
    subjects, kept = edf.recordings_of(recs, [3, 1, 3], "sleep_edf", tmp_path)
    assert subjects == [1, 3]
    assert [(r.subject, r.night) for r in kept] == [(1, 1), (1, 2), (3, 1), (3, 2)]
    line = f"mass_ss3: none of subjects [7, 9] has a recording in {tmp_path}"
    with pytest.raises(DataError, match=f"^{re.escape(line)}$"):
        edf.recordings_of(recs, [9, 7], "mass_ss3", tmp_path)
