"""Evaluation metrics shared by every task: one torchmetrics collection for binary and multiclass.

Every task logs the same eight numbers, so binary problems (seizure / non-seizure) and multiclass
problems (sleep stages, ECG superclasses) are treated alike: the model's softmax output is a
``(N, K)`` probability matrix with ``K >= 2`` and the target is an ``int64`` vector of class ids.

=========  =====================================================================================
key        definition (sklearn equivalent)
=========  =====================================================================================
acc        fraction of argmax predictions equal to the target (``accuracy_score``)
precision  macro mean of per-class precision (``precision_score(average="macro", zero_division=0)``)
recall     macro mean of per-class recall (``recall_score(average="macro", zero_division=0)``)
f1         macro mean of per-class F1 (``f1_score(average="macro", zero_division=0)``)
auroc      macro mean of one-vs-rest ROC AUC (``roc_auc_score(multi_class="ovr", average="macro")``;
           for ``K == 2`` this equals the binary AUROC of class 1)
auprc      macro mean of one-vs-rest average precision, i.e. the step-wise area under the
           precision-recall curve, no interpolation (``average_precision_score(one_hot,
           average="macro")``; for ``K == 2`` the mean over both classes, not class 1 alone)
ece        top-label expected calibration error, L1, 15 equal-width bins (Guo et al. 2017, eq. 3)
kappa      Cohen's kappa of the argmax predictions (``cohen_kappa_score``)
=========  =====================================================================================

Binary tasks (``K == 2``, class 1 the positive class: seizure, epilepsy, abnormal) add three keys
(:data:`BINARY_KEYS`), the columns of Yao et al.'s Tables 1 and 7:

===========  ===================================================================================
sensitivity  recall of class 1, TP / (TP + FN) (``recall_score(pos_label=1)``)
specificity  recall of class 0, TN / (TN + FP) (``recall_score(pos_label=0)``)
gmean        sqrt(sensitivity * specificity), the geometric mean of the two class recalls
===========  ===================================================================================

Each is ``nan`` when a class it needs is absent from the targets (the rate is undefined). Classes missing
from an evaluation set: :func:`build_metrics`; the ECE binning: :class:`TopLabelECE`; the opt-in
paper-specific metrics (``ClassificationTask(eval_metrics=...)``): :func:`build_extra_metrics`.

All metrics are ``torchmetrics.Metric`` subclasses, so states are synchronised across DDP ranks
before ``compute()``. Pass softmax probabilities, never logits: torchmetrics only applies a
softmax to a batch when some value lies outside ``[0, 1]``, which silently mixes conventions.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassAUROC,
    MulticlassAveragePrecision,
    MulticlassCalibrationError,
    MulticlassCohenKappa,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MulticlassPrecision,
    MulticlassPrecisionRecallCurve,
    MulticlassRecall,
)
from torchmetrics.functional.classification import binary_precision_recall_curve
from torchmetrics.utilities.data import dim_zero_cat

__all__ = [
    "BINARY_KEYS",
    "DETECTION_KEYS",
    "ECE_BINS",
    "EVAL_METRICS",
    "PositiveScores",
    "best_f1_threshold",
    "build_extra_metrics",
    "threshold_metrics",
    "METRIC_KEYS",
    "BinaryRate",
    "MacroOvRAUROC",
    "MacroOvRAveragePrecision",
    "TopLabelECE",
    "build_metrics",
    "confusion_matrix_metric",
    "reliability_bins",
]

ECE_BINS = 15
METRIC_KEYS = ("acc", "precision", "recall", "f1", "auroc", "auprc", "ece", "kappa")
BINARY_KEYS = ("sensitivity", "specificity", "gmean")

# torchmetrics warns about classes without positives/negatives; the subclasses below drop those
# classes from the mean on purpose, so the warnings would only be noise in every epoch's log.
_UNDEFINED_CLASS_WARNINGS = r"No (positive|negative) samples (found )?in target"


def _target_counts(metric: Any) -> tuple[Tensor, int]:
    """Per-class positive counts and the total count of the (already synced) target state."""
    target = dim_zero_cat(metric.target)
    return torch.bincount(target.long(), minlength=metric.num_classes), target.numel()


class _DefinedClassMean(MulticlassPrecisionRecallCurve):
    """Exact per-class scores (``average=None``, ``thresholds=None``) averaged over the classes
    :meth:`defined` keeps; mixed in before a torchmetrics multiclass metric built on the
    precision-recall curve's states (``MulticlassAUROC``, ``MulticlassAveragePrecision``)."""

    def __init__(self, num_classes: int, **kwargs: Any) -> None:
        super().__init__(num_classes=num_classes, average=None, thresholds=None, **kwargs)

    @staticmethod
    def defined(positives: Tensor, n: int) -> Tensor:
        """Which classes enter the mean, from their positive counts among ``n`` targets."""
        raise NotImplementedError

    # the mixed-in metric's compute() returns per-class scores (a Tensor), not the curve's tuple
    def compute(self) -> Tensor:  # type: ignore[override]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNDEFINED_CLASS_WARNINGS)
            per_class = cast(Tensor, super().compute())
        positives, n = _target_counts(self)
        return per_class[self.defined(positives, n)].mean()  # empty selection -> nan


