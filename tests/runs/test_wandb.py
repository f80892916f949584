"""wandb dashboards, checked offline: what the run file holds after fit, repeat and tune."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS
from tests.helpers import read_wandb_offline, wait_for_wandb_run

WANDB = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml"),
         "--config", str(EXPERIMENTS / "overlays" / "wandb.yaml"), "--trainer.max_epochs", "2"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)


def _runs(root: Path) -> list[dict]:
    files = sorted(root.rglob("offline-run-*/run-*.wandb"))
    assert files, f"no offline wandb run under {root}"
    return [wait_for_wandb_run(f) for f in files]


def test_offline_fit_holds_logged_metrics_config_and_tables(in_tmp: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    main(["fit", *WANDB])
    res = json.loads(
        Path(capsys.readouterr().out.strip().splitlines()[-1].split("results: ", 1)[1]).read_text()
    )
    (run,) = _runs(in_tmp)
    # every epoch's val/f1 of the CSV log is in the wandb history, with the same value
    rows = [r for r in csv.DictReader(open(Path(res["run_dir"]) / "metrics.csv")) if r.get("val/f1")]
    history = [h for h in run["history"] if "val/f1" in h]
    assert len(rows) == len(history) == 2
    for row, h in zip(rows, history, strict=True):
        assert h["val/f1"] == pytest.approx(float(row["val/f1"]), abs=1e-6)
    for key, value in res["metrics"].items():
        assert run["summary"][key] == pytest.approx(value, abs=1e-6)
    assert run["summary"]["num_params"] == res["num_params"]
    assert run["summary"]["test/confusion_matrix_counts"] == res["confusion_matrix"]
    assert (
        "ClassificationTask" in run["summary"]["model/summary_text"]
        or "backbone" in run["summary"]["model/summary_text"]
    )
    assert any("test/confusion_matrix_table/_type" in h for h in run["history"])
    assert run["config"]["config"]["model"]["init_args"]["backbone"]["class_path"].endswith("CNN1D")
    assert run["group"] == "demo"


def test_repeat_groups_its_seeds(in_tmp: Path) -> None:
    main(["repeat", *WANDB, "--trainer.max_epochs", "1", "--seeds", "3,4"])
    # wandb.yaml only adds a dashboard: the experiment (and its resumable folder) is the one without it
    out = in_tmp / "runs" / "repeat" / "demo+smoke"
    assert sorted(p.name for p in out.glob("seed_*")) == ["seed_3", "seed_4"]
    runs = _runs(in_tmp / "runs" / "repeat")
    assert sorted(r["name"] for r in runs) == ["demo+smoke/seed_3", "demo+smoke/seed_4"]
    assert {r["group"] for r in runs} == {"demo+smoke"}
    assert {r["config"]["seed"] for r in runs} == {3, 4}
    assert all(any("val/f1" in h for h in r["history"]) for r in runs)


def test_tune_names_trials_by_number(in_tmp: Path) -> None:
    space = in_tmp / "space.yaml"
    space.write_text("model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}\n")
    main(["tune", *WANDB, "--trainer.max_epochs", "1", "--search-space", str(space), "--study-name", "wb",
          "--n-trials", "2"])
    runs = _runs(in_tmp / "runs" / "tune")
    assert sorted(r["name"] for r in runs) == ["trial_0", "trial_1"]
    assert {r["group"] for r in runs} == {"wb"}
    assert all(any("val/f1" in h for h in r["history"]) for r in runs)


def _placed(run: dict | None, wandb_group: str | None) -> dict:
    from jsonargparse import Namespace

    from biosig_lightning.runs.placement import apply_placement as _apply_placement

    csv_logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(name="demo"))
    wandb_logger = Namespace(class_path="lightning.pytorch.loggers.WandbLogger",
                             init_args=Namespace(name="demo", group=wandb_group, save_dir="runs"))
    _apply_placement([csv_logger, wandb_logger], Namespace(**run) if run else None, "demo")
    return {"name": wandb_logger.init_args.name, "group": wandb_logger.init_args.group}


def test_a_users_wandb_group_is_kept_by_repeat_and_tune() -> None:
    seed = {"save_dir": "runs/repeat", "name": "demo", "version": "seed_3", "group": "demo"}
    trial = {"save_dir": "runs/tune/s", "name": "trial_0", "version": None, "group": "s"}
    # no group of the user's: repeat groups by experiment, tune by study; the seed/trial names the run
    assert _placed(seed, None) == {"name": "demo/seed_3", "group": "demo"}
    assert _placed(trial, None) == {"name": "trial_0", "group": "s"}
    assert _placed(None, None) == {"name": "demo", "group": "demo"}
    # --wandb.group sweep-1: every run in it, still named by seed / trial
    assert _placed(seed, "sweep-1") == {"name": "demo/seed_3", "group": "sweep-1"}
    assert _placed(trial, "sweep-1") == {"name": "trial_0", "group": "sweep-1"}


def test_the_anonymous_setting_warning_is_not_shown(in_tmp: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    # a fresh process: wandb prints to stderr only until some run in this process made it silent
    env = dict(os.environ, WANDB_SILENT="false",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "biosig_lightning.cli", "fit", *WANDB,
                           "--trainer.max_epochs", "1",
                           "--trainer.enable_progress_bar=false"], capture_output=True,
                          text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wandb: Tracking run" in proc.stderr  # wandb does talk here ...
    assert "anonymous setting" not in proc.stderr  # ... but not about the argument Lightning always passes


def test_a_run_file_read_while_wandb_writes_it_reads_its_whole_records_so_far(in_tmp: Path) -> None:
    """The reader sees the file the background service is appending to: every prefix of a run
    file reads without error and holds the history rows whose records it holds whole."""
    main(["fit", *WANDB, "--trainer.max_epochs", "1"])
    (path,) = sorted(in_tmp.rglob("offline-run-*/run-*.wandb"))
    full = wait_for_wandb_run(path)
    raw, cut, seen = path.read_bytes(), in_tmp / "partial.wandb", 0
    for end in [*range(8, len(raw), max(1, len(raw) // 200)), len(raw)]:
        cut.write_bytes(raw[:end])
        rows = read_wandb_offline(cut)["history"]
        assert seen <= len(rows) and rows == full["history"][:len(rows)], end
        seen = len(rows)
    assert seen == len(full["history"]) > 0
