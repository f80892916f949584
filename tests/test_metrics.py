"""biosig_lightning.metrics against scikit-learn and a numpy ECE reference."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)
from torchmetrics.functional.classification import multiclass_calibration_error

from biosig_lightning.metrics import (
    BINARY_KEYS,
    METRIC_KEYS,
    build_metrics,
    confusion_matrix_metric,
    reliability_bins,
)

TOL = 1e-5


def _random_case(num_classes: int, seed: int, n: int = 200, coarse: bool = False):
    """Probabilities with some signal (so no metric sits at a trivial value) and all classes present."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_classes, (n,), generator=g)
    target[:num_classes] = torch.arange(num_classes)
    logits = torch.randn(n, num_classes, generator=g) * 1.5
    logits[torch.arange(n), target] += 1.0
    probs = torch.softmax(logits, dim=1)
    if coarse:  # scores on a 0.1 grid (still summing to 1) create ties, the tricky part of AUROC / AP
        tenths = torch.floor(probs * 10)
        tenths[torch.arange(n), probs.argmax(1)] += 10 - tenths.sum(1)
        probs = tenths / 10
    return probs, target


def _compute(probs: torch.Tensor, target: torch.Tensor,
             num_classes: int, chunks: int = 1) -> dict[str, float]:
    metrics = build_metrics(num_classes)
    for p, t in zip(torch.tensor_split(probs, chunks), torch.tensor_split(target, chunks), strict=True):
        metrics.update(p, t)
    return {k: float(v) for k, v in metrics.compute().items()}


def _ece_reference(probs: np.ndarray, target: np.ndarray, n_bins: int = 15) -> float:
    """Guo et al. (2017) ECE with right-closed bins ((m-1)/M, m/M], written as a plain loop."""
    conf = probs.max(axis=1).astype(np.float64)
    correct = (probs.argmax(axis=1) == target).astype(np.float64)
    edges = np.arange(n_bins + 1) / n_bins
    ece = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        in_bin = (conf > lo) & (conf <= hi)
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return ece


def _sklearn_reference(probs: torch.Tensor, target: torch.Tensor, num_classes: int) -> dict[str, float]:
    p, t = probs.numpy(), target.numpy()
    pred = p.argmax(axis=1)
    one_hot = np.eye(num_classes)[t]
    if num_classes == 2:
        auroc = roc_auc_score(t, p[:, 1])
    else:
        auroc = roc_auc_score(t, p, multi_class="ovr", average="macro")
    return {
        "acc": accuracy_score(t, pred),
        "precision": precision_score(t, pred, average="macro", zero_division=0),
        "recall": recall_score(t, pred, average="macro", zero_division=0),
        "f1": f1_score(t, pred, average="macro", zero_division=0),
        "auroc": auroc,
        "auprc": average_precision_score(one_hot, p, average="macro"),
        "ece": _ece_reference(p, t),
        "kappa": cohen_kappa_score(t, pred),
    }


