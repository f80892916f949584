"""Argument parsing shared by the analysis commands that reopen one finished run (``fbd``, ``probe``)."""

from __future__ import annotations

import argparse

from biosig_lightning.analysis.fbd import SPLIT_CHOICES


def run_dir_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A parser with the arguments every single-run analysis starts with: ``RUN_DIR``, ``--split``,
    ``--out``; its description is the first paragraph of ``doc``."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished `biosig fit` run directory (holds results.json)")
    parser.add_argument("--split", default="test", choices=SPLIT_CHOICES)
    parser.add_argument("--out", default=None, help="output directory (default RUN_DIR/analysis)")
    return parser


def add_loading_options(parser: argparse.ArgumentParser,
                        batch_help: str | None = None, device: bool = True) -> None:
    """``--checkpoint``, ``--batch-size`` (feature extraction) and ``--device``: how the run is reopened
    (``device=False``: the caller adds ``--device`` itself, after options of its own)."""
    parser.add_argument("--checkpoint", default="best", help="best, last or a checkpoint path")
    parser.add_argument("--batch-size", type=int, default=256, help=batch_help)
    if device:
        parser.add_argument("--device", default="auto")
