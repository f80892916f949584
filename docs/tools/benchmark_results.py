"""Turn the benchmarks' own result files (``benchmarks/results/*.json``) into docs result files.

Each benchmark script writes its raw measurements to ``benchmarks/results/NAME.json``; this script
reads them and writes ``perf_<name>.json`` under ``docs/results/`` in the docs' result format (title, machine,
dates, command, items), shown on the Performance page. Run it after re-running a benchmark::

    python docs/tools/benchmark_results.py

Only numbers read from those files appear in the output; nothing is typed here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "benchmarks" / "results"
DST = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))


def _f(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def gpu_steps(d: dict[str, Any]) -> dict[str, Any]:
    m = d["meta"]
    rows = []
    for r in d["models"]:
        if "error" in r:
            rows.append([r["model"], "error", r["error"], "", "", "", "", "", ""])
            continue
        f32, bf = r["float32"], r["bf16-mixed"]
        rows.append([r["model"], r["batch"], _f(f32["step_ms"], 1), _f(f32["samples_per_s"], 1),
                     _f(f32["peak_mib"], 0), _f(bf["step_ms"], 1), _f(f32["step_ms"] / bf["step_ms"]),
                     r["max_batch"], _f(r["loader"]["windows_per_s"] / f32["samples_per_s"], 0)])
    return {
        "title": f"Paper models' training step on one {m['device']}",
        "machine": f"{m['device']}, torch {m['torch']}, Python {m['python']}",
        "dates": [m["date"][:10]],
        "command": m["command"],
        "page": "performance",
        "items": [
            {"text": "Each paper model at its YAML's batch on the YAML's stand-in: median of the timed "
                     "training "
                     "steps (the recipe's loss, backward, clip, optimiser; STDRO with its input ascent), "
                     "peak "
                     "allocated memory, the largest batch that fits (doubling, float32, capped), and how "
                     "many "
                     "times faster the DataModule's loader serves windows than the float32 step consumes "
                     "them."},
            {"table": {"columns": ["model", "batch", "float32 ms/step", "float32 samples/s",
                                   "float32 peak MiB",
                                   "bf16-mixed ms/step", "bf16 speed-up", "largest batch", "loader / step"],
                       "align": ["left"] + ["right"] * 8, "rows": rows}},
        ],
    }


def signed_graph(d: dict[str, Any]) -> dict[str, Any]:
    mach = d["machine"]
    filt = [[r["H"], r["N"], _f(r["speedup_lanczos_over_eigh"]), f"{r['relative_difference']:.1e}",
             _f(r["model_gflop_eigh"] / r["model_gflop_lanczos"]) if "model_gflop_lanczos" in r else "n/a",
             r.get("auto_chooses", "n/a")] for r in d["filter"]]
    items: list[dict[str, Any]] = [
        {"text": d["note"]},
        {"text": "Lanczos filter on the edge-stored product graph against the dense-eigh filter, forward and "
                 "backward at the YAML's batch (above 1: Lanczos faster):"},
        {"table": {"columns": ["chunks H", "nodes N", "Lanczos speed-up", "relative difference",
                               "dense / Lanczos flops", "auto picks"],
                   "align": ["right"] * 6, "rows": filt}},
    ]
    thr = d.get("throughput") or {}
    if isinstance(thr, dict) and thr.get("ratios"):
        rows = [[k, _f(v, 3)] for k, v in thr["ratios"].items()]
        items += [
            {"text": "Throughput ratios (the pair divided by the other model, same windows and batch):"},
            {"table": {"columns": ["ratio", "value"], "align": ["left", "right"], "rows": rows}},
        ]
    mem = d.get("memory") or {}
    if isinstance(mem, dict) and mem.get("ratios"):
        rows = [[k, _f(v, 2)] for k, v in mem["ratios"].items()]
        items += [{"text": "Peak memory growth of a training step (each model in its own process):"},
                  {"table": {"columns": ["ratio", "value"], "align": ["left", "right"], "rows": rows}}]
    flops = d.get("flops") or {}
    if isinstance(flops, dict) and flops:
        rows = [
            [
                k,
                _f(
                    v.get("infer_counted_gflop_per_window", 0.0) + v.get("eigh_gflop_per_window_infer", 0.0),
                    3,
                ),
                _f(v.get("train_counted_gflop_per_window", 0.0), 3),
            ]
            for k, v in flops.items()
        ]
        items += [{"text": "Flops per window (matrix products and convolutions counted by torch; the pair's "
                           "eigendecompositions added to inference from the flop model):"},
                  {"table": {"columns": ["model", "inference GFLOP", "training step GFLOP (counted)"],
                             "align": ["left", "right", "right"], "rows": rows}}]
    prof = d.get("profile") or {}
    if isinstance(prof, dict) and prof:
        stages = list(next(iter(prof.values())))
        rows = [[k, *[_f(v.get(st, 0.0), 3) for st in stages]] for k, v in prof.items()]
        items += [{"text": "Where the pair's time goes (fraction of self CPU time, torch profiler):"},
                  {"table": {"columns": ["run", *stages], "align": ["left"] + ["right"] * len(stages),
                             "rows": rows}}]
    if d.get("analysis"):
        items.append({"text": d["analysis"]})
    t10 = d.get("table10") or {}
    if isinstance(t10, dict) and t10.get("per_window"):
        conv = t10["convergence"]
        rows = [
            [
                name,
                f"{row['params']:,}",
                f"{row['train_s_per_window'] * 1000:.1f}",
                f"{row['infer_s_per_window'] * 1000:.1f}",
                str(conv[name]["epochs_to_criterion"])
                if conv[name]["epochs_to_criterion"] is not None
                else f"> {conv[name]['epochs_run']}",
                _f(conv[name]["train_s_per_epoch"], 1),
                _f(conv[name]["time_to_criterion_s"], 1)
                if conv[name]["time_to_criterion_s"] is not None
                else "n/a",
            ]
            for name, row in t10["per_window"].items()
        ]
        items += [{"text": f"Table 1's EEGNet (braindecode, temporal kernel 254: 9,170 parameters) and the "
                           f"default "
                           f"one (kernel 64) against the pair, per window and to convergence on the "
                           f"Turkish-epilepsy "
                           f"stand-in ({t10['criterion']}; {t10['date_utc'][:10]}):"},
                  {"table": {"columns": ["model", "parameters", "train ms / window", "inference ms / window",
                                         "epochs to criterion", "s / epoch", "s to criterion"],
                             "align": ["left"] + ["right"] * 6, "rows": rows}},
                  {"text": t10["reading"]}]
    return {"title": "Signed-graph denoiser pair: Lanczos against dense filtering",
            "machine": f"{mach['cpu']}, {mach['cpu_count']} cores, torch {mach['torch']}",
            "dates": sorted({d["date_utc"][:10], *([t10["date_utc"][:10]] if t10 else [])}),
            "command": d["command"] + (f"; {t10['command']}" if t10 else ""),
            "page": "performance", "items": items}


def spdtransnet_kernels(d: dict[str, Any]) -> dict[str, Any]:
    step = d["per_kernel_training_step"]
    gains = step["gain_over_plain_wall"]

    def decision(name: str) -> str:  # the rule: a kernel stays only if it buys 1.15x on the whole step
        return "" if name in ("plain", "all") else "kept" if gains[name] >= 1.15 else "deleted"

    rows = [[name, _f(gains[name]), _f(step["gain_over_plain_cpu"][name]), decision(name)] for name in gains]
    items: list[dict[str, Any]] = [
        {"text": d["what"]}, {"text": d["reduced_configuration"]},
        {"table": {"columns": ["variant", "whole-step speed-up (wall)", "speed-up (CPU time)", "decision"],
                   "align": ["left", "right", "right", "left"], "rows": rows}},
        {"text": f"Caveat: {d['caveat']}"},
    ]
    return {"title": "SPDTransNet's CPU kernels: keep or delete", "machine": d["machine"],
            "dates": [d["date_utc"][:10]], "command": step["command"], "page": "performance", "items": items}


def edf_windows(d: dict[str, Any]) -> dict[str, Any]:
    m = d["meta"]
    rows = [["wall time (median)", _f(d["speedup_biosig_over_mne_braindecode"])],
            ["CPU time (median)", _f(d["cpu_speedup_biosig_over_mne_braindecode"])]]
    items: list[dict[str, Any]] = [
        {"text": f"{m['nights']} Sleep-EDF-layout nights written with pyedflib; both pipelines give "
                 "the same windows (checked in the script). Speed-up of the suite's cache build:"},
        {"table": {"columns": ["measure", "speed-up"], "align": ["left", "right"], "rows": rows}}]
    if "peak_rss_mib" in d:
        peak, work = d["peak_rss_mib"], d.get("peak_rss_over_imports_mib", {})
        items.append({"table": {"columns": ["pipeline", "peak resident MiB",
                                            "of which the work (over imports)"],
                                "align": ["left", "right", "right"],
                                "rows": [[k,
                                          _f(peak[k], 0), _f(work.get(k), 0)] for k in ("biosig", "mne")]}})
    gpu = (d.get("loader") or {}).get("gpu_reference")
    if gpu:
        items.append({"text": f"The built cache's loader serves {_f(d['loader']['loader_windows_per_s'], 0)} "
                              f"windows/s here, {_f(gpu['loader_over_gpu_step'], 1)}x the fastest paper "
                              f"model's "
                              f"GPU training step ({gpu['model']}, {gpu['precision']}, {gpu['device']}, "
                              f"{_f(gpu['gpu_samples_per_s'], 1)} samples/s; target 10x)"
                              + (f"; on the GPU's own host its loader served "
                                 f"{_f(gpu['gpu_host_loader_windows_per_s'], 0)}"
                                 f" windows/s, {_f(gpu['gpu_host_loader_over_step'], 1)}x that step."
                                 if gpu.get("gpu_host_loader_over_step") else ".")})
    return {"title": "Raw EDF files to training windows: the window cache against MNE + braindecode",
            "machine": f"{m['machine']}, {m['cpus']} CPUs, Python {m['python']} (shared machine)",
            "dates": [m["date"][:10]], "command": m["command"], "page": "performance", "items": items}


def bioformer_authors(d: dict[str, Any]) -> dict[str, Any]:
    m = d["meta"]
    rows = [["float64 logits max difference", f"{d['float64']['logits']:.1e}"],
            ["median step, authors / ours", _f(d["authors_over_ours"])]]
    for key, label in (("authors_over_ours_compiled", "median steady step, authors / ours compiled"),
                       ("compile_s", "compile time of ours (s, first step)")):
        if d.get(key) is not None:
            rows.append([label, _f(d[key])])
    return {"title": "BioFormer against the authors' code (same weights)",
            "machine": f"{m['machine']}, {m['threads']} thread, torch {m['torch']}",
            "dates": [m["date"][:10]], "command": m["command"], "page": "performance",
            "source": m["authors_code"],
            "items": [{"table": {"columns": ["measure", "value"], "align": ["left", "right"], "rows": rows}}]}


def framework_overhead(d: dict[str, Any]) -> dict[str, Any]:
    runs = [d["runs"][key] for key in d["current"]]
    rows, imports = [], {}
    for run in runs:
        for name, r in run["models"].items():
            if name == "import_s":
                imports = imports or r["median_s"]
            if "median_steady_epoch_s" not in r:
                continue
            rows.append([name, r["train_windows"], _f(r["steady_epoch_fit_over_bare"]),
                         _f(r.get("steady_epoch_cpu_fit_over_bare")),
                         _f(r["steady_epoch_fit_over_braindecode"]),
                         _f(r["median_startup_plus_teardown_s"]["biosig_fit"]),
                         _f(r["fit_startup_in_steady_epochs"], 1), _f(r["total_fit_over_bare"])])
    m = runs[0]["meta"]
    items: list[dict[str, Any]] = [
        {"text": "`biosig fit` on the APAVA stand-in's cached windows against a bare PyTorch loop and "
                 "braindecode's "
                 "EEGClassifier (same windows, batch, optimiser, clip, threads, initial weights), each epoch "
                 "with "
                 "its validation. A steady epoch is one after the first (wall and process CPU time); "
                 "start-up is "
                 "parsing, instantiation, Trainer set-up and the sanity check (plus the tear-down). "
                 + d.get("summary", "")},
        {"table": {"columns": ["model", "train windows", "steady epoch: fit / bare", "CPU: fit / bare",
                               "fit / braindecode", "fit start-up s", "start-up in steady epochs",
                               "whole run: fit / bare"],
                   "align": ["left"] + ["right"] * 7, "rows": rows}}]
    if imports:
        items.append({"text": "A fresh interpreter's imports (s): " + ", ".join(
            f"{k} {_f(v)}" for k, v in imports.items()) + "."})
    return {"title": "The suite's own overhead: biosig fit against a bare loop and braindecode",
            "machine": f"{m['machine']}, {m['cpus']} CPUs shared with other sessions, {m['threads']} torch "
                       f"thread, "
                       f"torch {m['torch']}",
            "dates": sorted({r["meta"]["date"][:10] for r in runs}),
            "command": "; ".join(r["meta"]["command"] for r in runs), "page": "performance", "items": items}


CONVERTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "gpu_steps_h200": gpu_steps, "signed_graph": signed_graph, "spdtransnet_kernels": spdtransnet_kernels,
    "edf_windows": edf_windows, "bioformer_authors": bioformer_authors,
    "framework_overhead": framework_overhead,
}


def main() -> None:
    from biosig_lightning.atomic_io import atomic_write_json

    for name, convert in CONVERTERS.items():
        src = SRC / f"{name}.json"
        if src.is_file():
            doc = convert(json.loads(src.read_text()))
            doc["source"] = (f"`benchmarks/results/{name}.json`, rendered by "
                             f"`docs/tools/benchmark_results.py`"
                             + (f"; {doc['source']}" if doc.get("source") else ""))
            atomic_write_json(DST / f"perf_{name}.json", doc)
            print(f"wrote docs/results/perf_{name}.json")


if __name__ == "__main__":
    main()
