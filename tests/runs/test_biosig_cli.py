"""End-to-end: the `biosig` command on the synthetic demo, smoke-sized."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from biosig_lightning.cli import main
from biosig_lightning.runs.load import load_run
from tests.conftest import EXPERIMENTS, REPO
from tests.helpers import assert_metrics_match_predictions, csv_val_epochs, printed_metrics, val_row_of_epoch

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]
RESULT_KEYS = {"model", "dataset", "seed", "metrics", "subjects", "num_params", "fit_seconds",
               "best_checkpoint",
               "config"}
METRIC_KEYS = {f"test/{k}" for k in ("acc", "precision", "recall", "f1", "auroc", "auprc", "ece")}


def run_fit(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    main(["fit", *DEMO, *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("results: "), out[-5:]
    path = Path(out[-1].split("results: ", 1)[1])
    return json.loads(path.read_text())


def test_fit_writes_results_contract(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    res = run_fit(capsys)
    wall = time.perf_counter() - started
    assert RESULT_KEYS <= res.keys()
    assert METRIC_KEYS <= res["metrics"].keys()
    assert res["model"] == "CNN1D" and res["dataset"] == "synthetic" and res["seed"] == 42
    train, val, test = (set(res["subjects"][k]) for k in ("train", "val", "test"))
    assert train and val and test and not (train & val or train & test or val & test)
    assert Path(res["best_checkpoint"]).exists()
    # num_params: the trainable parameters of the task rebuilt from the saved config; fit_seconds: the
    # fit alone, so positive and within the wall time of the whole command (which also tests)
    assert res["num_params"] == sum(
        p.numel() for p in load_run(res["run_dir"]).task.parameters() if p.requires_grad
    )
    assert 0 < res["fit_seconds"] <= wall
    # the full resolved config: the data shape was linked into the backbone, not repeated
    assert res["config"]["model"]["init_args"]["backbone"]["class_path"].endswith("CNN1D")
    assert res["config"]["data"]["class_path"].endswith("SyntheticDataModule")
    # smoke limits testing to 2 batches of 64 windows: the confusion matrix counts what was tested
    assert sum(map(sum, res["confusion_matrix"])) == min(res["windows"]["test"], 2 * 64)
    # every logged test metric (ECE included) is what scikit-learn gets from the saved predictions
    assert_metrics_match_predictions(res["run_dir"], tested=min(res["windows"]["test"], 2 * 64))


def test_same_seed_same_metrics(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3")
    a = run_fit(capsys, *args)
    b = run_fit(capsys, *args)
    assert a["metrics"] == b["metrics"]
    assert a["subjects"] == b["subjects"]
    c = run_fit(capsys, *args, "--seed_everything", "7")
    assert c["metrics"] != a["metrics"]


def test_resume_from_last_continues_epochs(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--trainer.max_epochs", "3", "--trainer.logger.init_args.name", "resume",
            "--trainer.callbacks+=tests.helpers.RecordEpochs")
    with pytest.raises((SystemExit, KeyboardInterrupt)):
        main(["fit", *DEMO, *args, "--trainer.callbacks+=tests.helpers.InterruptAfterEpoch",
              "--trainer.callbacks.init_args.epoch", "1"])
    capsys.readouterr()
    run_dir = in_tmp / "runs" / "resume" / "version_0"
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    assert not (run_dir / "results.json").exists()
    assert csv_val_epochs(run_dir / "metrics.csv") == [0, 1]
    res = run_fit(capsys, *args, "--ckpt_path", "last")
    assert Path(res["run_dir"]) == Path("runs/resume/version_0")
    assert json.loads((run_dir / "epochs_trained.json").read_text()) == [2]
    assert res["epochs"] == 3
    # the learning curve of the epochs before the crash survives the resumed run's logger
    assert csv_val_epochs(run_dir / "metrics.csv") == [0, 1, 2]


def test_metrics_csv_is_on_disk_with_each_last_checkpoint(in_tmp: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # a run killed outright (no logger finalize) leaves the rows of every checkpointed epoch, which a
    # resume keeps (Lightning saves the CSV after every log call; this pins that we rely on it)
    res = run_fit(capsys, "--trainer.max_epochs", "3", "--trainer.callbacks+=tests.helpers.RecordCsvOnDisk")
    on_disk = json.loads((Path(res["run_dir"]) / "csv_on_disk.json").read_text())
    assert on_disk == {"0": [], "1": [0], "2": [0, 1]}


def test_resume_without_checkpoint_is_a_clear_error(in_tmp: Path) -> None:
    with pytest.raises(SystemExit, match="no last.ckpt under runs/nothing"):
        main(["fit", *DEMO, "--trainer.logger.init_args.name", "nothing", "--ckpt_path", "last"])
    assert not (in_tmp / "runs" / "nothing").exists()  # refused before a run directory was claimed


def test_braindecode_backbone_by_class_path(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import braindecode  # a pinned dev dependency: its absence is a failure, not a skip

    assert braindecode.__version__
    # by the name that holds for braindecode 0.8 (EEGNetv4) and 1.x (EEGNet) alike
    res = run_fit(capsys, "--model.init_args.backbone", "biosig_lightning.models.braindecode_names.EEGNet")
    assert res["model"] == ("EEGNet" if hasattr(braindecode.models, "EEGNet") else "EEGNetv4")
    assert METRIC_KEYS <= res["metrics"].keys()
    assert_metrics_match_predictions(res["run_dir"])


def test_unknown_subject_in_fixed_split_is_one_clear_error(in_tmp: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--data.init_args.split.strategy", "fixed",
              "--data.init_args.split.val", "[1, 2]", "--data.init_args.split.test", "[3, 99]"])
    assert "99" in str(err.value) and "error" in str(err.value)


def test_profile_prints_contract(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["profile", *DEMO, "--steps", "2", "--warmup", "1"])
    out = json.loads(capsys.readouterr().out)
    assert {"params", "flops_per_sample", "train_step_ms", "samples_per_s", "device"} <= out.keys()
    assert out["params"] > 0 and out["flops_per_sample"] > out["params"] and out["train_step_ms"] > 0


def test_print_config_does_not_repeat_linked_shape(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fit", *DEMO, "--print_config"])
    text = capsys.readouterr().out
    assert "SyntheticDataModule" in text and "n_chans: 16" in text  # the data's own argument
    backbone = text.split("backbone:", 1)[1].split("data:", 1)[0]
    assert "n_chans" not in backbone and "n_outputs" not in backbone


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


#: 3 test subjects x 7 windows = 21 (and 3 validation subjects x 7 = 21): the DistributedSampler pads
#: the 2 shards of each to 11 + 11
DDP_DATA = ["--data.init_args.synthetic_options.windows_per_subject", "7", "--data.init_args.split.strategy",
            "fixed", "--data.init_args.split.val", "[1, 2, 3]", "--data.init_args.split.test", "[4, 5, 6]"]


@pytest.fixture(scope="module")
def ddp_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One 2-process CPU DDP fit of the console script, run once for the tests of this module that check
    it (its ranks) and use its checkpoint (one process and DDP score it alike): (its cwd, the process)."""
    cwd = tmp_path_factory.mktemp("ddp_fit")
    proc = subprocess.run(
        [sys.executable, "-m", "biosig_lightning.cli", "fit", *DEMO, *DDP_DATA, "--trainer.accelerator",
         "cpu",
         "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.limit_train_batches", "4",
         "--trainer.logger.init_args.name", "ddp", "--trainer.callbacks+=tests.helpers.RecordRank"],
        capture_output=True, text=True, env=_env(), timeout=300, cwd=cwd)
    return cwd, proc


