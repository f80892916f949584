"""``biosig tune``: Optuna over config keys, cooperating workers, exported best config, clear errors."""

from __future__ import annotations

import csv
import json
import os
import socket
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
from biosig_lightning.tuning.pruning import OptunaPruning
from biosig_lightning.tuning.storage import open_storage
from tests.conftest import EXPERIMENTS, REPO

SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml")]
SPACE = """
model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
model.init_args.backbone.init_args.width: {type: categorical, choices: [8, 16]}
"""


def _space(tmp: Path, text: str = SPACE) -> str:
    path = tmp / "space.yaml"
    path.write_text(text)
    return str(path)


def _tune_args(tmp: Path, study: str, n: int, *extra: str) -> list[str]:
    return ["tune", *SMOKE, "--search-space", _space(tmp), "--study-name", study,
            "--n-trials", str(n), *extra]


def test_tune_two_trials_and_best_config_fits(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(_tune_args(in_tmp, "s", 2))
    study = optuna.load_study(study_name="s", storage="sqlite:///s.db")
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and len(study.trials) == 2
    for t in complete:  # the objective is the trial run's best val/f1, as its own CSV log has it
        with (in_tmp / t.user_attrs["run_dir"] / "metrics.csv").open() as fh:
            logged = [float(r["val/f1"]) for r in csv.DictReader(fh) if r.get("val/f1")]
        assert logged and t.value == pytest.approx(max(logged), abs=1e-6), (t.value, logged)
        assert t.value == pytest.approx(max(t.intermediate_values.values()), abs=1e-6)
    assert {t.params["model.init_args.backbone.init_args.width"] for t in complete} <= {8, 16}
    assert (in_tmp / "runs" / "tune" / "s" / "trial_0").is_dir()
    best = in_tmp / "runs" / "tune" / "s" / "best.yaml"  # beside the study's trials, not in the cwd
    printed = capsys.readouterr().out
    assert best.exists() and f"best config: {best.relative_to(in_tmp)}" in printed
    assert not list(in_tmp.glob("*_best.yaml"))
    # the experiment's own monitor is the default metric (demo: val/f1, max)
    assert study.user_attrs["metric"] == "val/f1" and study.direction.name == "MAXIMIZE"
    main(["fit", *SMOKE, "--config", str(best)])
    res_path = Path(capsys.readouterr().out.strip().splitlines()[-1].split("results: ", 1)[1])
    cfg = json.loads(res_path.read_text())["config"]["model"]["init_args"]
    assert cfg["lr"] == pytest.approx(study.best_params["model.init_args.lr"])
    assert (
        cfg["backbone"]["init_args"]["width"] == study.best_params["model.init_args.backbone.init_args.width"]
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_workers_share_one_study(in_tmp: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "postgres":
        # a plain postgresql:// URL, as a user writes it: tune picks psycopg2 when psycopg 3 is missing
        url = request.getfixturevalue("postgres_url").replace("postgresql+psycopg2://", "postgresql://")
        study_name = f"shared_{os.getpid()}_{time.time_ns()}"
    else:
        url, study_name = "sqlite:///shared.db", "shared"
    env = dict(os.environ,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    # each worker's first trial waits until the other worker has one too: both must run trials
    barrier = ["--trainer.callbacks+=tests.helpers.WaitForPeers",
               "--trainer.callbacks.init_args.directory", str(in_tmp / f"peers_{backend}")]
    cmd = [sys.executable, "-m", "biosig_lightning.cli", *_tune_args(in_tmp, study_name, 3, "--storage", url),
           *barrier]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    study = optuna.load_study(study_name=study_name, storage=open_storage(url))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3
    ran = [t for t in study.trials if "skipped" not in t.user_attrs]
    # no trial ran twice: every trial that ran has its own parameters (two workers handing out the
    # same sampled values would repeat a tuple) and exactly one run directory on disk
    params = [tuple(sorted(t.params.items())) for t in ran]
    assert len(params) == len(set(params)), params
    runs = in_tmp / "runs" / "tune" / study_name
    assert sorted(p.name for p in runs.iterdir() if p.name.startswith("trial_")) == sorted(
        f"trial_{t.number}" for t in ran)
    for t in ran:
        versions = list((runs / f"trial_{t.number}").iterdir())
        assert len(versions) == 1 and t.user_attrs["run_dir"] == str(versions[0].relative_to(in_tmp)), (
            versions
        )
    # both workers ran trials (each records host:pid on its trials)
    workers = {t.user_attrs["worker"] for t in ran}
    assert workers == {f"{socket.gethostname()}:{p.pid}" for p in procs}, workers


def test_ddp_spawn_trial_reports_once(in_tmp: Path, capfd: pytest.CaptureFixture[str]) -> None:
    main(_tune_args(in_tmp, "ddp", 1, "--trainer.accelerator", "cpu", "--trainer.devices", "2",
                    "--trainer.strategy", "ddp_spawn", "--trainer.max_epochs", "2",
                    "--trainer.callbacks+=tests.helpers.RecordRank"))
    study = optuna.load_study(study_name="ddp", storage="sqlite:///ddp.db")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE]
    trial = study.trials[0]
    # both ranks trained (each wrote its rank file) ...
    run_dir = in_tmp / trial.user_attrs["run_dir"]
    ranks = {int(p.stem[4:]): json.loads(p.read_text()) for p in run_dir.glob("rank*.json")}
    assert sorted(ranks) == [0, 1] and all(r["world_size"] == 2 for r in ranks.values())
    # ... and only one of them reported: Optuna ignores (with a warning) a second report of an epoch
    assert "already reported" not in capfd.readouterr().err
    assert sorted(trial.intermediate_values) == [0, 1]
    # the objective is the best reported value, carried back from the spawned rank 0
    assert trial.value == pytest.approx(max(trial.intermediate_values.values()), abs=1e-6)


def test_ddp_spawn_trial_is_pruned_on_both_ranks(in_tmp: Path) -> None:
    from optuna.distributions import FloatDistribution

    from biosig_lightning.tuning.objective import make_objective

    # five finished trials that reached val/f1 = 2 (beyond any real score) at epochs 0-2: the study's
    # default MedianPruner (5 startup trials, no warm-up) -- the one the spawned rank 0 reopens from the
    # storage -- prunes any new trial at its first report, epoch 0, through the real broadcast
    url = "sqlite:///prune.db"
    study = optuna.create_study(study_name="prune", storage=url, direction="maximize")
    dist = FloatDistribution(1e-3, 1e-2, log=True)
    for _ in range(5):
        study.add_trial(optuna.trial.create_trial(
            params={"model.init_args.lr": 3e-3}, distributions={"model.init_args.lr": dist}, value=2.0,
            intermediate_values={0: 2.0, 1: 2.0, 2: 2.0}))
    args = [*SMOKE, "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy",
            "ddp_spawn",
            "--trainer.max_epochs", "3", "--model.init_args.early_stopping_patience", "null",
            "--trainer.callbacks+=tests.helpers.RecordRank"]
    objective = make_objective(args, {"model.init_args.lr": dist}, "val/f1", "maximize", 6,
                               in_tmp / "runs" / "tune" / "prune", url)
    study.optimize(objective, n_trials=1, catch=(Exception,))
    trial = study.trials[-1]
    assert trial.state == TrialState.PRUNED, (trial.state, trial.user_attrs.get("error"))
    assert list(trial.intermediate_values) == [0]  # rank 0 reported epoch 0 once, then the run ended
    ranks = {int(p.stem[4:]): json.loads(p.read_text())
             for p in (in_tmp / trial.user_attrs["run_dir"]).glob("rank*.json")}
    assert sorted(ranks) == [0, 1] and all(r["world_size"] == 2 for r in ranks.values())
    # both ranks stopped after the same, first epoch: smoke trains 2 batches of 16 windows per rank and epoch
    assert [len(ranks[r]["seen"]) for r in (0, 1)] == [32, 32], {r: len(v["seen"]) for r, v in ranks.items()}
    assert ranks[0]["weights"] == ranks[1]["weights"]


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
    return SimpleNamespace(sanity_checking=False, current_epoch=3,
                           callback_metrics={"val/f1": torch.tensor(0.5)},
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


def test_killed_worker_trial_is_failed_and_replaced(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storage = optuna.storages.RDBStorage("sqlite:///k.db", heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(study_name="k", storage=storage, direction="maximize")
    dead = study.ask()  # a worker took this trial, sent one heartbeat, and was killed
    storage.record_heartbeat(dead._trial_id)
    # the restarted worker finds the dead trial in the only slot, still within its grace period
    main(_tune_args(in_tmp, "k", 1, "--grace-period", "3"))
    out = capsys.readouterr().out
    assert "waiting for RUNNING trial(s) [0] of other workers" in out and "--grace-period 3 s" in out
    assert "trial 0 failed: heartbeat lost (worker died)" in out
    trials = optuna.load_study(study_name="k", storage="sqlite:///k.db").trials
    assert {t.number: t.state for t in trials} == {0: TrialState.FAIL, 1: TrialState.COMPLETE}
    assert trials[0].user_attrs["error"] == "heartbeat lost (worker died)"


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


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-dir/x.db", "postgresql+psycopg2://x@127.0.0.1:1/x"])
def test_unreachable_storage_names_the_url(in_tmp: Path, url: str) -> None:
    started = time.monotonic()
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "u", 1, "--storage", url))
    assert (
        url in str(err.value) and "cannot open study storage" in str(err.value) and "\n" not in str(err.value)
    )
    assert time.monotonic() - started < 30  # a dead server is an error in seconds, not a hang


def test_storage_errors_hide_the_password_and_name_a_missing_driver() -> None:
    from biosig_lightning.tuning.errors import TuneError
    from biosig_lightning.tuning.storage import open_storage, storage_url

    with pytest.raises(TuneError) as err:
        open_storage("postgresql+psycopg2://user:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in str(err.value) and "user:***@127.0.0.1:1/x" in str(err.value)
    with pytest.raises(TuneError) as err:  # psycopg 3 is not installed here
        storage_url("postgresql+psycopg://user:s3cret@db/x")
    assert "driver module 'psycopg' is not installed" in str(err.value) and "[postgres]" in str(err.value)
    assert "s3cret" not in str(err.value)
    # a plain postgresql:// URL uses psycopg2 when only that driver is there (SQLAlchemy 2.1 means psycopg 3)
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        assert storage_url("postgresql://user:s3cret@db/x") == "postgresql+psycopg2://user:s3cret@db/x"


def test_pruning_callback_reports_and_prunes() -> None:
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=0.5))
    trial = study.ask()
    cb = OptunaPruning(trial, "val/f1", "maximize")
    trainer = SimpleNamespace(sanity_checking=False, current_epoch=0,
                              callback_metrics={"val/f1": torch.tensor(0.7)},
                              is_global_zero=True, world_size=1)
    cb.on_validation_end(trainer, None)  # above the threshold: reported, not pruned
    trainer.current_epoch, trainer.callback_metrics = 1, {"val/f1": torch.tensor(0.2)}
    with pytest.raises(optuna.TrialPruned, match="epoch 1"):
        cb.on_validation_end(trainer, None)
    assert cb.best == pytest.approx(0.7)
    study.tell(trial, state=TrialState.PRUNED)
    assert study.trials[0].intermediate_values == {0: pytest.approx(0.7), 1: pytest.approx(0.2)}


# ---- the search space and setup are checked before any study exists -------------------------------------
@pytest.mark.parametrize(
    "text,message",
    [
        # a later categorical choice the parser rejects (only the first one used to be tried)
        (
            "model.init_args.backbone.init_args.width: {type: categorical, choices: [8, wide]}\n",
            "search-space key 'model.init_args.backbone.init_args.width' (value wide) is not accepted by "
            "biosig fit",
        ),
        (
            "model.init_args.optimizer: {type: categorical, choices: [adamw, sgdx]}\n",
            "(value sgdx) is not accepted",
        ),
        (
            "model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true, step: 1.0e-3}\n",
            "model.init_args.lr: log and step cannot be combined",
        ),
        (
            "model.init_args.backbone.init_args.width: {type: int, low: 8, high: 64, step: 8.5}\n",
            "width: int step must be a whole number, got 8.5",
        ),
        (
            "model.init_args.backbone.init_args.width: {type: int, low: 2.5, high: 64}\n",
            "width: int low must be a whole number, got 2.5",
        ),
        ("model.init_args.lr: {type: float, low: 0.0, high: 1.0e-2, log: true}\n", "log scale needs low > 0"),
        (
            "model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: yes please}\n",
            "log must be true or false",
        ),
        ("model.init_args.lr: {type: categorical, choices: [0.1, 0.1]}\n", "choices repeat a value"),
        (
            "model.init_args.lr: {type: categorical, choices: [0.1], low: 0}\n",
            "unknown spec field(s) ['low']",
        ),
    ],
)
def test_bad_search_space_is_one_error_before_the_study(in_tmp: Path, text: str, message: str) -> None:
    space = _space(in_tmp, text)
    with pytest.raises(SystemExit) as err:
        main(["tune", *SMOKE, "--search-space", space, "--study-name", "bad", "--n-trials", "1"])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (in_tmp / "bad.db").exists()


def test_validation_parses_both_ends_of_every_range(monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.tuning import search_space as tune
    from biosig_lightning.tuning.search_space import IntDistribution, validate_space

    seen: list[list[str]] = []
    real = tune._parse
    monkeypatch.setattr(tune, "_parse", lambda args, what: seen.append(args) or real(args, what))
    validate_space(SMOKE, {"model.init_args.backbone.init_args.width": IntDistribution(8, 64, step=8),
                           "model.init_args.lr": tune.FloatDistribution(1e-3, 1e-2, log=True)})
    tried = {a for args in seen for a in args if a.startswith("--model")}
    assert {"--model.init_args.backbone.init_args.width=8", "--model.init_args.backbone.init_args.width=64",
            "--model.init_args.lr=0.001", "--model.init_args.lr=0.01"} <= tried


def test_validation_does_not_seed(capfd: pytest.CaptureFixture[str]) -> None:
    from biosig_lightning.tuning.search_space import load_search_space, validate_space

    capfd.readouterr()
    validate_space(SMOKE, load_search_space(EXPERIMENTS / "search_spaces" / "demo.yaml"))
    assert "Seed set to" not in capfd.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"],
     "a trial cannot use --trainer.strategy ddp with 2 devices"),
    (["--metric", "val/f2"], "--metric 'val/f2' is not a validation metric the tasks log"),
])
def test_setup_every_trial_would_fail_is_an_error_before_the_study(in_tmp: Path, extra: list[str],
                                                                   message: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "setup", 1, *extra))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (in_tmp / "setup.db").exists()


