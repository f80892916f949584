"""``biosig transfer``: channel mapping, window adapter, probe, and both SD-Former transfer directions end to
end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from biosig_lightning.analysis.transfer import (
    ProbeSettings,
    TransferError,
    WindowAdapter,
    fit_probe,
    map_channels,
    transfer,
)
from biosig_lightning.cli import main
from biosig_lightning.commands.transfer import run
from biosig_lightning.data.corpora.chb_mit import CHANNELS_23

SLEEP = ("EEG Fpz-Cz", "EEG Pz-Oz")
TINY_SDFORMER = {"d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 16, "stft_frames": 4, "token_hidden": 4,
                 "encoder_ff": 8, "edge_hidden": 8, "recon_hidden": 8, "dropout": 0.0}
DATA = {
    "chbmit": {"class_path": "CHBMITDataModule",
               "init_args": {"synthetic": True,
                             "synthetic_options": {"windows_per_subject": 8}, "batch_size": 16}},
    "sleep": {"class_path": "SleepEDFDataModule",
              "init_args": {"synthetic": True,
                            "synthetic_options": {"windows_per_subject": 10}, "batch_size": 16}},
}


def _write(path: Path, obj: dict) -> Path:
    path.write_text(yaml.safe_dump(obj))
    return path


def _fit(tmp: Path, corpus: str, band_pooling: bool) -> Path:
    config = {
        "seed_everything": 3,
        "model": {"class_path": "ClassificationTask",
                  "init_args": {"backbone": {"class_path": "biosig_lightning.models.sdformer.SDFormer",
                                             "init_args": {**TINY_SDFORMER, "band_pooling": band_pooling}},
                                "scheduler": "none", "early_stopping_patience": None}},
        "data": DATA[corpus],
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                    "limit_test_batches": 1,
                    "enable_progress_bar": False,
                    "enable_model_summary": False, "log_every_n_steps": 1,
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(tmp / "runs"), "name": corpus}}},
    }
    main(["fit", "--config", str(_write(tmp / f"fit_{corpus}.yaml", config))])
    run_dir = tmp / "runs" / corpus / "version_0"
    assert (run_dir / "results.json").is_file()
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, _cache_dir: None) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("transfer")
    out = {"chbmit": _fit(tmp, "chbmit", band_pooling=True), "sleep": _fit(tmp, "sleep", band_pooling=False)}
    for corpus in DATA:  # target configs: a data section only, as an experiment YAML would hold it
        out[f"{corpus}_target"] = _write(tmp / f"target_{corpus}.yaml", {"data": DATA[corpus]})
    out["tmp"] = tmp
    return out


# ---------------------------------------------------------------------------------------- units


def test_channel_mapping_nearest_midpoint_both_ways() -> None:
    to_sleep = map_channels(CHANNELS_23, SLEEP)
    assert to_sleep.method == "nearest-midpoint" and len(to_sleep.index) == 23
    pairs = dict(zip(to_sleep.source, (SLEEP[j] for j in to_sleep.index), strict=True))
    # frontal bipolar chords take Fpz-Cz, parieto-occipital ones Pz-Oz
    assert pairs["FZ-CZ"] == pairs["FP1-F3"] == pairs["FP2-F8"] == "EEG Fpz-Cz"
    assert pairs["P3-O1"] == pairs["P8-O2"] == pairs["CZ-PZ"] == "EEG Pz-Oz"
    to_chb = map_channels(SLEEP, CHANNELS_23)
    assert [CHANNELS_23[j] for j in to_chb.index] == ["FZ-CZ", "P3-O1"]
    assert all(0 < d < 60 for d in to_chb.distance_mm)
    # same montage: identity, also for the reversed pair P7-T7 and the duplicated T8-P8 (ties by name)
    same = map_channels(CHANNELS_23, CHANNELS_23)
    assert same.index == tuple(range(23)) and max(same.distance_mm) == 0.0


def test_channel_mapping_by_name_when_unplaceable() -> None:
    ecg = map_channels(["I", "II", "V1"], ["V1", "III", "I", "II"])
    assert ecg.method == "name" and ecg.index == (2, 3, 0)
    with pytest.raises(TransferError, match=r"\['V6'\]"):
        map_channels(["I", "V6"], ["I", "II"])


def test_window_adapter_segments_and_mirror_tiling() -> None:
    mapping = map_channels(["Cz", "Pz"], ["Pz", "Cz", "Oz"])
    x = torch.arange(2 * 3 * 10, dtype=torch.float32).reshape(2, 3, 10)
    cut = WindowAdapter(mapping, source_sfreq=100, source_n_times=4, target_sfreq=100, target_n_times=10,
                        renormalise=False)
    seg = cut(x)
    assert seg.shape == (2, 3, 2, 4) and cut.starts.tolist() == [0, 3, 6]
    assert torch.equal(seg[:, 1, 0], x[:, 1, 3:7]) and torch.equal(seg[:, 2, 1], x[:, 0, 6:10])
    tile = WindowAdapter(mapping, source_sfreq=100, source_n_times=11, target_sfreq=100, target_n_times=4,
                         renormalise=True)
    short = torch.tensor([[[0.0, 1.0, 2.0, 3.0]] * 3])
    out = tile(short)
    assert out.shape == (1, 1, 2, 11) and tile.to_dict()["time"]["extension"] == "mirror-tile"
    expected = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2], dtype=torch.float32)
    expected = (expected - expected.mean()) / (expected.std(unbiased=False) + 1e-6)
    torch.testing.assert_close(out[0, 0, 0], expected)
    torch.testing.assert_close(out[0, 0, 0].std(unbiased=False), torch.tensor(1.0), atol=1e-4, rtol=0)


def test_window_adapter_resamples_without_changing_frequency() -> None:
    mapping = map_channels(["Cz"], ["Cz"])
    t100 = np.arange(300) / 100.0
    x = torch.tensor(np.sin(2 * np.pi * 7.0 * t100), dtype=torch.float32)[None, None]
    up = WindowAdapter(mapping, source_sfreq=256, source_n_times=256, target_sfreq=100, target_n_times=300,
                       renormalise=False)
    assert (up.up, up.down, up.resampled_n_times, up.n_segments) == (64, 25, 768, 3)
    seg = up(x)[0, :, 0].reshape(-1).numpy()  # three back-to-back segments = the whole resampled window
    t256 = np.arange(768) / 256.0
    interior = slice(50, -50)  # the polyphase filter's edge transients
    np.testing.assert_allclose(seg[interior], np.sin(2 * np.pi * 7.0 * t256)[interior], atol=0.02)


def test_probe_learns_separable_features_and_keeps_best_epoch() -> None:
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(120) % 3
    x = torch.randn(120, 6, generator=gen) * 0.3 + torch.nn.functional.one_hot(y, 6).float() * 3
    probe, summary = fit_probe((x[:80], y[:80]), (x[80:], y[80:]), 3,
                               ProbeSettings(lr=0.05, epochs=40, patience=5, batch_size=128, seed=0))
    assert summary["val"]["val/acc"] == 1.0 and 1 <= summary["best_epoch"] <= summary["epochs_run"] <= 40
    assert (probe(x[80:]).argmax(-1) == y[80:]).all()
    with pytest.raises(TransferError, match="monitor"):
        fit_probe((x, y), (x, y), 3, ProbeSettings(monitor="nope"))


# ---------------------------------------------------------------------------------------- end to end


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    """What the transfer scores on the target test split: the fitted probe, its input features, the labels."""
    import biosig_lightning.analysis.transfer as module

    seen: dict[str, torch.Tensor] = {}
    real = module._evaluate

    def spy(probe: torch.nn.Module, feats: torch.Tensor, labels: torch.Tensor, n_classes: int,
            prefix: str) -> dict[str, float]:
        if prefix == "test/":
            seen.update(probe=probe, feats=feats.detach().clone(), labels=labels.detach().clone())
        return real(probe, feats, labels, n_classes, prefix)

    monkeypatch.setattr(module, "_evaluate", spy)
    return seen


def _check_metrics(report: dict, probed: dict[str, torch.Tensor]) -> None:
    """transfer.json's test metrics are scikit-learn's on the probe's predictions for every test window."""
    from tests.helpers import metrics_from_predictions

    y = probed["labels"].numpy()
    assert len(y) == report["target"]["windows"]["test"]
    with torch.no_grad():
        logits = probed["probe"](probed["feats"])
    probs = logits.softmax(-1).double().numpy()
    expect = metrics_from_predictions(probs, y)
    expect["test/loss"] = float(torch.nn.functional.cross_entropy(logits, probed["labels"]))
    metrics = report["metrics"]
    assert set(metrics) == set(expect), (set(metrics), set(expect))
    for key, want in expect.items():
        if np.isnan(want):
            assert metrics[key] is None, key  # undefined (e.g. a class absent from the test subjects): null
        else:
            assert metrics[key] == pytest.approx(want, abs=1e-4), key


