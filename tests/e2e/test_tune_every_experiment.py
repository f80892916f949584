"""``biosig tune`` runs one trial on every complete experiment YAML, scored by the experiment's own
``monitor``.

Apart from ``test_protocol_all_experiments.py`` (whose module fixtures run every config once) so that
the two can run on different test workers (``make test`` runs ``pytest -n 2 --dist loadscope``).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import optuna
import pytest

from biosig_lightning.cli import main
from tests.e2e.test_protocol_all_experiments import EXPERIMENT_FILES, _fit_args, _merged, _rel


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=_rel)
def test_tune_runs_a_trial_on_every_experiment(path: Path, in_tmp: Path) -> None:
    space = in_tmp / "space.yaml"
    space.write_text("model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-3, log: true}\n")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["tune", *_fit_args([path]), "--search-space", str(space),
              "--study-name", "t", "--n-trials", "1"])
    study = optuna.load_study(study_name="t", storage="sqlite:///t.db")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE]
    init = _merged([path])["model"]["init_args"]
    assert study.user_attrs["metric"] == init.get("monitor", "val/f1")  # the experiment's own, by default
    assert study.direction.name == ("MINIMIZE" if init.get("mode") == "min" else "MAXIMIZE")
    assert (in_tmp / "runs" / "tune" / "t" / "best.yaml").exists()
