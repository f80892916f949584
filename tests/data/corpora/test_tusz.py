"""TUSZ reader and DataModule on tiny trees written in the real layouts (pyedflib EDFs, .tse/.tse_bi,
.csv/.csv_bi)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.fftpack
from pyedflib import highlevel

from biosig_lightning.data.corpora.tusz import CHANNELS, TUSZ, parse_csv, parse_tse, patient_id
from biosig_lightning.data.datamodules.tusz import TUSZDataModule
from biosig_lightning.data.feature_reader import PAD_LOG
from biosig_lightning.data.spec import DataError
from biosig_lightning.features.spectral import log_fft_steps
from tests.tusz_fixture import write_tse

SECONDS = 36
# channel i of CHANNELS carries a sine at FREQS[i] Hz: channel matching and resampling show in the output
FREQS = np.arange(1, len(CHANNELS) + 1, dtype=float) * 2.0
AMPS = 20.0 + 2.0 * np.arange(len(CHANNELS))


def write_edf(path: Path, suffix: str, fs: int, seconds: int = SECONDS, drop: str | None = None) -> None:
    """An EDF with the 19 EEG channels (labels 'EEG XX-<suffix>') in scrambled order plus an EKG channel."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(seconds * fs) / fs
    order = np.random.default_rng(len(path.name)).permutation(len(CHANNELS))
    signals, headers = [], []
    for i in order:
        if CHANNELS[i] == drop:
            continue
        signals.append(AMPS[i] * np.sin(2 * np.pi * FREQS[i] * t))
        headers.append(highlevel.make_signal_header(f"{CHANNELS[i]}-{suffix}", sample_frequency=fs,
                                                    physical_min=-100, physical_max=100))
    signals.insert(3, np.zeros_like(t))
    headers.insert(3, highlevel.make_signal_header("EEG EKG1-REF", sample_frequency=fs, physical_min=-100,
                                                   physical_max=100))
    highlevel.write_edf(str(path), signals, headers)


def write_csv(stem: Path, events: list[tuple[float, float, str]], seconds: float = SECONDS) -> None:
    """``.csv`` (per-channel types) and ``.csv_bi`` (TERM seiz/bckg) as TUSZ 2.x publishes them."""
    def header(kind: str) -> str:
        return (f"# version = csv_v1.0.0\n# bname = {stem.name}\n# duration = {seconds:.4f} secs\n"
                f"# montage_file = $NEDC_NFC/lib/nedc_eas_default_montage.txt\n#\n"
                "channel,start_time,stop_time,label,confidence\n")

    bi = [f"TERM,0.0000,{seconds:.4f},bckg,1.0000"] if not events else []
    t = 0.0
    for s, e, _ in events:
        if s > t:
            bi.append(f"TERM,{t:.4f},{s:.4f},bckg,1.0000")
        bi.append(f"TERM,{s:.4f},{e:.4f},seiz,1.0000")
        t = e
    if events and t < seconds:
        bi.append(f"TERM,{t:.4f},{seconds:.4f},bckg,1.0000")
    stem.with_suffix(".csv_bi").write_text(header("bi") + "\n".join(bi) + "\n")
    rows = []
    for ch in ("FP1-F7", "F7-T3"):
        for k, (s, e, lab) in enumerate(events):  # channels see the seizure with slightly different bounds
            rows.append(f"{ch},{s + 0.5 * k:.4f},{e:.4f},{lab},1.0000")
    stem.with_suffix(".csv").write_text(header("") + "\n".join(rows) + "\n")


def v152(root: Path, name: str, folder: str, montage: str, fs: int, events: list, suffix: str = "REF",
         drop: str | None = None) -> Path:
    patient = name.split("_")[0]
    session = name.split("_")[1]
    edf = root / "edf" / folder / montage / patient[-3:] / patient / f"{session}_2003_07_21" / f"{name}.edf"
    write_edf(edf, suffix, fs, drop=drop)
    write_tse(edf.with_suffix(""), events, SECONDS)
    return edf


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tusz_v152")
    v152(root, "00000258_s002_t000", "train", "01_tcp_ar", 250, [(14.0, 20.0, "cpsz")])
    v152(root, "00000300_s001_t001", "train", "02_tcp_le", 256, [(1.0, 5.0, "gnsz"), (6.0, 10.0, "mysz")],
         suffix="LE")
    v152(root, "00000301_s001_t000", "train", "01_tcp_ar", 250, [])
    v152(root, "00000302_s003_t002", "train", "03_tcp_ar_a", 400, [(30.5, 33.0, "absz")])
    v152(root, "00000500_s001_t000", "dev", "01_tcp_ar", 250, [(2.0, 13.0, "tnsz")])
    v152(root, "00000258_s004_t000", "dev", "01_tcp_ar", 250, [(3.0, 9.0, "fnsz")])  # patient also in train
    return root


