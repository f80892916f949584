"""Bad input to ``biosig`` ends in one line that names the file or key, never in a traceback."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from biosig_lightning.cli import main
from biosig_lightning.data.cache import CacheError, load_cache, load_or_build
from biosig_lightning.data.spec import CorpusSpec, WindowBlock
from biosig_lightning.models.baselines import TransformerClassifier
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def _one_line(err: pytest.ExceptionInfo[SystemExit], command: str = "fit") -> str:
    message = err.value.code
    assert isinstance(message, str), f"exit code {message!r} instead of a message"
    assert message.startswith(f"biosig {command}: error: ") and "\n" not in message, message
    assert "Traceback" not in message and "weights_only=False" not in message
    return message


@pytest.mark.parametrize(("split", "expected"), [
    ('{"strategy": "loso", "fold": -1}', "loso fold -1 must be >= 0"),
    ('{"strategy": "kfold", "fold": 5, "n_folds": 5}', "fold 5"),
    ('{"strategy": "ratio", "ratios": [0.5, 0.2, 0.2]}', "sum"),
])
def test_invalid_split_is_one_line_naming_the_key(in_tmp: Path, split: str, expected: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--data.init_args.split", split])
    message = _one_line(err)
    assert message.startswith("biosig fit: error: data.init_args.split: ") and expected in message, message


@pytest.mark.parametrize(("key", "value"), [
    ("data.init_args.batch_size", "0"),
    ("data.init_args.batch_size", "-4"),
    ("data.init_args.eval_batch_size", "0"),
    ("data.init_args.num_workers", "-1"),
    ("trainer.max_epochs", "0"),
    ("trainer.max_epochs", "-2"),
])
def test_non_positive_sizes_are_one_line_naming_the_key(in_tmp: Path, key: str, value: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, f"--{key}", value])
    assert f"error: {key} must be" in _one_line(err) and f"got {value}" in str(err.value)
    assert not Path("runs").exists()


def test_malformed_yaml_names_the_config_file_and_line(in_tmp: Path) -> None:
    bad = in_tmp / "override.yaml"
    bad.write_text("trainer:\n  max_epochs: 2\n  limit_train_batches: [1, 2\n")
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--config", str(bad)])
    message = _one_line(err)
    assert f"--config {bad}: malformed YAML at line 4" in message, message


def _another_models_checkpoint(path: Path) -> Path:
    # a Lightning checkpoint whose weights belong to a TransformerClassifier, not the demo's CNN1D
    backbone = TransformerClassifier(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0, d_model=8, n_layers=1,
                                     n_heads=2, d_ff=16)
    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    torch.save({"state_dict": state, "epoch": 0, "global_step": 1,
                "pytorch-lightning_version": "2.6.0"}, path)
    return path


@pytest.mark.parametrize("command", ["test", "validate"])
@pytest.mark.parametrize("kind", ["missing", "random bytes", "text", "another model"])
def test_bad_checkpoint_is_one_line_naming_the_file(in_tmp: Path, command: str, kind: str) -> None:
    path = in_tmp / "model.ckpt"
    if kind == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "text":
        path.write_text("these are not the weights you are looking for\n")
    elif kind == "another model":
        _another_models_checkpoint(path)
    with pytest.raises(SystemExit) as err:
        main([command, *DEMO, "--ckpt_path", str(path)])
    message = _one_line(err, command)
    assert f"--ckpt_path {path}: " in message
    expected = {"missing": "no such file", "random bytes": "not a checkpoint", "text": "not a checkpoint",
                "another model": "trained for another model"}[kind]
    assert expected in message, message
    # nothing is left behind by a command that never started
    assert not any(Path("runs").rglob("version_*")) if Path("runs").exists() else True


SPEC = CorpusSpec(name="tiny", ch_names=("C3", "C4"), sfreq=10.0, n_times=5, classes=("a", "b"))


class TinyReader:
    spec = SPEC

    def config(self) -> dict:
        return {"reader": "tiny"}

    def iter_blocks(self):
        x = np.zeros((4, 2, 5), dtype=np.float32)
        yield WindowBlock(subject=1, recording="r1", x=x, y=np.array([0, 1, 0, 1]), start=np.arange(4.0))


def test_corrupt_cache_message_gives_the_cli_flag(tmp_path: Path) -> None:
    cache = load_or_build(TinyReader(), tmp_path, progress=False)
    signals = cache.dir / "signals.bin"
    signals.write_bytes(signals.read_bytes()[:-4])
    del cache
    with pytest.raises(CacheError) as err:
        load_cache(next(tmp_path.glob("tiny-*")))
    assert "--data.init_args.rebuild_cache true" in str(err.value)
    assert os.path.basename(str(signals)) in str(err.value)


def test_an_accelerator_this_machine_lacks_is_one_line(in_tmp: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--trainer.accelerator", "gpu"])
    message = _one_line(err)
    assert (
        message.startswith("biosig fit: error: trainer.accelerator: ")
        and "--trainer.accelerator auto or cpu" in message
    )


def test_a_read_only_run_directory_is_one_line_naming_it(in_tmp: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real_mkdir = os.mkdir

    def read_only(path: object, *args: object, **kwargs: object) -> None:
        if "runs" in str(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO])
    message = _one_line(err)
    assert message.startswith("biosig fit: error: cannot write the run directory in runs/demo: Read-only "
                              "file system; ")


def test_a_read_only_disk_under_the_runs_is_one_line(in_tmp: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root; the injected-error test covers the rest")
    runs = in_tmp / "runs"
    runs.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(runs)],
                          capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        with pytest.raises(SystemExit) as err:
            main(["fit", *DEMO])
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)
    assert "cannot write the run directory in runs/demo: Read-only file system" in _one_line(err)