@pytest.mark.parametrize("num_classes", [2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("coarse", [False, True])
def test_matches_sklearn(num_classes: int, seed: int, coarse: bool) -> None:
    probs, target = _random_case(num_classes, seed, coarse=coarse)
    ours = _compute(probs, target, num_classes)
    ref = _sklearn_reference(probs, target, num_classes)
    assert set(ours) == set(METRIC_KEYS) | (set(BINARY_KEYS) if num_classes == 2 else set())
    for key in METRIC_KEYS:
        assert ours[key] == pytest.approx(ref[key], abs=TOL), key
    # Sanity: the inputs are informative, so these numbers are not degenerate.
    assert 1.0 / num_classes < ours["acc"] < 0.95 and 0.55 < ours["auroc"] < 1.0


def test_binary_auroc_is_class_one_auroc() -> None:
    probs, target = _random_case(2, seed=7)
    ours = _compute(probs, target, 2)
    assert ours["auroc"] == pytest.approx(roc_auc_score(target.numpy(), probs[:, 1].numpy()), abs=TOL)


@pytest.mark.parametrize("num_classes", [2, 5])
def test_batched_updates_equal_single_update(num_classes: int) -> None:
    probs, target = _random_case(num_classes, seed=3, n=203)
    single = _compute(probs, target, num_classes, chunks=1)
    batched = _compute(probs, target, num_classes, chunks=3)
    for key in METRIC_KEYS:
        assert batched[key] == pytest.approx(single[key], abs=1e-6), key


def test_prefix_names_every_key() -> None:
    probs, target = _random_case(3, seed=0)
    metrics = build_metrics(3, prefix="test/")
    metrics.update(probs, target)
    assert set(metrics.compute()) == {f"test/{k}" for k in METRIC_KEYS}


@pytest.mark.parametrize("num_classes", [2, 3])
def test_perfect_predictor(num_classes: int) -> None:
    target = torch.arange(30) % num_classes
    one_hot = torch.nn.functional.one_hot(target, num_classes).float()
    hard = _compute(one_hot, target, num_classes)
    for key in ("acc", "precision", "recall", "f1", "auroc", "auprc", "kappa"):
        assert hard[key] == pytest.approx(1.0, abs=1e-6), key
    assert hard["ece"] == pytest.approx(0.0, abs=1e-6)

    # Right ranking but under-confident: everything is still perfect except calibration.
    soft = one_hot * 0.3 + (1 - 0.3) / num_classes
    scores = _compute(soft, target, num_classes)
    for key in ("acc", "f1", "auroc", "auprc", "kappa"):
        assert scores[key] == pytest.approx(1.0, abs=1e-6), key
    assert scores["ece"] == pytest.approx(1.0 - (0.3 + 0.7 / num_classes), abs=1e-6)


def test_always_wrong_binary_predictor() -> None:
    target = torch.arange(40) % 2
    probs = torch.nn.functional.one_hot(1 - target, 2).float()
    scores = _compute(probs, target, 2)
    expected = {"acc": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "auroc": 0.0,
                "auprc": 0.5,  # reversed ranking: AP of each class is its prevalence
                "ece": 1.0, "kappa": -1.0}
    for key, value in expected.items():
        assert scores[key] == pytest.approx(value, abs=1e-6), key


def test_cyclically_wrong_multiclass_predictor() -> None:
    # Predict (y + 1) mod 3 with full confidence, balanced classes.
    target = torch.arange(60) % 3
    probs = torch.nn.functional.one_hot((target + 1) % 3, 3).float()
    scores = _compute(probs, target, 3)
    # Per class: half the negatives outrank the positives, half tie with them -> AUROC 1/4;
    # AP = prevalence 1/3; kappa = (0 - 1/3) / (1 - 1/3).
    expected = {"acc": 0.0, "f1": 0.0, "auroc": 0.25, "auprc": 1 / 3, "ece": 1.0, "kappa": -0.5}
    for key, value in expected.items():
        assert scores[key] == pytest.approx(value, abs=1e-6), key
    ref = _sklearn_reference(probs, target, 3)
    for key in METRIC_KEYS:
        assert scores[key] == pytest.approx(ref[key], abs=TOL), key


def test_class_absent_from_targets_but_predicted() -> None:
    probs, target = _random_case(3, seed=4)
    target = torch.where(target == 2, torch.ones_like(target), target)  # class 2 never true
    assert (probs.argmax(1) == 2).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the handled torchmetrics warnings must not leak
        ours = _compute(probs, target, 3)
    p, t = probs.numpy(), target.numpy()
    pred = p.argmax(1)
    assert ours["acc"] == pytest.approx(accuracy_score(t, pred), abs=TOL)
    assert ours["precision"] == pytest.approx(precision_score(t, pred,
                                                              average="macro", zero_division=0), abs=TOL)
    assert ours["recall"] == pytest.approx(recall_score(t, pred, average="macro", zero_division=0), abs=TOL)
    assert ours["f1"] == pytest.approx(f1_score(t, pred, average="macro", zero_division=0), abs=TOL)
    assert ours["kappa"] == pytest.approx(cohen_kappa_score(t, pred), abs=TOL)
    # AUROC / AP: mean over the classes where they are defined (0 and 1), not a 0 for class 2.
    per_class_auroc = [roc_auc_score(t == c, p[:, c]) for c in (0, 1)]
    assert ours["auroc"] == pytest.approx(np.mean(per_class_auroc), abs=TOL)
    per_class_ap = [average_precision_score(t == c, p[:, c]) for c in (0, 1)]
    assert ours["auprc"] == pytest.approx(np.mean(per_class_ap), abs=TOL)
    assert ours["ece"] == pytest.approx(_ece_reference(p, t), abs=TOL)


def test_class_absent_from_targets_and_predictions_is_ignored() -> None:
    probs3, target = _random_case(3, seed=5)
    probs = torch.cat([probs3 * 0.99, torch.full((len(target), 1), 0.01)], dim=1)  # class 3: never argmax
    ours = _compute(probs, target, 4)
    ref = _sklearn_reference(probs3, target, 3)  # sklearn's default labels skip the unused class too
    for key in ("acc", "precision", "recall", "f1", "kappa"):
        assert ours[key] == pytest.approx(ref[key], abs=TOL), key
    p, t = probs.numpy(), target.numpy()
    assert ours["auroc"] == pytest.approx(
        np.mean([roc_auc_score(t == c, p[:, c]) for c in range(3)]), abs=TOL
    )
    assert ours["auprc"] == pytest.approx(average_precision_score(np.eye(4)[t][:, :3], p[:, :3]), abs=TOL)


def test_single_class_targets() -> None:
    probs, _ = _random_case(3, seed=6, n=50)
    target = torch.zeros(50, dtype=torch.long)
    ours = _compute(probs, target, 3)
    assert math.isnan(ours["auroc"])  # no class has both positives and negatives
    assert ours["auprc"] == pytest.approx(1.0, abs=1e-6)  # only class 0 is defined; every sample is positive
    assert ours["acc"] == pytest.approx(accuracy_score(target.numpy(), probs.argmax(1).numpy()), abs=TOL)
    assert math.isfinite(ours["ece"])


def test_ece_agrees_with_stock_torchmetrics_off_the_edges() -> None:
    probs, target = _random_case(5, seed=8)
    assert probs.max(1).values.max() < 1.0
    stock = float(multiclass_calibration_error(probs, target, num_classes=5, n_bins=15, norm="l1"))
    assert _compute(probs, target, 5)["ece"] == pytest.approx(stock, abs=1e-6)


def test_ece_saturated_confidence_falls_in_last_bin() -> None:
    # Two confident errors at exactly 1.0 and two correct predictions just below.
    probs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.94, 0.06], [0.95, 0.05]])
    target = torch.tensor([1, 0, 0, 0])
    ours = _compute(probs, target, 2)["ece"]
    expected = abs(0.5 - (1.0 + 1.0 + 0.94 + 0.95) / 4)  # all four share the bin (14/15, 1]
    assert ours == pytest.approx(expected, abs=1e-6)
    assert ours == pytest.approx(_ece_reference(probs.numpy(), target.numpy()), abs=1e-6)
    # Stock torchmetrics keeps 1.0 in a bin of its own and reports a different number.
    stock = float(multiclass_calibration_error(probs, target, num_classes=2, n_bins=15, norm="l1"))
    assert stock == pytest.approx(0.5 * 1.0 + 0.5 * (1 - 0.945), abs=1e-6)


