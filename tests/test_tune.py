"""``biosig tune``: Optuna over config keys, cooperating workers, exported best config, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
from optuna.trial import TrialState

from biosig_lightning.cli import main
from biosig_lightning.tune import OptunaPruning
from tests.conftest import EXPERIMENTS, REPO

SMOKE = ["--config", str(EXPERIMENTS / "demo.yaml"), "--config", str(EXPERIMENTS / "smoke.yaml")]
SPACE = """
model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
model.init_args.backbone.init_args.width: {type: categorical, choices: [8, 16]}
"""


def _space(tmp: Path, text: str = SPACE) -> str:
    path = tmp / "space.yaml"
    path.write_text(text)
    return str(path)


def _tune_args(tmp: Path, study: str, n: int, *extra: str) -> list[str]:
    return ["tune", *SMOKE, "--search-space", _space(tmp), "--study-name", study, "--n-trials", str(n), *extra]


def test_tune_two_trials_and_best_config_fits(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(_tune_args(in_tmp, "s", 2))
    study = optuna.load_study(study_name="s", storage="sqlite:///s.db")
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and len(study.trials) == 2
    assert all(0.0 <= t.value <= 1.0 for t in complete)
    assert {t.params["model.init_args.backbone.init_args.width"] for t in complete} <= {8, 16}
    assert (in_tmp / "runs" / "tune" / "s" / "trial_0").is_dir()
    best = in_tmp / "s_best.yaml"
    assert best.exists()
    capsys.readouterr()
    main(["fit", *SMOKE, "--config", str(best)])
    res_path = Path(capsys.readouterr().out.strip().splitlines()[-1].split("results: ", 1)[1])
    cfg = json.loads(res_path.read_text())["config"]["model"]["init_args"]
    assert cfg["lr"] == pytest.approx(study.best_params["model.init_args.lr"])
    assert cfg["backbone"]["init_args"]["width"] == study.best_params["model.init_args.backbone.init_args.width"]


def test_two_workers_share_one_study(in_tmp: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "biosig_lightning.cli", *_tune_args(in_tmp, "shared", 3)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    study = optuna.load_study(study_name="shared", storage="sqlite:///shared.db")
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 3


def test_killed_worker_trial_is_failed_and_replaced(in_tmp: Path) -> None:
    storage = optuna.storages.RDBStorage("sqlite:///k.db", heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(study_name="k", storage=storage, direction="maximize")
    dead = study.ask()  # a worker took this trial, sent one heartbeat, and was killed
    storage.record_heartbeat(dead._trial_id)
    time.sleep(1.5)
    main(_tune_args(in_tmp, "k", 1, "--grace-period", "1"))
    states = {t.number: t.state for t in optuna.load_study(study_name="k", storage="sqlite:///k.db").trials}
    assert states == {0: TrialState.FAIL, 1: TrialState.COMPLETE}


def test_unknown_search_space_key_is_named(in_tmp: Path) -> None:
    space = _space(in_tmp, "model.init_args.no_such_knob: {type: float, low: 0.1, high: 0.2}\n")
    with pytest.raises(SystemExit) as err:
        main(["tune", *SMOKE, "--search-space", space, "--study-name", "bad", "--n-trials", "1"])
    msg = str(err.value)
    assert "model.init_args.no_such_knob" in msg and "\n" not in msg
    assert not (in_tmp / "bad.db").exists()


def test_empty_search_space_is_an_error(in_tmp: Path) -> None:
    space = _space(in_tmp, "# nothing to search\n")
    with pytest.raises(SystemExit, match="is empty"):
        main(["tune", *SMOKE, "--search-space", space, "--study-name", "e", "--n-trials", "1"])


def test_bad_spec_is_named(in_tmp: Path) -> None:
    space = _space(in_tmp, "model.init_args.lr: {type: float, low: 0.1, high: 0.01}\n")
    with pytest.raises(SystemExit, match=r"model.init_args.lr: low \(0.1\) must be < high"):
        main(["tune", *SMOKE, "--search-space", space, "--study-name", "e", "--n-trials", "1"])


def test_unreachable_storage_names_the_url(in_tmp: Path) -> None:
    url = "sqlite:////nonexistent-dir/x.db"
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "u", 1, "--storage", url))
    assert url in str(err.value) and "cannot open study storage" in str(err.value)


def test_pruning_callback_reports_and_prunes() -> None:
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=0.5))
    trial = study.ask()
    cb = OptunaPruning(trial, "val/f1", "maximize")
    trainer = SimpleNamespace(sanity_checking=False, current_epoch=0, callback_metrics={"val/f1": torch.tensor(0.7)})
    cb.on_validation_end(trainer, None)  # above the threshold: reported, not pruned
    trainer.current_epoch, trainer.callback_metrics = 1, {"val/f1": torch.tensor(0.2)}
    with pytest.raises(optuna.TrialPruned, match="epoch 1"):
        cb.on_validation_end(trainer, None)
    assert cb.best == pytest.approx(0.7)
    study.tell(trial, state=TrialState.PRUNED)
    assert study.trials[0].intermediate_values == {0: pytest.approx(0.7), 1: pytest.approx(0.2)}
