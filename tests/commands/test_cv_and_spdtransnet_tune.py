"""SPDTransNet's protocol on the MASS stand-in: ``biosig cv`` over folds (resumable, mean +- std) and the
paper's Optuna search with two workers sharing a PostgreSQL study, each trial a 2-process gloo DDP run."""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState
from sklearn import metrics as skm

from biosig_lightning.cli import main
from biosig_lightning.commands import cv
from biosig_lightning.tuning.search_space import load_search_space
from biosig_lightning.tuning.storage import open_storage
from tests.conftest import EXPERIMENTS, REPO
from tests.helpers import assert_metrics_match_predictions

TINY = ["--model.init_args.backbone.init_args.d_model", "21", "--model.init_args.backbone.init_args.tokens_per_epoch",
        "7", "--model.init_args.backbone.init_args.intra_heads", "3", "--model.init_args.backbone.init_args.intra_layers",
        "1", "--model.init_args.backbone.init_args.inter_layers", "1", "--model.init_args.backbone.init_args.d_ff", "28",
        "--model.init_args.backbone.init_args.fc_width", "28", "--data.init_args.context", "3"]
STAND_IN = ["--config", str(EXPERIMENTS / "spdtransnet_mass.yaml"), "--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"),
            "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml")]


@pytest.fixture
def env(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("BIOSIG_CACHE", str(in_tmp / "cache"))
    return dict(os.environ)


def test_cv_runs_each_fold_once_and_summarises(in_tmp: Path, env: dict[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = cv.run([*STAND_IN, *TINY, "--folds", "0-1", "--out", "runs/cv/spd"])
    summary = json.loads((out / "cv.json").read_text())
    assert summary["n_folds"] == 2 and summary["missing"] == []
    tests = [json.loads((out / f"fold_0{k}" / "results.json").read_text())["subjects"]["test"] for k in (0, 1)]
    assert tests[0] and tests[1] and not set(tests[0]) & set(tests[1])  # different folds, different subjects
    f1 = [summary["folds"][str(k)]["test/f1"] for k in (0, 1)]
    assert summary["test/f1"]["mean"] == pytest.approx(sum(f1) / 2)
    assert {"test/macro_acc", "test/f1_n1"} <= set(summary)
    for k in (0, 1):  # Table 1's N1 F1 and macro accuracy are those of the saved test windows, each once
        got = assert_metrics_match_predictions(out / f"fold_0{k}")["metrics"]
        with np.load(out / f"fold_0{k}" / "test_predictions.npz", allow_pickle=False) as z:
            y, pred = z["y"], z["probs"].argmax(1)
        assert got["test/f1_n1"] == pytest.approx(skm.f1_score(y, pred, labels=[1], average=None)[0], abs=1e-6)
        assert got["test/macro_acc"] == pytest.approx(skm.recall_score(y, pred, average="macro"), abs=1e-6)
    # `biosig report runs/cv/spd`: Table 1's columns by default, mean +- std over the folds, as in cv.json
    capsys.readouterr()
    main(["report", str(out), "--format", "csv", "--figures", str(in_tmp / "figures")])
    (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out.strip().split("\n\n")[0])))
    ds = json.loads((out / "fold_00" / "results.json").read_text())["dataset"]
    assert [k.split("/")[1] for k in row if k.endswith("/mean")] == ["f1", "macro_acc", "f1_n1"]
    for m in ("f1", "macro_acc", "f1_n1"):
        folds = [json.loads((out / f"fold_0{k}" / "results.json").read_text())["metrics"][f"test/{m}"] for k in (0, 1)]
        assert float(row[f"{ds}/{m}/mean"]) == pytest.approx(np.mean(folds), abs=1e-9)
        assert float(row[f"{ds}/{m}/std"]) == pytest.approx(np.std(folds, ddof=1), abs=1e-9)
        assert float(row[f"{ds}/{m}/std"]) == pytest.approx(summary[f"test/{m}"]["std"], abs=1e-9)
        assert row[f"{ds}/{m}/n"] == "2"
    # resumable: a second call finds both folds finished and runs nothing
    cv.run([*STAND_IN, *TINY, "--folds", "0-1", "--out", "runs/cv/spd"])
    printed = capsys.readouterr().out
    assert printed.count("exists, skipped") == 2 and "fitting" not in printed


def test_folds_argument() -> None:
    assert cv.parse_folds("0-3,7") == [0, 1, 2, 3, 7]
    with pytest.raises(cv.CVError):
        cv.parse_folds("3-1")


def test_search_space_is_the_papers() -> None:
    space = load_search_space(EXPERIMENTS / "search_spaces" / "spdtransnet.yaml")
    assert list(space["model.init_args.backbone.init_args.d_model"].choices) == [351, 378]
    assert list(space["model.init_args.backbone.init_args.tokens_per_epoch"].choices) == [1, 3, 5, 7, 10]
    assert space["model.init_args.lr"].low == 1e-6 and space["model.init_args.lr"].high == 5e-4
    assert space["data.init_args.alpha"].log and space["data.init_args.alpha"].high == 1000.0


def test_two_workers_share_a_postgres_study_with_ddp_trials(in_tmp: Path, env: dict[str, str],
                                                             postgres_url: str) -> None:
    study_name = f"spd_{os.getpid()}_{time.time_ns()}"
    space = in_tmp / "space.yaml"  # the paper's keys, small values so a CPU trial takes seconds
    space.write_text("model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-3, log: true}\n"
                     "data.init_args.alpha: {type: float, low: 0.1, high: 1000.0, log: true}\n"
                     "data.init_args.beta: {type: categorical, choices: [1.0, 1.01, 10.0, 10.01]}\n"
                     "data.init_args.eps: {type: categorical, choices: [by_beta]}\n")
    cmd = [sys.executable, "-m", "biosig_lightning.cli", "tune", *STAND_IN, *TINY, "--search-space", str(space),
           "--study-name", study_name, "--storage", postgres_url, "--n-trials", "2",
           "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp_spawn",
           "--trainer.callbacks+=tests.helpers.RecordRank", "--trainer.callbacks+=tests.helpers.WaitForPeers",
           "--trainer.callbacks.init_args.directory", str(in_tmp / "peers")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    study = optuna.load_study(study_name=study_name, storage=open_storage(postgres_url))
    errors = [f"trial {t.number}: {t.user_attrs.get('error')}" for t in study.trials if t.state == TrialState.FAIL]
    assert [p.returncode for p in procs] == [0, 0], "\n".join([*errors, *(o[-4000:] for o in outs)])
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2
    assert {t.user_attrs["worker"] for t in complete} == {f"{socket.gethostname()}:{p.pid}" for p in procs}
    for t in complete:  # each trial trained as a 2-process DDP run
        ranks = sorted((in_tmp / t.user_attrs["run_dir"]).rglob("rank*.json"))
        assert [p.name for p in ranks] == ["rank0.json", "rank1.json"]
        assert {json.loads(p.read_text())["world_size"] for p in ranks} == {2}