@pytest.mark.parametrize("case", ["random", "saturated"])
def test_reliability_bins_match_metric_ece(case: str) -> None:
    probs, target = _random_case(3, seed=9)
    if case == "saturated":
        probs = torch.softmax(torch.log(probs) * 40, dim=1)  # many confidences become exactly 1.0
        assert (probs.max(1).values == 1.0).sum() > 20
    bins = reliability_bins(probs.numpy(), target.numpy())
    assert bins["edges"].shape == (16,) and bins["edges"][0] == 0.0 and bins["edges"][-1] == 1.0
    assert bins["count"].sum() == len(target) and bins["count"].dtype == np.int64
    filled = bins["count"] > 0
    assert np.isnan(bins["confidence"][~filled]).all() and np.isnan(bins["accuracy"][~filled]).all()
    assert np.all(bins["confidence"][filled] > bins["edges"][:-1][filled])
    assert np.all(bins["confidence"][filled] <= bins["edges"][1:][filled])
    # ECE rebuilt from the returned per-bin numbers equals the logged metric and the reference.
    weights = bins["count"][filled] / len(target)
    rebuilt = float(np.sum(weights * np.abs(bins["accuracy"][filled] - bins["confidence"][filled])))
    metric_ece = _compute(probs, target, 3)["ece"]
    assert rebuilt == pytest.approx(metric_ece, abs=1e-6)
    assert bins["ece"] == pytest.approx(metric_ece, abs=1e-6)
    assert bins["ece"] == pytest.approx(_ece_reference(probs.numpy(), target.numpy()), abs=1e-9)
    # Tensors are accepted as well as arrays.
    assert reliability_bins(probs, target)["ece"] == bins["ece"]


def test_reliability_bins_are_right_closed() -> None:
    # Confidences exactly on the edges 0.5, 0.75 and 1.0 of four bins belong to the bin below.
    probs = np.array([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]], dtype=np.float32)
    bins = reliability_bins(probs, np.array([0, 1, 1]), n_bins=4)
    np.testing.assert_array_equal(bins["edges"], [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(bins["count"], [0, 1, 1, 1])
    np.testing.assert_allclose(bins["accuracy"][1:], [1.0, 1.0, 0.0])
    assert bins["ece"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)


def test_reliability_bins_rejects_bad_input() -> None:
    probs, target = _random_case(3, seed=0, n=10)
    with pytest.raises(ValueError, match="shape"):
        reliability_bins(probs[:, :1], target)
    with pytest.raises(ValueError, match="target must have shape"):
        reliability_bins(probs, target[:5])
    with pytest.raises(ValueError, match="softmax"):
        reliability_bins(probs * 3 - 1, target)
    with pytest.raises(ValueError, match="target values"):
        reliability_bins(probs, target + 3)
    with pytest.raises(ValueError, match="integer"):
        reliability_bins(probs, target.float())


def test_confusion_matrix_matches_sklearn() -> None:
    probs, target = _random_case(4, seed=1)
    cm = confusion_matrix_metric(4)
    for p, t in zip(torch.tensor_split(probs, 3), torch.tensor_split(target, 3), strict=True):
        cm.update(p, t)
    expected = confusion_matrix(target.numpy(), probs.argmax(1).numpy(), labels=range(4))
    np.testing.assert_array_equal(cm.compute().numpy(), expected)


@pytest.mark.parametrize("bad", [1, 0, 2.0, True])
def test_num_classes_must_be_at_least_two(bad) -> None:
    with pytest.raises(ValueError, match="num_classes"):
        build_metrics(bad)
    with pytest.raises(ValueError, match="num_classes"):
        confusion_matrix_metric(bad)
