"""SPDTransNet learns sleep stages through the whole SPD pipeline and its experiment YAMLs (``biosig fit
--config experiments/spdtransnet_{mass,sleepedf}.yaml`` with small-model overrides): on a MASS SS3 corpus
and a Sleep-EDF (Sleep Cassette) corpus written in their real formats by pyedflib, and on both corpora's
synthetic stand-ins, clearly above the majority class on unseen subjects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from biosig_lightning.cli import main
from biosig_lightning.data.datamodules import MASSSS3DataModule, SleepEDFSPDDataModule
from biosig_lightning.data.spd import SPDDataModule
from tests.conftest import EXPERIMENTS
from tests.mass_fixture import write_corpus as write_mass
from tests.sleep_edf_fixture import write_corpus as write_sleep_edf

#: a small SPDTransNet (the YAMLs' is d = 351, 5 + 4 layers), no dropout, so a CPU learns in seconds
SMALL = dict(d_model=28, tokens_per_epoch=7, intra_heads=2, intra_layers=1, inter_heads=2, inter_layers=1,
             d_ff=36, fc_width=28, dropout=0.0)


def _fit(capsys: pytest.CaptureFixture[str], experiment: str, split: dict[str, list[int]], *extra: str,
         epochs: int = 10) -> dict[str, Any]:
    """``biosig fit`` of the experiment YAML at L = 3 on a fixed subject split; the run's results.json."""
    main(["fit", "--config", str(EXPERIMENTS / experiment), *extra,
          "--model.init_args.backbone.init_args", json.dumps(SMALL), "--model.init_args.lr", "2e-3",
          "--data.init_args.context", "3", "--data.init_args.trim", "0", "--data.init_args.test_trim", "0",
          "--data.init_args.batch_size", "16", "--data.init_args.eval_batch_size", "64",
          "--data.init_args.split", json.dumps({"strategy": "fixed", **split}),
          "--data.init_args.cache_dir", "cache", "--trainer.max_epochs", str(epochs),
          "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("results: "), last
    return json.loads(Path(last.split("results: ", 1)[1]).read_text())


def _scores(results: dict[str, Any], train_labels: list[int] | np.ndarray) -> tuple[float, float]:
    """The run's test macro-F1 (checked against its saved predictions) and the majority-class macro-F1."""
    with np.load(Path(results["run_dir"]) / "test_predictions.npz", allow_pickle=False) as z:
        y, pred = z["y"], z["probs"].argmax(1)
    f1 = results["metrics"]["test/f1"]
    assert f1 == pytest.approx(f1_score(y, pred, average="macro"), abs=1e-6)
    majority = np.full_like(y, np.bincount(np.asarray(train_labels)).argmax())
    return f1, f1_score(y, majority, average="macro")


def test_learns_on_a_mass_layout_corpus(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stages = write_mass(in_tmp / "ss3", [1, 2, 3, 4], n_epochs=30, seed=4)
    res = _fit(capsys, "spdtransnet_mass.yaml", {"train": [1, 2], "val": [3], "test": [4]},
               "--data.init_args.root", str(in_tmp / "ss3"))
    assert res["model"] == "SPDTransNet" and res["dataset"] == "mass_ss3" and res["subjects"]["test"] == [4]
    f1, baseline = _scores(res, stages[1] + stages[2])
    print(f"test macro-F1 {f1:.3f}, majority class {baseline:.3f}")
    assert f1 > baseline + 0.4, (f1, baseline)


def test_learns_on_a_sleep_edf_layout_corpus(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # subject 0 has two nights (SC4001E0 + SC4002E0, hypnograms ...EC and ...EH), as in the Sleep Cassette
    kept = write_sleep_edf(in_tmp / "sleep-cassette", [(0, 1), (0, 2), (1, 1), (2, 1), (3, 1)], n_epochs=30,
                           seed=5)
    res = _fit(capsys, "spdtransnet_sleepedf.yaml", {"train": [0, 1], "val": [2], "test": [3]},
               "--data.init_args.root", str(in_tmp), epochs=12)
    assert res["dataset"] == "sleep_edf" and res["windows"]["test"] == len(kept[3])
    f1, baseline = _scores(res, kept[0] + kept[1])
    print(f"test macro-F1 {f1:.3f}, majority class {baseline:.3f}")
    assert f1 > baseline + 0.4, (f1, baseline)


@pytest.mark.parametrize(("experiment", "datamodule", "dataset"), [
    ("spdtransnet_mass.yaml", MASSSS3DataModule, "mass_ss3-synthetic"),
    ("spdtransnet_sleepedf.yaml", SleepEDFSPDDataModule, "sleep_edf-synthetic"),
])
def test_learns_on_the_stand_in(in_tmp: Path, capsys: pytest.CaptureFixture[str], experiment: str,
                                datamodule: type[SPDDataModule], dataset: str) -> None:
    # the stand-in's per-subject drift needs three training subjects; two unseen ones steady the score
    options = {"n_subjects": 6, "windows_per_subject": 60}
    res = _fit(capsys, experiment, {"train": [1, 2, 3], "val": [4], "test": [5, 6]},
               "--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"), "--data.init_args.synthetic_options",
               json.dumps(options), epochs=6)
    assert res["dataset"] == dataset and res["subjects"]["test"] == [5, 6]
    # the training subjects' labels, read back from the run's own token cache
    dm = datamodule(synthetic=True, synthetic_options=options, context=3, cache_dir="cache")
    train = np.asarray(dm.cache.labels[dm.cache.indices_for_subjects([1, 2, 3])])
    f1, baseline = _scores(res, train)
    print(f"test macro-F1 {f1:.3f}, majority class {baseline:.3f}")
    assert f1 > baseline + 0.3, (f1, baseline)


def test_learns_on_the_stand_in_with_bf16_mixed_precision_on_a_cpu(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's bf16-mixed on a CPU (torch's CPU autocast): the linear maps (feed-forward blocks, head)
    # run in bfloat16, and the model learns as in float32 above
    lows: list[Any] = []
    forward = torch.nn.Linear.forward
    monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: (lambda out: lows.append(out.dtype) or out)(
        forward(self, x)))
    options = {"n_subjects": 6, "windows_per_subject": 60}
    res = _fit(capsys, "spdtransnet_mass.yaml", {"train": [1, 2, 3], "val": [4], "test": [5, 6]},
               "--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"), "--data.init_args.synthetic_options",
               json.dumps(options), "--trainer.precision", "bf16-mixed", epochs=6)
    assert res["dataset"] == "mass_ss3-synthetic"
    assert lows and set(lows) == {torch.bfloat16}
    dm = MASSSS3DataModule(synthetic=True, synthetic_options=options, context=3, cache_dir="cache")
    f1, baseline = _scores(res, np.asarray(dm.cache.labels[dm.cache.indices_for_subjects([1, 2, 3])]))
    print(f"bf16-mixed: test macro-F1 {f1:.3f}, majority class {baseline:.3f}")
    assert f1 > baseline + 0.3, (f1, baseline)
