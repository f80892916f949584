"""``biosig graphs RUN_DIR...``: SD-Former's learned graphs per class, their stability across runs and, on a
stand-in with a planted graph, how well they recover it (:mod:`biosig_lightning.analysis.graphs`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

from biosig_lightning.analysis.graphs import (
    SPLITS,
    ClassGraphs,
    run_graphs,
    safe_name,
    stability,
    write_run_outputs,
)
from biosig_lightning.atomic_io import atomic_write_json


def _print_run(summary: dict[str, Any]) -> None:
    title = (f"graphs: {summary.get('model')} on {summary.get('dataset')} (seed {summary.get('seed')}, "
             f"{summary['split']}, {len(summary['node_names'])} {summary['nodes']} nodes)")
    print(title)
    print("-" * len(title))
    print(f"  {'class':<14} {'windows':>8} {'density':>8} {'acyclic':>8} {'edges>0.5':>10}")
    for cls, row in summary["classes"].items():
        dens = "-" if row["edge_density"] is None else f"{row['edge_density']:.4f}"
        acyc = "-" if row["acyclic_fraction"] is None else f"{row['acyclic_fraction']:.3f}"
        print(f"  {cls:<14} {row['n_windows']:>8} {dens:>8} {acyc:>8} {row['edges_above_threshold']:>10}")


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print_recovery(summary: dict[str, Any]) -> None:
    """The planted-edge recovery table (analysis.graphs.edge_recovery) beside a random graph of equal
    density."""
    recovery = summary.get("recovery")
    if not recovery:
        return
    title = "planted-edge recovery (all windows; random: a graph with as many edges, expected / one drawn)"
    print(title)
    print("-" * len(title))
    print(f"  {'':<9} {'planted':>7} {'pairs':>6} {'edges':>6}  {'':<9} {'precision':>9} {'recall':>7} "
          f"{'top-k':>6} {'auroc':>6}")
    for view in ("directed", "skeleton"):
        row = recovery[view]
        for i, (label, key) in enumerate((("learned", "learned"), ("random", "random_expected"),
                                          ("  drawn", "random_drawn"))):
            r = row[key]
            lead = (
                f"  {view:<9} {row['planted']:>7} {row['pairs']:>6} {row['edges']:>6}" if i == 0 else " " * 33
            )
            print(f"{lead}  {label:<9} {_cell(r['precision']):>9} {_cell(r['recall']):>7} "
                  f"{_cell(r['top_k_precision']):>6} {_cell(r['auroc']):>6}")


def _print_stability(report: dict[str, Any]) -> None:
    title = f"graph stability over {len(report['runs'])} runs ({len(report['pairs'])} pairs)"
    print(title)
    print("-" * len(title))
    print(f"  {'class':<14} {'jaccard':>16} {'pearson':>16} {'density':>9}")

    def cell(s: dict[str, Any]) -> str:
        return "-" if s["mean"] is None else f"{s['mean']:.3f} ± {s['std']:.3f}"

    for cls, row in report["classes"].items():
        density = "-" if row["density"]["mean"] is None else f"{row['density']['mean']:.4f}"
        flag = "  DEGENERATE" if row["degenerate"] else ""
        print(f"  {cls:<14} {cell(row['jaccard']):>16} {cell(row['pearson']):>16} {density:>9}{flag}")
    for warning in report["warnings"]:
        print(f"biosig graphs: warning: {warning}", file=sys.stderr)


def _labels(run_dirs: list[Path]) -> tuple[Path, list[str]]:
    """Common parent of the runs and one unique, file-name-safe label per run."""
    resolved = [p.resolve() for p in run_dirs]
    parent = Path(os.path.commonpath(resolved))
    if len(set(resolved)) == 1:
        parent = parent.parent
    labels: list[str] = []
    for i, p in enumerate(resolved):
        label = safe_name(str(p.relative_to(parent)).replace(os.sep, "_"))
        labels.append(label if label not in labels else f"{label}-{i}")
    return parent, labels


def run(argv: list[str]) -> None:
    """Entry point of ``biosig graphs`` (argv without the command word)."""
    ap = argparse.ArgumentParser(prog="biosig graphs", allow_abbrev=False,
                                 description="per-class learned SD-Former graphs and their stability over "
                                             "seeds")
    ap.add_argument("run_dirs", nargs="+", type=Path,
                    help="finished `biosig fit` run directories (SD-Former)")
    ap.add_argument("--split", default="test", choices=SPLITS, help="windows to average over")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default: RUN_DIR/graphs for one run, <common parent>/graphs for "
                         "several)")
    ap.add_argument("--checkpoint", default="best", help="best, last or a checkpoint path")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--top-edges", type=int, default=20, help="edges listed and drawn per class")
    ap.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    args = ap.parse_args(argv)
    if args.batch_size < 1 or args.top_edges < 0:
        ap.error("--batch-size must be >= 1 and --top-edges >= 0")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    several = len(args.run_dirs) > 1
    parent, labels = _labels(args.run_dirs)
    out = args.out or (parent / "graphs" if several else args.run_dirs[0] / "graphs")
    collected: list[ClassGraphs] = []
    for run_dir, label in zip(args.run_dirs, labels, strict=True):
        graphs, meta = run_graphs(run_dir, args.split, args.checkpoint, args.batch_size, device)
        summary = write_run_outputs(graphs, meta, out / label if several else out, not args.no_figures,
                                    args.top_edges)
        _print_run(summary)
        _print_recovery(summary)
        print(f"graphs: {summary['npz']}", flush=True)
        collected.append(graphs)
    if several:
        report = {"split": args.split, "run_dirs": [str(p) for p in args.run_dirs],
                  **stability(collected, labels)}
        path = atomic_write_json(out / "stability.json", report)
        _print_stability(report)
        print(f"stability: {path}", flush=True)
