"""Signed-graph denoiser pair against braindecode's EEGNet / Deep4Net, and Lanczos against dense eigh filtering.

Yao et al. (App. I, Table 10) compare training and inference time with EEGNet, FBCSPNet and Deep4Net.
Everything here is a ratio against a baseline timed in the same run, the runs of the models interleaved
repeat by repeat so that a busy machine slows all of them alike:

1. **Throughput** on the windows and batch of ``experiments/signed_graph_turkish.yaml`` (35 channels x
   6000 samples, batch 8; the pair built from that YAML's backbone arguments, 2 x 14,787 parameters,
   ``filter_method: auto``, and the same pair forced to ``filter_method: lanczos``):
   windows/s of a training step and of inference.
   * the pair: a training step is the contrastive denoising loss of eq. 23 (both denoisers on the noisy
     batch) + backward + Adam, with class polarities fitted beforehand (as the task does at every epoch
     start); inference is the eq. 22 classification of the batch (both denoisers);
   * braindecode's ``EEGNetv4`` and ``Deep4Net``: cross-entropy + backward + Adam; inference = forward.
2. **Peak memory** of a training step: each model in its own process; the growth of the process's
   peak resident set (``VmHWM``, reset first) over two training steps, above what model, optimiser and
   batch hold.
3. **Filter**: ``lanczos_filter`` on the edge-stored Laplacian (``krylov_dim = 20``, three-term recurrence,
   as the model runs it) against ``exact_filter`` (dense ``eigh``, eq. 12) on a balanced product graph of
   ``N = 35 x H`` nodes as the sequence length ``H`` grows, ``6000 / H`` samples per node, forward +
   backward of the filtered signal's energy (as in training), their relative difference, both filters'
   flop counts (``signed_graph.filter_flops``) and the filter ``auto`` picks.
4. **Flops per window** (torch's ``FlopCounterMode``: matrix products and convolutions; the pair's
   eigendecompositions added from the flop model) and a **profile** of the pair's training step and
   inference batch, self CPU time grouped by stage (CNN, eigendecompositions, matrix products, the rest).

Usage::

    python benchmarks/performance/signed_graph.py                # writes benchmarks/results/signed_graph.json
    python benchmarks/performance/signed_graph.py --quick        # 1500-sample windows, fewer repeats, no file unless --out
    python benchmarks/performance/signed_graph.py --threads 2 --out /tmp/sg.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml

from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.features import product_graph as pg
from biosig_lightning.features import signed_graph as sg
from biosig_lightning.models.signed_graph import SignedGraphClassifier
from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "experiments" / "signed_graph_turkish.yaml"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "signed_graph.json"
#: the pair as its YAML builds it (``filter_method: auto``), the same pair forced to Lanczos, and the baselines
PAIR, PAIR_LANCZOS = "SignedGraphClassifier", "SignedGraphClassifier[lanczos]"
MODELS = (PAIR, PAIR_LANCZOS, "EEGNetv4", "Deep4Net")
BASELINES = ("EEGNetv4", "Deep4Net")


def paper_config() -> tuple[dict[str, Any], int]:
    """The pair's backbone arguments and the batch size of ``experiments/signed_graph_turkish.yaml``."""
    cfg = yaml.safe_load(YAML.read_text())
    return dict(cfg["model"]["init_args"]["backbone"]["init_args"]), int(cfg["data"]["init_args"]["batch_size"])


