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


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_workers_share_one_study(in_tmp: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        study_name = f"shared_{os.getpid()}_{time.time_ns()}"
    else:
        url, study_name = "sqlite:///shared.db", "shared"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "biosig_lightning.cli", *_tune_args(in_tmp, study_name, 3, "--storage", url)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    study = optuna.load_study(study_name=study_name, storage=url)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3
    # no trial ran twice: each trial number and each run directory belongs to exactly one trial
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    run_dirs = [t.user_attrs["run_dir"] for t in complete]
    assert len(set(run_dirs)) == 3
    # both workers took part (each starts a trial as soon as it opens the study)
    assert all("study " in o for o in outs)


def test_ddp_spawn_trial_reports_once(in_tmp: Path) -> None:
    main(_tune_args(in_tmp, "ddp", 1, "--trainer.accelerator", "cpu", "--trainer.devices", "2",
                    "--trainer.strategy", "ddp_spawn", "--trainer.max_epochs", "2"))
    study = optuna.load_study(study_name="ddp", storage="sqlite:///ddp.db")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE]
    trial = study.trials[0]
    assert sorted(trial.intermediate_values) == [0, 1]
    # the objective is the best reported value, carried back from the spawned rank 0
    assert trial.value == pytest.approx(max(trial.intermediate_values.values()), abs=1e-6)


class _Trial:
    """Stands in for optuna.Trial in callback unit tests: records what it is told."""

    def __init__(self, prune_at: int | None = None) -> None:
        self.reports: list[tuple[int, float]] = []
        self.prune_at = prune_at
        self.study = SimpleNamespace(study_name="unit")
        self._trial_id = 0

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        return self.prune_at is not None and self.reports[-1][0] >= self.prune_at


def _rank_trainer(rank: int, decision_from_rank0: bool) -> SimpleNamespace:
    return SimpleNamespace(sanity_checking=False, current_epoch=3, callback_metrics={"val/f1": torch.tensor(0.5)},
                           is_global_zero=rank == 0, world_size=2, should_stop=False,
                           strategy=SimpleNamespace(broadcast=lambda obj, src=0: decision_from_rank0))


def test_only_rank_zero_reports_and_all_ranks_stop_together() -> None:
    lead, other = _Trial(prune_at=3), _Trial(prune_at=3)
    cb0, cb1 = OptunaPruning(lead, "val/f1", "maximize"), OptunaPruning(other, "val/f1", "maximize")
    t0, t1 = _rank_trainer(0, True), _rank_trainer(1, True)
    cb0.on_validation_end(t0, None)
    cb1.on_validation_end(t1, None)
    assert lead.reports == [(3, 0.5)] and other.reports == []
    for t in (t0, t1):  # no exception in a multi-process trial: every rank stops at the same epoch
        assert t.should_stop and int(t.callback_metrics["optuna/pruned_epoch"]) == 3
        assert float(t.callback_metrics["optuna/best"]) == pytest.approx(0.5)


def test_pruning_callback_pickles_without_its_trial() -> None:
    import pickle

    cb = OptunaPruning(_Trial(), "val/f1", "maximize", storage_url="sqlite:///x.db")
    clone = pickle.loads(pickle.dumps(cb))
    assert clone.trial is None and clone.storage_url == "sqlite:///x.db" and clone._study_name == "unit"


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
    trainer = SimpleNamespace(sanity_checking=False, current_epoch=0, callback_metrics={"val/f1": torch.tensor(0.7)},
                              is_global_zero=True, world_size=1)
    cb.on_validation_end(trainer, None)  # above the threshold: reported, not pruned
    trainer.current_epoch, trainer.callback_metrics = 1, {"val/f1": torch.tensor(0.2)}
    with pytest.raises(optuna.TrialPruned, match="epoch 1"):
        cb.on_validation_end(trainer, None)
    assert cb.best == pytest.approx(0.7)
    study.tell(trial, state=TrialState.PRUNED)
    assert study.trials[0].intermediate_values == {0: pytest.approx(0.7), 1: pytest.approx(0.2)}
