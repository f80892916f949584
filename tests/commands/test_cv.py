"""``biosig cv`` on SPDTransNet's MASS stand-in: each fold runs once (resumable), metrics match the saved
predictions, and ``biosig report`` summarises the folds as mean +- std."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn import metrics as skm

from biosig_lightning.cli import main
from biosig_lightning.commands import cv
from tests.commands.spdtransnet_standin import STAND_IN, TINY
from tests.conftest import EXPERIMENTS
from tests.helpers import assert_metrics_match_predictions


def test_cv_runs_each_fold_once_and_summarises(in_tmp: Path, env: dict[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = cv.run([*STAND_IN, *TINY, "--folds", "0-1", "--out", "runs/cv/spd"])
    summary = json.loads((out / "cv.json").read_text())
    assert summary["n_folds"] == 2 and summary["missing"] == []
    tests = [
        json.loads((out / f"fold_0{k}" / "results.json").read_text())["subjects"]["test"] for k in (0, 1)
    ]
    assert tests[0] and tests[1] and not set(tests[0]) & set(tests[1])  # different folds, different subjects
    f1 = [summary["folds"][str(k)]["test/f1"] for k in (0, 1)]
    assert summary["test/f1"]["mean"] == pytest.approx(sum(f1) / 2)
    assert {"test/macro_acc", "test/f1_n1"} <= set(summary)
    for k in (0, 1):  # Table 1's N1 F1 and macro accuracy are those of the saved test windows, each once
        got = assert_metrics_match_predictions(out / f"fold_0{k}")["metrics"]
        with np.load(out / f"fold_0{k}" / "test_predictions.npz", allow_pickle=False) as z:
            y, pred = z["y"], z["probs"].argmax(1)
        assert got["test/f1_n1"] == pytest.approx(skm.f1_score(y, pred,
                                                               labels=[1], average=None)[0], abs=1e-6)
        assert got["test/macro_acc"] == pytest.approx(skm.recall_score(y, pred, average="macro"), abs=1e-6)
    # `biosig report runs/cv/spd`: Table 1's columns by default, mean +- std over the folds, as in cv.json
    capsys.readouterr()
    main(["report", str(out), "--format", "csv", "--figures", str(in_tmp / "figures")])
    (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out.strip().split("\n\n")[0])))
    ds = json.loads((out / "fold_00" / "results.json").read_text())["dataset"]
    assert [k.split("/")[1] for k in row if k.endswith("/mean")] == ["f1", "macro_acc", "f1_n1"]
    for m in ("f1", "macro_acc", "f1_n1"):
        folds = [
            json.loads((out / f"fold_0{k}" / "results.json").read_text())["metrics"][f"test/{m}"]
            for k in (0, 1)
        ]
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


def test_cv_on_a_missing_corpus_stops_before_any_fold(in_tmp: Path) -> None:
    """One line naming the root and its key, and no fold started (each would have failed on it)."""
    missing = in_tmp / "no-such-mass"
    with pytest.raises(SystemExit) as err:
        main(["cv", "--config", str(EXPERIMENTS / "spdtransnet_mass.yaml"),
              "--data.init_args.root", str(missing), "--folds", "0-2", "--out", "runs/cv/missing"])
    msg = str(err.value)
    assert str(missing) in msg and "data.init_args.root" in msg and "\n" not in msg
    assert not (in_tmp / "runs" / "cv" / "missing").exists()
