"""Sensitivity, specificity and G-mean of the binary metric collection, against scikit-learn and by hand."""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.metrics import recall_score

from biosig_lightning.metrics import BINARY_KEYS, build_metrics


def _probs(pred: np.ndarray) -> torch.Tensor:
    p = np.where(pred[:, None] == np.arange(2)[None], 0.8, 0.2)
    return torch.tensor(p, dtype=torch.float32)


def test_binary_rates_match_sklearn_in_two_updates() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 57)
    pred = np.where(rng.random(57) < 0.7, y, 1 - y)
    metrics = build_metrics(2, prefix="test/")
    metrics.update(_probs(pred[:30]), torch.tensor(y[:30]))
    metrics.update(_probs(pred[30:]), torch.tensor(y[30:]))
    out = metrics.compute()
    sens = recall_score(y, pred, pos_label=1)
    spec = recall_score(y, pred, pos_label=0)
    assert math.isclose(float(out["test/sensitivity"]), sens, rel_tol=1e-6)
    assert math.isclose(float(out["test/specificity"]), spec, rel_tol=1e-6)
    assert math.isclose(float(out["test/gmean"]), math.sqrt(sens * spec), rel_tol=1e-6)
    assert sens != spec  # the two are told apart


def test_hand_computed_and_undefined_cases() -> None:
    y = torch.tensor([0, 0, 0, 1, 1])
    pred = np.array([0, 1, 1, 1, 1])  # TN 1, FP 2, TP 2, FN 0
    m = build_metrics(2)
    m.update(_probs(pred), y)
    out = m.compute()
    assert math.isclose(float(out["specificity"]), 1 / 3, rel_tol=1e-6)
    assert float(out["sensitivity"]) == 1.0
    assert math.isclose(float(out["gmean"]), math.sqrt(1 / 3), rel_tol=1e-6)
    only_neg = build_metrics(2)
    only_neg.update(_probs(np.array([0, 1])), torch.tensor([0, 0]))
    res = only_neg.compute()
    assert math.isnan(float(res["sensitivity"])) and float(res["specificity"]) == 0.5
    assert not set(BINARY_KEYS) & set(build_metrics(3).keys())  # multiclass: not defined


def test_detection_counts_a_score_equal_to_the_threshold_as_positive() -> None:
    """``score >= threshold`` is positive: the threshold :func:`best_f1_threshold` returns is one of the
    scores, so
    the window carrying it must be predicted positive."""
    from biosig_lightning.metrics import threshold_metrics

    got = threshold_metrics(torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0, 1, 1]), 0.5)
    assert (got["det_precision"], got["det_recall"], got["det_f1"], got["det_acc"]) == (1.0, 1.0, 1.0, 1.0)
