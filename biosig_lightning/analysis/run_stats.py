"""What the statistics of ``biosig report`` need from finished runs, read from their run directories.

:mod:`.stats` and :mod:`.tables` are pure maths over numbers; this module turns a report cell's runs
(``[(path of results.json, parsed results.json), ...]``) into those numbers:

* :func:`table1_metrics`: a run's Table 1 columns (Yao et al., Table 1) as report metrics
  ``table1/<column>`` (accuracy ... F1 in %, params), via :func:`.stats.table1_row`.
* :func:`subject_outcomes` / :func:`subject_accuracy`: per-subject test accuracy from each run's
  ``test_predictions.npz`` (``probs``, ``y``, ``subject``, written beside ``results.json``). A
  subject's windows are pooled over the runs that tested it: with repeated seeds on one split each
  subject is tested once per seed; in LOSO each fold tests another subject, so the pooled cell holds
  every subject once. The predicted class is ``argmax(probs)``, as for ``test/acc``.
* :func:`subject_anova`: Table 9's one-way ANOVA *between subjects* of one row (are some subjects
  classified worse than others?). The observations of a subject are its per-run accuracies when
  every subject was tested by at least two runs (LOSO repeated over seeds), else the 0/1
  correctness of its test windows (one LOSO study): see :mod:`.stats`.
* :func:`sleep_table1_metrics`: SPDTransNet Table 1's macro accuracy and N1 F1 of a run that did not log
  them (any sleep-staging task), from its ``test_predictions.npz``, the way ``SPDTransNetTask`` logs them.
* :func:`run_key` / :func:`paired_values`: runs of two rows paired by ``(split_id, seed)``, Table 8's
  "10 partitions x 10 runs" (a partition is a subject split, named by its ``split_id``).

Every input problem is a :class:`RunStatsError` whose message is one line naming the run or row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.analysis.stats import AnovaResult, one_way_anova, per_subject_correct, table1_row

__all__ = ["SLEEP_TABLE1_DERIVED", "TABLE1_METRICS", "RunStatsError", "metric_values", "paired_values",
           "run_key",
           "sleep_table1_metrics", "subject_accuracy", "subject_anova", "subject_outcomes", "table1_metrics"]

Run = tuple[Path, dict[str, Any]]

#: the report metric names of Table 1's columns, in the paper's order
TABLE1_METRICS = ("table1/accuracy", "table1/precision", "table1/recall", "table1/specificity", "table1/f1",
                  "table1/params")


#: SPDTransNet Table 1's columns besides macro-F1 that :func:`sleep_table1_metrics` derives from predictions
SLEEP_TABLE1_DERIVED = ("test/macro_acc", "test/f1_n1")


class RunStatsError(ValueError):
    """Runs that cannot give the statistic asked for (missing predictions, unpaired seeds, too few runs)."""


def table1_metrics(results: dict[str, Any]) -> dict[str, float]:
    """``{"table1/accuracy": %, ..., "table1/params": count}`` of one run; columns the run lacks are left out.

    A binary run's precision, recall and F1 are those of class 1, from its ``confusion_matrix`` (see
    :func:`.stats.table1_row`).
    """
    row = table1_row(results.get("metrics", {}), results.get("num_params"),
                     confusion=results.get("confusion_matrix"))
    return {f"table1/{col}": float(v) for col, v in row.items() if v is not None and math.isfinite(v)}


def sleep_table1_metrics(path: Path, results: dict[str, Any]) -> dict[str, float]:
    """``{"test/macro_acc": ..., "test/f1_n1": ...}`` of one run from its ``test_predictions.npz``.

    SPDTransNet Table 1 (MAcc, N1 F1): the mean per-class recall over the classes present in ``y`` or
    the predictions, and the F1 of the class named ``N1`` in ``results["classes"]`` (left out when
    no class has that name), of ``argmax(probs)`` against ``y``: what ``SPDTransNetTask`` logs, for
    runs of other sleep tasks. An error naming the run when it saved no predictions.
    """
    from sklearn.metrics import f1_score, recall_score

    npz = predictions_path(path, results, "macro accuracy and N1 F1")
    with np.load(npz, allow_pickle=False) as z:
        if "probs" not in z.files or "y" not in z.files:
            raise RunStatsError(f"{npz}: no probs / y array (has {', '.join(z.files)})")
        pred, y = z["probs"].argmax(1), z["y"]
    out = {"test/macro_acc": float(recall_score(y, pred, average="macro", zero_division=0))}
    classes = [str(c) for c in results.get("classes") or []]
    if "N1" in classes:
        n1 = classes.index("N1")
        out["test/f1_n1"] = float(f1_score(y, pred, labels=[n1], average=None, zero_division=0)[0])
    return out


def predictions_path(path: Path, results: dict[str, Any], purpose: str = "per-subject accuracy") -> Path:
    """The run's ``test_predictions.npz``: beside its ``results.json`` (run folders get copied and moved),
    else where ``results["test_predictions"]`` says; an error naming the run when neither exists."""
    beside = Path(path).parent / "test_predictions.npz"
    if beside.is_file():
        return beside
    recorded = results.get("test_predictions")
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    raise RunStatsError(f"{beside}: no test predictions (the run saved no test_predictions.npz), "
                        f"needed for {purpose}")


def subject_outcomes(runs: Sequence[Run]) -> dict[int, list[np.ndarray]]:
    """``{subject: [0/1 correctness of its test windows in run 1, in run 2, ...]}`` over the runs that tested
    it."""
    out: dict[int, list[np.ndarray]] = defaultdict(list)
    for path, results in runs:
        npz = predictions_path(path, results)
        with np.load(npz, allow_pickle=False) as z:
            missing = [k for k in ("probs", "y", "subject") if k not in z.files]
            if missing:
                raise RunStatsError(f"{npz}: no {', '.join(missing)} array (has {', '.join(z.files)})")
            probs, y, subject = z["probs"], z["y"], z["subject"]
        if probs.ndim != 2 or len(probs) == 0:
            raise RunStatsError(f"{npz}: probs of shape {probs.shape}, expected (windows, classes)")
        try:
            per_run = per_subject_correct(probs.argmax(1), y, subject)
        except ValueError as err:
            raise RunStatsError(f"{npz}: {err}") from None
        for s, correct in per_run.items():
            out[s].append(correct)
    return dict(sorted(out.items()))


def subject_accuracy(outcomes: dict[int, list[np.ndarray]]) -> dict[int, float]:
    """Each subject's accuracy over all its test windows, pooled over the runs that tested it."""
    return {s: float(np.concatenate(parts).mean()) for s, parts in outcomes.items()}


