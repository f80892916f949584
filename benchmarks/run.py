"""``make bench``: can the window loader keep the model fed?

Runs the loader benchmark (``performance/loader.py``) and the train-step benchmark
(``performance/train_step.py``) in one process on the CPU and reports, besides each figure, the
ratio that matters: windows per second the loader serves over samples per second a baseline trains on. A ratio
well
above 1 means data loading is not the bottleneck. Every number is also compared with a
baseline measured in the same run, because absolute timings depend on the machine and its
load (recorded in the output).

Usage::

    python benchmarks/run.py [--quick] [--out FILE.json] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "performance"))
from loader import bench_loader  # noqa: E402
from train_step import bench_train_steps  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"

#: loader size and warm epochs; train-step batch, warm-up, timed steps (at most; at least min_steps,
#: stopping once budget_s seconds are spent) and whether the ClassificationTask path is timed too
SETTINGS: dict[str, dict[str, Any]] = {
    "full": {"n_subjects": 30, "windows_per_subject": 200, "repeats": 5, "train_batch_size": 64, "warmup": 2,
             "steps": 20, "min_steps": 5, "budget_s": 45.0, "via_task": True},
    # the default Transformer takes seconds per batch-64 step on two busy cores: quick times batch 16
    "quick": {"n_subjects": 10, "windows_per_subject": 100, "repeats": 2, "train_batch_size": 16, "warmup": 1,
              "steps": 2, "min_steps": 2, "budget_s": 10.0, "via_task": False},
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, and how busy it was."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": _loadavg(),
    }


def key_ratios(loader: dict[str, Any], train: dict[str, Any]) -> dict[str, Any]:
    """Loader windows/s over training samples/s, per model, for the cache and the naive loader."""
    cache = loader["warm"]["cache"]["windows_per_s"]
    naive = loader["warm"]["naive_mmap"]["windows_per_s"]
    cold = loader["cold"]["cache_windows_per_s"]
    out = {}
    for name, res in train.items():
        sps = res["bare"]["samples_per_s"]
        out[name] = {"cache_over_train": cache / sps, "cache_cold_over_train": cold / sps,
                     "naive_mmap_over_train": naive / sps}
    return out


def print_report(res: dict[str, Any]) -> None:
    m, ld, tr, kr = res["machine"], res["loader"], res["train_step"], res["key_ratios"]
    cfg = ld["config"]
    print()
    print(f"machine: {m['cpu']}, {m['cpus_usable']}/{m['cpu_count']} CPUs usable, torch {m['torch']} "
          f"({m['torch_threads']} threads)")
    print(f"load average (1/5/15 min): start {m['loadavg_start']}, after the loader "
          f"{m['loadavg_after_loader']}, end {m['loadavg_end']}")
    print(f"\nloader: {cfg['n_subjects']} subjects x {cfg['windows_per_subject']} windows of "
          f"{cfg['n_chans']} x {cfg['n_times']}, {cfg['train_windows_per_epoch']} training windows per "
          f"epoch, "
          f"batch {cfg['batch_size']}, num_workers 0, median of {cfg['repeats']} warm epochs")
    print(f"  {'loader':<20}{'epoch s':>10}{'windows/s':>12}{'x naive':>9}")
    for name, w in ld["warm"].items():
        print(
            f"  {name:<20}{w['epoch_s_median']:>10.3f}{w['windows_per_s']:>12.0f}{w['vs_naive_mmap']:>9.1f}"
        )
    c = ld["cold"]
    print(f"  cache build (first setup, generating the windows): {ld['cache_build_s']:.2f} s")
    print(f"  cold open (load_cache + split):                    {c['open_s'] * 1000:.1f} ms")
    print(f"  cold epoch: cache {c['cache_windows_per_s']:.0f} windows/s, naive_mmap "
          f"{c['naive_mmap_windows_per_s']:.0f} windows/s (resident after eviction: cache "
          f"{_pct(c['cache_resident_after_evict'])}, npy {_pct(c['npy_resident_after_evict'])})")
    first = next(iter(tr.values()))
    print(f"\ntrain step (CPU, batch {res['settings']['train_batch_size']}, forward + cross-entropy + "
          f"backward "
          f"+ AdamW, median of up to {res['settings']['steps']} steps after {first['bare']['warmup']} "
          f"warm-up):")
    print(f"  {'model':<24}{'params':>10}{'path':>6}{'steps':>6}{'ms/step':>10}{'samples/s':>11}")
    for name, r in tr.items():
        for path in ("bare", "task"):
            if path in r:
                p = r[path]
                print(f"  "
                      f"{name:<24}{r['params']:>10,}{path:>6}{p['steps']:>6}{p['ms_per_step_median']:>10.1f}"
                      f"{p['samples_per_s']:>11.1f}")
    print("\nkey figure: loader windows/s over training samples/s (>> 1: the loader is not the bottleneck)")
    print(f"  {'model':<24}{'cache warm':>12}{'cache cold':>12}{'naive_mmap':>12}")
    for name, k in kr.items():
        print(f"  {name:<24}{k['cache_over_train']:>12.1f}{k['cache_cold_over_train']:>12.1f}"
              f"{k['naive_mmap_over_train']:>12.1f}")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, well under a minute")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    s = SETTINGS[mode]
    torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    started = time.perf_counter()
    res: dict[str, Any] = {"mode": mode, "settings": s, "machine": machine_info()}
    res["loader"] = bench_loader(n_subjects=s["n_subjects"], windows_per_subject=s["windows_per_subject"],
                                 batch_size=64, repeats=s["repeats"], log=log)
    res["machine"]["loadavg_after_loader"] = _loadavg()
    res["train_step"] = bench_train_steps(batch_size=s["train_batch_size"], warmup=s["warmup"],
                                          steps=s["steps"], min_steps=s["min_steps"], budget_s=s["budget_s"],
                                          via_task=s["via_task"], log=log)
    res["key_ratios"] = key_ratios(res["loader"], res["train_step"])
    res["machine"]["loadavg_end"] = _loadavg()
    res["wall_s"] = time.perf_counter() - started
    print_report(res)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nresults: {args.out} ({res['wall_s']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
