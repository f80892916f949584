"""STDRO step vs ERM step of the same backbone, measured in one run (ratio; Appendix C's cost claim).

An ERM step: forward, cross-entropy, backward, Adam. An STDRO step: ``m`` ascent steps of the inner
maximisation (each one forward plus one input-gradient backward) and the same theta step on
``X~_m``; so it should cost about ``m + 1`` ERM steps. The M step (environment losses, a gradient of
``A(theta)`` and two finite-difference input gradients per buffered batch, Adam, projection) runs
once every ``N_theta`` theta steps; it is timed on its own and reported amortised over one epoch of
``--steps-per-block`` steps (Appendix C: N_theta is counted in epochs).

    python benchmarks/stdro_step.py                 # DCRNN (distance graph), TUSZ 12-s shape, batch 32
    python benchmarks/stdro_step.py --quick         # 16 units, batch 8: a minute on a busy CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from biosig_lightning.models.dcrnn import DCRNN
from biosig_lightning.robust.stdro import STDROTask, correlation_graphs, period_bounds


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

    def erm() -> float:
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(backbone(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    def stdro() -> float:
        t0 = time.perf_counter()
        x_adv, d = task.inner_maximisation(x, y)
        opt.zero_grad()
        F.cross_entropy(backbone(x_adv), y).backward()
        opt.step()
        task._buffer.append({"x": x, "x_adv": x_adv, "d": d, "y": y, "subject": subjects})
        return time.perf_counter() - t0

    t_erm, t_stdro = [], []
    for i in range(repeats + 1):
        e, s = erm(), stdro()
        if i:
            t_erm.append(e)
            t_stdro.append(s)
    t0 = time.perf_counter()
    task._block_steps = steps_per_block
    task.m_step()
    m_step = time.perf_counter() - t0
    erm_s, stdro_s = statistics.median(t_erm), statistics.median(t_stdro)
    return {"m": m, "erm_s": round(erm_s, 4), "stdro_s": round(stdro_s, 4), "ratio": round(stdro_s / erm_s, 2),
            "bound_m_plus_1": m + 1, "m_step_s": round(m_step, 3),
            "ratio_with_amortised_m_step": round((stdro_s + m_step / steps_per_block) / erm_s, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps-per-block", type=int, default=680,
                        help="theta steps between M steps (TUSZ 12-s balanced train set / batch 40 = 682 per epoch)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    units, batch = (16, 8) if args.quick else (64, 32)
    rows = [measure(m, units, batch, args.repeats, args.steps_per_block) for m in (5, 10)]
    print(json.dumps({"threads": args.threads, "units": units, "batch": batch, "load_average": os.getloadavg(),
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