@pytest.mark.slow
def test_ddp_two_cpu_processes(ddp_fit: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, proc = ddp_fit
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = cwd / "runs" / "ddp" / "version_0"
    results = list((cwd / "runs").rglob("results.json"))
    assert results == [run_dir / "results.json"]
    assert proc.stdout.count("results: ") == 1
    r0 = json.loads((run_dir / "rank0.json").read_text())
    r1 = json.loads((run_dir / "rank1.json").read_text())
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["weights"] == r1["weights"]
    # the distributed sampler gave the ranks different windows
    assert r0["seen"] and r1["seen"] and not set(r0["seen"]) & set(r1["seen"])
    res = json.loads(results[0].read_text())
    assert METRIC_KEYS <= res["metrics"].keys()


@pytest.mark.slow
def test_ddp_test_run_scores_like_one_process(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                              ddp_fit: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    import numpy as np

    # the DDP fit tested its best checkpoint with 2 processes (results.json) and validated each epoch with
    # 2 (metrics.csv); one process tests and validates that checkpoint again: every value must be the same
    cwd, proc = ddp_fit
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp_dir = cwd / "runs" / "ddp" / "version_0"
    res = json.loads((ddp_dir / "results.json").read_text())
    assert res["windows"]["test"] == res["windows"]["val"] == 21
    ckpt = cwd / res["best_checkpoint"]
    test = ["test", *DEMO, *DDP_DATA, "--ckpt_path", str(ckpt), "--trainer.enable_progress_bar=false"]

    def one_process_equals(cmd: list[str], name: str, stage: str, two: dict[str, float]) -> None:
        main([*cmd, "--trainer.logger.init_args.name", name])
        one = printed_metrics(capsys.readouterr().out, stage)
        assert set(one) == set(two) and len(one) >= 9, (set(one), set(two))
        for key, value in one.items():
            assert two[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (stage, key, value, two[key])

    one_process_equals(test, "one", "test", res["metrics"])

    def saved(run_dir: Path) -> dict[str, np.ndarray]:
        with np.load(run_dir / "test_predictions.npz", allow_pickle=False) as z:
            order = np.argsort(z["index"])
            return {k: z[k][order] for k in z.files}

    (one_dir,) = (in_tmp / "runs" / "one").glob("version_*")
    a, b = saved(one_dir), saved(ddp_dir)
    # every test window exactly once, with the same prediction: no padded duplicate is scored twice
    assert len(a["index"]) == len(np.unique(a["index"])) == 21
    np.testing.assert_array_equal(b["index"], a["index"])
    np.testing.assert_array_equal(b["y"], a["y"])
    np.testing.assert_allclose(b["probs"], a["probs"], atol=1e-6)
    cm = [np.bincount(2 * p["y"] + p["probs"].argmax(1), minlength=4) for p in (a, b)]
    np.testing.assert_array_equal(cm[1], cm[0])

    # validation too (it picks the checkpoint, stops early, sets a detection threshold): the 21 val
    # windows are also padded to 11 + 11, and the duplicate must not count twice; the DDP fit logged
    # the checkpoint's epoch
    epoch = int(ckpt.stem.removeprefix("best-epoch"))
    one_process_equals(["validate", *test[1:]], "one_val", "val",
                       val_row_of_epoch(ddp_dir / "metrics.csv", epoch))


def _write_apava(root: Path, n_windows: int = 4) -> None:
    """A tiny APAVA in the Medformer layout: Feature/feature_XX.npy (n, T, C) + Label/label.npy."""
    import numpy as np

    rng = np.random.default_rng(0)
    (root / "Feature").mkdir(parents=True)
    (root / "Label").mkdir()
    rows = []
    for sid in range(1, 24):
        label = sid % 2
        x = rng.standard_normal((n_windows, 256, 16)) + label * np.sin(np.arange(256) / 4)[None, :, None]
        np.save(root / "Feature" / f"feature_{sid:02d}.npy", x)
        rows.append((label, sid))
    np.save(root / "Label" / "label.npy", np.asarray(rows, dtype=np.float64))


def _real_corpus_config(tmp: Path, root: Path) -> Path:
    cfg = tmp / "apava_real.yaml"
    cfg.write_text(f"""
model:
  class_path: ClassificationTask
  init_args:
    backbone:
      class_path: biosig_lightning.models.baselines.CNN1D
      init_args: {{width: 16, n_blocks: 3, convs_per_block: 1}}
data:
  class_path: APAVADataModule
  init_args: {{root: {root}, batch_size: 16}}
""")
    return cfg


def test_fit_on_a_real_corpus_layout(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = in_tmp / "apava"
    _write_apava(root)
    cfg = _real_corpus_config(in_tmp, root)
    main(["fit", "--config", str(cfg), "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml")])
    out = capsys.readouterr().out.strip().splitlines()
    res = json.loads(Path(out[-1].split("results: ", 1)[1]).read_text())
    assert res["dataset"] == "apava"
    # the paper's fixed APAVA split (BioFormer C.1)
    assert res["subjects"]["val"] == [15, 16, 19, 20] and res["subjects"]["test"] == [1, 2, 17, 18]


def test_missing_corpus_root_is_one_clear_error(in_tmp: Path) -> None:
    missing = in_tmp / "no-such-corpus"
    cfg = _real_corpus_config(in_tmp, missing)
    with pytest.raises(SystemExit) as err:
        main(["fit", "--config", str(cfg), "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml")])
    msg = str(err.value)
    assert str(missing) in msg and "does not exist" in msg and "\n" not in msg


def test_synthetic_override_never_needs_root(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _real_corpus_config(in_tmp, in_tmp / "absent")
    res_line = None
    main(["fit", "--config", str(cfg), "--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"),
          "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml")])
    res_line = capsys.readouterr().out.strip().splitlines()[-1]
    res = json.loads(Path(res_line.split("results: ", 1)[1]).read_text())
    assert res["dataset"] == "apava-synthetic"


def test_tensorboard_and_wandb_loggers_selectable(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(in_tmp))
    res = run_fit(capsys, "--config", str(EXPERIMENTS / "overlays" / "tensorboard.yaml"))
    assert list(Path(res["run_dir"]).parent.parent.rglob("events.out.tfevents.*"))
    res = run_fit(capsys, "--config", str(EXPERIMENTS / "overlays" / "wandb.yaml"))
    offline = list(in_tmp.rglob("offline-run-*"))
    assert offline, "wandb wrote no offline run"
    assert res["metrics"]


def test_validate_and_test_a_saved_checkpoint(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = run_fit(capsys, "--trainer.max_epochs", "2")
    ckpt = res["best_checkpoint"]
    main(["test", *DEMO, "--ckpt_path", ckpt])
    tested = printed_metrics(capsys.readouterr().out, "test")
    # the same checkpoint on the same test windows: every printed value is the one results.json holds
    assert set(tested) == set(res["metrics"]), (set(tested), set(res["metrics"]))
    for key, value in res["metrics"].items():
        assert tested[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    main(["validate", *DEMO, "--ckpt_path", ckpt])
    validated = printed_metrics(capsys.readouterr().out, "val")
    # ... and on the validation windows, what the fit logged for the checkpoint's epoch
    epoch = int(Path(ckpt).stem.removeprefix("best-epoch"))
    logged = val_row_of_epoch(Path(res["run_dir"]) / "metrics.csv", epoch)
    assert validated["val/f1"] == pytest.approx(res["best_val"], rel=1e-6)
    assert set(logged) <= set(validated) and len(logged) >= 8, logged
    for key, value in logged.items():
        assert validated[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key


def test_profile_counts_transformer_encoder_flops(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # nn.TransformerEncoder's no-grad fast path hides its matmuls from the flop counter
    def flops(n_layers: int) -> int:
        main(["profile", *DEMO, "--steps", "1", "--warmup", "0", "--model.init_args.backbone",
              "biosig_lightning.models.baselines.TransformerClassifier",
              f"--model.init_args.backbone.init_args.n_layers={n_layers}",
              "--model.init_args.backbone.init_args.d_model=32",
              "--model.init_args.backbone.init_args.patch_len=16"])
        return json.loads(capsys.readouterr().out)["flops_per_sample"]

    # one more layer of 16 tokens x width 32 costs at least its q/k/v/out projections
    assert flops(2) - flops(1) >= 2 * 16 * 4 * 32 * 32


def test_bf16_on_a_cpu_without_bfloat16_instructions_warns(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning import accel

    monkeypatch.setattr(accel, "cpu_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="bfloat16 products are emulated"):
        run_fit(capsys, "--trainer.precision", "bf16-mixed")


def test_gpu_asked_for_without_one_is_one_line(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(SystemExit,
                       match=r"^biosig fit: error: trainer.accelerator: gpu asked for, but torch .* sees no "
                             r"GPU"):
        main(["fit", *DEMO, "--trainer.accelerator", "gpu"])
    assert not list((in_tmp / "runs").glob("*/version_*"))  # refused before a run directory was claimed


def test_tensorboard_without_the_extra_names_it(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tensorboard", "tensorboardX") else real(name, *a))
    with pytest.raises(SystemExit, match=r"pip install 'biosig-lightning\[tensorboard\]'"):
        main(["fit", *DEMO, "--tensorboard", "true"])