def build(name: str, n_chans: int, n_times: int, sfreq: float, x: torch.Tensor, y: torch.Tensor
          ) -> tuple[Callable[[], None], Callable[[], None], int]:
    """``(train_step, infer, n_params)`` of one model on the batch ``x``, ``y``."""
    torch.manual_seed(0)
    if name in (PAIR, PAIR_LANCZOS):
        kwargs, _ = paper_config()
        if name == PAIR_LANCZOS:
            kwargs["filter_method"] = "lanczos"
        model = SignedGraphClassifier(n_chans, 2, n_times, sfreq, **kwargs)
        task = DenoiserPairTask(model, n_outputs=2, optimizer="adam", weight_decay=0.0, scheduler="none")
        model.fit_polarity(x, y)  # the task does this at every epoch start
        opt = torch.optim.Adam(model.parameters(), 1e-3)

        def train_step() -> None:
            model.train()
            opt.zero_grad(set_to_none=True)
            loss, _, _ = task.denoising_loss(x, y, torch.randn_like(x))
            loss.backward()
            opt.step()
        net: torch.nn.Module = model
    else:
        from braindecode.models import Deep4Net

        from biosig_lightning.models.braindecode_names import braindecode_model

        EEGNetv4 = braindecode_model("EEGNetv4")  # braindecode 1.x: EEGNet
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls = {"EEGNetv4": EEGNetv4, "Deep4Net": Deep4Net}[name]
            net = cls(n_chans=n_chans, n_outputs=2, n_times=n_times, sfreq=sfreq)
        opt = torch.optim.Adam(net.parameters(), 1e-3)

        def train_step() -> None:
            net.train()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()

    def infer() -> None:
        net.eval()
        with torch.no_grad():
            net(x)

    return train_step, infer, sum(p.numel() for p in net.parameters() if p.requires_grad)


