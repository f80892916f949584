"""The grid runner's progress line."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState, create_trial

from biosig_lightning.benchmarking.runner import _progress


def test_progress_counts_the_selected_cells_only() -> None:
    """``--only`` on a folder whose other cells are done says how many of *its* cells are done."""
    study = optuna.create_study(direction="maximize")
    for cell in ("apava/cnn1d/seed_1", "apava/cnn1d/seed_2", "apava/eegnet/seed_1"):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs={"cell": cell}))
    study.enqueue_trial({}, user_attrs={"cell": "apava/signed_graph/seed_1"})
    only = ["apava/signed_graph/seed_1", "apava/cnn1d/seed_1"]
    assert _progress(study, only) == "1/2 cells done, 0 running"
    assert _progress(study, ["apava/signed_graph/seed_1"]) == "0/1 cells done, 0 running"
