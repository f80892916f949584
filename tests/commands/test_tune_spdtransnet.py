"""``biosig tune`` with SPDTransNet's search space: the paper's space, and two workers sharing a PostgreSQL
Optuna study, each trial a 2-process gloo DDP run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from biosig_lightning.tuning.search_space import load_search_space
from biosig_lightning.tuning.storage import open_storage
from tests.commands.spdtransnet_standin import STAND_IN, TINY
from tests.conftest import EXPERIMENTS


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
    # 6 stand-in subjects, not 12: each trial builds its own tokens (alpha and beta shape them)
    cmd = [sys.executable, "-m", "biosig_lightning.cli", "tune", *STAND_IN, *TINY,
           "--data.init_args.synthetic_options.n_subjects", "6", "--search-space", str(space),
           "--study-name", study_name, "--storage", postgres_url, "--n-trials", "2",
           "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp_spawn",
           "--trainer.callbacks+=tests.helpers.RecordRank", "--trainer.callbacks+=tests.helpers.WaitForPeers",
           "--trainer.callbacks.init_args.directory", str(in_tmp / "peers")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    study = optuna.load_study(study_name=study_name, storage=open_storage(postgres_url))
    errors = [
        f"trial {t.number}: {t.user_attrs.get('error')}" for t in study.trials if t.state == TrialState.FAIL
    ]
    assert [p.returncode for p in procs] == [0, 0], "\n".join([*errors, *(o[-4000:] for o in outs)])
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2
    assert {t.user_attrs["worker"] for t in complete} == {f"{socket.gethostname()}:{p.pid}" for p in procs}
    for t in complete:  # each trial trained as a 2-process DDP run
        ranks = sorted((in_tmp / t.user_attrs["run_dir"]).rglob("rank*.json"))
        assert [p.name for p in ranks] == ["rank0.json", "rank1.json"]
        assert {json.loads(p.read_text())["world_size"] for p in ranks} == {2}
