"""Whole-training-step gain of each SPDTransNet CPU kernel over the plain layer: the keep-or-delete test.

Each variant is the plain layer (torch modules, ``F.linear``, torch-RNG dropout, unpadded heads, SP-MHA
recomputed in backward by torch ops) with one kernel switched on; ``all`` is every kernel together (that
tree's CPU default). One process; every round runs one training step of each variant in turn (the
order rotated each round), so load from other processes falls on all of them alike; round 0 is warm-up
(numba compilation, allocator, caches), then ``--rounds`` rounds, medians reported.

It measures the tree that still held every kernel, commit b0bf872 (the kernels that did not pay were
deleted after this measurement, so they exist only there); run it from an export of that commit:

    git archive b0bf872 biosig_lightning | tar -x -C /tmp/pre && cp
    benchmarks/performance/spdtransnet_kernel_gains.py /tmp/pre/
    cd /tmp/pre && python spdtransnet_kernel_gains.py --rounds 3 --out step_gains.json

The kept ones (padded heads, numba map kernels) now live in :mod:`biosig_lightning.accel.spdtransnet`;
``--backend`` measures them there, on the current tree (the plain model against the same model switched
to the backend, alternated step by step):

    python benchmarks/performance/spdtransnet_kernel_gains.py --backend --rounds 3 --out backend_gain.json
Results: ``benchmarks/results/spdtransnet_kernels.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

VARIANTS = ["plain", "dropout", "aligned_linear", "feed_forward", "head_pad", "map_kernels", "all"]


def _torch_apply_drop(x, p, seed, stream=0, scale=1.0, out=None):  # noqa: ANN001, ANN202
    gen = torch.Generator(device=x.device).manual_seed((seed + 0x9E3779B97F4A7C15 * stream) % 2**63)
    drop = torch.rand(x.shape, generator=gen, device=x.device) < p
    out = x if out is None else out
    return torch.mul(x.masked_fill(drop, 0.0), scale, out=out)


class Switch:
    """Sets the tree's CPU path to one variant (and back), by replacing module attributes."""

    def __init__(self) -> None:
        from biosig_lightning.models.spdtransnet import attention, kernels, map_kernels
        self.attention, self.kernels, self.map_kernels = attention, kernels, map_kernels
        self.orig = dict(numba=map_kernels._numba, apply_drop=kernels.apply_drop, linear=kernels.linear,
                         layer=attention.SPEncoderLayer.forward, mha=attention.SPMultiheadAttention.forward)

    def set(self, on: str) -> None:
        k, att, o = self.kernels, self.attention, self.orig
        self.map_kernels._numba = o["numba"]
        k.apply_drop, k.linear = o["apply_drop"], o["linear"]
        att.SPEncoderLayer.forward, att.SPMultiheadAttention.forward = o["layer"], o["mha"]
        if on == "all":
            return
        if on != "map_kernels":
            self.map_kernels._numba = None
        if on not in ("dropout", "map_kernels"):
            k.apply_drop = _torch_apply_drop  # SP-MHA's torch path then draws its map masks with torch's RNG
        lin = o["linear"] if on == "aligned_linear" else (lambda x, w, b=None: F.linear(x, w, b))
        k.linear = lin  # what attention._project calls (q and k maps)
        drop = k.dropout if on == "dropout" else (lambda x, p, train: F.dropout(x, p, train))

        def layer_forward(self, x, factors=None):  # noqa: ANN001, ANN202
            x = self.norm1(x + drop(self.attn(x, factors), self.drop1.p, self.training))
            lin1, _, d, lin2 = self.ff
            if on == "feed_forward":
                h = k.feed_forward(x, lin1, lin2, d.p, self.training)
            else:
                h = lin(
                    drop(torch.relu(lin(x, lin1.weight, lin1.bias)), d.p, self.training),
                    lin2.weight,
                    lin2.bias,
                )
            return self.norm2(x + drop(h, self.drop2.p, self.training))

        pad = on == "head_pad"

        def mha_forward(self, x, factors=None):  # noqa: ANN001, ANN202
            dh = x.shape[-1] // self.heads
            q, k_ = self._qk_heads(x, -(-dh // 8) * 8 if pad else dh, factors)
            p = self.dropout if self.training else 0.0
            return k.SPAttention.apply(q, k_, x.contiguous(), self.weights(), p,
                                       k.draw_seed() if p > 0 else 0)

        att.SPEncoderLayer.forward, att.SPMultiheadAttention.forward = layer_forward, mha_forward


class BackendSwitch:
    """``--backend``: the current tree's plain model against the same model switched to the CPU backend
    (:func:`biosig_lightning.accel.enable_spdtransnet_cpu`), by turning its SP-MHA modules' class back and
    forth."""

    variants = ("plain", "cpu_backend")

    def __init__(self, model: torch.nn.Module) -> None:
        from biosig_lightning import accel
        from biosig_lightning.accel import spdtransnet as cpu
        from biosig_lightning.models.spdtransnet import SPMultiheadAttention

        accel.enable_spdtransnet_cpu(model)
        self.modules = [m for m in model.modules() if isinstance(m, SPMultiheadAttention)]
        self.classes = {"plain": SPMultiheadAttention, "cpu_backend": cpu.CPUSPMultiheadAttention}

    def set(self, on: str) -> None:
        for m in self.modules:
            m.__class__ = self.classes[on]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="store_true",
                    help="current tree: plain model against the CPU backend (accel.enable_spdtransnet_cpu)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--context", type=int, default=3)
    ap.add_argument("--intra-layers", type=int, default=2)
    ap.add_argument("--inter-layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = dict(d_model=351, tokens_per_epoch=10, intra_heads=9, intra_layers=a.intra_layers, inter_heads=3,
               inter_layers=a.inter_layers, d_ff=1035, fc_width=1035, dropout=0.1, pe="learnable")
    from biosig_lightning.models.spdtransnet import SPDTransNet
    torch.manual_seed(0)
    model = SPDTransNet(n_chans=a.context * 210, n_outputs=5, n_times=45, sfreq=256.0, **cfg)
    sw = BackendSwitch(model) if a.backend else Switch()
    variants = list(BackendSwitch.variants) if a.backend else VARIANTS
    x = torch.randn(a.batch, a.context * 210, 45)
    y = torch.randint(0, 5, (a.batch,))
    opt = torch.optim.Adam(model.parameters(), lr=5.8e-5, eps=1e-7, weight_decay=1e-5)
    rows: dict[str, list] = {v: [] for v in variants}
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for r in range(a.rounds + 1):  # round 0: warm-up (numba compile, allocator, caches)
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            sw.set(v)
            load = open("/proc/loadavg").read().split()[0]
            t, c = time.perf_counter(), time.process_time()
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            print(r, v, f"{wall:.3f}s wall {cpu:.3f}s cpu load {load}", flush=True)
            if r > 0:
                rows[v].append({"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "load1": float(load)})
    med = {v: float(np.median([s["wall_s"] for s in rows[v]])) for v in variants}
    med_cpu = {v: float(np.median([s["cpu_s"] for s in rows[v]])) for v in variants}
    out = {"command": " ".join(["python", *sys.argv]), "started_utc": started,
           "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()}: {platform.processor() or platform.machine()}, "
                      f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores, "
                      f"shared",
           "torch": torch.__version__,
           "config": {**cfg, "batch": a.batch, "context_L": a.context,
                      "threads": a.threads, "rounds": a.rounds},
           "median_step_wall_s": med, "median_step_cpu_s": med_cpu,
           "gain_over_plain_wall": {v: round(med["plain"] / med[v], 3) for v in variants},
           "gain_over_plain_cpu": {v: round(med_cpu["plain"] / med_cpu[v], 3) for v in variants},
           "steps": rows}
    print(json.dumps({k: out[k] for k in ("gain_over_plain_wall", "gain_over_plain_cpu")}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
