"""``biosig transfer --source RUN_DIR --target-config Y.yaml``: linear probe of a run's frozen backbone on
another corpus; the method and its montage/shape rule are in :mod:`biosig_lightning.analysis.transfer`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from biosig_lightning.analysis.transfer import ProbeSettings, transfer
from biosig_lightning.metrics import METRIC_KEYS


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        prog="biosig transfer", allow_abbrev=False,
        description="freeze a run's backbone and fit a linear probe on another dataset (SD-Former Table 3)")
    ap.add_argument("--source", required=True, type=Path, help="finished `biosig fit` run directory")
    ap.add_argument("--target-config", required=True, type=Path,
                    help="YAML whose data section is the target dataset")
    ap.add_argument("--config", action="append", default=[], type=Path,
                    help="more YAML overriding the target data (repeatable, e.g. "
                         "experiments/overlays/synthetic.yaml)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default: SOURCE/transfer/<target dataset>)")
    ap.add_argument("--checkpoint", default="best", help="best, last or a checkpoint path of the source run")
    defaults = ProbeSettings()
    ap.add_argument("--epochs", type=int, default=defaults.epochs, help="maximum probe epochs")
    ap.add_argument("--lr", type=float, default=defaults.lr)
    ap.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    ap.add_argument("--patience", type=int, default=defaults.patience,
                    help="early-stopping patience (epochs)")
    ap.add_argument("--batch-size", type=int, default=defaults.batch_size,
                    help="probe and feature batch size")
    ap.add_argument("--monitor", default=defaults.monitor, choices=("loss", *METRIC_KEYS),
                    help="validation quantity for early stopping (loss and ece are minimised)")
    ap.add_argument("--class-weight", default=defaults.class_weight, choices=("none", "balanced"))
    ap.add_argument("--seed", type=int, default=None, help="probe seed (default: the source run's seed)")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    own, rest = ap.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith("-") and not a.startswith("--data.")]
    if unknown:
        ap.error(f"unrecognized arguments: {' '.join(unknown)} (only --data.* overrides pass through)")
    for name in ("epochs", "patience", "batch_size"):
        if getattr(own, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    return own, rest


def _print_table(report: dict[str, Any]) -> None:
    title = (f"transfer: {report['source']['model']} {report['source']['dataset']} -> "
             f"{report['target']['dataset']} (linear probe, seed {report['probe']['seed']})")
    print(title)
    print("-" * len(title))
    for key in (f"test/{k}" for k in (*METRIC_KEYS, "loss")):
        if key in report["metrics"]:
            value = report["metrics"][key]
            print(f"  {key.split('/', 1)[1]:<10} {'nan' if value is None else f'{value:.4f}'}")


def run(argv: list[str]) -> None:
    """Entry point of ``biosig transfer`` (argv without the command word)."""
    args, overrides = _parse(argv)
    settings = ProbeSettings(lr=args.lr, weight_decay=args.weight_decay, epochs=args.epochs,
                             patience=args.patience, batch_size=args.batch_size, monitor=args.monitor,
                             class_weight=args.class_weight, seed=args.seed)
    result = transfer(args.source, [args.target_config, *args.config], overrides=overrides, out=args.out,
                      checkpoint=args.checkpoint, settings=settings, device=args.device)
    _print_table(result.report)
    print(f"transfer: {result.path}", flush=True)
