"""``biosig benchmark`` on a user's own data: a grid corpus given as a BIDS root, an ``mne.Epochs`` file or an
``.npz`` array file, every method under the same subject-disjoint split."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from biosig_lightning.benchmarking.grid import GridError, load_grid
from biosig_lightning.cli import main
from tests.data.datamodules.test_own_data import _epochs, bids_root  # noqa: F401  (the BIDS fixture)

SPLIT = {"strategy": "ratio", "ratios": [0.5, 0.17, 0.33], "seed": 0}
#: all five papers' methods (each at a tiny size) and two baselines; one short epoch each
METHODS: dict[str, dict] = {
    "bioformer": {"backbone": {"class_path": "BioFormer",
                               "init_args": {"d_model": 16, "d_ff": 32, "n_heads": 2,
                                                                        "n_layers": 1, "d_token": 8}},
                  "recipe": {"class_path": "ClassificationTask"}},
    "sdformer": {"backbone": {"class_path": "SDFormer",
                              "init_args": {"d_model": 16, "n_layers": 1, "n_heads": 2,
                                                                      "d_ff": 32}},
                 "recipe": {"class_path": "SDFormerTask",
                            "init_args": {"phase1_epochs": 1, "phase2_epochs": 0}}},
    "stdro": {"backbone": {"class_path": "CNN1D", "init_args": {"width": 8, "n_blocks": 2}},
              "recipe": {"class_path": "biosig_lightning.robust.STDROTask",
                         "init_args": {"variant": "stdro", "n_periods": 4,
                                       "ascent_steps": 2, "n_environments": 2}}},
    "spdtransnet": {"backbone": {"class_path": "SPDTransNet",
                                 "init_args": {"n_bands": 7, "d_model": 45, "tokens_per_epoch": 7,
                                               "intra_heads": 3,
                                               "intra_layers": 1, "inter_heads": 3, "inter_layers": 1,
                                               "d_ff": 45,
                                               "fc_width": 16, "n_subwindows": 1}},
                    "recipe": {"class_path": "biosig_lightning.tasks.SPDTransNetTask"},
                    # SPD tokens of the BIDS windows: the grid puts the BIDS DataModule inside as its corpus
                    "overrides": {"data.class_path": "biosig_lightning.data.spd_windows.SPDWindowsDataModule",
                                  "data.init_args.context": 1, "data.init_args.n_subwindows": 1,
                                  "data.init_args.whitening": "train"}},
    "signed_graph": {"backbone": {"class_path": "SignedGraphClassifier",
                                  "init_args": {"n_blocks": 1, "feature_dim": 8,
                                                "metric_rank": 2, "n_chunks": 4}},
                     "recipe": {"class_path": "biosig_lightning.tasks.DenoiserPairTask",
                                "init_args": {"spatial_graph": "montage"}}},
    "cnn1d": {"backbone": {"class_path": "CNN1D", "init_args": {"width": 8, "n_blocks": 2}},
              "recipe": {"class_path": "ClassificationTask"}},
    "eegnet": {"backbone": {"class_path": "EEGNet"}, "recipe": {"class_path": "ClassificationTask"}},
}


def _grid(tmp_path: Path, data: dict, methods: dict | None = None) -> Path:
    spec = {
        "name": "own", "seeds": [1],
        "fit_args": {"trainer.enable_progress_bar": False, "trainer.enable_model_summary": False,
                     "trainer.max_epochs": 1},
        "corpora": {"mine": {"task": "window_classification", "data": data, "protocol": {"split": SPLIT},
                             # the budget every method shares (the denoisers' own warm restarts are their
                             # schedule)
                             "overrides": {"data.init_args.batch_size": 16,
                                           "model.init_args.scheduler": "none"},
                             "metrics": ["f1", "acc"]}},
        "methods": {n: {"tasks": ["window_classification"], **m} for n, m in (methods or METHODS).items()},
    }
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_grid_of_the_papers_methods_runs_on_a_bids_dataset(bids_root: Path, tmp_path: Path) -> None:  # noqa: F811
    grid_file = _grid(tmp_path, {"bids": str(bids_root), "task": "mi", "window_seconds": 1.0})
    out = tmp_path / "out"
    main(["benchmark", "--grid", str(grid_file), "--out", str(out), "--inline"])
    results = {m: json.loads((out / "mine" / m / "seed_1" / "results.json").read_text()) for m in METHODS}
    # one subject-disjoint split for every method: the same subjects, read from the BIDS dataset
    splits = {m: (r["split_id"], json.dumps(r["subjects"], sort_keys=True)) for m, r in results.items()}
    assert len(set(splits.values())) == 1, splits
    subjects = next(iter(results.values()))["subjects"]
    assert sorted(subjects["train"] + subjects["val"] + subjects["test"]) == list(range(1, 7))
    assert not set(subjects["train"]) & (set(subjects["val"]) | set(subjects["test"]))
    for m, r in results.items():
        assert r["dataset"] == "bids" and r["classes"] == ["left", "right"], m
        assert r["windows"]["test"] == 20 * len(subjects["test"]), m
    # and every method has a number in the leaderboard (none is n/a on data it can read)
    with open(out / "leaderboard.csv", newline="") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == sorted(METHODS)
    for m, row in rows.items():
        assert float(row["mine (f1)"].split(" ")[0]) == pytest.approx(
            results[m]["metrics"]["test/f1"], abs=5e-4
        ), m


def test_an_epochs_file_and_an_array_file_are_grid_corpora(tmp_path: Path) -> None:
    epochs = _epochs()
    fif = tmp_path / "mine-epo.fif"
    epochs.save(fif, verbose="error")
    npz = tmp_path / "mine.npz"
    subjects = epochs.metadata["subject"].to_numpy()
    np.savez(npz, x=epochs.get_data(), y=epochs.events[:, 2] - 1, subjects=subjects,
             sfreq=epochs.info["sfreq"])
    one = {"cnn1d": METHODS["cnn1d"]}
    assert Path.cwd() != tmp_path  # the paths below are found relative to the grid file's folder
    for data, class_name, key, path in (({"epochs": "mine-epo.fif"}, "EpochsDataModule", "epochs", fif),
                                        ({"arrays": "mine.npz", "name": "mine"},
                                         "ArrayFileDataModule", "file", npz)):
        grid = load_grid(_grid(tmp_path, data, one))
        args = grid.base_args(grid.cells()[0])
        assert f"--data.class_path=biosig_lightning.data.datamodules.{class_name}" in args
        assert f"--data.init_args.{key}={path.resolve()}" in args
        # the protocol comes after the data swap, so the split is the grid's
        assert args.index(f"--data.init_args.{key}={path.resolve()}") < \
            args.index(f"--data.init_args.split={json.dumps(SPLIT)}")
    from biosig_lightning.data.datamodules import ArrayFileDataModule
    from biosig_lightning.data.splits import SplitConfig

    dm = ArrayFileDataModule(str(npz), split=SplitConfig(strategy="ratio", ratios=(0.5, 0.17, 0.33), seed=0),
                             batch_size=8)
    dm.setup("fit")
    assert dm.n_chans == 4 and dm.sfreq == 100.0 and dm.n_outputs == 2
    assert len(dm.datasets["train"]) + len(dm.datasets["val"]) + len(dm.datasets["test"]) == len(subjects)


@pytest.mark.parametrize(("data", "message"), [
    ({"bids": "nowhere"}, "corpora.mine.data.bids: 'nowhere' not found"),
    ({"bids": ".", "epochs": "."}, "corpora.mine.data needs exactly one of bids, epochs, arrays"),
    ({"task": "mi"}, "corpora.mine.data needs exactly one of bids, epochs, arrays"),
    ({"bids": ".", "window_secs": 2}, "corpora.mine.data: BIDSDataModule has no argument(s) ['window_secs']"),
])
def test_a_bad_own_data_corpus_is_one_line_naming_the_key(tmp_path: Path, data: dict, message: str) -> None:
    path = _grid(tmp_path, data, {"cnn1d": METHODS["cnn1d"]})
    with pytest.raises(GridError) as err:
        load_grid(path)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_array_file_without_its_arrays_says_which(tmp_path: Path) -> None:
    from biosig_lightning.data.corpora.arrays import arrays_from_file
    from biosig_lightning.data.spec import DataError

    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 1, 8)), y=np.zeros(2))
    with pytest.raises(DataError, match=r"bad.npz lacks array\(s\) subjects"):
        arrays_from_file(tmp_path / "bad.npz", sfreq=100.0)
    np.savez(tmp_path / "nosfreq.npz", x=np.zeros((2, 1, 8)), y=np.zeros(2), subjects=np.arange(2))
    with pytest.raises(DataError, match="holds no sfreq; give data.init_args.sfreq"):
        arrays_from_file(tmp_path / "nosfreq.npz")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_cells_that_fail_on_one_bad_folder_end_as_one_line(tmp_path: Path, workers: str) -> None:
    """A folder that exists but is no BIDS root passes the grid's path check and fails every cell when it is
    read; the end says how many failed and the one error line once, not a list of every cell id (with
    several worker processes too: the parent reads why from the queue)."""
    (tmp_path / "not_bids").mkdir()
    grid = _grid(tmp_path, {"bids": str(tmp_path / "not_bids"), "task": "mi"},
                 {"cnn1d": METHODS["cnn1d"], "eegnet": METHODS["eegnet"]})
    spec = yaml.safe_load(grid.read_text())
    spec["seeds"] = [1, 2]
    grid.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit) as end:
        main(["benchmark", "--grid", str(grid), "--out", str(tmp_path / "out"), "--inline",
              "--workers", workers])
    message = str(end.value.code)
    assert message.startswith("biosig benchmark: 4 cell(s) failed (mine/cnn1d/seed_1, ")
    assert " and 1 more: biosig fit: error: bids: " in message and "is not a BIDS root" in message
    assert message.count("is not a BIDS root") == 1 and "\n" not in message