class MacroOvRAUROC(_DefinedClassMean, MulticlassAUROC):
    """Macro one-vs-rest AUROC over the classes for which it is defined.

    A class's one-vs-rest AUROC needs at least one positive and one negative target; classes
    without either are left out of the mean instead of being scored 0 (see :func:`build_metrics`).
    Exact (``thresholds=None``): predictions are kept until ``compute()``.
    """

    @staticmethod
    def defined(positives: Tensor, n: int) -> Tensor:
        return (positives > 0) & (positives < n)


class MacroOvRAveragePrecision(_DefinedClassMean, MulticlassAveragePrecision):
    """Macro one-vs-rest average precision over the classes present in the targets.

    AP needs at least one positive target; absent classes are left out of the mean
    (sklearn would count them as 0, see :func:`build_metrics`). Exact (``thresholds=None``).
    """

    @staticmethod
    def defined(positives: Tensor, n: int) -> Tensor:
        return positives > 0


def _calibration_bins(confidences: Tensor, correct: Tensor, n_bins: int) -> tuple[Tensor, ...]:
    """Bin top-label confidences into ``n_bins`` equal-width right-closed bins ``((m-1)/M, m/M]``.

    Returns ``(edges, count, confidence_sum, correct_sum)`` as float64/int64 CPU tensors.
    Runs on CPU in float64: it is a once-per-epoch reduction over N scalars, and CUDA scatter
    sums are not deterministic.
    """
    conf = confidences.detach().to("cpu", torch.float64).flatten()
    hit = correct.detach().to("cpu", torch.float64).flatten()
    # i / M (correctly rounded) rather than linspace, so a numpy ``np.arange(M + 1) / M`` matches.
    edges = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    idx = torch.bucketize(conf, edges[1:-1], right=False)  # 0 for conf <= 1/M, M-1 for conf > (M-1)/M
    count = torch.bincount(idx, minlength=n_bins)
    conf_sum = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, conf)
    hit_sum = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, hit)
    return edges, count, conf_sum, hit_sum


def _ece_from_bins(count: Tensor, conf_sum: Tensor, hit_sum: Tensor) -> Tensor:
    """ECE = sum_m |B_m|/N * |acc(B_m) - conf(B_m)| (Guo et al. 2017, eq. 3), written as sums."""
    return (hit_sum - conf_sum).abs().sum() / count.sum()


class TopLabelECE(MulticlassCalibrationError):
    """Top-label L1 expected calibration error with right-closed equal-width bins.

    ECE bins are right-closed, ``((m-1)/M, m/M]`` (Guo et al. 2017), so a saturated confidence of
    exactly 1.0 -- frequent in float32 softmax -- falls into the last bin. Stock
    ``MulticlassCalibrationError`` uses left-closed bins and puts 1.0 into a separate 16th bin;
    on confidences that lie on no bin edge and below 1.0 the two agree. :func:`reliability_bins`
    shares the binning code with the metric, so a reliability diagram and the logged ECE always match.

    Same states and update as ``MulticlassCalibrationError`` (so DDP sync is unchanged); only the
    binning in ``compute()`` differs.
    """

    def __init__(self, num_classes: int, n_bins: int = ECE_BINS, **kwargs: Any) -> None:
        super().__init__(num_classes=num_classes, n_bins=n_bins, norm="l1", **kwargs)

    def compute(self) -> Tensor:
        confidences = dim_zero_cat(self.confidences)
        _, count, conf_sum, hit_sum = _calibration_bins(confidences,
                                                        dim_zero_cat(self.accuracies), self.n_bins)
        return _ece_from_bins(count, conf_sum, hit_sum).to(confidences.device, torch.float32)


