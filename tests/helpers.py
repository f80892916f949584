"""Callbacks the end-to-end tests inject with ``--trainer.callbacks+=tests.helpers.X``, and checks they
share."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class RecordRank(Callback):
    """Writes, per rank, a hash of the final weights and the window indices it trained on."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_batch_start(self, trainer: Trainer,
                             pl_module: LightningModule, batch, batch_idx: int) -> None:
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

    def on_train_batch_start(self, trainer: Trainer,
                             pl_module: LightningModule, batch, batch_idx: int) -> None:
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

    from google.protobuf.message import DecodeError
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
        if pos + 7 + length > len(raw):  # the service is still writing this chunk: read it next time
            break
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
        try:
            rec.ParseFromString(data)
        except DecodeError:  # a record torn by a concurrent write; a finished run has none
            out["torn"] = True
            continue
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
        done = run["finished"] and not run.get("torn")
        if done or time.monotonic() > deadline:
            assert done, f"{path}: wandb never wrote the run's exit record (or left a torn record)"
            return run
        time.sleep(0.2)


class RecordCsvOnDisk(Callback):
    """Writes, per epoch, the epochs whose validation rows ``metrics.csv`` already holds on disk
    when that epoch's first batch starts (what a crash at that moment would leave behind)."""

    def __init__(self) -> None:
        self.on_disk: dict[int, list[int]] = {}

    def on_train_batch_start(self, trainer: Trainer,
                             pl_module: LightningModule, batch, batch_idx: int) -> None:
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


def _ece_numpy(probs: Any, y: Any, n_bins: int = 15) -> float:
    """Top-label L1 ECE (Guo et al. 2017, eq. 3), right-closed bins ((m-1)/M, m/M], written
    independently of ``biosig_lightning.metrics`` so a regression there shows up here."""
    import numpy as np

    conf = probs.astype(np.float32).max(1).astype(np.float64)
    hit = (probs.argmax(1) == y).astype(np.float64)
    total = 0.0
    for m in range(1, n_bins + 1):
        lo, hi = (m - 1) / n_bins, m / n_bins
        inside = (conf > lo) & (conf <= hi) if m > 1 else conf <= hi
        if inside.any():
            total += inside.sum() / len(y) * abs(hit[inside].mean() - conf[inside].mean())
    return float(total)


def metrics_from_predictions(probs: Any, y: Any) -> dict[str, float]:
    """The eight test metrics (and, for two classes, sensitivity, specificity and G-mean) recomputed with
    scikit-learn from saved probabilities and targets,
    following the definitions of ``biosig_lightning.metrics`` (absent classes left out of the
    AUROC/AUPRC means)."""
    import numpy as np
    from sklearn import metrics as skm

    k = probs.shape[1]
    pred = probs.argmax(1)
    out = {
        "test/acc": skm.accuracy_score(y, pred),
        "test/precision": skm.precision_score(y, pred, average="macro", zero_division=0),
        "test/recall": skm.recall_score(y, pred, average="macro", zero_division=0),
        "test/f1": skm.f1_score(y, pred, average="macro", zero_division=0),
        "test/ece": _ece_numpy(probs, y),
    }
    with np.errstate(all="ignore"):
        out["test/kappa"] = (float("nan") if len(set(y.tolist()) | set(pred.tolist())) == 1
                             else skm.cohen_kappa_score(y, pred))
    onehot = np.eye(k)[y]
    auroc = [
        skm.roc_auc_score(onehot[:, c], probs[:, c]) for c in range(k) if 0 < onehot[:, c].sum() < len(y)
    ]
    auprc = [
        skm.average_precision_score(onehot[:, c], probs[:, c]) for c in range(k) if onehot[:, c].sum() > 0
    ]
    out["test/auroc"] = float(np.mean(auroc)) if auroc else float("nan")
    out["test/auprc"] = float(np.mean(auprc)) if auprc else float("nan")
    if k == 2:  # class 1 positive; a rate whose class has no target is undefined
        sens = skm.recall_score(y, pred, pos_label=1, zero_division=0) if (y == 1).any() else float("nan")
        spec = skm.recall_score(y, pred, pos_label=0, zero_division=0) if (y == 0).any() else float("nan")
        out |= {"test/sensitivity": sens, "test/specificity": spec, "test/gmean": float(np.sqrt(sens * spec))}
    return {key: float(v) for key, v in out.items()}


