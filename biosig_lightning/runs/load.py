"""Reopen a finished run: its task with trained weights and its DataModule, from the run directory.

Analysis commands (band discriminability, subject probes, learned graphs, transfer) start from a
run directory that ``biosig fit`` wrote. Everything needed is already there: ``results.json``
holds the full resolved config and the best checkpoint's path, so this module rebuilds exactly
the model and data of that run (same split, same normalisation) without re-reading YAML files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule

from biosig_lightning.runs.biosig_cli import BiosigCLI
from biosig_lightning.runs.checks import check_checkpoint_size


class RunError(ValueError):
    """A run directory that cannot be reopened (one line, names the path)."""


@dataclass
class LoadedRun:
    """A reopened run: ``task`` (eval mode, weights loaded), its ``datamodule`` (not set up yet),
    the parsed ``results.json`` and the checkpoint that was loaded."""

    task: LightningModule
    datamodule: LightningDataModule
    results: dict[str, Any]
    run_dir: Path
    checkpoint: Path


def read_results(run_dir: str | Path) -> dict[str, Any]:
    """``results.json`` of a run directory, with a clear error when it is missing or broken."""
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise RunError(f"{path}: no results.json (is {run_dir} a finished `biosig fit` run directory?)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunError(f"{path}: not valid JSON ({err})") from err


def resolve_checkpoint(run_dir: Path, results: dict[str, Any], checkpoint: str) -> Path:
    """``best`` (results.json's best checkpoint), ``last`` or an explicit path."""
    if checkpoint == "best":
        best = results.get("best_checkpoint")
        if not best:
            raise RunError(f"{run_dir}/results.json: no best_checkpoint recorded")
        path = Path(best)
        if not path.is_file():
            # runs are often moved or copied: fall back to the same file name below the run directory
            local = run_dir / "checkpoints" / path.name
            path = local if local.is_file() else path
    elif checkpoint == "last":
        path = run_dir / "checkpoints" / "last.ckpt"
    else:
        path = Path(checkpoint)
    if not path.is_file():
        raise RunError(f"checkpoint {path} not found (run {run_dir}, checkpoint={checkpoint!r})")
    return path


def load_run(run_dir: str | Path, checkpoint: str = "best",
             overrides: dict[str, Any] | None = None) -> LoadedRun:
    """Rebuild the task and DataModule of ``run_dir`` and load a checkpoint (``weights_only=True``).

    ``overrides`` are merged into the saved ``data.init_args`` (for example ``{"root": ...}`` when
    the corpus moved, or ``{"num_workers": 0}``); the model config is never changed, so the weights
    always fit.
    """
    run_dir = Path(run_dir)
    results = read_results(run_dir)
    config = results.get("config") or {}
    if "model" not in config or "data" not in config:
        raise RunError(f"{run_dir}/results.json: its config has no model/data section")
    data = json.loads(json.dumps(config["data"]))
    if overrides:
        data.setdefault("init_args", {}).update(overrides)
    args = {"model": config["model"], "data": data, "seed_everything": config.get("seed_everything", 42),
            "trainer": {"logger": False, "enable_checkpointing": False}}
    cli = BiosigCLI(args=args, run=False, save_config_callback=None)
    ckpt = resolve_checkpoint(run_dir, results, checkpoint)
    check_checkpoint_size(ckpt)
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    try:
        cli.model.load_state_dict(state["state_dict"])
    except (KeyError, RuntimeError) as err:
        raise RunError(f"{ckpt}: weights do not match the run's model config ({err})") from err
    cli.model.eval()
    return LoadedRun(task=cli.model, datamodule=cli.datamodule, results=results,
                     run_dir=run_dir, checkpoint=ckpt)