def test_patient_ids() -> None:
    assert patient_id("00000258") == 258
    assert patient_id("aaaaaajy") == 9 * 26 + 24
    with pytest.raises(DataError, match="tusz: 'chb01' is not a TUH patient code"):
        patient_id("chb01", "tusz")


def test_detection_clips_channels_and_resampling(corpus: Path) -> None:
    with pytest.warns(UserWarning, match="00000258"):
        reader = TUSZ(corpus, task="detection", clip_seconds=12)
    blocks = {b.recording: b for b in reader.iter_blocks()}
    assert set(blocks) == {"00000258_s002_t000", "00000300_s001_t001", "00000301_s001_t000",
                           "00000302_s003_t002",
                           "00000500_s001_t000"}  # the dev recording of train patient 258 is left out
    # clips [0,12) [12,24) [24,36): the seizure 14-20 s is in the second one only
    assert blocks["00000258_s002_t000"].y.tolist() == [0, 1, 0]
    assert blocks["00000300_s001_t001"].y.tolist() == [1, 0, 0]
    assert blocks["00000301_s001_t000"].y.tolist() == [0, 0, 0]
    assert blocks["00000302_s003_t002"].y.tolist() == [0, 0, 1]
    assert blocks["00000500_s001_t000"].y.tolist() == [1, 1, 0]  # 2-13 s reaches into the second clip
    # AR (250 Hz), LE (256 Hz) and 400 Hz files: each output channel is its own sine at 200 Hz
    t = np.arange(SECONDS * 200) / 200.0
    expected = AMPS[:, None] * np.sin(2 * np.pi * FREQS[:, None] * t)
    for name in ("00000258_s002_t000", "00000300_s001_t001", "00000302_s003_t002"):
        b = blocks[name]
        assert b.x.shape == (3, 19, 2400)
        signal = b.x.transpose(1, 0, 2).reshape(19, -1)
        np.testing.assert_allclose(signal, expected, atol=0.05)
    assert blocks["00000258_s002_t000"].subject == 258


def test_inclusive_overlap_rule(corpus: Path) -> None:
    with pytest.warns(UserWarning):
        reader = TUSZ(corpus, clip_seconds=12)
    # a seizure starting exactly where clip 1 ends (sample 4800) also marks clip 1 (the reference's test)
    assert reader.detection_labels(7200, [(24.0, 25.0)]).tolist() == [0, 1, 1]
    assert reader.detection_labels(7200, [(24.01, 25.0)]).tolist() == [0, 0, 1]
    assert reader.detection_labels(7199, [(30.0, 31.0)]).tolist() == [0, 0]  # floor(L / clip) clips


def test_classification_clips(corpus: Path) -> None:
    with pytest.warns(UserWarning):
        reader = TUSZ(corpus, task="classification", clip_seconds=12)
    blocks = {b.recording: b for b in reader.iter_blocks()}
    assert blocks["00000258_s002_t000"].y.tolist() == [0]  # cpsz -> CF
    assert blocks["00000300_s001_t001"].y.tolist() == [1]  # gnsz -> GN; mysz dropped
    assert blocks["00000302_s003_t002"].y.tolist() == [2]  # absz -> AB
    assert blocks["00000500_s001_t000"].y.tolist() == [3]  # tnsz -> CT
    assert "00000301_s001_t000" not in blocks  # no seizure, no clip
    # cpsz 14-20 s: starts 2 s early (12 s), ends with the seizure (20 s): 8 s of signal, then zeros
    b = blocks["00000258_s002_t000"]
    assert b.start.tolist() == [12.0]
    t = 12.0 + np.arange(1600) / 200.0
    np.testing.assert_allclose(b.x[0, :, :1600],
                               AMPS[:, None] * np.sin(2 * np.pi * FREQS[:, None] * t), atol=0.05)
    assert np.all(b.x[0, :, 1600:] == 0)
    # gnsz 1-5 s: the start is clipped to sample 1 (the reference's "previous end + 1" with no previous
    # seizure), so samples 1..999 remain: 4 whole 1-s steps, then zeros
    assert blocks["00000300_s001_t001"].start.tolist() == [1 / 200.0]
    assert np.all(blocks["00000300_s001_t001"].x[0, :, 800:] == 0)
    assert np.abs(blocks["00000300_s001_t001"].x[0, :, :800]).sum(axis=0).min() > 0