class BinaryRate(MulticlassConfusionMatrix):
    """Sensitivity, specificity or their geometric mean for a two-class problem (class 1 positive).

    Keeps the 2 x 2 confusion matrix of the argmax predictions (so DDP sync is the stock one);
    ``compute()`` returns ``nan`` when a class the rate needs has no target.
    """

    def __init__(self, which: str, **kwargs: Any) -> None:
        if which not in BINARY_KEYS:
            raise ValueError(f"which must be one of {', '.join(BINARY_KEYS)}, got {which!r}")
        super().__init__(num_classes=2, **kwargs)
        self.which = which

    def compute(self) -> Tensor:
        cm = super().compute().double()
        spec = cm[0, 0] / cm[0].sum()  # 0 / 0 -> nan: no negative targets
        sens = cm[1, 1] / cm[1].sum()
        value = {"sensitivity": sens, "specificity": spec, "gmean": (sens * spec).sqrt()}[self.which]
        return value.float()


def _check_num_classes(num_classes: int) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an int >= 2 (use 2 for binary tasks), got {num_classes!r}")


def build_metrics(num_classes: int, prefix: str = "", sync_on_compute: bool = True) -> MetricCollection:
    """The evaluation collection every task uses: keys ``prefix + k`` for ``k`` in :data:`METRIC_KEYS`
    (and :data:`BINARY_KEYS` when ``num_classes == 2``).

    Classes missing from an evaluation set (common with few test subjects) are handled as follows:

    * precision / recall / f1 average over the classes that occur in the targets *or* the predictions,
      which is what sklearn does without ``labels=``. A class that is predicted but never true
      contributes precision 0 and recall 0 (``zero_division=0``).
    * auroc averages over the classes whose one-vs-rest problem has at least one positive and one
      negative target; the AUROC of any other class is undefined. sklearn raises in that case and
      stock ``MulticlassAUROC`` silently scores such a class 0, which drags the mean down. If no class
      qualifies (all targets equal) the result is ``nan``.
    * auprc averages over the classes with at least one positive target. sklearn instead averages in
      an AP of 0 for every absent class (after warning that recall is undefined); we leave them out,
      as stock ``MulticlassAveragePrecision`` does in most cases (it scores them ``nan`` or ``-0``).
    * kappa is ``nan`` when chance agreement is 1 (targets and predictions all one class), as in
      sklearn. acc and ece are always defined.

    ``update(probs, target)`` takes ``probs`` float ``(N, K)`` softmax probabilities and
    ``target`` int64 ``(N,)``; ``compute()`` returns a dict keyed ``prefix + k`` (e.g. ``"test/acc"``).
    Definitions are in the module docstring.
    ``sync_on_compute=False`` keeps ``compute()`` to this process's states (for a caller that has
    already gathered every rank's predictions itself).
    """
    _check_num_classes(num_classes)
    k = num_classes
    kw: dict[str, Any] = {"sync_on_compute": sync_on_compute}
    metrics: dict[str, Metric | MetricCollection] = {
        "acc": MulticlassAccuracy(num_classes=k, average="micro", **kw),
        "precision": MulticlassPrecision(num_classes=k, average="macro", **kw),
        "recall": MulticlassRecall(num_classes=k, average="macro", **kw),
        "f1": MulticlassF1Score(num_classes=k, average="macro", **kw),
        "auroc": MacroOvRAUROC(num_classes=k, **kw),
        "auprc": MacroOvRAveragePrecision(num_classes=k, **kw),
        "ece": TopLabelECE(num_classes=k, n_bins=ECE_BINS, **kw),
        "kappa": MulticlassCohenKappa(num_classes=k, **kw),
    }
    if k == 2:
        metrics.update({key: BinaryRate(key, **kw) for key in BINARY_KEYS})
    return MetricCollection(metrics, prefix=prefix)


