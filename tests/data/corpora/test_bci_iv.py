"""Tests for the BCI Competition IV 2a/2b reader, on tiny files in both public formats.

The BNCI .mat fixtures are written with scipy.io.savemat in the release's structure (cell array
``data`` of run structs). The GDF fixtures are real GDF 1.25 files (the version of the
competition files) from the small writer below, read back through mne.io.read_raw_gdf: no
monkeypatching.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from biosig_lightning.data.corpora.bci_iv import (
    BCI2A,
    BCI2B,
    SPLIT_RULE,
    SYNTHETIC_DEFAULTS,
    BCIIVReader,
)
from biosig_lightning.data.spec import CorpusReader, DataError

FS = 250
TRIAL_S = 8  # trial-to-trial spacing in the fixtures
A_CHANNELS = (["EEG-Fz"] + [f"EEG-{i}" for i in range(6)] + ["EEG-C3", "EEG-6", "EEG-Cz", "EEG-7", "EEG-C4"]
              + [f"EEG-{i}" for i in range(8, 15)] + ["EEG-Pz", "EEG-15", "EEG-16", "EOG-left", "EOG-central",
                                                        "EOG-right"])
B_CHANNELS = ["EEG:C3", "EEG:Cz", "EEG:C4", "EOG:ch01", "EOG:ch02", "EOG:ch03"]
A_PICK, B_PICK = (7, 9, 11), (0, 1, 2)
CLASSES_2A = np.array(["left hand", "right hand", "feet", "tongue"], dtype=object)
CLASSES_2B = np.array(["left hand", "right hand"], dtype=object)


# ---------------------------------------------------------------------------- fixture writers
A_UV, SLOPE = 1000.0, 50.0  # µV and µV/s of the time code (within the GDF fixture's int16 range)


def make_signal(n_trials: int, n_ch: int, pick: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """(samples, channels) µV that encode time, t in seconds from the recording's start: the picked
    channels (C3, Cz, C4) carry ``A + s t``, ``A - s t`` and ``300 + a 5 Hz sine``, every other
    channel a large distinct offset plus noise. :func:`decode_time` reads t back from a window
    whatever the anti-aliasing filter's DC gain, so a window cut at a wrong onset (even by a whole
    number of 5 Hz periods), a shifted sample grid, or a wrong or swapped channel pick shows."""
    n = (n_trials + 1) * TRIAL_S * FS
    t = np.arange(n) / FS
    rng = np.random.default_rng(seed)
    x = np.empty((n, n_ch))
    for c in range(n_ch):
        x[:, c] = 1000.0 + 10 * c + rng.standard_normal(n)
    x[:, pick[0]] = A_UV + SLOPE * t
    x[:, pick[1]] = A_UV - SLOPE * t
    x[:, pick[2]] = 300.0 + 20 * np.sin(2 * np.pi * 5 * t)
    return x


def decode_time(x: np.ndarray) -> np.ndarray:
    """(windows, 3, T) -> (windows, T) seconds: t = (A / s) (C3 - Cz) / (C3 + Cz), free of any common gain."""
    x = x.astype(np.float64)
    return A_UV / SLOPE * (x[:, 0] - x[:, 1]) / (x[:, 0] + x[:, 1])


def assert_windows_at(x: np.ndarray, cues: np.ndarray, step: int = 4, tmin: float = 0.0) -> None:
    """Window k's sample j lies at raw sample ``cues[k] + tmin * FS + j * step`` of the recording
    (to 1/2 raw sample), and the third channel is C4 (offset 300; the filter passes DC at ~0.9886)."""
    want = (np.asarray(cues)[:, None] + tmin * FS + np.arange(x.shape[-1])[None] * step) / FS
    np.testing.assert_allclose(decode_time(x), want, atol=0.5 / FS)
    np.testing.assert_allclose(x[:, 2].mean(-1), 300, rtol=0.015)


def trial_starts(n_trials: int) -> np.ndarray:
    """0-based trial-start samples: 1 s, 9 s, 17 s ..."""
    return FS + np.arange(n_trials) * TRIAL_S * FS


def run_struct(X: np.ndarray, starts0: np.ndarray, y: np.ndarray, classes: np.ndarray,
               artifacts: np.ndarray | None = None) -> dict:
    return {"X": X, "trial": (starts0 + 1).reshape(-1, 1), "y": np.asarray(y).reshape(-1, 1), "fs": FS,
            "classes": classes,
            "artifacts": (np.zeros(len(y)) if artifacts is None else artifacts).reshape(-1, 1),
            "gender": "f", "age": 30}


def calibration_run(n_ch: int) -> dict:
    return {"X": np.zeros((500, n_ch)), "trial": np.zeros((0, 0)), "y": np.zeros((0, 0)), "fs": FS,
            "classes": np.zeros((0, 0)), "artifacts": np.zeros((0, 0)), "gender": "f", "age": 30}


def write_bnci(path: Path, runs: list[dict]) -> None:
    cell = np.empty((1, len(runs)), dtype=object)
    for i, r in enumerate(runs):
        cell[0, i] = r
    sio.savemat(path, {"data": cell})


def write_gdf(path: Path, data_uv: np.ndarray, ch_names: list[str], events: list[tuple[int, int]]) -> None:
    """A minimal GDF 1.25 file: int16 samples in 1-s records, µV, event table mode 1.

    data_uv: (samples, channels); events: (0-based sample, event code).
    """
    n_s, n_ch = data_uv.shape
    n_rec = -(-n_s // FS)
    padded = np.zeros((n_rec * FS, n_ch))
    padded[:n_s] = data_uv
    pmin, pmax, dmin, dmax = -3276.8, 3276.7, -32768, 32767
    dig = np.clip(np.round((padded - pmin) / (pmax - pmin) * (dmax - dmin) + dmin), dmin, dmax).astype("<i2")

    def text(s: str, n: int) -> bytes:
        return s.encode("latin-1")[:n].ljust(n, b" ")

    fixed = b"".join(
        [
            b"GDF 1.25",
            text("X X", 80),
            text("fixture", 80),
            text("2005010100000000", 16),
            np.int64(256 * (n_ch + 1)).tobytes(),
            bytes(24),
            bytes(20),  # header size, equipment/hospital/technician
            np.int64(n_rec).tobytes(),
            np.array([1, 1], "<u4").tobytes(),
            np.uint32(n_ch).tobytes(),
        ]
    )
    variable = b"".join([
        b"".join(text(c, 16) for c in ch_names), text("", 80) * n_ch, text("uV", 8) * n_ch,
        np.full(n_ch, pmin, "<f8").tobytes(), np.full(n_ch, pmax, "<f8").tobytes(),
        np.full(n_ch, dmin, "<i8").tobytes(), np.full(n_ch, dmax, "<i8").tobytes(),
        text("", 80) * n_ch, np.full(n_ch, FS, "<i4").tobytes(), np.full(n_ch, 3, "<i4").tobytes(),  # int16
        bytes(32 * n_ch)])
    assert len(fixed) == 256 and len(variable) == 256 * n_ch
    records = dig.reshape(n_rec, FS, n_ch).transpose(0, 2, 1).tobytes()
    pos = np.array([e[0] + 1 for e in events], "<u4")
    typ = np.array([e[1] for e in events], "<u2")
    table = (
        bytes([1])
        + FS.to_bytes(3, "little")
        + np.uint32(len(events)).tobytes()
        + pos.tobytes()
        + typ.tobytes()
    )
    path.write_bytes(fixed + variable + records + table)


def gdf_events(starts0: np.ndarray, cue_codes: list[int], cue_delay_s: float,
               rejected: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    ev = []
    for i, (s, code) in enumerate(zip(starts0, cue_codes, strict=True)):
        ev.append((int(s), 768))
        if i in rejected:
            ev.append((int(s), 1023))
        ev.append((int(s + cue_delay_s * FS), code))
    return ev


@pytest.fixture
def bnci_2a(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A01T.mat (calibration run + 4 trials, one marked) and A01E.mat (3 trials)."""
    X = make_signal(4, 25, A_PICK)
    write_bnci(tmp_path / "A01T.mat", [calibration_run(25),
                                       run_struct(X, trial_starts(4), np.array([1, 2, 3, 4]), CLASSES_2A,
                                                  artifacts=np.array([0, 1, 0, 0]))])
    write_bnci(tmp_path / "A01E.mat", [run_struct(X, trial_starts(3), np.array([4, 4, 2]), CLASSES_2A)])
    return tmp_path, X