def test_v2_csv_layout_matches(tmp_path: Path) -> None:
    for folder, patient, events in (("train", "aaaaaajy", [(14.0, 20.0, "fnsz")]), ("train", "aaaaaajz", []),
                                    ("dev", "aaaaaakb", [(2.0, 13.0, "gnsz")])):
        edf = tmp_path / "edf" / folder / patient / "s001_2002" / "01_tcp_ar" / f"{patient}_s001_t000.edf"
        write_edf(edf, "REF", 250)
        write_csv(edf.with_suffix(""), events)
    reader = TUSZ(tmp_path, clip_seconds=12)
    assert reader.format == "csv"
    labels = {b.subject: b.y.tolist() for b in reader.iter_blocks()}
    assert labels == {patient_id("aaaaaajy"): [0, 1, 0], patient_id("aaaaaajz"): [0, 0, 0],
                      patient_id("aaaaaakb"): [1, 1, 0]}
    cls = {
        b.subject: (b.y.tolist(), b.start.tolist())
        for b in TUSZ(tmp_path, task="classification").iter_blocks()
    }
    # per-channel .csv rows merged: fnsz on two channels -> one CF seizure from 14 s (clip from 12 s)
    assert cls == {patient_id("aaaaaajy"): ([0], [12.0]), patient_id("aaaaaakb"): ([1], [1 / 200.0])}
    rows = parse_csv(tmp_path / "edf/train/aaaaaajy/s001_2002/01_tcp_ar/aaaaaajy_s001_t000.csv_bi")
    assert [(ch, ev.label) for ch, ev in rows] == [("TERM", "bckg"), ("TERM", "seiz"), ("TERM", "bckg")]


def test_bad_input_errors(tmp_path: Path, corpus: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        TUSZ(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no train/ or dev/"):
        TUSZ(tmp_path / "empty")
    # mixed releases
    mixed = tmp_path / "mixed"
    edf = v152(mixed, "00000258_s002_t000", "train", "01_tcp_ar", 250, [(14.0, 20.0, "cpsz")])
    with pytest.raises(DataError, match=r"missing split folder .*mixed/edf/dev"):
        TUSZ(mixed)
    edf2 = v152(mixed, "00000259_s002_t000", "dev", "01_tcp_ar", 250, [])
    edf2.with_suffix(".tse_bi").unlink()
    with pytest.raises(DataError, match=r"00000259_s002_t000\.edf: missing its annotation file .*\.tse_bi"):
        TUSZ(mixed)
    write_csv(edf2.with_suffix(""), [])
    with pytest.raises(DataError,
                       match="mixes TUSZ v1.5.2 annotations .*tse.* with TUSZ 2.x annotations .*csv"):
        TUSZ(mixed)
    # malformed annotation lines name the file and line
    bad = tmp_path / "bad.tse_bi"
    bad.write_text("version = tse_v1.0.0\n\n0.0000 10.0000 seiz\n")
    with pytest.raises(DataError, match=r"bad\.tse_bi:3: expected '<start> <stop> <label> <confidence>'"):
        parse_tse(bad)
    bad.write_text("0.0000 10.0000 seiz 1.0000\n")
    with pytest.raises(DataError, match="version = tse_v1.0.0"):
        parse_tse(bad)
    bad.write_text("version = tse_v1.0.0\n12.0 10.0 seiz 1.0\n")
    with pytest.raises(DataError, match="bad.tse_bi:2: event 12-10 s is not a valid interval"):
        parse_tse(bad)
    # a binary file with a type label
    odd = tmp_path / "odd"
    edf = v152(odd, "00000258_s002_t000", "train", "01_tcp_ar", 250, [(14.0, 20.0, "cpsz")])
    edf.with_suffix(".tse_bi").write_text("version = tse_v1.0.0\n\n0.0 36.0 cpsz 1.0\n")
    v152(odd, "00000259_s002_t000", "dev", "01_tcp_ar", 250, [])
    with pytest.raises(DataError, match="label 'cpsz' in a binary annotation file"):
        list(TUSZ(odd).iter_blocks())
    # a file lacking a channel is left out and named
    lack = tmp_path / "lack"
    v152(lack, "00000258_s002_t000", "train", "01_tcp_ar", 250, [], drop="EEG CZ")
    v152(lack, "00000259_s002_t000", "dev", "01_tcp_ar", 250, [])
    reader = TUSZ(lack)
    with pytest.warns(UserWarning, match=r"00000258_s002_t000\.edf \(lacks channel\(s\) EEG CZ\)"):
        assert [b.subject for b in reader.iter_blocks()] == [259]


def test_log_fft_matches_reference_formula() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 600)).astype(np.float32)
    x[0, 1, :200] = 0.0  # an all-zero step: log(1e-8) in every bin
    out = log_fft_steps(x, 200)
    assert out.shape == (2, 3, 300)
    for t in range(3):
        amp = np.abs(
            scipy.fftpack.fft(x[..., t * 200 : (t + 1) * 200].astype(np.float64), n=200, axis=-1)[..., :100]
        )
        amp[amp == 0.0] = 1e-8
        np.testing.assert_allclose(out[..., t * 100:(t + 1) * 100], np.log(amp), rtol=1e-5, atol=1e-5)
    assert np.all(out[0, 1, :100] == np.float32(PAD_LOG))


