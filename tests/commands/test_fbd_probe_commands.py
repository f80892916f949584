"""``biosig fbd`` and ``biosig probe`` end to end on a trained tiny BioFormer run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biosig_lightning.analysis import fbd, subject_probe
from biosig_lightning.analysis.fbd import (
    AnalysisError,
)
from biosig_lightning.cli import main
from biosig_lightning.commands import fbd as fbd_command
from biosig_lightning.commands import probe as probe_command
from biosig_lightning.models.bioformer import BioFormer
from tests.conftest import EXPERIMENTS

# --------------------------------------------------------------------------- end to end


TINY_RUN = """
seed_everything: 0
trainer:
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args: {save_dir: runs, name: tiny_bioformer}
model:
  class_path: ClassificationTask
  init_args:
    backbone:
      class_path: biosig_lightning.models.bioformer.BioFormer
      init_args: {d_model: 16, d_ff: 32, n_heads: 2, n_layers: 2}
    lr: 3.0e-3
data:
  class_path: SyntheticDataModule
  init_args: {n_chans: 3, sfreq: 128.0, n_times: 64, n_classes: 2, label_level: window, n_subjects: 10}
"""


def test_fbd_and_probe_on_a_trained_bioformer_run(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (in_tmp / "tiny.yaml").write_text(TINY_RUN)
    main(["fit", "--config", "tiny.yaml", "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml"),
          "--data.init_args.synthetic_options", '{"windows_per_subject": 30}',
          "--trainer.enable_progress_bar=false"])
    run_dir = in_tmp / "runs" / "tiny_bioformer" / "version_0"
    results = json.loads((run_dir / "results.json").read_text())
    test_subjects = results["subjects"]["test"]

    fbd_command.run([str(run_dir), "--device", "cpu"])
    out = run_dir / "analysis"
    rep = json.loads((out / "fbd.json").read_text())
    assert (out / "fbd.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["split"] == "test" and rep["subjects"] == sorted(test_subjects) and rep["n_windows"] == 30 * 2
    assert rep["input"]["fs_hz"] == 128.0 and len(rep["input"]["fbd"]) == 32  # 2 Hz bins up to 64 Hz
    # BioFormer branches of 32, 16, 8 tokens per 0.5 s window: 64, 32, 16 Hz token rates
    assert [b["fs_hz"] for b in rep["branches"]] == [64.0, 32.0, 16.0]
    assert [len(b["fbd"]) for b in rep["branches"]] == [16, 8, 4]
    assert rep["embedding"] == rep["branches"][0]
    emb = rep["embedding"]
    for i, (a, e, f) in enumerate(zip(emb["inter"], emb["intra"], emb["fbd"], strict=True)):
        assert f == pytest.approx(a / (e + fbd.EPS)), i
    assert set(rep["comparison"]) >= {"low", "all"}
    assert rep["comparison"]["low"]["embedding"] == emb["bands"]["low"]["fbd_mean"]

    probe_command.run([str(run_dir), "--epochs", "20", "--device", "cpu", "--out", str(in_tmp / "probe")])
    rep = json.loads((in_tmp / "probe" / "probe.json").read_text())
    assert (in_tmp / "probe" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bf = BioFormer(n_chans=3, n_outputs=2, n_times=64, sfreq=128.0, d_model=16,
                   d_ff=32, n_heads=2, n_layers=2)
    assert rep["feature_dim"] == bf.feature_dim and rep["n_windows"] == 60
    # 30 % of each (subject, class) cell, rounded per cell
    assert rep["probe"]["n_train"] + rep["probe"]["n_test"] == 60 and 15 <= rep["probe"]["n_test"] <= 21
    assert rep["clustering"]["k"] == 2 and rep["clustering"]["n_windows"] == 60
    # the silhouettes are scikit-learn's on the run's own frozen test features (PCA keeps the distances)
    from sklearn.metrics import silhouette_score as sk_silhouette

    from biosig_lightning.runs import load_run

    feats = subject_probe.collect_features(load_run(run_dir), "test")
    assert feats["features"].shape == (60, bf.feature_dim)
    for key, labels in (("subject", feats["subject"]), ("label", feats["y"])):
        assert rep["silhouette"][key]["score"] == pytest.approx(
            sk_silhouette(feats["features"], labels), abs=1e-5
        )
    # two test subjects whose windows carry the stand-in's subject drift: the probe beats the majority guess
    assert rep["probe"]["subject_acc"] >= rep["probe"]["majority_acc"] + 0.2, rep["probe"]
    printed = capsys.readouterr().out
    assert "fbd: " in printed and "probe: " in printed

    with pytest.raises(AnalysisError, match="--bands"):
        fbd_command.run([str(run_dir), "--bands", "nonsense"])