def subject_anova(outcomes: dict[int, list[np.ndarray]]) -> tuple[AnovaResult, str]:
    """Table 9's one-way ANOVA between subjects, and the observation unit used (``"runs"`` or
    ``"windows"``)."""
    if len(outcomes) < 2:
        raise RunStatsError(f"{len(outcomes)} subject(s) in the test predictions; an ANOVA between subjects "
                            "needs at least two")
    groups: list[list[float]] | list[np.ndarray]
    if all(len(parts) >= 2 for parts in outcomes.values()):
        groups, unit = [[float(c.mean()) for c in parts] for parts in outcomes.values()], "runs"
    else:
        groups, unit = [np.concatenate(parts) for parts in outcomes.values()], "windows"
    try:
        return one_way_anova(groups), unit
    except ValueError as err:
        raise RunStatsError(str(err)) from None


def metric_values(runs: Sequence[Run], metric: str) -> list[float]:
    """The finite values of ``metric`` (a key of ``results["metrics"]``) over the runs that report it."""
    vals = [float(r["metrics"][metric]) for _, r in runs if metric in r.get("metrics", {})]
    return [v for v in vals if math.isfinite(v)]


def run_key(results: dict[str, Any]) -> tuple[str, Any]:
    """What pairs two methods' runs (Table 8): the subject split (``split_id``) and the seed."""
    return str(results.get("split_id") or ""), results.get("seed")


def _describe(key: tuple[str, Any]) -> str:
    split, seed = key
    return f"seed {seed}" + (f" (split {split})" if split else "")


def paired_values(runs_a: Sequence[Run], runs_b: Sequence[Run], metric: str,
                  names: tuple[str, str] = ("A", "B")
                  ) -> tuple[list[tuple[str, Any]], list[float], list[float]]:
    """``(keys, a, b)``: ``metric`` of the two rows' runs matched by :func:`run_key`, in key order.

    Errors: a key twice in one row (which copy pairs?), a run of one row without its partner in the
    other, fewer than two pairs.
    """
    by_key: list[dict[tuple[str, Any], float]] = []
    for name, runs in zip(names, (runs_a, runs_b), strict=True):
        got: dict[tuple[str, Any], float] = {}
        for path, res in runs:
            value = res.get("metrics", {}).get(metric)
            if value is None or not math.isfinite(float(value)):
                raise RunStatsError(f"{path}: no finite {metric} for the paired t-test of {name}")
            key = run_key(res)
            if key in got:
                raise RunStatsError(f"{name} has two runs of {_describe(key)}; a paired test needs one per "
                                    f"seed")
            got[key] = float(value)
        by_key.append(got)
    only = [(names[i], sorted(set(by_key[i]) - set(by_key[1 - i]), key=repr)) for i in (0, 1)]
    unpaired = [f"{name}: {', '.join(_describe(k) for k in keys)}" for name, keys in only if keys]
    if unpaired:
        raise RunStatsError(
            f"unpaired seeds, runs without a partner in the other row ({'; '.join(unpaired)})"
        )
    keys = sorted(by_key[0], key=repr)
    if len(keys) < 2:
        raise RunStatsError(f"{len(keys)} paired run(s) of {names[0]} and {names[1]}; a paired t-test needs "
                            f"at least two")
    return keys, [by_key[0][k] for k in keys], [by_key[1][k] for k in keys]
