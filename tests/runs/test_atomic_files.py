"""A full or read-only disk stops a fit in one line and never leaves a torn checkpoint or metrics.csv."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
import torch

from biosig_lightning.atomic_io import StorageError
from biosig_lightning.cli import main
from biosig_lightning.runs import atomic_files
from biosig_lightning.runs.atomic_files import AtomicCheckpointIO
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def _refuse_fsync(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_refused_checkpoint_write_names_the_directory_and_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "epoch": 0}, path)
    _refuse_fsync(monkeypatch, code)
    with pytest.raises(StorageError) as err:
        io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "epoch": 1}, path)
    monkeypatch.undo()
    assert str(err.value).startswith(f"cannot write checkpoint last.ckpt in {path.parent}: "
                                     f"{os.strerror(code)}")
    assert torch.load(path, weights_only=True)["epoch"] == 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temporary file left


def _fail_nth_checkpoint(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    real = atomic_files.atomic_write_bytes
    calls = {"ckpt": 0}

    def write(path: Path, data: bytes) -> Path:
        if Path(path).suffix == ".ckpt":
            calls["ckpt"] += 1
            if calls["ckpt"] >= n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)

    monkeypatch.setattr(atomic_files, "atomic_write_bytes", write)


def test_a_fit_whose_disk_fills_stops_in_one_line(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _fail_nth_checkpoint(monkeypatch, 3)  # epoch 0 writes best and last; epoch 1's first write fails
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--trainer.max_epochs=3", "--trainer.enable_progress_bar=false"])
    message = err.value.code
    assert isinstance(message, str) and "\n" not in message, message
    ckpts = Path("runs/demo/version_0/checkpoints")
    assert (
        message.startswith("biosig fit: error: cannot write checkpoint ")
        and f" in {ckpts}: No space" in message
    )
    assert "resume with --ckpt_path last" in message
    assert "Traceback" not in capsys.readouterr().err
    assert torch.load(ckpts / "last.ckpt", weights_only=True)["epoch"] == 0


def test_metrics_csv_rows_are_written_atomically(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter

    writer = _ExperimentWriter(str(in_tmp / "run"))
    writer.save = atomic_files._save_rows.__get__(writer)
    writer.log_metrics({"loss": 1.0}, step=0)
    writer.save()
    before = (in_tmp / "run" / "metrics.csv").read_bytes()
    writer.log_metrics({"loss": 0.5, "acc": 0.7}, step=1)  # a new key: Lightning rewrites the whole file
    _refuse_fsync(monkeypatch, errno.ENOSPC)
    with pytest.raises(StorageError,
                       match=r"cannot write metrics.csv rows in .*run: No space left on device"):
        writer.save()
    monkeypatch.undo()
    assert (in_tmp / "run" / "metrics.csv").read_bytes() == before
    writer.save()
    assert (in_tmp / "run" / "metrics.csv").read_text().splitlines() == [
        "acc,loss,step",
        ",1.0,0",
        "0.7,0.5,1",
    ]


@pytest.fixture
def small_disk(in_tmp: Path) -> Path:
    """``runs/`` on an 800 KiB tmpfs: room for the demo's first two checkpoints (330 KB each), not a third."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (mount -t tmpfs); the injected-error tests cover the "
                    "rest")
    runs = in_tmp / "runs"
    runs.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(runs)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield runs
    subprocess.run(
        ["umount", "-l", str(runs)], check=False
    )  # lazily: this process may still hold files there


def test_a_full_disk_during_a_fit_leaves_every_checkpoint_loadable(small_disk: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--trainer.max_epochs=4", "--trainer.enable_progress_bar=false"])
    message = err.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert "No space left on device" in message and "runs/demo/version_0/checkpoints" in message, message
    ckpts = sorted((small_disk / "demo" / "version_0" / "checkpoints").iterdir())
    assert ckpts, "no checkpoint was written before the disk filled"
    for path in ckpts:  # never a torn file: each loads, and no temporary file is left behind
        assert path.suffix == ".ckpt", path
        assert "state_dict" in torch.load(path, weights_only=True), path