def test_a_trial_the_parser_rejects_is_recorded_as_failed(in_tmp: Path) -> None:
    from biosig_lightning.tuning.objective import make_objective

    # the parser exits (SystemExit) on a bad value; Optuna does not catch that, so the objective must
    study = optuna.create_study(direction="maximize")
    objective = make_objective([*SMOKE, "--model.init_args.backbone.init_args.width=wide"], {}, "val/f1",
                               "maximize", 1, in_tmp / "runs")
    study.optimize(objective, n_trials=1, catch=(Exception,))
    (trial,) = study.trials
    assert trial.state == TrialState.FAIL
    assert (
        "biosig fit rejected the trial's config" in trial.user_attrs["error"]
        and "wide" in trial.user_attrs["error"]
    )
    assert objective.fatal is None  # one bad value, not a broken setup: the worker goes on


def test_a_fatal_trial_error_stops_the_worker_at_once(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.tuning import study as tune

    # the setup check is bypassed, so the first trial meets the unlogged metric itself
    monkeypatch.setattr(tune, "check_setup", lambda cfg, metric: None)
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "fatal", 3, "--metric", "val/nope", "--direction", "maximize"))
    assert "stopping this worker: --metric 'val/nope' was not logged" in str(err.value)
    trials = optuna.load_study(study_name="fatal", storage="sqlite:///fatal.db").trials
    assert [t.state for t in trials] == [TrialState.FAIL]  # not --max-failures (3) trials