def confusion_matrix_metric(num_classes: int) -> MulticlassConfusionMatrix:
    """Raw-count confusion matrix (rows = true class, columns = argmax prediction) for reports."""
    _check_num_classes(num_classes)
    return MulticlassConfusionMatrix(num_classes=num_classes)


def reliability_bins(probs: Any, target: Any, n_bins: int = ECE_BINS) -> dict[str, Any]:
    """Per-bin statistics of the top-label confidence, for reliability diagrams.

    ``probs`` is an ``(N, K)`` array or tensor of probabilities, ``target`` an ``(N,)`` integer
    array. Returns numpy arrays ``edges`` (``n_bins + 1``), ``confidence`` and ``accuracy``
    (per-bin means, ``nan`` for empty bins), ``count`` (int64), and ``ece`` (float), which equals
    what :class:`TopLabelECE` (the ``ece`` key of :func:`build_metrics`) reports for the same data.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    p = torch.as_tensor(probs).detach().cpu()
    t = torch.as_tensor(target).detach().cpu()
    if p.ndim != 2 or p.shape[1] < 2 or p.shape[0] == 0:
        raise ValueError(f"probs must have shape (N, K) with N >= 1 and K >= 2, got {tuple(p.shape)}")
    if t.shape != (p.shape[0],):
        raise ValueError(f"target must have shape ({p.shape[0]},) to match probs, got {tuple(t.shape)}")
    if not p.is_floating_point():
        raise ValueError(f"probs must be floating point, got {p.dtype}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"target must hold integer class ids, got {t.dtype}")
    if not bool(((p >= 0) & (p <= 1)).all()):
        raise ValueError("probs must be probabilities in [0, 1] (apply softmax to logits first)")
    if int(t.min()) < 0 or int(t.max()) >= p.shape[1]:
        raise ValueError(f"target values must lie in [0, {p.shape[1] - 1}], got range [{int(t.min())}, "
                         f"{int(t.max())}]")

    # Same path as MulticlassCalibrationError.update: float32 probabilities, max over classes.
    confidences, predictions = p.float().max(dim=1)
    correct = predictions.eq(t.long())
    edges, count, conf_sum, hit_sum = _calibration_bins(confidences, correct, n_bins)
    return {
        "edges": edges.numpy(),
        "confidence": (conf_sum / count).numpy(),  # 0 / 0 -> nan marks empty bins
        "accuracy": (hit_sum / count).numpy(),
        "count": count.numpy(),
        "ece": float(_ece_from_bins(count, conf_sum, hit_sum)),
    }


# ---- paper-specific, opt-in metrics ---------------------------------------------------------------------
EVAL_METRICS = ("default", "detection", "classification", "sleep")
DETECTION_KEYS = ("det_threshold", "det_f1", "det_precision", "det_recall", "det_acc")
DEFAULT_THRESHOLD = 0.5  # the reference's threshold before it is tuned on the validation set


class PositiveScores(Metric):
    """Keeps the positive-class probability and the binary target of every window (synced across ranks)."""

    full_state_update = False
    scores: list[Tensor]
    target: list[Tensor]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, target: Tensor) -> None:
        self.scores.append(scores.detach().float().flatten())
        self.target.append(target.detach().long().flatten())

    def compute(self) -> tuple[Tensor, Tensor]:
        if not self.scores:
            return torch.zeros(0), torch.zeros(0, dtype=torch.long)
        return dim_zero_cat(self.scores), dim_zero_cat(self.target)


def best_f1_threshold(scores: Any, target: Any, default: float = DEFAULT_THRESHOLD) -> float:
    """The score threshold with the highest F1 on a precision-recall curve (``pred = score >= t``).

    Candidates are the distinct scores, with the precision and recall of torchmetrics'
    ``binary_precision_recall_curve`` (sklearn's ``precision_recall_curve`` thresholds);
    candidates whose F1 is undefined (precision + recall = 0) are skipped and ties go to the
    lowest threshold, as the DCRNN reference's ``thresh_max_f1`` does. Without a positive or
    with no defined F1, ``default`` is returned.
    """
    s = torch.as_tensor(scores).detach().double().cpu().flatten()
    t = torch.as_tensor(target).detach().long().cpu().flatten()
    if s.numel() == 0 or not bool((t == 1).any()):
        return float(default)
    # precision and recall of ``score >= threshold`` at each distinct score, thresholds descending (the
    # curve's closing (1, 0) pair dropped)
    precision, recall, thresholds = binary_precision_recall_curve(s, t, thresholds=None)
    precision, recall, thresholds = (
        precision[:-1].double().flip(0),
        recall[:-1].double().flip(0),
        thresholds.flip(0),
    )
    f1 = 2 * precision * recall / (precision + recall)
    valid = torch.isfinite(f1)
    if not bool(valid.any()):
        return float(default)
    f1 = torch.where(valid, f1, torch.full_like(f1, -1.0))
    best = f1.max()
    # thresholds descend: the lowest one among the maxima is the last index
    idx = int(torch.nonzero(f1 == best).flatten()[-1])
    return float(thresholds[idx])


def threshold_metrics(scores: Any, target: Any, threshold: float) -> dict[str, float]:
    """Binary F1, precision, recall (of class 1; zero_division 0) and accuracy of ``score >= threshold``."""
    s = torch.as_tensor(scores).detach().double().cpu().flatten()
    t = torch.as_tensor(target).detach().long().cpu().flatten()
    if s.numel() == 0:
        nan = float("nan")
        return {"det_threshold": float(threshold), "det_f1": nan, "det_precision": nan, "det_recall": nan,
                "det_acc": nan}
    pred = (s >= threshold).long()
    tp = int(((pred == 1) & (t == 1)).sum())
    fp = int(((pred == 1) & (t == 0)).sum())
    fn = int(((pred == 0) & (t == 1)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    return {"det_threshold": float(threshold), "det_f1": f1, "det_precision": precision, "det_recall": recall,
            "det_acc": float((pred == t).double().mean())}


def build_extra_metrics(kind: str, num_classes: int, prefix: str = "",
                        sync_on_compute: bool = True) -> MetricCollection | None:
    """The opt-in collection of ``kind``; ``None`` for ``default`` and ``detection``.

    Paper-specific metrics, opt-in per experiment (``ClassificationTask(eval_metrics=...)``), added to the
    keys of :func:`build_metrics` (which keep their meaning):

    * ``detection`` (binary seizure detection, the DCRNN reference's protocol that STDRO reports, STDRO paper
      Sec. 4.2): the decision threshold on the seizure probability is the one that maximises F1 along the
      validation set's precision-recall curve (:func:`best_f1_threshold`, thresholds whose F1 is undefined are
      skipped, ties go to the lowest threshold), and it is reused on test. Keys ``det_threshold``, ``det_f1``,
      ``det_precision``, ``det_recall`` (of the seizure class) and ``det_acc`` at that threshold; the AUROC
      is ``auroc`` (threshold-free).
    * ``classification`` (seizure typing): ``weighted_f1``, ``weighted_precision``, ``weighted_recall``
      (sklearn ``average="weighted"``, zero_division 0) beside ``acc``.
    * ``sleep``: ``macro_f1`` (equal to ``f1``, under the paper's name) beside ``kappa``.

    ``sync_on_compute`` as in :func:`build_metrics`.

    Detection metrics need the validation threshold, so the task computes them with
    :class:`PositiveScores`, :func:`best_f1_threshold` and :func:`threshold_metrics`.
    """
    if kind not in EVAL_METRICS:
        raise ValueError(f"eval_metrics must be one of {', '.join(EVAL_METRICS)}, got {kind!r}")
    _check_num_classes(num_classes)
    if kind == "detection" and num_classes != 2:
        raise ValueError(f"eval_metrics='detection' needs a binary task (n_outputs=2), got {num_classes} "
                         f"classes")
    k = num_classes
    if kind == "classification":
        return MetricCollection({
            "weighted_f1": MulticlassF1Score(num_classes=k, average="weighted",
                                             sync_on_compute=sync_on_compute),
            "weighted_precision": MulticlassPrecision(num_classes=k, average="weighted",
                                                      sync_on_compute=sync_on_compute),
            "weighted_recall": MulticlassRecall(num_classes=k, average="weighted",
                                                sync_on_compute=sync_on_compute),
        }, prefix=prefix)
    if kind == "sleep":
        return MetricCollection(
            {"macro_f1": MulticlassF1Score(num_classes=k, average="macro", sync_on_compute=sync_on_compute)},
            prefix=prefix,
        )
    return None
