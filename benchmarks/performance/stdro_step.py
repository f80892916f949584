"""STDRO step vs ERM step of the same backbone, measured in one run (ratio; Appendix C's cost claim).

An ERM step: forward, cross-entropy, backward, Adam. An STDRO step: ``m`` ascent steps of the inner
maximisation (each one forward plus one backward to the input only, the parameters frozen) and the
same theta step on ``X~_m``; so it should cost about ``m + 1`` ERM steps (``ascent_step_over_erm``:
one ascent step in ERM steps, ``(STDRO - ERM) / m / ERM``). The M step (environment losses, a gradient of
``A(theta)`` and two finite-difference input gradients per buffered batch, Adam, projection) runs
once every ``N_theta`` theta steps; it is timed on its own and reported amortised over one epoch of
``--steps-per-block`` steps (Appendix C: N_theta is counted in epochs).

    python benchmarks/performance/stdro_step.py                 # DCRNN (distance graph), TUSZ 12-s shape,
    batch 32
    python benchmarks/performance/stdro_step.py --quick         # 16 units, batch 8: a minute on a busy CPU
    python benchmarks/performance/stdro_step.py --quick --phases 40   # forward / backward of an ERM and an
    ascent step
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from biosig_lightning.models.dcrnn import DCRNN
from biosig_lightning.robust.stdro import STDROTask, correlation_graphs, period_bounds


def _timed(step: Callable[[], None]) -> tuple[float, float]:
    """Wall-clock and process CPU seconds of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(m: int, units: int, batch: int, repeats: int, steps_per_block: int) -> dict[str, Any]:
    torch.manual_seed(0)
    backbone = DCRNN(19, 2, 1200, 200.0, step_bins=100, rnn_units=units)
    task = STDROTask(backbone, ascent_steps=m, step_bins=100, hyper_buffer=8, lr=1e-4)
    x = torch.randn(batch, 19, 1200)
    y = torch.randint(0, 2, (batch,))
    subjects = torch.arange(batch) % 6
    bounds = period_bounds(1200, 4, 100)
    task.init_cost(correlation_graphs([x], bounds), bounds)
    task.set_environments({s: s % 3 for s in range(6)})
    opt = torch.optim.Adam(backbone.parameters(), lr=1e-4)

    def erm() -> None:
        opt.zero_grad()
        F.cross_entropy(backbone(x), y).backward()
        opt.step()

    def stdro() -> None:
        x_adv, d = task.inner_maximisation(x, y)
        opt.zero_grad()
        F.cross_entropy(backbone(x_adv), y).backward()
        opt.step()
        task._buffer.append({"x": x, "x_adv": x_adv, "d": d, "y": y, "subject": subjects})

    times: dict[str, list[tuple[float, float]]] = {"erm": [], "stdro": []}
    for i in range(repeats + 1):  # taking turns, so load changes hit both alike
        for name, step in (("erm", erm), ("stdro", stdro)):
            wall, cpu = _timed(step)
            if i:
                times[name].append((wall, cpu))
    t0 = time.perf_counter()
    task._block_steps = steps_per_block
    task.m_step()
    m_step = time.perf_counter() - t0
    erm_s, stdro_s = (statistics.median(w for w, _ in times[k]) for k in ("erm", "stdro"))
    erm_cpu, stdro_cpu = (statistics.median(c for _, c in times[k]) for k in ("erm", "stdro"))
    return {"m": m, "erm_s": round(erm_s, 4), "stdro_s": round(stdro_s, 4),
            "ratio": round(stdro_s / erm_s, 2),
            # CPU time of this process: on a shared machine, time spent waiting for a core is not counted
            "cpu_ratio": round(stdro_cpu / erm_cpu, 2),
            "bound_m_plus_1": m + 1,
            # one ascent step in ERM steps: the STDRO step less its theta step (an ERM step on X~_m), over m
            "ascent_step_over_erm": round((stdro_s - erm_s) / m / erm_s, 2),
            "m_step_s": round(m_step, 3),
            "ratio_with_amortised_m_step": round((stdro_s + m_step / steps_per_block) / erm_s, 2)}


def phases(units: int, batch: int, repeats: int) -> dict[str, float]:
    """Fastest of ``repeats`` interleaved runs of each phase, ms (the minimum is what load adds least to):
    the ERM step's forward, backward and Adam step; an ascent step's forward and its backward to the
    input, with the parameters frozen (as :meth:`STDROTask.inner_maximisation` runs it) and trainable."""
    torch.manual_seed(0)
    backbone = DCRNN(19, 2, 1200, 200.0, step_bins=100, rnn_units=units).eval()
    params = list(backbone.parameters())
    opt = torch.optim.Adam(params, lr=1e-4)
    x = torch.randn(batch, 19, 1200)
    y = torch.randint(0, 2, (batch,))
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds * 1e3)

    for _ in range(repeats):
        t0 = time.perf_counter()
        loss = F.cross_entropy(backbone(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        keep("erm_forward", t1 - t0), keep("erm_backward", t2 - t1), keep("erm_adam",
                                                                          time.perf_counter() - t2)
        opt.zero_grad()
        for frozen in (True, False):
            for p in params:
                p.requires_grad_(not frozen)
            x_adv = x.clone().requires_grad_(True)
            t0 = time.perf_counter()
            loss = F.cross_entropy(backbone(x_adv), y, reduction="sum")
            t1 = time.perf_counter()
            torch.autograd.grad(loss, x_adv)
            tag = "frozen" if frozen else "trainable"
            keep(f"ascent_forward_{tag}", t1 - t0), keep(f"ascent_backward_{tag}", time.perf_counter() - t1)
    erm = best["erm_forward"] + best["erm_backward"] + best["erm_adam"]
    out = {k: round(v, 2) for k, v in best.items()}
    for tag in ("frozen", "trainable"):
        out[f"ascent_over_erm_{tag}"] = round(
            (best[f"ascent_forward_{tag}"] + best[f"ascent_backward_{tag}"]) / erm, 3
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--phases", type=int, default=0, metavar="N",
                        help="instead: the fastest of N runs of each phase of an ERM and an ascent step (ms)")
    parser.add_argument("--steps-per-block", type=int, default=680,
                        help="theta steps between M steps (TUSZ 12-s balanced train set / batch 40 = 682 per "
                             "epoch)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    units, batch = (16, 8) if args.quick else (64, 32)
    if args.phases:
        print(json.dumps({"threads": args.threads, "units": units, "batch": batch,
                          "load_average": os.getloadavg(),
                          "phases_ms": phases(units, batch, args.phases)}, indent=2))
        return
    rows = [measure(m, units, batch, args.repeats, args.steps_per_block) for m in (5, 10)]
    print(json.dumps({"threads": args.threads, "units": units, "batch": batch,
                      "load_average": os.getloadavg(),
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
