"""SPDTransNet's recipe: Table 1's extra columns, N1 F1 and macro accuracy, on hand-made predictions."""

from __future__ import annotations

import pytest
import torch
from sklearn import metrics as skm
from torch import nn

from biosig_lightning.tasks.spdtransnet import SPDTransNetTask


def test_n1_f1_and_macro_accuracy_are_table1s() -> None:
    task = SPDTransNetTask(backbone=nn.Identity(), n_outputs=5)
    # W, N1, N2, N3, REM: N1 is often taken for W or N2, which is what its F1 must show
    y = torch.tensor([0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4])
    pred = torch.tensor([0, 1, 1, 0, 2, 1, 2, 2, 1, 3, 2, 4, 4, 0])
    probs = torch.nn.functional.one_hot(pred, 5).float() * 0.6 + 0.08
    got = task.epoch_metrics(probs, y)
    assert set(got) == {"f1_n1", "macro_acc"}
    assert float(got["f1_n1"]) == pytest.approx(skm.f1_score(y, pred, labels=[1], average=None)[0])
    assert float(got["macro_acc"]) == pytest.approx(skm.recall_score(y, pred, average="macro"))
    # by hand: N1 precision 2/4, recall 2/4 -> F1 0.5; recalls 1/2, 2/4, 2/3, 1/2, 2/3 -> mean 17/30
    assert float(got["f1_n1"]) == pytest.approx(0.5)
    assert float(got["macro_acc"]) == pytest.approx(17 / 30)
