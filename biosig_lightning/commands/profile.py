"""``biosig profile --config X.yaml``: size, forward FLOPs and train-step speed of an experiment's model.

Prints one JSON object (docs/architecture.md, "Contracts"): ``params`` (trainable), ``flops_per_sample``
(:func:`~biosig_lightning.profiling.count_forward_flops`), ``train_step_ms`` (median of
``--steps`` timed steps after ``--warmup`` untimed ones), ``samples_per_s``, ``batch_size``, ``device``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import numpy as np
import torch

from biosig_lightning.profiling import count_forward_flops
from biosig_lightning.runs.biosig_cli import BiosigCLI


def profile(argv: list[str]) -> dict[str, Any]:
    """The profile of the experiment ``argv`` configures (``biosig fit`` arguments plus the options above)."""
    ap = argparse.ArgumentParser(prog="biosig profile", add_help=True)
    ap.add_argument("--steps", type=int, default=10, help="timed train steps (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch_size", type=int, default=None, help="default: the config's data batch size")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    own, rest = ap.parse_known_args(argv)
    cli = BiosigCLI(args=rest, run=False, save_config_callback=None)
    model, dm = cli.model, cli.datamodule
    device = torch.device(own.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device)
    dm.setup("fit")
    if own.batch_size:
        dm.batch_size = own.batch_size
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.to(device) for k, v in batch.items()}
    bs = int(batch["y"].shape[0])

    model.eval()
    flops = count_forward_flops(model, batch["x"][:1])

    model.train()
    opt = (
        model.build_optimizer()
        if hasattr(model, "build_optimizer")
        else torch.optim.AdamW(model.parameters())
    )
    times = []
    for i in range(own.warmup + own.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = (
            model.training_loss(batch)[0]
            if hasattr(model, "training_loss")
            else model.training_step(batch, 0)
        )
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= own.warmup:
            times.append(time.perf_counter() - t0)
    step_ms = float(np.median(times) * 1000)
    dev = str(device)
    if device.type == "cuda":
        dev += f" ({torch.cuda.get_device_name(device)})"
    else:
        dev += f" ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {
        "model": type(getattr(model, "backbone", model)).__name__,
        "dataset": getattr(dm, "dataset_name", type(dm).__name__),
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "flops_per_sample": flops,
        "train_step_ms": round(step_ms, 3),
        "samples_per_s": round(bs / (step_ms / 1000), 2),
        "batch_size": bs,
        "device": dev,
    }


def run(argv: list[str]) -> None:
    """Entry point of ``biosig profile`` (argv without the command word)."""
    print(json.dumps(profile(argv), indent=2))