def test_datamodule_dev_is_test_and_balanced(corpus: Path, tmp_path: Path) -> None:
    with pytest.warns(UserWarning):
        dm = TUSZDataModule(root=str(corpus), cache_dir=str(tmp_path / "cache"), batch_size=4)
        dm.setup()
    assert dm.subjects["test"] == [500]
    assert sorted(dm.subjects["train"] + dm.subjects["val"]) == [258, 300, 301, 302]
    assert len(dm.subjects["val"]) == 1
    assert (dm.n_chans, dm.n_outputs, dm.n_times, dm.sfreq, dm.step_bins) == (19, 2, 1200, 200.0, 100)
    train_y = np.asarray(dm.cache.labels[dm.datasets["train"].indices])
    all_y = np.asarray(dm.cache.labels[dm.cache.indices_for_subjects(dm.subjects["train"])])
    assert (all_y == 0).sum() > (all_y == 1).sum() > 0
    # every seizure clip kept, background undersampled to the same count
    assert (train_y == 1).sum() == (all_y == 1).sum() == (train_y == 0).sum()
    batch = next(iter(dm.test_dataloader()))
    assert set(batch) == {"x", "y", "subject", "index"}
    assert batch["x"].shape == (3, 19, 1200)
    assert batch["y"].tolist() == [1, 1, 0]
    # train-set standardisation: training windows are z-scored per channel
    train = dm.datasets["train"].__getitems__(list(range(len(dm.datasets["train"]))))["x"].numpy()
    np.testing.assert_allclose(train.transpose(1, 0, 2).reshape(19, -1).mean(axis=1), 0.0, atol=1e-4)


def test_datamodule_classification_padding_stays_zero(corpus: Path, tmp_path: Path) -> None:
    with pytest.warns(UserWarning):
        dm = TUSZDataModule(root=str(corpus), task="classification", cache_dir=str(tmp_path / "cache"))
        dm.setup()
    assert dm.n_outputs == 4
    split = "train" if 258 in dm.subjects["train"] else "val"
    batch = dm.datasets[split].__getitems__(list(range(len(dm.datasets[split]))))
    x = batch["x"].numpy()[batch["subject"].numpy() == 258][0]  # cpsz 14-20 s: 8 s of signal, 4 s of padding
    assert np.all(x[:, 800:] == 0.0)
    assert np.abs(x[:, :800]).reshape(19, 8, 100).sum(axis=(0, 2)).min() > 1.0
    full = dm.datasets["test"].__getitems__([0])["x"].numpy()[0]  # tnsz 2-13 s: a whole 12-s clip, no padding
    assert np.abs(full).reshape(19, 12, 100).sum(axis=(0, 2)).min() > 1.0


def test_synthetic_split_protocol(tmp_path: Path) -> None:
    opts = {"n_subjects": 10, "dev_subjects": 2, "windows_per_subject": 2}
    dm = TUSZDataModule(synthetic=True, features="raw", synthetic_options=opts, cache_dir=str(tmp_path))
    split = dm.default_split()
    assert split.test == [9, 10]
    assert len(split.val) == 1 and set(split.train) | set(split.val) == set(range(1, 9))
    again = TUSZDataModule(synthetic=True, features="raw", synthetic_options=opts, cache_dir=str(tmp_path))
    assert again.default_split().val == split.val  # seeded
    vals = {tuple(TUSZDataModule(synthetic=True, features="raw", split_seed=s, synthetic_options=opts,
                                 cache_dir=str(tmp_path)).default_split().val) for s in range(6)}
    assert len(vals) > 1  # the seed moves the validation patient
