"""The measurements behind the held-out bounds of ``tests/e2e/test_paper_models_beat_band_power.py``.

For each case of that test (BioFormer on APAVA's stand-in, SD-Former on Sleep-EDF's), at each seed:
the run's test macro F1, its ``lr = 0`` control's, the log band-power logistic regression's F1 and
accuracy on the same test windows, and the CPU seconds of the pair of fits (one torch thread), as JSON
lines::

    python tools/audits/paper_models_vs_band_power.py --seeds 41,42,43
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", default="41,42,43", help="comma-separated seed_everything values")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's tests package
    from tests.e2e.test_paper_models_beat_band_power import CASES, measure

    torch.set_num_threads(1)
    cases = [c for c in args.cases.split(",") if c] or sorted(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("BIOSIG_CACHE", os.path.join(tmp, "cache"))
        os.chdir(tmp)
        for case in cases:
            for seed in (int(s) for s in args.seeds.split(",")):
                start = time.process_time()
                got = measure(case, f"--seed_everything={seed}")
                print(json.dumps({"case": case, "seed": seed, **{k: round(v, 4) for k, v in got.items()},
                                  "cpu_s": round(time.process_time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
