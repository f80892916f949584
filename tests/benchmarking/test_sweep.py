"""The one-method sweeps of ``biosig repeat`` and ``biosig cv``: their fold and seed lists, and the one fold
key."""

from __future__ import annotations

from pathlib import Path

import pytest

from biosig_lightning.benchmarking.grid import FOLD_KEY, fold_key
from biosig_lightning.benchmarking.sweep import SweepError, fold_jobs, parse_folds, seed_jobs
from biosig_lightning.cli import main
from biosig_lightning.data.datamodules import SyntheticDataModule
from biosig_lightning.data.splits import SplitConfig, SplitError


def test_a_fold_range_is_bounded_before_it_is_built(in_tmp: Path) -> None:
    assert parse_folds("0-3,7,5") == [0, 1, 2, 3, 5, 7]
    with pytest.raises(SystemExit) as err:  # a typo, not 3e9 folds in memory
        main(["cv", "--config", "overlays/demo.yaml", "--folds", "0-3000000000"])
    message = err.value.code
    assert isinstance(message, str) and message.startswith("biosig cv: error: --folds: '0-3000000000' ")
    assert "\n" not in message and not (in_tmp / "runs").exists()
    for bad in ("3-1", "-1", "a", ","):
        with pytest.raises(SweepError, match="--folds"):
            parse_folds(bad)


def test_each_fold_and_seed_gets_its_own_directory_log_and_placement(tmp_path: Path) -> None:
    out = tmp_path / "cv" / "spd"
    (job,) = fold_jobs(["--config", "x.yaml"], out, [3])
    assert (job.label, job.run_dir, job.log) == ("fold 3", out / "fold_03", out / "fold_03.log")
    assert job.args == ("--config", "x.yaml", f"--{FOLD_KEY}", "3", "--run.save_dir", str(out.parent),
                        "--run.name",
                        "spd", "--run.version", "fold_03", "--run.group", "spd")
    (job,) = seed_jobs(["--config", "x.yaml"], out, [41])
    assert job.run_dir == out / "seed_41" and job.args[2:4] == ("--seed_everything", "41")
    with pytest.raises(SweepError, match="--run.version is set per fold by biosig cv"):
        fold_jobs(["--run.version", "v"], out, [0])


def test_one_fold_key_for_every_corpus_and_the_old_one_still_works(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kfold = SplitConfig(strategy="kfold", n_folds=3, seed=0)
    small = dict(n_subjects=6, windows_per_subject=2, batch_size=4)

    def test_subjects(**kw: object) -> list[int]:
        dm = SyntheticDataModule(**small, **kw)
        dm.setup()
        return dm.subjects["test"]

    for k in range(3):  # data.init_args.fold is the test fold of the split, as split.fold was
        assert test_subjects(split=kfold, fold=k) == test_subjects(
            split=SplitConfig(**{**vars(kfold), "fold": k})
        )
    assert len({tuple(test_subjects(split=kfold, fold=k)) for k in range(3)}) == 3
    with pytest.raises(SplitError, match=r"data.fold=1 needs a loso or kfold split, .* is 'ratio'"):
        test_subjects(split=SplitConfig(strategy="ratio"), fold=1)
    capsys.readouterr()
    assert fold_key(FOLD_KEY) == FOLD_KEY and capsys.readouterr().err == ""
    assert fold_key("data.init_args.split.fold") == "data.init_args.split.fold"
    assert capsys.readouterr().err == ("biosig: deprecated fold key data.init_args.split.fold: use "
                                       "data.init_args.fold "
                                       "(the same test fold of a loso or kfold split)\n")