def test_metric_and_direction_default_to_the_experiments_monitor() -> None:
    from biosig_lightning.tuning.search_space import load_search_space, validate_space
    from biosig_lightning.tuning.trial_setup import experiment_monitor

    space = load_search_space(EXPERIMENTS / "search_spaces" / "sdformer.yaml")
    cfg = validate_space(["--config", str(EXPERIMENTS / "sdformer_chbmit.yaml")], space)
    assert experiment_monitor(cfg) == ("val/auroc", "maximize")
    cfg = validate_space([*SMOKE, "--model.init_args.monitor", "val/loss", "--model.init_args.mode", "min"],
                         load_search_space(EXPERIMENTS / "search_spaces" / "demo.yaml"))
    assert experiment_monitor(cfg) == ("val/loss", "minimize")


def test_help_says_what_n_trials_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "this many COMPLETE trials; pruned and failed trials are extra" in text


def test_a_preempted_trial_is_failed_queued_again_and_the_worker_exits_non_zero(in_tmp: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(_tune_args(in_tmp, "pre", 2, "--trainer.callbacks+=tests.helpers.SigtermAtEpoch"))
    assert err.value.code == ("biosig tune: preempted (SIGTERM) in trial 0; the trial is FAIL and queued "
                              "again with "
                              "its parameters: rerun the same command to go on")
    first, again = optuna.load_study(study_name="pre", storage="sqlite:///pre.db").trials
    assert first.state == TrialState.FAIL and first.user_attrs["error"].startswith("preempted (SIGTERM)")
    assert again.state == TrialState.WAITING and again.user_attrs["retry_of"] == 0
    assert again.system_attrs["fixed_params"] == first.params