def assert_metrics_match_predictions(results_path: str | Path, *, tested: int | None = None,
                                     tol: float = 1e-4) -> dict[str, Any]:
    """Check a run's ``results.json`` (``results_path``: the file or its run directory): its logged test
    metrics and confusion matrix equal what
    scikit-learn computes from the run's ``test_predictions.npz`` (probs, y) to ``tol``.

    ``tested`` (optional) is the number of windows that must have been scored. Returns the parsed
    results. A task that logs metrics of other windows than it saved, averages wrongly, or writes
    a confusion matrix of other predictions fails here; a range check ``0 <= f1 <= 1`` would not.
    """
    import math

    import numpy as np

    results_path = Path(results_path)
    if results_path.is_dir():
        results_path = results_path / "results.json"
    res = json.loads(results_path.read_text())
    npz = results_path.parent / "test_predictions.npz"
    assert npz.is_file(), f"{npz}: the run saved no test predictions"
    with np.load(npz, allow_pickle=False) as z:
        probs, y = z["probs"].astype(np.float64), z["y"].astype(np.int64)
    assert probs.ndim == 2 and len(y) == len(probs) > 0
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-4)
    if tested is not None:
        assert len(y) == tested, (len(y), tested)
    expect = metrics_from_predictions(probs, y)
    got = res["metrics"]
    assert {"test/acc", "test/f1"} <= got.keys(), got
    for key, want in expect.items():
        if key not in got:
            continue
        have = got[key]
        if have is None or (isinstance(have, float) and math.isnan(have)):
            assert math.isnan(want), (key, have, want)
        else:
            assert have == pytest.approx(want, abs=tol), (key, have, want)
    k = probs.shape[1]
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (y, probs.argmax(1)), 1)
    if "confusion_matrix" in res:
        assert res["confusion_matrix"] == cm.tolist()
    return res



def printed_metrics(text: str, stage: str) -> dict[str, float]:
    """``{"<stage>/<name>": value}`` from the metric table Lightning prints after ``test``/``validate``."""
    import re

    rows = re.findall(rf"^\s*({stage}/\w+)\s+(\S+)\s*$", text, flags=re.M)
    assert rows, f"no {stage}/* metric table in the output:\n{text[-2000:]}"
    return {k: float(v) for k, v in rows}


def val_row_of_epoch(metrics_csv: Path, epoch: int) -> dict[str, float]:
    """The ``val/*`` values the CSV logger wrote for ``epoch`` (one row holds them)."""
    with Path(metrics_csv).open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("val/loss") and int(float(r["epoch"])) == epoch]
    assert len(rows) == 1, (metrics_csv, epoch, len(rows))
    return {k: float(v) for k, v in rows[0].items() if k.startswith("val/") and v != ""}


#: CHB-MIT's 23 bipolar channel labels as its EDFs name them, and the 12 ECG leads (montage graph tests)
CHB_MIT = [
    "FP1-F7",
    "F7-T7",
    "T7-P7",
    "P7-O1",
    "FP1-F3",
    "F3-C3",
    "C3-P3",
    "P3-O1",
    "FP2-F4",
    "F4-C4",
    "C4-P4",
    "P4-O2",
    "FP2-F8",
    "F8-T8",
    "T8-P8-0",
    "P8-O2",
    "FZ-CZ",
    "CZ-PZ",
    "P7-T7",
    "T7-FT9",
    "FT9-FT10",
    "FT10-T8",
    "T8-P8-1",
]
ECG = ["I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6"]


class PauseForKill(Callback):
    """When ``BIOSIG_TEST_PAUSE`` names a file: at the start of epoch ``epoch`` of the run seeded
    ``seed`` (the epoch before is checkpointed), touch that file and sleep, so a test can kill -9
    the process mid-run. Without the variable it does nothing (the rerun that resumes)."""

    def __init__(self, seed: int, epoch: int = 1, seconds: float = 120.0) -> None:
        self.seed, self.epoch, self.seconds = seed, epoch, seconds

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        marker = os.environ.get("BIOSIG_TEST_PAUSE")
        if (
            marker
            and trainer.current_epoch == self.epoch
            and os.environ.get("PL_GLOBAL_SEED") == str(self.seed)
        ):
            Path(marker).touch()
            time.sleep(self.seconds)


class SigtermAtEpoch(Callback):
    """Sends this process SIGTERM (a scheduler's preemption) at the start of epoch ``epoch``."""

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(scope="module")
def one_torch_thread() -> Any:
    """One torch intra-op thread for a module of small-model fits: on a shared 2-core machine a second
    thread only adds contention. A module takes it with ``from tests.helpers import one_torch_thread`` and
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