def _interleaved(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, one warm-up each, repeats interleaved across functions."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _batch(n_chans: int, n_times: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, n_chans, n_times, generator=g), torch.arange(batch) % 2


def throughput(n_chans: int, n_times: int, sfreq: float, batch: int, repeats: int) -> dict[str, Any]:
    x, y = _batch(n_chans, n_times, batch)
    built = {name: build(name, n_chans, n_times, sfreq, x, y) for name in MODELS}
    train = _interleaved({k: v[0] for k, v in built.items()}, repeats)
    infer = _interleaved({k: v[1] for k, v in built.items()}, repeats)
    out: dict[str, Any] = {name: {"params": built[name][2], "train_windows_per_s": batch / train[name],
                                  "infer_windows_per_s": batch / infer[name]} for name in MODELS}
    ratios = {}
    for mine, tag in ((PAIR, "ours"), (PAIR_LANCZOS, "ours_lanczos")):
        for name in BASELINES:
            for kind in ("train", "infer"):
                ratios[f"{kind}_{tag}_over_{name}"] = (out[mine][f"{kind}_windows_per_s"]
                                                       / out[name][f"{kind}_windows_per_s"])
    out["ratios"] = ratios
    return out


#: aten operators grouped into the pair's stages for the profile breakdown
STAGES = {
    "cnn (conv, batch norm, LeakyReLU, pool)": ("conv", "batch_norm", "leaky_relu", "adaptive_avg_pool"),
    "eigendecompositions (N x N dense or m x m tridiagonal)": ("eigh",),
    "matrix products (filter g(L) y, Lanczos L v, signal gaps, distances)": ("bmm", "mm", "matmul", "baddbmm",
                                                                              "addmm", "linalg_vecdot"),
}


def profile_breakdown(n_chans: int, n_times: int, sfreq: float, batch: int) -> dict[str, Any]:
    """Self CPU time of one training step and one inference batch of the pair, grouped by stage (fractions)."""
    from torch.profiler import ProfilerActivity, profile

    x, y = _batch(n_chans, n_times, batch)
    out: dict[str, Any] = {}
    for name in (PAIR, PAIR_LANCZOS):
        train_step, infer, _ = build(name, n_chans, n_times, sfreq, x, y)
        for kind, fn in (("train", train_step), ("infer", infer)):
            fn()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            groups = dict.fromkeys([*STAGES, "elementwise and other"], 0.0)
            for ev in prof.key_averages():
                key = next((g for g, pats in STAGES.items() if any(p in ev.key for p in pats)),
                           "elementwise and other")
                groups[key] += ev.self_cpu_time_total
            total = sum(groups.values())
            out[f"{name} {kind}"] = {k: round(v / total, 3) for k, v in groups.items()}
            print(f"  profile {name} {kind}: {out[f'{name} {kind}']}", flush=True)
    return out


def flops_per_window(n_chans: int, n_times: int, sfreq: float, batch: int) -> dict[str, Any]:
    """Counted matrix-product and convolution flops per window (torch's FlopCounterMode) of inference and a
    training step; the pair's eigendecompositions, which the counter skips, are added from
    ``signed_graph.filter_flops``'s model (9 n^3 per n x n decomposition). Elementwise work is not counted."""
    from torch.utils.flop_counter import FlopCounterMode

    x, y = _batch(n_chans, n_times, batch)
    kwargs, _ = paper_config()
    h, blocks = int(kwargs["n_chunks"]), int(kwargs["n_blocks"])
    m, d = int(kwargs["krylov_dim"]), n_times // int(kwargs["n_chunks"])
    out: dict[str, Any] = {}
    for name in MODELS:
        train_step, infer, _ = build(name, n_chans, n_times, sfreq, x, y)
        row = {}
        for kind, fn in (("infer", infer), ("train", train_step)):
            with FlopCounterMode(display=False) as counter:
                fn()
            row[f"{kind}_counted_gflop_per_window"] = counter.get_total_flops() / batch / 1e9
        if name in (PAIR, PAIR_LANCZOS):
            method = "lanczos" if name == PAIR_LANCZOS else sg.choose_filter(n_chans, h, d, m)
            n = n_chans * h
            eig = sg.EIGH_FLOPS_PER_N3 * (n ** 3 if method == "exact" else d * min(m, n) ** 3)
            row["filter"] = method
            row["eigh_gflop_per_window_infer"] = 2 * blocks * eig / 1e9  # two denoisers
            row["filter_model_gflop_per_window_infer"] = 2 * blocks * sg.filter_flops(n_chans, h, d, m)[method] / 1e9
        out[name] = row
        print(f"  flops {name}: {row}", flush=True)
    return out


def _status_mib(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process in MiB (``ru_maxrss`` would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def probe_memory(name: str, n_chans: int, n_times: int, sfreq: float, batch: int) -> dict[str, float]:
    """Peak resident-set growth (MiB) of two training steps of ``name``, in this process (Linux)."""
    x, y = _batch(n_chans, n_times, batch)
    train_step, _, _ = build(name, n_chans, n_times, sfreq, x, y)
    before = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current resident set
    for _ in range(2):
        train_step()
    peak = _status_mib("VmHWM")
    return {"step_peak_growth_mib": peak - before, "process_peak_mib": peak}


def memory(n_chans: int, n_times: int, sfreq: float, batch: int, threads: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in MODELS:
        cmd = [sys.executable, __file__, "--probe-memory", name, "--threads", str(threads),
               "--n-times", str(n_times), "--batch", str(batch)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
    rows["ratios"] = {f"step_memory_{tag}_over_{n}": rows[mine]["step_peak_growth_mib"]
                      / max(rows[n]["step_peak_growth_mib"], 1e-9)
                      for mine, tag in ((PAIR, "ours"), (PAIR_LANCZOS, "ours_lanczos")) for n in BASELINES}
    return rows


def _graph(n_chans: int, h: int, batch: int, seed: int) -> pg.ProductLaplacian:
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(batch, h, n_chans, 16, generator=g)
    mask = ~torch.eye(n_chans, dtype=torch.bool)
    ds, dt = pg.normalise_edge_distances(*pg.edge_distances(f, "euclidean"), mask)
    beta = torch.where(torch.rand(batch, n_chans, generator=g) < 0.5, -1.0, 1.0)
    ws, wt = pg.edge_weights(ds, dt, mask, "balanced", beta)
    lap, _ = pg.edge_laplacian(*pg.normalize_edge_weights(ws, wt)).gershgorin_shift()
    return lap.similarity_transform(beta)


def filter_scaling(n_chans: int, n_times: int, chunks: list[int], krylov_dim: int, batch: int,
                   repeats: int) -> list[dict[str, float]]:
    rows = []
    for h in chunks:
        lap = _graph(n_chans, h, batch, h)
        y = torch.randn(batch, n_chans * h, n_times // h, generator=torch.Generator().manual_seed(h))

        def run(method: str, lap: pg.ProductLaplacian = lap, y: torch.Tensor = y) -> None:
            parts = [t.clone().requires_grad_(True) for t in (lap.diag, lap.spatial, lap.temporal)]
            op = pg.ProductLaplacian(*parts)
            omega = torch.tensor(1.0, requires_grad=True)
            if method == "lanczos":
                out = sg.lanczos_filter(op, y, omega, krylov_dim, reorth_passes=0)
            else:
                out = sg.exact_filter(op.dense(), y, omega)
            out.square().sum().backward()

        t = _interleaved({"lanczos": lambda: run("lanczos"), "eigh": lambda: run("exact")}, repeats)
        with torch.no_grad():
            ref = sg.exact_filter(lap.dense(), y, 1.0)
            err = float((sg.lanczos_filter(lap, y, 1.0, krylov_dim, reorth_passes=0) - ref).norm() / ref.norm())
        flops = sg.filter_flops(n_chans, h, n_times // h, krylov_dim)
        rows.append({"H": h, "N": n_chans * h, "D": n_times // h, "lanczos_ms": 1e3 * t["lanczos"],
                     "eigh_ms": 1e3 * t["eigh"], "speedup_lanczos_over_eigh": t["eigh"] / t["lanczos"],
                     "relative_difference": err, "model_gflop_lanczos": flops["lanczos"] / 1e9,
                     "model_gflop_eigh": flops["exact"] / 1e9,
                     "auto_chooses": sg.choose_filter(n_chans, h, n_times // h, krylov_dim)})
        print(f"  filter {rows[-1]}", flush=True)
    return rows


def machine(threads: int) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": threads, "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true", help="only the filter scaling")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help=f"results JSON (default {DEFAULT_OUT})")
    parser.add_argument("--chunks", type=str, default=None, help="comma-separated H of the filter table")
    parser.add_argument("--note", type=str, default="", help="appended to the results file's note")
    parser.add_argument("--probe-memory", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--n-times", type=int, default=6000, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    _, yaml_batch = paper_config()
    batch = args.batch or yaml_batch
    if args.probe_memory:
        print(json.dumps(probe_memory(args.probe_memory, 35, args.n_times, 500.0, batch)))
        return
    n_times = 1500 if args.quick else args.n_times
    repeats = args.repeats or (2 if args.quick else 3)
    out = args.out or (None if args.quick else DEFAULT_OUT)
    started = time.time()
    result: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/performance/signed_graph.py", *(sys.argv[1:] if argv is None else argv)]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(args.threads), "loadavg_start": os.getloadavg(),
        "note": "ratios from runs interleaved in one process on a machine shared with other jobs; "
                "absolute timings are not claims" + (f"; {args.note}" if args.note else ""),
        "windows": {"n_chans": 35, "n_times": n_times, "batch": batch, "config": str(YAML.relative_to(ROOT))},
    }
    result["complete"] = False  # the file is rewritten after every section; true once all are in

    def save() -> None:
        if out is not None:
            atomic_write_json(out, result)

    print(f"Lanczos (m = 20, edges) vs dense eigh, forward + backward, batch {batch}:", flush=True)
    chunks = ([int(c) for c in args.chunks.split(",")] if args.chunks
              else [1, 2, 6, 10] if args.quick else [1, 2, 3, 6, 10, 20])
    result["filter"] = filter_scaling(35, n_times, chunks, 20, batch, repeats)
    save()
    if not args.skip_throughput:
        print("peak memory of a training step (one process per model) ...", flush=True)
        result["memory"] = memory(35, n_times, 500.0, batch, args.threads)
        print(json.dumps(result["memory"], indent=1), flush=True)
        save()
        print("throughput ...", flush=True)
        result["throughput"] = throughput(35, n_times, 500.0, batch, repeats)
        for name in MODELS:
            row = result["throughput"][name]
            print(f"  {name:32s} params {row['params']:>8,d}  train {row['train_windows_per_s']:8.2f}  "
                  f"infer {row['infer_windows_per_s']:8.2f} windows/s")
        for key, value in result["throughput"]["ratios"].items():
            print(f"  {key:40s} {value:6.3f}")
        save()
        print("flops per window ...", flush=True)
        result["flops"] = flops_per_window(35, n_times, 500.0, batch)
        save()
        print("profile of the pair ...", flush=True)
        result["profile"] = profile_breakdown(35, n_times, 500.0, batch)
    result["loadavg_end"] = os.getloadavg()
    result["wall_s"] = time.time() - started
    result["complete"] = True
    for row in result["filter"]:
        print(f"  H {row['H']:3d}  N {row['N']:4d}  D {row['D']:5d}  eigh/lanczos {row['speedup_lanczos_over_eigh']:6.2f}"
              f"  rel.diff {row['relative_difference']:.1e}")
    save()
    if out is not None:
        print(f"results: {out}")


if __name__ == "__main__":
    main()
