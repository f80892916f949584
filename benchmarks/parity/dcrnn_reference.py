"""DCRNN: ours vs the reference implementation (tsy935/eeg-gnn-ssl), same weights, same inputs, one run.

Loads the reference's ``model/model.py`` from a local copy (path given on the command line; nothing
here needs it otherwise), copies our weights into it (``dconv_gate``/``dconv_candidate`` <- our
``gate_*``/``cand_*``, ``head.fc`` <- ``fc``; the reference detects with one logit, ours returns
``(0, z)``), checks that logits and every parameter gradient agree, then times a training step
(forward, backward, clipping at 5, Adam) of both, taking turns, batch 32 of 12-s 19 x 100 FFT clips.

Both get the same supports: the distance graph's scaled Laplacian (ours computed from the 10-20
sphere), or, for the correlation graph, the per-clip dual random walk supports; the reference
receives them precomputed (its data loader builds them, not timed here), ours builds them inside
forward (timed), so the comparison is conservative for us.

    python benchmarks/parity/dcrnn_reference.py --reference /path/to/eeg-gnn-ssl [--graph both] [--steps 20]

The reference imports sklearn, scipy, h5py, pandas, pyedflib, matplotlib and tqdm at module level.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from biosig_lightning.models.dcrnn import DCRNN
from biosig_lightning.models.modules.channel_graphs import correlation_adjacency, dual_random_walk


def reference_model(path: Path, graph: str) -> Any:
    sys.path.insert(0, str(path))
    from model.model import DCRNNModel_classification  # the reference's own module

    args = SimpleNamespace(num_nodes=19, num_rnn_layers=2, rnn_units=64, input_dim=100, max_diffusion_step=2,
                           dcgru_activation="tanh", dropout=0.0,
                           filter_type="laplacian" if graph == "distance" else "dual_random_walk")
    return DCRNNModel_classification(args, num_classes=1, device="cpu")


def copy_weights(ours: DCRNN, ref: Any) -> None:
    with torch.no_grad():
        for cell, rcell in zip(ours.cells, ref.encoder.encoding_cells, strict=True):
            rcell.dconv_gate.weight.copy_(cell.gate_weight)
            rcell.dconv_gate.biases.copy_(cell.gate_bias)
            rcell.dconv_candidate.weight.copy_(cell.cand_weight)
            rcell.dconv_candidate.biases.copy_(cell.cand_bias)
        ref.fc.weight.copy_(ours.head.fc.weight)
        ref.fc.bias.copy_(ours.head.fc.bias)


def pairs(ours: DCRNN, ref: Any) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    out = []
    for i, (cell, rcell) in enumerate(zip(ours.cells, ref.encoder.encoding_cells, strict=True)):
        out += [(f"l{i}.gate_w", cell.gate_weight, rcell.dconv_gate.weight),
                (f"l{i}.gate_b", cell.gate_bias, rcell.dconv_gate.biases),
                (f"l{i}.cand_w", cell.cand_weight, rcell.dconv_candidate.weight),
                (f"l{i}.cand_b", cell.cand_bias, rcell.dconv_candidate.biases)]
    return out + [("fc_w", ours.head.fc.weight, ref.fc.weight), ("fc_b", ours.head.fc.bias, ref.fc.bias)]


def compare(path: Path, graph: str, batch: int, steps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    ours = DCRNN(19, 2, 1200, 200.0, step_bins=100, graph=graph)  # type: ignore[arg-type]
    ref = reference_model(path, graph)
    copy_weights(ours, ref)
    n_ours = sum(p.numel() for p in ours.parameters())
    n_ref = sum(p.numel() for p in ref.parameters())
    x_ref = torch.randn(batch, 12, 19, 100)  # (B, T, N, F) as the reference's loader gives it
    x = x_ref.permute(0, 2, 1, 3).reshape(batch, 19, 1200)
    y = (torch.rand(batch) < 0.5).float()
    lengths = torch.full((batch,), 12, dtype=torch.long)

    def ref_supports() -> list[torch.Tensor]:
        return (
            ours.graph_supports(x) if graph == "distance" else dual_random_walk(correlation_adjacency(x, 3))
        )

    supports = ref_supports()
    lo, lr_ = ours(x)[:, 1], ref(x_ref, lengths, supports)[:, 0]
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    bce(lo, y).backward()
    bce(lr_, y).backward()
    grad_err = max(float((a.grad - b.grad).abs().max() / (b.grad.abs().max() + 1e-12))
                   for _, a, b in pairs(ours, ref))
    logit_err = float((lo - lr_).abs().max())

    def step_fn(model: Any, opt: torch.optim.Optimizer, call: Any) -> float:
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = bce(call(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return time.perf_counter() - t0

    opt_o = torch.optim.Adam(ours.parameters(), lr=1e-4, weight_decay=5e-4)
    opt_r = torch.optim.Adam(ref.parameters(), lr=1e-4, weight_decay=5e-4)
    times_o, times_r = [], []
    for i in range(steps + 2):  # taking turns; the first two are warm-up
        to = step_fn(ours, opt_o, lambda: ours(x)[:, 1])
        tr = step_fn(ref, opt_r, lambda: ref(x_ref, lengths, supports)[:, 0])
        if i >= 2:
            times_o.append(to)
            times_r.append(tr)
    med_o, med_r = statistics.median(times_o), statistics.median(times_r)
    return {"graph": graph, "params_ours": n_ours, "params_reference": n_ref, "max_abs_logit_diff": logit_err,
            "max_rel_grad_diff": grad_err, "ours_s_per_step": round(med_o, 4),
            "reference_s_per_step": round(med_r, 4), "speedup": round(med_r / med_o, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="local copy of tsy935/eeg-gnn-ssl")
    parser.add_argument("--graph", choices=("distance", "correlation", "both"), default="both")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.reference / "model" / "model.py").is_file():
        raise SystemExit(f"{args.reference} is not an eeg-gnn-ssl checkout (no model/model.py)")
    torch.set_num_threads(args.threads)
    graphs = ("distance", "correlation") if args.graph == "both" else (args.graph,)
    report = {"threads": args.threads, "batch": args.batch, "load_average": os.getloadavg(),
              "results": [compare(args.reference, g, args.batch, args.steps) for g in graphs]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
