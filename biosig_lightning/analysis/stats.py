"""Statistics for the report (Yao et al., Table 1 columns, LOSO spread, Table 8 t-test, Table 9 ANOVA).

Pure functions over numbers and arrays (no run loading, no I/O), so ``biosig report`` (or any caller)
feeds them what it collected from ``results.json`` / ``test_predictions.npz`` files:

* :func:`table1_row`: Table 1's columns from a run's ``metrics`` and ``num_params`` (precision, recall
  and F1 of the positive class from the test confusion matrix of a binary run).
* :func:`per_subject_accuracy` / :func:`per_subject_correct`: test windows grouped by subject.
* :func:`spread`: mean, std (ddof 1), min, max, n of per-subject (or per-run) values.
* :func:`one_way_anova` (Table 9) and :func:`paired_t_test` (Table 8): ``scipy.stats.f_oneway`` and
  ``scipy.stats.ttest_rel`` with the degrees of freedom and input checks the report needs.

Readings:

* Table 9 ("one-way ANOVA on the per-subject LOSO accuracies") needs several observations per
  subject; with one LOSO fold per subject the observations of subject ``s`` are the 0/1
  correctness of its test windows (:func:`per_subject_correct`), or, when the LOSO study is repeated
  over seeds, its per-seed accuracies. Either way the groups are subjects, and a large p-value says
  the accuracy does not differ between subjects.
* Table 8 ("paired t-tests over 10 partitions x 10 runs"): pairs are matched by (partition, seed), so
  the caller passes the two methods' accuracies in the same order; two-sided.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = ["AnovaResult", "TTestResult", "one_way_anova", "paired_t_test", "per_subject_accuracy",
           "per_subject_correct", "spread", "table1_row"]

TABLE1_COLUMNS = ("accuracy", "precision", "recall", "specificity", "f1", "params")
_TABLE1_KEYS = {"accuracy": "acc", "precision": "precision", "recall": "recall", "specificity": "specificity",
                "f1": "f1"}


@dataclass(frozen=True)
class AnovaResult:
    f: float
    p: float
    df_between: int
    df_within: int


@dataclass(frozen=True)
class TTestResult:
    t: float
    p: float
    df: int
    mean_difference: float


def table1_row(metrics: Mapping[str, float], num_params: int | None, prefix: str = "test/",
               confusion: Sequence[Sequence[float]] | np.ndarray | None = None) -> dict[str, float | None]:
    """Table 1's columns (accuracy, precision, recall, specificity, F1 in %, params) from a run's metrics.

    Table 1's precision, recall and F1 are those of the positive class (epilepsy, class 1): its baseline
    rows satisfy ``F1 = 2PR / (P + R)`` and have recall far below specificity (EEGNet 53.25 / 93.11). The
    metric collection's ``precision``/``recall``/``f1`` are macro means over both classes (the macro
    recall is (sensitivity + specificity) / 2), so when ``confusion`` is a run's 2 x 2 test confusion
    matrix (rows true, columns predicted, as ``results.json`` stores it) the three come from it:
    ``P = TP / (TP + FP)``, ``R = TP / (TP + FN)``, ``F1 = 2 TP / (2 TP + FP + FN)`` (0 where undefined,
    as ``zero_division=0``). Otherwise (multiclass, or no matrix) they are the logged metrics.
    A missing metric (e.g. specificity of a multiclass run) is ``None``.
    """
    row: dict[str, float | None] = {}
    for col, key in _TABLE1_KEYS.items():
        value = metrics.get(prefix + key)
        row[col] = None if value is None else 100.0 * float(value)
    cm = None if confusion is None else np.asarray(confusion, dtype=float)
    if cm is not None and cm.shape == (2, 2):
        tp, fp, fn = cm[1, 1], cm[0, 1], cm[1, 0]
        row["precision"] = 100.0 * tp / (tp + fp) if tp + fp else 0.0
        row["recall"] = 100.0 * tp / (tp + fn) if tp + fn else 0.0
        row["f1"] = 100.0 * 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    row["params"] = None if num_params is None else float(num_params)
    return row


def per_subject_correct(pred: Sequence[int] | np.ndarray, target: Sequence[int] | np.ndarray,
                        subject: Sequence[int] | np.ndarray) -> dict[int, np.ndarray]:
    """``{subject: 0/1 correctness of its windows}`` (sorted by subject id)."""
    p, t, s = np.asarray(pred), np.asarray(target), np.asarray(subject)
    if not (p.shape == t.shape == s.shape) or p.ndim != 1:
        raise ValueError(f"pred, target and subject must be 1-D of one length, got {p.shape}, {t.shape}, "
                         f"{s.shape}")
    return {int(k): (p[s == k] == t[s == k]).astype(float) for k in np.unique(s)}


def per_subject_accuracy(pred: Sequence[int] | np.ndarray, target: Sequence[int] | np.ndarray,
                         subject: Sequence[int] | np.ndarray) -> dict[int, float]:
    """``{subject: accuracy over its windows}``."""
    return {k: float(v.mean()) for k, v in per_subject_correct(pred, target, subject).items()}


def spread(values: Sequence[float] | Mapping[int, float]) -> dict[str, float]:
    """``mean``, ``std`` (sample, ddof 1; 0 for one value), ``min``, ``max`` and ``n`` of the values."""
    v = np.asarray(list(values.values()) if isinstance(values, Mapping) else list(values), dtype=float)
    if v.size == 0:
        raise ValueError("spread of no values")
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "n": float(v.size)}


def _quiet(test: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``test(*args)`` without scipy's warnings about constant or near-constant samples, whose results
    (an infinite statistic with p = 0, or NaN) are the documented answer here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", getattr(_st, "ConstantInputWarning", RuntimeWarning))
        warnings.simplefilter("ignore", getattr(_st, "DegenerateDataWarning", RuntimeWarning))
        return test(*args, **kwargs)


def one_way_anova(groups: Sequence[Sequence[float] | np.ndarray]) -> AnovaResult:
    """One-way ANOVA (``scipy.stats.f_oneway``): ``F = (SS_between / (k - 1)) / (SS_within / (N - k))``.

    ``F`` is infinite (p = 0) when every group is constant and the groups differ, NaN when all are equal.
    """
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if len(arrays) < 2 or any(a.size == 0 for a in arrays):
        raise ValueError("one-way ANOVA needs at least two non-empty groups")
    k = len(arrays)
    n = sum(a.size for a in arrays)
    if n <= k:
        raise ValueError(f"one-way ANOVA needs more observations ({n}) than groups ({k})")
    res = _quiet(_st.f_oneway, *arrays)
    return AnovaResult(float(res.statistic), float(res.pvalue), k - 1, n - k)


def paired_t_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TTestResult:
    """Two-sided paired t-test of ``a - b`` (``scipy.stats.ttest_rel``): ``t = mean(d) / (std(d, ddof=1) /
    sqrt(n))``, ``df = n - 1``; ``t`` is infinite (p = 0) when every difference is the same non-zero value."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"paired t-test needs two 1-D samples of one length >= 2, got {x.shape} and "
                         f"{y.shape}")
    res = _quiet(_st.ttest_rel, x, y)
    return TTestResult(float(res.statistic), float(res.pvalue), x.size - 1, float((x - y).mean()))
