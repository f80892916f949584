"""Train-step cost of the reproduced papers' models and their baselines, at the papers' shapes.

For each experiment YAML (on its synthetic stand-in, which has the real corpus's channels, rate and
window) this runs ``biosig profile``: trainable parameters, forward FLOPs per sample (torch's flop
counter), and the median wall time of a full training step (forward with the recipe's loss,
backward, optimiser step) at the given batch size. The issues ask for:

* BioFormer vs the vanilla Transformer (and Medformer) at APAVA's shape, batch 32, 2 CPU threads;
* SD-Former and its four baselines at the Sleep-EDF and CHB-MIT shapes, batch 64, 2 CPU threads,
  plus two shares of SD-Former's step: edge scoring (the edge MLP over all node pairs, forward +
  backward, timed alone on the same node embeddings) and the gate gradient (what the graph's
  straight-through gradient adds to the six graph-masked attentions: each layer's attention,
  forward + backward, with a gate that requires a gradient minus the same attention with a
  constant gate, which runs the fused kernel; timed alone on the layer's own q, k, v and gate).

Timings depend on the machine and its load; compare rows of one run, not runs of two machines.

Usage::

    python benchmarks/performance/paper_models.py [--only bioformer|sdformer] [--no-baselines] [--steps 5]
    [--threads 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from biosig_lightning.commands.profile import profile
from biosig_lightning.runs.biosig_cli import BiosigCLI

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments"
SYNTHETIC = ["--config", str(EXP / "overlays" / "synthetic.yaml")]

BIOFORMER_CASES = [
    ("BioFormer", "apava", [EXP / "bioformer_apava.yaml"]),
    ("Transformer", "apava", [EXP / "bioformer_apava.yaml", EXP / "bioformer/baselines/transformer.yaml"]),
    ("Medformer", "apava", [EXP / "bioformer_apava.yaml", EXP / "bioformer/baselines/medformer.yaml"]),
]
SDFORMER_CASES = [
    (name, corpus,
     [EXP / (f"sdformer_{corpus}.yaml" if name == "SDFormer" else f"sdformer/{name}_{corpus}.yaml")])
    for corpus in ("sleepedf", "chbmit")
    for name in ("SDFormer", "patchtst", "transformer", "static_gnn", "cnn1d")
]


def _args(configs: list[Path]) -> list[str]:
    out: list[str] = []
    for cfg in configs:
        out += ["--config", str(cfg)]
    return out + SYNTHETIC + ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]


def edge_share(configs: list[Path], batch_size: int, steps: int) -> dict[str, Any]:
    """Forward+backward time of SD-Former's edge MLP alone, on node embeddings of a real batch."""
    cli = BiosigCLI(args=_args(configs), run=False, save_config_callback=None)
    model = cli.model.backbone
    dm = cli.datamodule
    dm.setup("fit")
    dm.batch_size = batch_size
    x = next(iter(dm.train_dataloader()))["x"]
    with torch.no_grad():
        tokens, _ = model.tokenizer(x)
        nodes = model.inferencer.norm(model.inferencer.encoder(model._graph_nodes(tokens)))
    edges = model.inferencer.edges
    times = []
    for i in range(steps + 2):
        h = nodes.detach().clone().requires_grad_(True)
        t0 = time.perf_counter()
        edges(h).sum().backward()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return {"edge_ms": round(statistics.median(times) * 1000, 3), "nodes": int(nodes.shape[1]),
            **gate_gradient_cost(model, x, steps)}


def gate_gradient_cost(model: torch.nn.Module, x: torch.Tensor, steps: int) -> dict[str, Any]:
    """Extra ms per train step for the gate gradient of SD-Former's masked attentions (see the module
    docstring).

    Whatever ``masked_attention`` does with a learning gate (the zero-valued bridge term before,
    one fused autograd function now) is compared with itself on a constant gate, so the figure
    holds for either implementation.
    """
    import biosig_lightning.models.sdformer.model as sdformer

    real = sdformer.masked_attention
    captured: list[tuple[torch.Tensor, ...]] = []

    def capture(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                gate: torch.Tensor | None = None) -> torch.Tensor:
        if gate is not None:
            captured.append(tuple(t.detach().clone() for t in (q, k, v, gate)))
        return real(q, k, v, gate)

    sdformer.masked_attention = capture
    try:
        model.train()
        with torch.no_grad():
            model.forward_with_aux(x)
    finally:
        sdformer.masked_attention = real

    upstream = [torch.randn_like(q) for q, *_ in captured]  # a dense output gradient, as in training

    def attention_ms(learning: bool) -> float:
        times = []
        for i in range(steps + 2):
            total = 0.0
            for (q, k, v, gate), up in zip(captured, upstream, strict=True):
                q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
                g = gate.clone().requires_grad_(learning)
                t0 = time.perf_counter()
                (real(q, k, v, g) * up).sum().backward()
                total += time.perf_counter() - t0
            if i >= 2:
                times.append(total)
        return statistics.median(times) * 1000

    # interleaved, so load changes on a shared machine hit both sides alike
    learning, constant = [], []
    for _ in range(3):
        learning.append(attention_ms(True))
        constant.append(attention_ms(False))
    learning_ms, constant_ms = statistics.median(learning), statistics.median(constant)
    return {"attention_ms": round(constant_ms, 3), "attention_gate_grad_ms": round(learning_ms, 3),
            "gate_grad_ms": round(learning_ms - constant_ms, 3), "layers": len(captured)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("bioformer", "sdformer"), default=None)
    ap.add_argument("--no-baselines", action="store_true", help="SD-Former itself, not its four baselines")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "paper_models.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    cases: list[tuple[str, str, list[Path], int]] = []
    if args.only in (None, "bioformer"):
        cases += [(n, c, cfg, 32) for n, c, cfg in BIOFORMER_CASES]
    if args.only in (None, "sdformer"):
        cases += [(n, c, cfg, 64) for n, c, cfg in SDFORMER_CASES if n == "SDFormer" or not args.no_baselines]
    rows = []
    for name, corpus, configs, batch in cases:
        res = profile([*_args(configs), "--batch_size", str(batch), "--steps", str(args.steps), "--warmup",
                       "2",
                       "--device", "cpu"])
        row = {"model": name, "corpus": corpus, "batch": batch, "params": res["params"],
               "gflops_per_sample": round(res["flops_per_sample"] / 1e9, 4), "step_ms": res["train_step_ms"],
               "samples_per_s": res["samples_per_s"]}
        if name == "SDFormer":
            share = edge_share(configs, batch, args.steps)
            row.update(share, edge_share=round(share["edge_ms"] / res["train_step_ms"], 4),
                       gate_grad_share=round(share["gate_grad_ms"] / res["train_step_ms"], 4))
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                       "torch": torch.__version__}, "loadavg_start": load_start,
           "loadavg_end": os.getloadavg(),
           "rows": rows}
    args.out.write_text(json.dumps(out, indent=2))
    print("\n| model | corpus | batch | params | GFLOP/sample | step ms | samples/s "
          "|\n|---|---|---|---|---|---|---|")
    for r in rows:
        extra = (f" (edge scoring {100 * r['edge_share']:.1f} %, gate gradient "
                 f"{100 * r['gate_grad_share']:.1f} %)"
                 if "edge_share" in r else "")
        print(f"| {r['model']} | {r['corpus']} | {r['batch']} | {r['params']:,} | {r['gflops_per_sample']} | "
              f"{r['step_ms']:.0f}{extra} | {r['samples_per_s']:.1f} |")


if __name__ == "__main__":
    main()
