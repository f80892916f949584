"""SPD preprocessing of one whole recording (8 h, 960 epochs, the synthetic MASS SS3 stand-in) with the
numba Jacobi eigensolver (``accel/jacobi.py``, ``features/jacobi.py`` before) against ``torch.linalg.eigh``:
the keep-or-delete test.

Alternating fresh processes (``jacobi``, ``eigh``, ``jacobi``, ...), ``--repeats`` of each, medians;
the kernel is compiled (or loaded from numba's disk cache) before the timing. Both give the same tokens
to round-off (``token_checksum``).

    python benchmarks/performance/spd_eigh_gain.py --repeats 3 --out eigh_gain.json

Results: ``benchmarks/results/spdtransnet_kernels.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch


def one(variant: str, epochs: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    from biosig_lightning.accel import jacobi
    from biosig_lightning.data.corpora.mass_ss3 import MASSSS3
    from biosig_lightning.data.synthetic import SyntheticReader
    from biosig_lightning.features import spd
    if variant == "eigh":
        jacobi._numba = None
    else:  # compile (or load numba's disk cache) outside the timing
        jacobi.eigh(torch.eye(9, dtype=torch.float64).expand(128, 9, 9).clone())
    reader = SyntheticReader(MASSSS3.make_spec(), n_subjects=1,
                             windows_per_subject=epochs, kind="sleep", seed=0)
    block = next(reader.iter_blocks())
    x, starts = block.x.astype(np.float64), block.start
    t0, c0 = time.perf_counter(), time.process_time()
    cov, psd = spd.covariance_features(x, starts, 256.0, 30)
    t1, c1 = time.perf_counter(), time.process_time()
    tok = spd.recording_tokens(torch.from_numpy(cov), torch.from_numpy(psd), 2.4904, 1.01, 0.01, "augmented",
                               sqrt2=True)[0]
    t2, c2 = time.perf_counter(), time.process_time()
    return {"total_s": t2 - t0, "tokens_s": t2 - t1, "covariances_s": t1 - t0, "total_cpu_s": c2 - c0,
            "tokens_cpu_s": c2 - c1, "token_checksum": float(tok.double().abs().sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", default=None)
    ap.add_argument("--epochs", type=int, default=960)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.epochs, a.threads)))
        return
    rows = {"jacobi": [], "eigh": []}
    for r in range(a.repeats):
        for v in rows:
            out = subprocess.run([sys.executable, __file__, "--one", v, f"--epochs={a.epochs}",
                                  f"--threads={a.threads}"],
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            res = json.loads(out)
            res["load"] = open("/proc/loadavg").read().split()[:3]
            rows[v].append(res)
            print(r, v, json.dumps(res), flush=True)
    med = {v: {k: float(np.median([x[k] for x in rows[v]])) for k in ("total_s", "tokens_s", "total_cpu_s")}
           for v in rows}
    res = {"epochs": a.epochs, "threads": a.threads, "repeats": a.repeats, "median": med,
           "gain_total": med["eigh"]["total_s"] / med["jacobi"]["total_s"],
           "gain_tokens_stage": med["eigh"]["tokens_s"] / med["jacobi"]["tokens_s"],
           "cpu_gain_total": med["eigh"]["total_cpu_s"] / med["jacobi"]["total_cpu_s"], "runs": rows}
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
