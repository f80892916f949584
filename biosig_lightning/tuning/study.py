"""``tune()``: one worker's share of a study, and the best trial exported as a config file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal, cast

import optuna
import yaml
from optuna.trial import TrialState

from biosig_lightning.atomic_io import atomic_write_bytes
from biosig_lightning.tuning.coordination import (
    HEARTBEAT_LOST,
    TrialTakenOver,
    count_slots,
    fail_dead_trials,
    heartbeat_interval,
)
from biosig_lightning.tuning.errors import TuneError, TunePreempted
from biosig_lightning.tuning.objective import make_objective
from biosig_lightning.tuning.search_space import load_search_space, validate_space
from biosig_lightning.tuning.storage import open_storage, shown_url
from biosig_lightning.tuning.trial_setup import LOWER_IS_BETTER, check_setup, experiment_monitor


def tune(config_args: list[str], space_path: str | Path, study_name: str, n_trials: int,
         storage: str | None = None, metric: str | None = None, direction: str | None = None,
         runs_dir: Path | None = None, max_failures: int | None = None, poll_s: float = 2.0,
         grace_period: int = 120) -> optuna.Study:
    """Run this worker's share of the study until it holds ``n_trials`` COMPLETE trials.

    ``metric``/``direction`` default to the experiment's ``monitor``/``mode``.
    """
    if n_trials < 1:
        raise TuneError(f"--n-trials must be >= 1, got {n_trials}")
    if direction not in (None, "maximize", "minimize"):
        raise TuneError(f"--direction must be maximize or minimize, got {direction!r}")
    heartbeat_interval(grace_period)  # a grace period too short for the heartbeat is refused here
    space = load_search_space(space_path)
    cfg = validate_space(config_args, space)
    monitor, mode = experiment_monitor(cfg)
    metric = metric or monitor
    if direction is None:
        direction = mode if metric == monitor else \
            "minimize" if metric.split("/")[-1] in LOWER_IS_BETTER else "maximize"
    check_setup(cfg, metric)
    url = storage or f"sqlite:///{study_name}.db"
    store = open_storage(url, grace=grace_period)
    study = optuna.create_study(study_name=study_name, storage=store,
                                direction=cast(Literal["minimize", "maximize"], direction),  # checked above
                                load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise TuneError(f"study {study_name!r} in {shown_url(url)} was created to "
                        f"{study.direction.name.lower()}, "
                        f"not {direction}")
    if study.user_attrs.get("metric", metric) != metric:  # workers scoring different metrics would mix them
        raise TuneError(f"study {study_name!r} in {shown_url(url)} optimises {study.user_attrs['metric']}, "
                        f"not {metric} (pass --metric {study.user_attrs['metric']})")
    study.set_user_attr("metric", metric)
    runs_dir = runs_dir or Path("runs") / "tune" / study_name
    print(f"tune: study {study_name!r} in {shown_url(url)}: {direction} {metric} over {', '.join(space)}; "
          f"until {n_trials} COMPLETE trials", flush=True)
    objective = make_objective(config_args, space, metric, direction, n_trials, runs_dir, url)
    max_failures = n_trials if max_failures is None else max_failures
    failures = 0
    waiting_for: list[int] = []
    finished: list[optuna.trial.FrozenTrial] = []
    while True:
        dead = fail_dead_trials(study)
        for number in [t.number for t in study.get_trials(deepcopy=False) if t._trial_id in dead]:
            print(f"tune: trial {number} failed: {HEARTBEAT_LOST}; its slot is free again", flush=True)
        complete, running = count_slots(study)
        if complete >= n_trials:
            break
        if complete + len(running) >= n_trials:
            if running != waiting_for:  # say once what this worker waits for, not every poll
                print(f"tune: {complete}/{n_trials} COMPLETE; waiting for RUNNING trial(s) {running} of "
                      f"other "
                      f"workers (a dead worker's trial is failed after --grace-period {grace_period} s "
                      f"without "
                      "heartbeat, and its slot is taken again)", flush=True)
                waiting_for = running
            time.sleep(poll_s)  # the last slots are being run elsewhere; one may still fail
            continue
        waiting_for = []
        if failures >= max_failures:
            last_error = next((t.user_attrs["error"] for t in finished if "error" in t.user_attrs), "?")
            raise TuneError(f"{failures} trials of this worker failed (study {study_name!r}, FAIL trials "
                            f"keep "
                            f"user_attrs['error']); last: {last_error.splitlines()[0][:300]}")
        finished.clear()
        try:
            study.optimize(objective, n_trials=1, catch=(Exception,),
                           callbacks=[lambda _, t: finished.append(t)])
        except TrialTakenOver as taken:  # not this worker's failure: its slot went to another trial
            print(f"tune: {taken}", flush=True)
            continue
        if objective.fatal is not None:
            raise TuneError(f"stopping this worker: {objective.fatal}") from None
        if objective.preempted is not None:
            raise TunePreempted(f"preempted (SIGTERM) in trial {objective.preempted}; the trial is FAIL and "
                                f"queued "
                                "again with its parameters: rerun the same command to go on")
        failures += sum(t.state == TrialState.FAIL and "skipped" not in t.user_attrs for t in finished)
    return study


def export_best(study: optuna.Study, path: str | Path) -> Path:
    """Write the best trial's parameters as a nested YAML override file."""
    best = study.best_trial
    nested: dict[str, Any] = {}
    for key, value in best.params.items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    path = Path(path)
    header = (f"# best trial {best.number} of study {study.study_name!r}: value {best.value}\n"
              f"# biosig fit --config <experiment.yaml> --config {path}\n")
    atomic_write_bytes(path, (header + yaml.safe_dump(nested, sort_keys=False)).encode())
    return path

