"""Bad inputs a ``biosig`` command refuses in one line naming the culprit: a checkpoint's hyperparameter
the model lost, a seed out of range, a cache path that is a file, float16 asked for on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml"),
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1",
        "--trainer.limit_test_batches=1", "--trainer.logger.init_args.name=demo"]


def _no_run(root: Path) -> bool:
    return not list((root / "runs").glob("*/version_*"))


def test_a_checkpoint_is_read_once_and_a_hyperparameter_the_model_lost_is_named(
        in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    main(["fit", *DEMO, "--test_after_fit=false"])
    results = json.loads(
        Path(capsys.readouterr().out.strip().splitlines()[-1].split("results: ", 1)[1]).read_text()
    )
    ckpt = Path(results["best_checkpoint"])
    loads: list[object] = []
    real_load = torch.load

    def counting(f: object, *args: object, **kwargs: object) -> object:
        loads.append(f)
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    main(["test", *DEMO, "--ckpt_path", str(ckpt)])
    assert len(loads) == 1, loads  # our checked read; LightningCLI's hyperparameters and the trainer reuse it
    monkeypatch.setattr(torch, "load", real_load)

    state = torch.load(ckpt, weights_only=True)
    state["hyper_parameters"]["no_longer_taken"] = 3
    old = in_tmp / "old.ckpt"
    torch.save(state, old)
    with pytest.raises(SystemExit) as err:
        main(["test", *DEMO, "--ckpt_path", str(old)])
    assert str(err.value) == (f"biosig test: error: --ckpt_path {old}: its saved hyperparameter "
                              f"'no_longer_taken' is "
                              "not an argument of biosig_lightning.tasks.ClassificationTask in this version "
                              "(the "
                              "checkpoint was saved by another version of the model)")


@pytest.mark.parametrize("seed", ["4294967296", "-1"])
def test_a_seed_out_of_range_is_one_line(in_tmp: Path, seed: str) -> None:
    with pytest.raises(SystemExit,
                       match=rf"^biosig fit: error: seed_everything must be an integer in 0..4294967295 "
                                         rf".*got {seed}$"):
        main(["fit", *DEMO, f"--seed_everything={seed}"])
    assert _no_run(in_tmp)


def test_a_cache_path_that_is_a_file_is_one_line(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = in_tmp / "cache-file"
    cache.write_text("not a directory")
    monkeypatch.setenv("BIOSIG_CACHE", str(cache / "sub"))
    with pytest.raises(SystemExit,
                       match=rf"^biosig fit: error: window cache {cache}/sub: {cache} is a file, not a "
                                         r"directory \(it lies below"):
        main(["fit", *DEMO])
    assert _no_run(in_tmp)


def test_float16_on_a_cpu_is_refused_rather_than_recorded_as_what_did_not_run(in_tmp: Path) -> None:
    with pytest.raises(SystemExit,
                       match=r"^biosig fit: error: trainer.precision: 16-mixed asked for, but on cpu "
                                         r"Lightning runs bf16-mixed"):
        main(["fit", *DEMO, "--trainer.accelerator=cpu", "--trainer.precision=16-mixed"])
    assert _no_run(in_tmp)
