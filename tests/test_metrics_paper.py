"""Opt-in paper metrics (detection threshold tuned on validation, weighted F1, macro-F1/kappa) against
sklearn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    f1_score,
    precision_recall_curve,
    precision_score,
    recall_score,
    roc_auc_score,
)
from torch import nn
from torch.utils.data import DataLoader

from biosig_lightning.metrics import (
    best_f1_threshold,
    build_extra_metrics,
    build_metrics,
    threshold_metrics,
)
from biosig_lightning.tasks.classification import ClassificationTask


def reference_threshold(y_true: np.ndarray, y_prob: np.ndarray) -> float:
    """The DCRNN reference's rule, written with sklearn: max F1 over the PR curve, NaN F1 skipped."""
    precision, recall, thresholds = precision_recall_curve(y_true, y_prob)
    best, best_f1 = None, -1.0
    for i, thr in enumerate(thresholds):
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = 2 * precision[i] * recall[i] / (precision[i] + recall[i])
        if not np.isnan(f1) and f1 > best_f1:  # thresholds ascend: first max = lowest threshold
            best, best_f1 = thr, f1
    return float(best)


@pytest.mark.parametrize("seed", range(6))
def test_best_f1_threshold_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    y = (rng.random(n) < 0.2 + 0.1 * seed % 3).astype(int)
    p = 1 / (1 + np.exp(-(rng.standard_normal(n) + 1.2 * y)))
    if seed % 2:
        p = np.round(p, 1)  # many ties
    assert best_f1_threshold(torch.tensor(p), torch.tensor(y)) == pytest.approx(
        reference_threshold(y, p), abs=1e-12
    )


def test_best_f1_threshold_edge_cases() -> None:
    # perfectly separable: the lowest positive score
    assert best_f1_threshold([0.1, 0.2, 0.7, 0.9], [0, 0, 1, 1]) == pytest.approx(0.7)
    # no positive: undefined, the default stays
    assert best_f1_threshold([0.1, 0.2], [0, 0]) == 0.5
    # F1 2/3 at 0.9 and at 0.6 (0.5 and 0.4 between): ties go to the lowest threshold, as in the reference
    assert best_f1_threshold([0.9, 0.8, 0.7, 0.6], [1, 0, 0, 1]) == pytest.approx(0.6)
    assert reference_threshold(np.array([1, 0, 0, 1]), np.array([0.9, 0.8, 0.7, 0.6])) == pytest.approx(0.6)
    # one score for everything: the only candidate
    assert best_f1_threshold([0.3, 0.3, 0.3], [0, 1, 0]) == pytest.approx(0.3)


@pytest.mark.parametrize("thr", [0.25, 0.5, 0.8])
def test_threshold_metrics_match_sklearn(thr: float) -> None:
    rng = np.random.default_rng(1)
    y = (rng.random(200) < 0.3).astype(int)
    p = np.clip(0.35 * y + 0.65 * rng.random(200), 0, 1)
    out = threshold_metrics(torch.tensor(p), torch.tensor(y), thr)
    pred = (p >= thr).astype(int)
    assert out["det_f1"] == pytest.approx(f1_score(y, pred, zero_division=0))
    assert out["det_precision"] == pytest.approx(precision_score(y, pred, zero_division=0))
    assert out["det_recall"] == pytest.approx(recall_score(y, pred, zero_division=0))
    assert out["det_acc"] == pytest.approx(accuracy_score(y, pred))
    assert out["det_threshold"] == thr


def test_weighted_and_sleep_metrics_match_sklearn() -> None:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (300,), generator=g)
    y[y == 3] = 2  # class 3 never true, but predicted sometimes
    logits = torch.randn(300, 4, generator=g)
    logits[torch.arange(300), y] += 1.0
    probs = logits.softmax(-1)
    pred = probs.argmax(-1).numpy()
    cls = build_extra_metrics("classification", 4, prefix="test/")
    cls.update(probs, y)
    out = {k: float(v) for k, v in cls.compute().items()}
    assert out["test/weighted_f1"] == pytest.approx(f1_score(y, pred,
                                                             average="weighted", zero_division=0), abs=1e-6)
    assert out["test/weighted_precision"] == pytest.approx(
        precision_score(y, pred, average="weighted", zero_division=0), abs=1e-6)
    assert out["test/weighted_recall"] == pytest.approx(
        recall_score(y, pred, average="weighted", zero_division=0), abs=1e-6)
    assert out["test/weighted_f1"] != pytest.approx(f1_score(y, pred,
                                                             average="macro", zero_division=0), abs=1e-3)
    sleep = build_extra_metrics("sleep", 4, prefix="test/")
    sleep.update(probs, y)
    base = build_metrics(4, prefix="test/")
    base.update(probs, y)
    assert float(sleep.compute()["test/macro_f1"]) == pytest.approx(
        f1_score(y, pred, average="macro"), abs=1e-6
    )
    assert float(base.compute()["test/kappa"]) == pytest.approx(cohen_kappa_score(y, pred), abs=1e-6)
    assert build_extra_metrics("default", 2) is None
    with pytest.raises(ValueError, match="binary task"):
        build_extra_metrics("detection", 4)
    with pytest.raises(ValueError, match="eval_metrics must be one of"):
        build_extra_metrics("macro", 2)


