"""Signed-graph denoiser pair: throughput vs braindecode EEGNet / Deep4Net, and Lanczos vs dense eigh filtering.

Two measurements, each reported as ratios against a baseline timed in the same run (Yao et al.,
App. I / Table 10 compare training and inference time with EEGNet, FBCSPNet and Deep4Net):

1. **Throughput** on one input shape (default: the Turkish corpus, 35 channels x 6000 samples, batch 8
   as App. E.4): windows/s of a training step and of inference for
   * the signed-graph pair (the paper's configuration, 2 x 14,787 parameters): a training step is the
     contrastive denoising loss of eq. 23 (both denoisers on the noisy batch) + backward + Adam;
     inference is the eq. 22 classification of a batch (both denoisers);
   * braindecode's ``EEGNetv4`` and ``Deep4Net``: cross-entropy + backward + Adam; inference = forward.
2. **Filter**: ``lanczos_filter`` (``krylov_dim`` = 20) vs ``exact_filter`` (dense ``eigh``) on a balanced
   graph of ``N = 35 x H`` nodes as the sequence length ``H`` grows, each node carrying ``6000 / H``
   samples (forward + backward of the filtered signal's energy, as in training).

Usage::

    python benchmarks/signed_graph.py             # full sizes (several minutes on 2 CPU cores)
    python benchmarks/signed_graph.py --quick     # 1500-sample windows, fewer repeats
    python benchmarks/signed_graph.py --out /tmp/sg.json --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from biosig_lightning.features import signed_graph as sg
from biosig_lightning.models.signed_graph import SignedGraphClassifier
from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask


def _median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(n_chans: int, n_times: int, sfreq: float, batch: int, repeats: int) -> dict[str, Any]:
    from braindecode.models import Deep4Net

    from biosig_lightning.models.braindecode_names import braindecode_model

    EEGNetv4 = braindecode_model("EEGNetv4")  # braindecode 1.x: EEGNet

    torch.manual_seed(0)
    x = torch.randn(batch, n_chans, n_times)
    y = torch.arange(batch) % 2
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        baselines = {"EEGNetv4": EEGNetv4(n_chans=n_chans, n_outputs=2, n_times=n_times, sfreq=sfreq),
                     "Deep4Net": Deep4Net(n_chans=n_chans, n_outputs=2, n_times=n_times, sfreq=sfreq)}
    for name, net in baselines.items():
        opt = torch.optim.Adam(net.parameters(), 1e-3)

        def train_step(net: torch.nn.Module = net, opt: torch.optim.Optimizer = opt) -> None:
            net.train()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()

        def infer(net: torch.nn.Module = net) -> None:
            net.eval()
            with torch.no_grad():
                net(x)

        out[name] = {"params": sum(p.numel() for p in net.parameters() if p.requires_grad),
                     "train_windows_per_s": batch / _median_time(train_step, repeats),
                     "infer_windows_per_s": batch / _median_time(infer, repeats)}
        print(f"  measured {name}: {out[name]}", flush=True)
    model = SignedGraphClassifier(n_chans, 2, n_times, sfreq)
    task = DenoiserPairTask(model, n_outputs=2, optimizer="adam", weight_decay=0.0, scheduler="none")
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def pair_train() -> None:
        model.train()
        opt.zero_grad(set_to_none=True)
        loss, _, _ = task.denoising_loss(x, y, torch.randn_like(x))
        loss.backward()
        opt.step()

    def pair_infer() -> None:
        model.eval()
        with torch.no_grad():
            model(x)

    out["SignedGraphClassifier"] = {"params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                                    "train_windows_per_s": batch / _median_time(pair_train, repeats),
                                    "infer_windows_per_s": batch / _median_time(pair_infer, repeats)}
    ours = out["SignedGraphClassifier"]
    out["ratios"] = {f"{kind}_ours_over_{name}": ours[f"{kind}_windows_per_s"] / out[name][f"{kind}_windows_per_s"]
                     for name in baselines for kind in ("train", "infer")}
    return out


def filter_scaling(n_chans: int, n_times: int, chunks: list[int], krylov_dim: int, batch: int,
                   repeats: int) -> list[dict[str, float]]:
    rows = []
    for h in chunks:
        torch.manual_seed(h)
        n = n_chans * h
        d = n_times // h
        mask = sg.product_graph_mask(n_chans, h)
        f = torch.randn(batch, n, 16)
        dist = sg.normalise_distance(sg.pairwise_distance(f, "euclidean"), mask)
        beta = torch.where(torch.rand(batch, n_chans) < 0.5, -1.0, 1.0).repeat(1, h)
        w = sg.signed_weights(dist, mask, "balanced", beta)
        lap_b, _ = sg.gershgorin_shift(sg.combinatorial_laplacian(sg.normalize_weights(w)))
        lap = sg.similarity_transform(lap_b, beta)
        y = torch.randn(batch, n, d)

        def run(method: str, lap: torch.Tensor = lap, y: torch.Tensor = y) -> None:
            lp = lap.clone().requires_grad_(True)
            omega = torch.tensor(1.0, requires_grad=True)
            out = sg.lanczos_filter(lp, y, omega, krylov_dim) if method == "lanczos" else sg.exact_filter(lp, y, omega)
            out.square().sum().backward()

        t_l = _median_time(lambda: run("lanczos"), repeats)
        t_e = _median_time(lambda: run("exact"), repeats)
        with torch.no_grad():
            err = float((sg.lanczos_filter(lap, y, 1.0, krylov_dim) - sg.exact_filter(lap, y, 1.0)).norm() /
                        sg.exact_filter(lap, y, 1.0).norm())
        rows.append({"H": h, "N": n, "D": d, "lanczos_ms": 1e3 * t_l, "eigh_ms": 1e3 * t_e,
                     "speedup_lanczos_over_eigh": t_e / t_l, "relative_error": err})
        print(f"  measured filter {rows[-1]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true", help="only the filter scaling")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("signed_graph_results.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n_times = 1500 if args.quick else 6000
    repeats = 2 if args.quick else 3
    result = {
        "threads": args.threads, "loadavg": os.getloadavg(), "n_times": n_times,
        "filter": filter_scaling(35, n_times, [1, 2, 3, 6, 10, 20] if not args.quick else [1, 2, 6, 10], 20, 2,
                                 repeats),
        "throughput": {} if args.skip_throughput else throughput(35, n_times, 500.0, 8, repeats),
    }
    print(f"Throughput, 35 x {n_times} windows, batch 8, {args.threads} threads (windows/s):")
    for name, row in result["throughput"].items():
        if name != "ratios":
            print(f"  {name:24s} params {row['params']:>8,d}  train {row['train_windows_per_s']:8.2f}  "
                  f"infer {row['infer_windows_per_s']:8.2f}")
    for key, value in result["throughput"].get("ratios", {}).items():
        print(f"  {key:40s} {value:6.3f}")
    print("Lanczos (m = 20) vs dense eigh, forward + backward, batch 2:")
    for row in result["filter"]:
        print(f"  H {row['H']:3d}  N {row['N']:4d}  D {row['D']:5d}  lanczos {row['lanczos_ms']:9.1f} ms  "
              f"eigh {row['eigh_ms']:9.1f} ms  eigh/lanczos {row['speedup_lanczos_over_eigh']:6.2f}  "
              f"rel.err {row['relative_error']:.1e}")
    args.out.write_text(json.dumps(result, indent=2))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
