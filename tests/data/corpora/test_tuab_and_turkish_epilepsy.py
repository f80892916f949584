"""Turkish epilepsy (manifest + .mat/.edf) and TUAB (v3 flat / v2 nested EDF) readers, DataModules and stand-in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyedflib import highlevel
from scipy.io import savemat

from biosig_lightning.data.corpora.tuab import CHANNELS, TUAB, patient_id
from biosig_lightning.data.corpora.turkish_epilepsy import TurkishEpilepsy
from biosig_lightning.data.datamodules import TUABDataModule, TurkishEpilepsyDataModule
from biosig_lightning.data.spec import CorpusSpec, DataError
from biosig_lightning.data.synthetic_epilepsy import SignedEEGStandIn


def _write_edf(path: Path, labels: list[str], seconds: float, fs: float, step: float = 10.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * fs)) / fs
    signals = [step * k + t for k in range(len(labels))]
    headers = [highlevel.make_signal_header(lbl, sample_frequency=fs, physical_min=-1000, physical_max=5000)
               for lbl in labels]
    assert highlevel.write_edf(str(path), signals, headers)


# ---- Turkish epilepsy -----------------------------------------------------------------------------
def _turkish(root: Path) -> None:
    rows = ["file,subject,label"]
    fs = 500
    for k, (subject, label) in enumerate([(3, "epilepsy"), (3, "epilepsy"), (8, "control")]):
        t = np.arange(15 * fs) / fs
        data = np.stack([100.0 * c + t for c in range(35)])  # channel c holds 100 c + time in s
        if k == 1:
            savemat(root / f"rec{k}.mat", {"data": data.T, "fs": 500.0})  # (n, 35) also accepted
        elif k == 0:
            savemat(root / f"rec{k}.mat", {"data": data})
        else:
            _write_edf(root / "edf" / f"rec{k}.edf", [f"C{c}" for c in range(35)], 15, fs, step=100.0)
        rows.append(f"{'edf/' if k == 2 else ''}rec{k}.{'edf' if k == 2 else 'mat'},{subject},{label}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")


def test_turkish_reader_trims_and_windows(tmp_path: Path) -> None:
    _turkish(tmp_path)
    blocks = list(TurkishEpilepsy(tmp_path).iter_blocks())
    assert [b.subject for b in blocks] == [3, 3, 8] and [int(b.y[0]) for b in blocks] == [1, 1, 0]
    for b in blocks:
        assert b.x.shape == (1, 35, 6000)
        # first sample is t = 2 s (2 s trimmed), last t = 14 s - 1 sample (1 s trimmed at the end)
        np.testing.assert_allclose(b.x[0, 4, [0, -1]], [402.0, 400.0 + 14.0 - 1 / 500], atol=0.1)  # EDF: 16-bit steps
    per_rec = list(TurkishEpilepsy(tmp_path, unit="recording").iter_blocks())
    assert [b.subject for b in per_rec] == [1, 2, 3]


def test_turkish_reader_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="manifest.csv"):
        TurkishEpilepsy(tmp_path)
    _turkish(tmp_path)
    (tmp_path / "manifest.csv").write_text("file,subject,label\nrec0.mat,3,epilepsy\nrec1.mat,3,control\n")
    with pytest.raises(DataError, match=r"subject\(s\) \[3\] listed with both labels"):
        TurkishEpilepsy(tmp_path)
    (tmp_path / "manifest.csv").write_text("file,subject,label\n../x.mat,3,epilepsy\n")
    with pytest.raises(DataError, match="inside the corpus root"):
        TurkishEpilepsy(tmp_path)
    savemat(tmp_path / "bad.mat", {"data": np.zeros((34, 7500))})
    (tmp_path / "manifest.csv").write_text("file,subject,label\nbad.mat,1,control\n")
    with pytest.raises(DataError, match="bad.mat.*35 channels"):
        list(TurkishEpilepsy(tmp_path).iter_blocks())


def test_turkish_datamodule_recording_split_and_loso(tmp_path: Path) -> None:
    opts = {"n_subjects": 6, "windows_per_subject": 4}
    dm = TurkishEpilepsyDataModule(synthetic=True, unit="recording", synthetic_options=opts,
                                   cache_dir=str(tmp_path), batch_size=4)
    dm.setup()
    assert dm.dataset_name == "turkish_epilepsy-synthetic-recording-split"
    assert sum(len(v) for v in dm.subjects.values()) == 24  # every window is a split unit
    assert (dm.n_chans, dm.n_times, dm.sfreq) == (35, 6000, 500.0)
    from biosig_lightning.data.splits import SplitConfig

    loso = TurkishEpilepsyDataModule(synthetic=True, unit="subject", synthetic_options=opts, cache_dir=str(tmp_path),
                                     split=SplitConfig(strategy="loso", fold=2, val_ratio=0.2))
    loso.setup()
    assert len(loso.subjects["test"]) == 1
    assert not set(loso.subjects["test"]) & (set(loso.subjects["train"]) | set(loso.subjects["val"]))


# ---- TUAB --------------------------------------------------------------------------------------------
def _tuab_v3(root: Path) -> None:
    labels = [f"EEG {c}-REF" for c in CHANNELS] + ["EKG1-REF"]
    for folder, cls, name, fs in [("train", "normal", "aaaaaaaa_s001_t000", 250), ("train", "abnormal",
                                   "aaaaaaab_s002_t001", 500), ("eval", "normal", "aaaaaaac_s001_t000", 250)]:
        _write_edf(root / "edf" / folder / cls / "01_tcp_ar" / f"{name}.edf", labels[::-1], 30, fs)


def test_tuab_v3_reader(tmp_path: Path) -> None:
    _tuab_v3(tmp_path)
    reader = TUAB(tmp_path, window_seconds=24.0, offset_seconds=60.0)
    assert reader.patient_folders() == {"train": [0, 1], "eval": [2]}
    blocks = list(reader.iter_blocks())
    assert [int(b.y[0]) for b in blocks] == [0, 1, 0]  # train: normal, abnormal; eval: normal
    for b in blocks:
        assert b.x.shape == (1, 21, 6000)
        # channel order is CHANNELS' (the file stores them reversed after an EKG): channel k holds 10 (21 - k) + t
        # recordings of 30 s start their 24-s window at 6 s (offset clipped to fit)
        np.testing.assert_allclose(b.x[0, :, 0], 10.0 * (21 - np.arange(21)) + 6.0, atol=0.2)


def test_tuab_v2_nested_layout_and_errors(tmp_path: Path) -> None:
    labels = [f"EEG {c}-LE" for c in CHANNELS]
    nested = tmp_path / "edf" / "eval" / "abnormal" / "01_tcp_ar" / "000" / "00000021" / "s004_2013_08_15"
    _write_edf(nested / "00000021_s004_t000.edf", labels, 25, 250)
    reader = TUAB(tmp_path / "edf")
    assert [r.patient for r in reader.recordings] == [21] and reader.recordings[0].folder == "eval"
    assert patient_id("aaaaaaba") == 26
    with pytest.raises(DataError, match="EEG CZ"):
        _write_edf(nested / "00000021_s004_t001.edf", [lbl for lbl in labels if "CZ" not in lbl], 25, 250)
        list(TUAB(tmp_path).iter_blocks())
    with pytest.raises(DataError, match="edf/train"):
        TUAB(tmp_path / "nothing")


def test_tuab_official_split_is_patient_disjoint(tmp_path: Path) -> None:
    _tuab_v3(tmp_path)
    dm = TUABDataModule(root=str(tmp_path), protocol="official", cache_dir=str(tmp_path / "cache"),
                        val_fraction=0.5, batch_size=2)
    dm.setup()
    assert dm.subjects["test"] == [2]
    assert sorted(dm.subjects["train"] + dm.subjects["val"]) == [0, 1]


# ---- stand-in -------------------------------------------------------------------------------------------
def test_standin_has_anticorrelated_pairs_and_class_rhythm() -> None:
    spec = CorpusSpec("x", tuple(f"c{i}" for i in range(6)), 100.0, 1200, ("control", "epilepsy"), "subject")
    gen = SignedEEGStandIn(spec, n_subjects=6, windows_per_subject=3, seed=1)
    blocks = list(gen.iter_blocks())
    again = list(SignedEEGStandIn(spec, n_subjects=6, windows_per_subject=3, seed=1).iter_blocks())
    assert all(np.array_equal(a.x, b.x) for a, b in zip(blocks, again, strict=True))
    assert {int(b.y[0]) for b in blocks} == {0, 1}
    pair, other = [], []
    for b in blocks:
        corr = np.mean([np.corrcoef(w) for w in b.x], axis=0)
        cross = corr[:3, 3:].mean()  # between the two halves of the montage
        # the epileptiform class reverses phase between the halves (negative edges), controls do not
        assert (cross < -0.1) if b.y[0] == 1 else (cross > 0.1), (int(b.y[0]), cross)
        pair += [corr[0, 1], corr[2, 3], corr[4, 5]]
        other += [corr[0, 2], corr[1, 2], corr[3, 5]]
        assert 5 < b.x.std() < 200  # microvolt scale
    assert np.mean(pair) < np.mean(other) - 0.2  # channel pairs share an anti-correlated source
    # the epileptiform class has much more 2-4 Hz power relative to 8-12 Hz
    def ratio(x: np.ndarray) -> float:
        f = np.fft.rfftfreq(x.shape[-1], 0.01)
        p = np.abs(np.fft.rfft(x, axis=-1)) ** 2
        return float(p[..., (f > 2) & (f < 4)].sum() / p[..., (f > 8) & (f < 12)].sum())
    r1 = [ratio(b.x) for b in blocks if b.y[0] == 1]
    r0 = [ratio(b.x) for b in blocks if b.y[0] == 0]
    assert min(r1) > 2 * max(r0)
