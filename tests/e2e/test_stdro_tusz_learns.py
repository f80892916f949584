"""STDRO + DCRNN learns on a TUSZ v1.5.2 corpus in the real format, tested on the ``dev`` folder's patients.

Acceptance: ``biosig fit`` with ``experiments/stdro_tusz.yaml`` (the STDRO recipe around
DCRNN with the distance graph, 12-s log|FFT| clips) on a tree of pyedflib EDFs with ``.tse`` /
``.tse_bi`` beside each (``tests/tusz_fixture.py``: seizure-like bursts with patient drift). Only
the sizes shrink (16 units, 1 layer, m = 3 ascent steps, 8 epochs at lr 1e-2, batch 16), and checkpoints are
chosen by val/loss: the single validation patient's AUROC is already 1.0 after one epoch, so the
recipe's val/auroc monitor would keep that first epoch.

Claims, each one a broken pipeline fails:

* the test windows are exactly the ``dev`` folder's patients (not the train patient that also has a
  ``dev`` recording), disjoint from train / val, which split ``train`` 90/10;
* the labels are the fixture's ``.tse_bi`` seizures (clip overlaps a seizure), per patient;
* learning: test AUROC, recomputed from ``test_predictions.npz`` and equal to ``results.json``'s,
  is >= 0.9 (chance 0.5) and beats by >= 0.25 the same run with lr = 0 (the initial weights
  going through the identical pipeline), whose AUROC shows what an untrained DCRNN scores on
  these bursts;
* the STDRO loop really ran: the adversary moved the inputs and M took its steps.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS
from tests.helpers import assert_metrics_match_predictions
from tests.tusz_fixture import SeizureCorpus, write_seizure_corpus

SMALL = ["--model.init_args.backbone.init_args.rnn_units=16",
         "--model.init_args.backbone.init_args.num_rnn_layers=1",
         "--model.init_args.ascent_steps=3", "--model.init_args.monitor=val/loss",
         "--model.init_args.mode=min",
         "--data.init_args.batch_size=16", "--trainer.accelerator=cpu",
         "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _fit(root: Path, capsys: pytest.CaptureFixture[str], lr: float, epochs: int) -> Path:
    with pytest.warns(UserWarning, match="00000101"):  # the train patient's dev recording is left out
        main(["fit", "--config", str(EXPERIMENTS / "stdro_tusz.yaml"), f"--data.init_args.root={root}",
              f"--data.init_args.cache_dir={root / 'cache'}", *SMALL, f"--model.init_args.lr={lr}",
              f"--trainer.max_epochs={epochs}"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("results: "), last
    return Path(last.split("results: ", 1)[1]).parent


def _test_auroc(run: Path) -> tuple[float, np.ndarray, np.ndarray]:
    res = assert_metrics_match_predictions(run)  # results.json's metrics are those of test_predictions.npz
    with np.load(run / "test_predictions.npz") as z:
        probs, y, subjects = z["probs"], z["y"], z["subject"]
    auroc = float(roc_auc_score(y, probs[:, 1]))
    assert res["metrics"]["test/auroc"] == pytest.approx(auroc, abs=1e-4)
    return auroc, y, subjects


def _assert_ascent_climbs_its_lagrangian(run: Path) -> None:
    """The inner maximisation (eq. 4, Appendix A) of the trained run, on one batch of its training windows:
    the points it transports the batch to raise the objective it climbs, ``sum_i l(X~_i) - lambda c_w(X~_i,
    X_i)``,
    above its value at the clean inputs, ``sum_i l(X_i)`` (where ``c_w = 0``). So the adversary moved the
    inputs
    (an unmoved batch gains exactly nothing), and by a cost ``lambda c_w`` below the loss it gained: a
    positive transport within the budget the penalty sets. An ascent that descends, or a step that never
    moves, gains nothing or loses."""
    import torch
    import torch.nn.functional as F

    from biosig_lightning.robust.stdro.cost import transport_cost
    from biosig_lightning.runs import load_run

    loaded = load_run(run, overrides={"num_workers": 0})
    task, dm = loaded.task, loaded.datamodule
    dm.setup("fit")
    batch = next(iter(dm._loader("train", train=False)))
    x, y = batch["x"], batch["y"]
    x_adv, _ = task.inner_maximisation(x, y)
    with torch.no_grad():
        clean = float(F.cross_entropy(task.backbone(x), y, reduction="sum"))
        moved = float(F.cross_entropy(task.backbone(x_adv), y, reduction="sum"))
        cost = transport_cost(x_adv, x, task.covariate_weight(), task.bounds)
    price = task.hparams.penalty * float(cost.sum())
    assert 0 < price < moved - clean, (clean, moved, price)


def _expected_test_labels(corpus: SeizureCorpus) -> dict[int, tuple[int, int]]:
    """dev patient -> (clips, seizure clips) of its dev-folder recordings."""
    out: dict[int, tuple[int, int]] = {}
    for stem, labels in corpus.clip_labels.items():
        pid = int(stem.split("_")[0])
        if corpus.folder_of[stem] == "dev" and pid in corpus.folders["dev"]:
            n, k = out.get(pid, (0, 0))
            out[pid] = (n + len(labels), k + sum(labels))
    return out


def test_stdro_dcrnn_learns_on_a_tusz_v152_edf_corpus(in_tmp: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_seizure_corpus(in_tmp / "tusz")
    assert any(corpus.folder_of[s] == "dev" and s.startswith("00000101") for s in corpus.folder_of)

    run = _fit(in_tmp / "tusz", capsys, lr=1e-2, epochs=8)
    res = json.loads((run / "results.json").read_text())
    assert (res["task"], res["variant"], res["model"]) == ("STDROTask", "STDRO", "DCRNN")

    # (1) test = the dev folder's patients only; train / val = a 90/10 patient split of the train folder
    split = res["subjects"]
    assert split["test"] == sorted(corpus.folders["dev"])
    assert sorted(split["train"] + split["val"]) == sorted(corpus.folders["train"])
    assert len(split["val"]) == round(0.1 * len(corpus.folders["train"]))
    assert not set(split["test"]) & (set(split["train"]) | set(split["val"]))
    auroc, y, subjects = _test_auroc(run)
    assert sorted(set(subjects.tolist())) == split["test"]
    # (2) labels: each dev patient's clips and seizure clips as its .tse_bi files say
    got = {int(s): (int((subjects == s).sum()), int(y[subjects == s].sum())) for s in np.unique(subjects)}
    assert got == _expected_test_labels(corpus)

    # (3) it learns: well above chance and above the same run with the initial weights (lr = 0: the
    # weights never move, so one epoch tests exactly what more epochs would)
    control, control_y, _ = _test_auroc(_fit(in_tmp / "tusz", capsys, lr=0.0, epochs=1))
    assert np.array_equal(control_y, y)
    assert auroc >= 0.9, (auroc, control)
    assert auroc >= control + 0.25, (auroc, control)

    # the STDRO loop ran: an adversarial cost logged every epoch, M took its 4 steps (every 8 / 4 epochs)
    with open(run / "metrics.csv") as f:
        costs = [float(r["train/adv_cost"]) for r in csv.DictReader(f) if r.get("train/adv_cost")]
    assert len(costs) == 8
    _assert_ascent_climbs_its_lagrangian(run)
    with np.load(run / "stdro_weights.npz") as z:
        assert z["epochs"].tolist() == [0, 2, 4, 6, 8]
        assert not np.allclose(z["history"][-1], z["history"][0])
