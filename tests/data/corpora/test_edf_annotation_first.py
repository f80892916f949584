"""An EDF+ file whose annotation signal comes FIRST, written byte by byte here (not by pyedflib's writer,
which always puts it last), read by our record reader against ``pyedflib.EdfReader.readSignal``.

The layout is the EDF+ specification's (Kemp & Olivan 2003, "European data format 'plus' (EDF+)",
sections 2.1 and 2.2): a 256-byte fixed header, 256 bytes per signal, then data records holding each
signal's samples in header order, the annotation signal's samples being time-stamped annotation
lists (TALs) whose first entry keeps each record's onset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyedflib

from biosig_lightning.data.corpora.edf import read_annotations, read_signals

N_RECORDS = 4
PER_RECORD = {"A": 10, "B": 10}  # 10 Hz, 1-s records
ANNOT_BYTES = 60  # 30 "samples" of 2 bytes


def _field(values: list[str], width: int) -> bytes:
    return b"".join(v.encode("ascii").ljust(width) for v in values)


def _write(path: Path, digital: dict[str, np.ndarray]) -> None:
    labels = ["EDF Annotations", "A", "B"]
    per_record = [ANNOT_BYTES // 2, PER_RECORD["A"], PER_RECORD["B"]]
    fixed = (
        b"0".ljust(8)
        + b"X X X X".ljust(80)
        + b"Startdate 01-JAN-2020 X X X".ljust(80)
        + b"01.01.20"
        + b"10.00.00"
        + str(256 * (len(labels) + 1)).encode().ljust(8)
        + b"EDF+C".ljust(44)
        + str(N_RECORDS).encode().ljust(8)
        + b"1".ljust(8)
        + str(len(labels)).encode().ljust(4)
    )
    signals = (
        _field(labels, 16)
        + _field(["", "AgAgCl", "AgAgCl"], 80)
        + _field(["", "uV", "uV"], 8)
        + _field(["-1", "-200", "-50"], 8)
        + _field(["1", "200", "350"], 8)  # physical min / max
        + _field(["-32768", "-2048", "-1000"], 8)
        + _field(["32767", "2047", "3000"], 8)  # digital min / max
        + _field(["", "", ""], 80)
        + _field([str(n) for n in per_record], 8)
        + _field(["", "", ""], 32)
    )
    assert len(fixed) == 256 and len(signals) == 256 * len(labels)
    records = []
    for r in range(N_RECORDS):
        tal = f"+{r}\x14\x14\x00".encode() + (b"+1.5\x150.5\x14spike\x14\x00" if r == 1 else b"")
        records.append(tal.ljust(ANNOT_BYTES, b"\x00"))
        for name in ("A", "B"):
            n = PER_RECORD[name]
            records.append(digital[name][r * n:(r + 1) * n].astype("<i2").tobytes())
    path.write_bytes(fixed + signals + b"".join(records))


def test_signals_after_a_leading_annotation_signal_read_as_pyedflib_reads_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    digital = {"A": rng.integers(-2048, 2048, N_RECORDS * 10), "B": rng.integers(-1000, 3001, N_RECORDS * 10)}
    path = tmp_path / "annotations_first.edf"
    _write(path, digital)
    reader = pyedflib.EdfReader(str(path))
    try:
        assert reader.filetype == 1 and list(reader.getSignalLabels()) == ["A", "B"]
        theirs = [reader.readSignal(0), reader.readSignal(1)]
    finally:
        reader.close()
    # the values are the file's own, scaled: A spans [-200, 200] uV over its digital range, B [-50, 350]
    np.testing.assert_allclose(theirs[0], -200 + (digital["A"] + 2048) * 400 / 4095, rtol=1e-9)
    np.testing.assert_allclose(theirs[1], -50 + (digital["B"] + 1000) * 400 / 4000, rtol=1e-9)
    ours = read_signals(path, [1, 0], 10.0)
    assert np.array_equal(ours, np.stack([theirs[1], theirs[0]]).astype(np.float32))
    _, annotations = read_annotations(path)
    assert [(a.onset, a.duration, a.text) for a in annotations] == [(1.5, 0.5, "spike")]
