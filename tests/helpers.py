"""Callbacks the end-to-end tests inject with ``--trainer.callbacks+=tests.helpers.X``."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class RecordRank(Callback):
    """Writes, per rank, a hash of the final weights and the window indices it trained on."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        self.seen.extend(batch["index"].tolist())

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        digest = hashlib.sha256()
        for name, tensor in sorted(pl_module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        out = Path(trainer.log_dir) / f"rank{trainer.global_rank}.json"
        out.write_text(json.dumps({"weights": digest.hexdigest(), "seen": self.seen,
                                   "world_size": trainer.world_size}))


class InterruptAfterEpoch(Callback):
    """Simulates a crash (Ctrl-C) once epoch ``epoch`` has finished and been checkpointed."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == self.epoch + 1:
            raise KeyboardInterrupt


def state_hash(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class RecordEpochs(Callback):
    """Writes the epochs in which this process ran training batches (a resumed run continues the count)."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if trainer.current_epoch not in self.epochs:
            self.epochs.append(trainer.current_epoch)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        (Path(trainer.log_dir) / "epochs_trained.json").write_text(json.dumps(self.epochs))


def read_wandb_offline(path: Path) -> dict[str, Any]:
    """Decode an offline ``run-*.wandb`` file: run name/group, config, history rows and final summary.

    The file is a LevelDB-style log (32 KiB blocks, 7-byte chunk headers: crc, length, type) of
    protobuf ``Record`` messages after a 7-byte ``:W&B`` header; wandb 0.2x+ ships no Python reader.
    """
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a wandb run file"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    out: dict[str, Any] = {"history": [], "summary": {}, "config": {}, "name": None, "group": None,
                           "finished": False}

    def items(seq: Any) -> dict[str, Any]:
        return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in seq}

    for data in records:
        rec = pb.Record()
        rec.ParseFromString(data)
        which = rec.WhichOneof("record_type")
        if which == "run":
            out["name"], out["group"] = rec.run.display_name, rec.run.run_group
            out["config"].update(items(rec.run.config.update))
        elif which == "config":
            out["config"].update(items(rec.config.update))
        elif which == "history":
            out["history"].append(items(rec.history.item))
        elif which == "summary":
            out["summary"].update(items(rec.summary.update))
        elif which == "exit":
            out["finished"] = True
    return out


def wait_for_wandb_run(path: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Read an offline run once wandb's background service has written its exit record."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        run = read_wandb_offline(path)
        if run["finished"] or time.monotonic() > deadline:
            assert run["finished"], f"{path}: wandb never wrote the run's exit record"
            return run
        time.sleep(0.2)


class RecordCsvOnDisk(Callback):
    """Writes, per epoch, the epochs whose validation rows ``metrics.csv`` already holds on disk
    when that epoch's first batch starts (what a crash at that moment would leave behind)."""

    def __init__(self) -> None:
        self.on_disk: dict[int, list[int]] = {}

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if batch_idx == 0:
            self.on_disk[trainer.current_epoch] = csv_val_epochs(Path(trainer.log_dir) / "metrics.csv")

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        (Path(trainer.log_dir) / "csv_on_disk.json").write_text(json.dumps(self.on_disk))


def csv_val_epochs(path: Path) -> list[int]:
    """Sorted epochs that have a ``val/loss`` row in the CSV logger file ``path`` (none if absent)."""
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return sorted({int(float(r["epoch"])) for r in csv.DictReader(fh) if r.get("val/loss")})


class WaitForPeers(Callback):
    """Holds a process's first fit until ``count`` processes have reached one (a barrier on files in
    ``directory``), so a test of cooperating workers does not depend on which one started faster."""

    def __init__(self, directory: str, count: int = 2, timeout: float = 120.0) -> None:
        self.directory, self.count, self.timeout = Path(directory), count, timeout

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / str(os.getpid())).touch()
        deadline = time.monotonic() + self.timeout
        while len(list(self.directory.iterdir())) < self.count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"WaitForPeers: fewer than {self.count} processes in {self.directory}")
            time.sleep(0.2)