# ---------------------------------------------------------------------------- constants
def test_specs_split_and_synthetic_defaults() -> None:
    for spec, k in ((BCI2A, 4), (BCI2B, 2)):
        assert spec.ch_names == ("C3", "Cz", "C4") and spec.sfreq == 62.5 and spec.n_times == 250
        assert spec.n_outputs == k and spec.label_level == "window"
    assert SPLIT_RULE == {"kind": "fixed", "val": [6, 8], "test": [7, 9]}
    for d in SYNTHETIC_DEFAULTS.values():
        assert d["n_subjects"] == 9 and d["signal"] in ("bands", "motif")


# ---------------------------------------------------------------------------- BNCI .mat
def test_mat_2a_windows_labels_channels(bnci_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = bnci_2a
    reader = BCIIVReader(root, "2a", subjects=[1])
    assert isinstance(reader, CorpusReader) and reader.format == "mat"
    blocks = list(reader.iter_blocks())
    assert [(b.subject, b.recording) for b in blocks] == [(1, "A01T_run2"), (1, "A01E_run1")]
    train, evaluation = blocks
    assert train.x.shape == (4, 3, 250) and train.x.dtype == np.float32
    assert train.y.tolist() == [0, 1, 2, 3] and evaluation.y.tolist() == [3, 3, 1]
    # window = [cue, cue + 4 s), cue = trial start + 2 s
    np.testing.assert_allclose(train.start, (trial_starts(4) + 2 * FS) / FS)
    # the samples are those of [cue, cue + 4 s) every 4th raw sample, from C3, Cz, C4 in that order
    assert_windows_at(train.x, trial_starts(4) + 2 * FS)
    assert_windows_at(evaluation.x, trial_starts(3) + 2 * FS)


def test_mat_decimation_is_antialiased(tmp_path: Path) -> None:
    n = 3 * TRIAL_S * FS
    t = np.arange(n) / FS
    X = np.zeros((n, 25))
    X[:, 7] = np.sin(2 * np.pi * 5 * t) + np.sin(2 * np.pi * 50 * t)  # 50 Hz > new Nyquist 31.25 Hz
    write_bnci(tmp_path / "A01T.mat", [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)])
    write_bnci(tmp_path / "A01E.mat", [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)])
    block = next(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())
    assert block.x.shape[-1] == 250
    cue = trial_starts(2)[0] + 2 * FS
    t_dec = (cue + 4 * np.arange(250)) / FS
    # the 5 Hz part survives, the 50 Hz part (which would alias to 12.5 Hz) is gone
    np.testing.assert_allclose(block.x[0, 0], np.sin(2 * np.pi * 5 * t_dec), atol=0.02)
    assert np.abs(block.x[0, 1:]).max() == 0.0

    raw = next(BCIIVReader(tmp_path, "2a", subjects=[1], decimation=1, tmin=0.5, tmax=2.5).iter_blocks())
    assert raw.x.shape == (2, 3, 500)
    np.testing.assert_allclose(raw.x[0, 0], X[cue + FS // 2: cue + FS // 2 + 500, 7], atol=1e-6)


def test_decimation_changes_spec_and_config(bnci_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = bnci_2a
    r = BCIIVReader(root, "2a", subjects=[1], decimation=2, tmin=0.5, tmax=3.5)
    assert (r.spec.sfreq, r.spec.n_times) == (125.0, 375)
    cfg = r.config()
    assert json.loads(json.dumps(cfg)) == cfg
    assert cfg["root"] == str(root.resolve()) and cfg["spec"]["n_times"] == 375
    assert cfg["options"] == {"dataset": "2a", "format": "mat", "tmin": 0.5, "tmax": 3.5, "decimation": 2,
                              "subjects": [1], "drop_rejected": False, "labels_dir": None}
    assert cfg["files"]["n_files"] == 2 and len(cfg["files"]["sha256"]) == 64
    assert BCIIVReader(root, "2a", subjects=[1], decimation=2, tmin=0.5, tmax=3.5).config() == cfg
    assert BCIIVReader(root, "2a", subjects=[1]).config() != cfg
    train = next(r.iter_blocks())  # [cue + 0.5 s, cue + 3.5 s), every 2nd raw sample
    assert_windows_at(train.x, trial_starts(4) + 2 * FS, step=2, tmin=0.5)
    with pytest.raises(ValueError, match="whole number of samples"):
        BCIIVReader(root, "2a", subjects=[1], tmin=0, tmax=1.001)


def test_mat_drop_rejected(bnci_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = bnci_2a
    kept = list(BCIIVReader(root, "2a", subjects=[1]).iter_blocks())
    dropped = list(BCIIVReader(root, "2a", subjects=[1], drop_rejected=True).iter_blocks())
    assert len(kept[0].y) == 4 and dropped[0].y.tolist() == [0, 2, 3]
    np.testing.assert_array_equal(dropped[0].x, kept[0].x[[0, 2, 3]])


def test_mat_2b_runs_are_sessions(tmp_path: Path) -> None:
    X = make_signal(2, 6, B_PICK)
    runs = [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2B) for _ in range(3)]
    write_bnci(tmp_path / "B01T.mat", runs)
    write_bnci(tmp_path / "B01E.mat", runs[:2])
    blocks = list(BCIIVReader(tmp_path, "2b", subjects=[1]).iter_blocks())
    assert [b.recording for b in blocks] == ["B01T_run1", "B01T_run2", "B01T_run3", "B01E_run1", "B01E_run2"]
    assert all(b.y.tolist() == [0, 1] for b in blocks)
    np.testing.assert_allclose(blocks[0].start, (trial_starts(2) + 3 * FS) / FS)  # 2b cue at +3 s
    for b in blocks:
        assert_windows_at(b.x, trial_starts(2) + 3 * FS)


# ---------------------------------------------------------------------------- .mat errors
def test_missing_root_and_missing_files(tmp_path: Path, bnci_2a: tuple[Path, np.ndarray]) -> None:
    with pytest.raises(DataError, match=r"nope: BCI IV 2a root does not exist.*A01T.mat.*A01T.gdf"):
        BCIIVReader(tmp_path / "nope", "2a")
    with pytest.raises(DataError, match=r"missing A02T.mat, A02E.mat; expected the BNCI Horizon .mat files"):
        BCIIVReader(tmp_path, "2a", subjects=[1, 2])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no BCI IV 2b files found; expected .*B01T.mat.*B0101T.gdf"):
        BCIIVReader(tmp_path / "empty", "2b")


def _bad_run(tmp_path: Path, **override) -> BCIIVReader:
    X = make_signal(2, 25, A_PICK)
    run = run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)
    run.update(override)
    write_bnci(tmp_path / "A01T.mat", [run])
    write_bnci(tmp_path / "A01E.mat", [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)])
    return BCIIVReader(tmp_path, "2a", subjects=[1], format="mat")


@pytest.mark.parametrize("override, pattern", [
    ({"X": np.zeros((9000, 22))}, r"A01T.mat \(run 1\): X has shape \(9000, 22\); expected \(samples, 25\)"),
    ({"fs": 500}, r"A01T.mat \(run 1\): sampling rate 500 Hz; BCI IV 2a is recorded at 250 Hz"),
    ({"y": np.array([[1], [5]])}, r"A01T.mat \(run 1\): label 5 outside 1..4"),
    ({"y": np.array([[1], [2], [3]])}, r"A01T.mat \(run 1\): 2 trial onsets but 3 labels"),
    ({"classes": np.array(["right hand", "left hand", "feet", "tongue"], dtype=object)},
     r"A01T.mat \(run 1\): classes \['right hand', 'left hand', 'feet', 'tongue'\] do not match"),
    ({"trial": np.array([[1], [8000]])}, r"A01T.mat \(run 1\): trial 2 window \[33.996, 37.996\) s lies "
                                         r"outside the recording \(0 to 24 s\)"),
])
def test_bad_mat_run(tmp_path: Path, override: dict, pattern: str) -> None:
    reader = _bad_run(tmp_path, **override)
    with pytest.raises(DataError, match=pattern):
        list(reader.iter_blocks())


def test_mat_missing_field_and_nan(tmp_path: Path) -> None:
    X = make_signal(2, 25, A_PICK)
    run = run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)
    del run["fs"]
    write_bnci(tmp_path / "A01T.mat", [run])
    write_bnci(tmp_path / "A01E.mat", [run])
    with pytest.raises(DataError, match=r"A01T.mat \(run 1\): run struct lacks field 'fs'"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())

    X[trial_starts(2)[1] + 2 * FS + 10, 9] = np.nan  # Cz, inside trial 2's window
    write_bnci(tmp_path / "A01T.mat", [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)])
    with pytest.raises(DataError,
                       match=r"A01T.mat \(run 1\): NaN/Inf in channel 'Cz' in trial 2 \(t=11.04 s\)"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())