def test_chbmit_to_sleep_edf(runs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                             probed: dict[str, torch.Tensor]) -> None:
    out = runs["tmp"] / "chb_to_sleep"
    run(["--source", str(runs["chbmit"]), "--target-config", str(runs["sleep_target"]), "--out", str(out),
         "--epochs", "15", "--patience", "5"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == f"transfer: {out / 'transfer.json'}"
    assert any(
        line.startswith("transfer: SDFormer chbmit-synthetic -> sleep_edf-synthetic") for line in printed
    )
    report = json.loads((out / "transfer.json").read_text())
    assert (
        report["source"]["dataset"] == "chbmit-synthetic"
        and report["target"]["dataset"] == "sleep_edf-synthetic"
    )
    mapping = report["mapping"]
    assert mapping["channels"]["method"] == "nearest-midpoint" and len(mapping["channels"]["pairs"]) == 23
    assert {p["target"] for p in mapping["channels"]["pairs"]} == set(SLEEP)
    assert mapping["resample"]["up"] == 64 and mapping["resample"]["down"] == 25
    # 30 s at 100 Hz -> 7680 samples at 256 Hz -> 15 back-to-back 2 s segments
    assert mapping["time"]["n_segments"] == 15 and mapping["time"]["extension"] == "none"
    assert mapping["time"]["segment_starts"] == list(range(0, 7680, 512))
    assert report["probe"]["feature_dim"] == TINY_SDFORMER["d_model"] and report["probe"]["seed"] == 3
    assert 1 <= report["probe"]["best_epoch"] <= report["probe"]["epochs_run"] <= 15
    assert set(report["target"]["subjects"]) == {"train", "val", "test"}
    _check_metrics(report, probed)
    state = torch.load(out / "probe.pt", map_location="cpu", weights_only=True)
    assert state["linear.weight"].shape == (5, TINY_SDFORMER["d_model"])


def test_sleep_edf_to_chbmit_leaves_backbone_unchanged(runs: dict[str, Path],
                                                       probed: dict[str, torch.Tensor]) -> None:
    results = json.loads((runs["sleep"] / "results.json").read_text())
    saved = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    before = {k.removeprefix("backbone."): v for k, v in saved.items() if k.startswith("backbone.")}
    out = runs["tmp"] / "sleep_to_chb"
    result = transfer(runs["sleep"], [runs["chbmit_target"]], out=out, device="cpu",
                      settings=ProbeSettings(epochs=15, patience=5))
    after = result.backbone.state_dict()
    assert before.keys() == after.keys()
    # includes the tokenizer's BatchNorm running statistics, which a forward in train mode would move
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert not any(p.requires_grad for p in result.backbone.parameters())
    report = json.loads(result.path.read_text())
    assert [p["target"] for p in report["mapping"]["channels"]["pairs"]] == ["FZ-CZ", "P3-O1"]
    # 2 s at 256 Hz -> 200 samples at 100 Hz, mirror-tiled to the 3000-sample Sleep-EDF window
    assert report["mapping"]["time"]["resampled_n_times"] == 200
    assert (
        report["mapping"]["time"]["extension"] == "mirror-tile"
        and report["mapping"]["time"]["n_segments"] == 1
    )
    assert report["probe"]["class_weight"] == "none" and report["target"]["spec"]["n_times"] == 512
    _check_metrics(report, probed)


def test_bad_source_and_target_are_clear_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(TransferError, match=r"--source: .*nowhere.*results\.json"):
        run(["--source", str(tmp_path / "nowhere"), "--target-config", str(runs["sleep_target"])])
    no_data = _write(tmp_path / "model_only.yaml", {"model": {"class_path": "ClassificationTask"}})
    with pytest.raises(TransferError, match="no `data:` section"):
        run(["--source", str(runs["chbmit"]), "--target-config", str(no_data)])