class _Fixed(nn.Module):
    """Returns the logits stored in the batch's first feature (so the test knows every probability)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w * x[:, 0, :2]


def _loader(logits: torch.Tensor, y: torch.Tensor) -> DataLoader:
    items = [{"x": logits[i].view(1, 2), "y": y[i], "subject": torch.tensor(0), "index": torch.tensor(i)}
             for i in range(len(y))]
    return DataLoader(items, batch_size=16)


def test_task_tunes_threshold_on_val_and_reuses_it_on_test(tmp_path) -> None:
    g = torch.Generator().manual_seed(3)
    yv, yt = (torch.rand(120, generator=g) < 0.3).long(), (torch.rand(100, generator=g) < 0.3).long()
    lv = torch.randn(120, 2, generator=g) + torch.stack([torch.zeros(120), 1.5 * yv.float() - 1.0], 1)
    lt = torch.randn(100, 2, generator=g) + torch.stack([torch.zeros(100), 1.5 * yt.float() - 1.0], 1)
    task = ClassificationTask(_Fixed(), n_outputs=2, eval_metrics="detection")
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.validate(task, dataloaders=_loader(lv, yv), verbose=False)
    pv = lv.softmax(-1)[:, 1].numpy()
    thr = reference_threshold(yv.numpy(), pv)
    assert float(task.decision_threshold) == pytest.approx(thr, abs=1e-6)
    out = trainer.test(task, dataloaders=_loader(lt, yt), verbose=False)[0]
    pred = (lt.softmax(-1)[:, 1].numpy() >= float(task.decision_threshold)).astype(int)
    assert out["test/det_threshold"] == pytest.approx(thr, abs=1e-6)
    assert out["test/det_f1"] == pytest.approx(f1_score(yt, pred), abs=1e-6)
    assert out["test/det_recall"] == pytest.approx(recall_score(yt, pred), abs=1e-6)
    assert out["test/det_precision"] == pytest.approx(precision_score(yt, pred), abs=1e-6)
    assert out["test/det_acc"] == pytest.approx(accuracy_score(yt, pred), abs=1e-6)
    # the standard metrics stay what they are: macro F1 of the argmax, AUROC of the class-1 probability
    assert out["test/f1"] == pytest.approx(f1_score(yt, lt.argmax(-1), average="macro"), abs=1e-6)
    assert out["test/auroc"] == pytest.approx(roc_auc_score(yt, lt.softmax(-1)[:, 1].numpy()), abs=1e-6)
    # the threshold travels with the weights (checkpoint of the best epoch -> test)
    fresh = ClassificationTask(_Fixed(), n_outputs=2, eval_metrics="detection")
    assert float(fresh.decision_threshold) == 0.5
    fresh.load_state_dict(task.state_dict())
    assert float(fresh.decision_threshold) == pytest.approx(thr, abs=1e-6)
    # the default task logs none of the opt-in keys
    plain = ClassificationTask(_Fixed(), n_outputs=2)
    out = trainer.test(plain, dataloaders=_loader(lt, yt), verbose=False)[0]
    assert not any(k.startswith("test/det_") or "weighted" in k for k in out)
    assert "decision_threshold" not in plain.state_dict()


def test_fit_on_tusz_stand_in_writes_detection_metrics(tmp_path, monkeypatch, capsys) -> None:
    """`biosig fit --data TUSZDataModule --data.init_args.synthetic true ...`: the det_* keys reach
    results.json,
    and the test threshold is the one stored in the best checkpoint (tuned on that epoch's validation)."""
    import json
    from pathlib import Path

    from biosig_lightning.cli import main
    from tests.conftest import EXPERIMENTS

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
          str(EXPERIMENTS / "overlays" / "smoke.yaml"),
          "--data", "TUSZDataModule", "--data.init_args.synthetic", "true",
          "--data.init_args.cache_dir", str(tmp_path / "cache"),
          "--data.init_args.synthetic_options",
          '{"n_subjects": 10, "dev_subjects": 2, "windows_per_subject": 7}',
          "--model.init_args.eval_metrics", "detection", "--model.init_args.monitor", "val/auroc"])
    out = capsys.readouterr().out.strip().splitlines()
    res = json.loads(Path(out[-1].split("results: ", 1)[1]).read_text())
    assert res["dataset"] == "tusz-synthetic"
    assert {"test/det_threshold", "test/det_f1", "test/det_precision", "test/det_recall", "test/det_acc",
            "test/auroc", "test/f1"} <= res["metrics"].keys()
    assert res["subjects"]["test"] == [9, 10]  # the stand-in's dev folder
    state = torch.load(res["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    assert res["metrics"]["test/det_threshold"] == pytest.approx(float(state["decision_threshold"]), abs=1e-6)