def test_mat_without_data_variable_hints_at_label_file(tmp_path: Path) -> None:
    sio.savemat(tmp_path / "A01T.mat", {"classlabel": np.array([1, 2])})
    sio.savemat(tmp_path / "A01E.mat", {"classlabel": np.array([1, 2])})
    with pytest.raises(DataError,
                       match=r"A01T.mat: no variable 'data' \(found \['classlabel'\]\).*true-label file"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1], format="mat").iter_blocks())
    (tmp_path / "A01T.mat").write_bytes(b"not a mat file")
    with pytest.raises(DataError, match=r"A01T.mat: cannot read as a MATLAB v5 file"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1], format="mat").iter_blocks())


def test_drop_rejected_needs_artifacts(tmp_path: Path) -> None:
    X = make_signal(2, 25, A_PICK)
    run = run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)
    del run["artifacts"]
    write_bnci(tmp_path / "A01T.mat", [run])
    write_bnci(tmp_path / "A01E.mat", [run])
    assert len(list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())) == 2
    with pytest.raises(DataError,
                       match=r"A01T.mat \(run 1\): drop_rejected=True but the run has no 'artifacts'"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1], drop_rejected=True).iter_blocks())


# ---------------------------------------------------------------------------- GDF
@pytest.fixture
def gdf_2a(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A01T.gdf (4 trials, cues 769..772, trial 2 rejected), A01E.gdf (3 trials, cues 783) and the
    true-label files A01T.mat / A01E.mat (classlabel) in a separate labels directory."""
    X = make_signal(4, 25, A_PICK)
    starts = trial_starts(4)
    write_gdf(tmp_path / "A01T.gdf", X, A_CHANNELS,
              gdf_events(starts, [769, 770, 771, 772], 2.0, rejected=(1,)))
    write_gdf(tmp_path / "A01E.gdf", X, A_CHANNELS, gdf_events(starts[:3], [783] * 3, 2.0))
    labels = tmp_path / "true_labels"
    labels.mkdir()
    sio.savemat(labels / "A01T.mat", {"classlabel": np.array([1, 2, 3, 4], dtype=np.uint8).reshape(-1, 1)})
    sio.savemat(labels / "A01E.mat", {"classlabel": np.array([4, 4, 2], dtype=np.uint8).reshape(-1, 1)})
    return tmp_path, X


def test_gdf_2a_reads_like_the_mat_release(gdf_2a: tuple[Path, np.ndarray], tmp_path_factory) -> None:
    root, X = gdf_2a
    reader = BCIIVReader(root, "2a", subjects=[1], labels_dir=root / "true_labels")
    assert reader.format == "gdf"
    train, evaluation = reader.iter_blocks()
    assert (train.recording, evaluation.recording) == ("A01T", "A01E")
    assert train.y.tolist() == [0, 1, 2, 3] and evaluation.y.tolist() == [3, 3, 1]
    np.testing.assert_allclose(train.start, (trial_starts(4) + 2 * FS) / FS)
    assert_windows_at(train.x, trial_starts(4) + 2 * FS)
    assert_windows_at(evaluation.x, trial_starts(3) + 2 * FS)

    mat_root = tmp_path_factory.mktemp("mat")
    write_bnci(mat_root / "A01T.mat", [run_struct(X, trial_starts(4), np.array([1, 2, 3, 4]), CLASSES_2A)])
    write_bnci(mat_root / "A01E.mat", [run_struct(X, trial_starts(3), np.array([4, 4, 2]), CLASSES_2A)])
    mat_train, mat_eval = BCIIVReader(mat_root, "2a", subjects=[1]).iter_blocks()
    # same windows from both releases, up to the GDF fixture's 0.1 µV int16 resolution
    np.testing.assert_allclose(train.x, mat_train.x, atol=0.1)
    np.testing.assert_allclose(evaluation.x, mat_eval.x, atol=0.1)
    np.testing.assert_array_equal(evaluation.start, mat_eval.start)


def test_gdf_drop_rejected_uses_1023(gdf_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = gdf_2a
    train = next(BCIIVReader(root, "2a", subjects=[1], labels_dir=root / "true_labels",
                             drop_rejected=True).iter_blocks())
    assert train.y.tolist() == [0, 2, 3]


def test_gdf_unknown_cues_need_true_labels(gdf_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = gdf_2a
    blocks = BCIIVReader(root, "2a", subjects=[1]).iter_blocks()  # labels_dir defaults to root
    assert next(blocks).y.tolist() == [0, 1, 2, 3]  # T session: cue codes suffice
    with pytest.raises(DataError) as e:
        next(blocks)
    msg = str(e.value)
    assert "A01E.gdf: 3 of 3 cues are 783" in msg and "A01E.mat" in msg and "classlabel" in msg
    assert "labels_dir" in msg and str(root) in msg


def test_gdf_true_label_file_problems(gdf_2a: tuple[Path, np.ndarray]) -> None:
    root, _ = gdf_2a
    labels = root / "true_labels"
    sio.savemat(labels / "A01E.mat", {"classlabel": np.array([4, 4])})
    with pytest.raises(DataError, match=r"A01E.mat: 2 labels in 'classlabel', but A01E.gdf has 3 cues"):
        list(BCIIVReader(root, "2a", subjects=[1], labels_dir=labels).iter_blocks())
    sio.savemat(labels / "A01E.mat", {"labels": np.array([4, 4, 2])})
    with pytest.raises(DataError, match=r"A01E.mat: no variable 'classlabel' \(found \['labels'\]\)"):
        list(BCIIVReader(root, "2a", subjects=[1], labels_dir=labels).iter_blocks())
    sio.savemat(labels / "A01T.mat", {"classlabel": np.array([1, 2, 4, 3])})
    with pytest.raises(DataError, match=r"A01T.mat: trial 3 labelled tongue, but A01T.gdf's cue says feet"):
        list(BCIIVReader(root, "2a", subjects=[1], labels_dir=labels).iter_blocks())


def test_gdf_channel_events_and_file_errors(tmp_path: Path) -> None:
    X = make_signal(2, 25, A_PICK)
    starts = trial_starts(2)
    names = list(A_CHANNELS)
    names[9] = "EEG-9x"
    write_gdf(tmp_path / "A01T.gdf", X, names, gdf_events(starts, [769, 770], 2.0))
    write_gdf(tmp_path / "A01E.gdf", X, A_CHANNELS, gdf_events(starts, [769, 770], 2.0))
    with pytest.raises(DataError,
                       match=r"A01T.gdf: no channel Cz \(looked for EEG-Cz / EEG:Cz\); channels: EEG-Fz"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())

    write_gdf(tmp_path / "A01T.gdf", X, A_CHANNELS, [(int(s + 2 * FS), 769) for s in starts])
    with pytest.raises(DataError, match=r"A01T.gdf: no trial-start events \(768\)"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())

    write_gdf(tmp_path / "A01T.gdf", X, A_CHANNELS, [(int(s), 768) for s in starts])
    with pytest.raises(DataError, match=r"A01T.gdf: no cue events \(769, 770, 771, 772, 783\)"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())

    (tmp_path / "A01T.gdf").write_bytes(b"GDF 9.99" + bytes(300))
    with pytest.raises(DataError, match=r"A01T.gdf: cannot read as GDF"):
        list(BCIIVReader(tmp_path, "2a", subjects=[1]).iter_blocks())


def test_gdf_2b_five_sessions(tmp_path: Path) -> None:
    X = make_signal(2, 6, B_PICK)
    starts = trial_starts(2)
    for k in range(1, 6):
        codes = [769, 770] if k <= 3 else [783, 783]
        write_gdf(tmp_path / f"B01{k:02d}{'T' if k <= 3 else 'E'}.gdf", X, B_CHANNELS,
                  gdf_events(starts, codes, 3.0))
    for k in (4, 5):
        sio.savemat(tmp_path / f"B01{k:02d}E.mat", {"classlabel": np.array([2, 1])})
    reader = BCIIVReader(tmp_path, "2b", subjects=[1], format="gdf")
    blocks = list(reader.iter_blocks())
    assert [b.recording for b in blocks] == ["B0101T", "B0102T", "B0103T", "B0104E", "B0105E"]
    assert [b.y.tolist() for b in blocks] == [[0, 1]] * 3 + [[1, 0]] * 2
    np.testing.assert_allclose(blocks[0].start, (starts + 3 * FS) / FS)
    for b in blocks:
        assert_windows_at(b.x, starts + 3 * FS)
    assert reader.config()["options"]["labels_dir"] == str(tmp_path.resolve())


def test_auto_format_prefers_bnci_mat_over_gdf_but_not_label_files(tmp_path: Path) -> None:
    X = make_signal(2, 25, A_PICK)
    for s in "TE":
        write_gdf(tmp_path / f"A01{s}.gdf", X, A_CHANNELS, gdf_events(trial_starts(2), [769, 770], 2.0))
        sio.savemat(tmp_path / f"A01{s}.mat", {"classlabel": np.array([1, 2])})  # true-label files
    assert BCIIVReader(tmp_path, "2a", subjects=[1]).format == "gdf"
    for s in "TE":
        write_bnci(tmp_path / f"A01{s}.mat", [run_struct(X, trial_starts(2), np.array([1, 2]), CLASSES_2A)])
    assert BCIIVReader(tmp_path, "2a", subjects=[1]).format == "mat"
    with pytest.raises(ValueError, match="dataset must be '2a' or '2b'"):
        BCIIVReader(tmp_path, "2c")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"subjects must be within 1..9, got \[10\]"):
        BCIIVReader(tmp_path, "2a", subjects=[10])
