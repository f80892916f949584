"""SPDTransNet: training step and preprocessing, ours against baselines measured in the same run.

Training step (forward + backward + Adam, dropout 0.1, published best: L = 21, d(m) = 351, t = 10,
intra 9 heads x 5 layers, inter 3 heads x 4 layers, d_ff = FC = 1035), each configuration in a fresh
process so its peak RSS (``ru_maxrss``) is its own:

* ``ours``: SP-MHA as ``impl="auto"`` picks on this device (CPU: the combined map recomputed in
  backward; CUDA: SDPA over the h heads' fused outputs);
* ``ours_ckpt``: ``ours`` with ``checkpoint_layers=True`` (each encoder layer recomputed in backward);
* ``sdpa``: SP-MHA as the weighted sum of h SDPA outputs (``impl="sdpa"``);
* ``stored_maps`` (the baseline of the ratio): the same model with the h softmax maps kept for backward,
  as the paper's Fig. 1 computes SP-MHA (and as the authors' code does; their model also carries
  4.45 M unused projections, not included here).

Preprocessing of one synthetic 8 h recording (960 epochs, 8 electrodes, 256 Hz):

* ``ours``: :func:`~biosig_lightning.features.spd.covariance_features` + whitening reference +
  :func:`~biosig_lightning.features.spd.spd_tokens` (batched numpy/torch);
* ``per_epoch`` (baseline): the same maths one epoch at a time: scipy ``sosfiltfilt`` on the whole
  recording, then per epoch pyriemann ``covariances`` and scipy ``periodogram``, pyriemann
  ``mean_riemann`` per channel, per epoch augmentation, whitening and pyriemann ``logm``; its tokens are
  compared with ours (max abs difference; the two filters differ only near the recording's ends).

``--authors PATH`` is reserved for timing the authors' code (github MathieuSeraphim/SPDTransNet, torch 1.11
/ Lightning 1.9, needs shims under torch 2) in the same run; not implemented yet, the anchor figures
(``../shared/anchors/spdtransnet.md``: 21.8 s and 6.4 GiB at batch 4 on 2 cores; 85 s per recording) are
quoted for reference only.

    python benchmarks/spdtransnet.py --batches 4 32 --steps 2
    python benchmarks/spdtransnet.py --skip-train            # preprocessing only
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BEST = dict(d_model=351, tokens_per_epoch=10, intra_heads=9, intra_layers=5, inter_heads=3, inter_layers=4,
            d_ff=1035, fc_width=1035, dropout=0.1, pe="learnable")


def _stored_maps_forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    q, k = self._qk(x)
    return self._combined(q, k, x, self.weights())


def train_step(variant: str, batch: int, steps: int, context: int = 21) -> dict[str, float]:
    """Median seconds per training step and peak RSS of this process (call in a fresh process)."""
    from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    impl = {"ours": "auto", "ours_ckpt": "auto", "sdpa": "sdpa", "stored_maps": "recompute"}[variant]
    if variant == "stored_maps":
        SPMultiheadAttention.forward = _stored_maps_forward
    model = SPDTransNet(n_chans=context * 210, n_outputs=5, n_times=45, sfreq=256.0, attention_impl=impl,
                        checkpoint_layers=variant == "ours_ckpt", **BEST).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=5.8e-5, eps=1e-7, weight_decay=1e-5)
    x = torch.randn(batch, context * 210, 45, device=device)
    y = torch.randint(0, 5, (batch,), device=device)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    out = {"step_s": float(np.median(times)), "first_step_s": times[0],
           "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "device": device}
    if device == "cuda":
        out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def _in_subprocess(variant: str, batch: int, steps: int, context: int = 21) -> dict[str, float]:
    code = (f"import json, sys; sys.path.insert(0, {str(REPO)!r}); from benchmarks.spdtransnet import train_step; "
            f"print('RESULT', json.dumps(train_step({variant!r}, {batch}, {steps}, {context})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout)[-500:]}


def recording(n_epochs: int = 960, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from biosig_lightning.data.corpora.mass_ss3 import MASSSS3
    from biosig_lightning.data.synthetic import SyntheticReader

    reader = SyntheticReader(MASSSS3.make_spec(), n_subjects=1, windows_per_subject=n_epochs, kind="sleep", seed=seed)
    block = next(reader.iter_blocks())
    return block.x.astype(np.float64), block.start


def ours_tokens(x: np.ndarray, starts: np.ndarray, alpha: float = 2.4904, beta: float = 1.01,
                eps: float = 0.01) -> tuple[np.ndarray, dict[str, float]]:
    from biosig_lightning.features import spd

    t0 = time.perf_counter()
    cov, psd = spd.covariance_features(x, starts, 256.0, 30)
    t1 = time.perf_counter()
    ct, pt = torch.from_numpy(cov), torch.from_numpy(psd)
    ref = spd.whitening_reference(ct, pt, alpha, "augmented_raw")
    t2 = time.perf_counter()
    tok = spd.spd_tokens(ct, pt, alpha, beta, eps, ref).numpy()
    t3 = time.perf_counter()
    return tok, {"covariances_s": t1 - t0, "reference_s": t2 - t1, "tokens_s": t3 - t2, "total_s": t3 - t0}


def per_epoch_tokens(x: np.ndarray, alpha: float = 2.4904, beta: float = 1.01,
                     eps: float = 0.01) -> tuple[np.ndarray, dict[str, float]]:
    from pyriemann.utils.base import invsqrtm, logm
    from pyriemann.utils.covariance import covariances
    from pyriemann.utils.mean import mean_riemann
    from pyriemann.utils.tangentspace import upper
    from scipy import signal as sps

    from biosig_lightning.features.spd import SPD_BANDS

    t0 = time.perf_counter()
    n_ep, n, t = x.shape
    cont = x.transpose(1, 0, 2).reshape(n, -1)
    cont = (cont - cont.mean(1, keepdims=True)) / cont.std(1, keepdims=True)
    chans = [cont] + [sps.sosfiltfilt(sps.butter(4, [lo / 128, hi / 128], "bandpass", output="sos"), cont, axis=-1)
                      for lo, hi in SPD_BANDS.values()]
    covs = np.empty((len(chans), n_ep, 30, n, n))
    psds = np.empty((len(chans), n_ep, 30, n))
    for c, sig in enumerate(chans):
        for e in range(n_ep):
            w = sig[:, e * t:(e + 1) * t].reshape(n, 30, t // 30).transpose(1, 0, 2)
            covs[c, e] = covariances(w, estimator="cov")
            psds[c, e] = sps.periodogram(w, fs=256.0, axis=-1)[1].mean(-1)
    t1 = time.perf_counter()
    refs = []
    for c in range(len(chans)):
        mv = alpha * psds[c].reshape(-1, n).mean(0)
        g = mean_riemann(covs[c].reshape(-1, n, n))
        refs.append(np.block([[g + np.outer(mv, mv), mv[:, None]], [mv[None], np.ones((1, 1))]]))
    t2 = time.perf_counter()
    out = np.empty((n_ep, len(chans), 30, (n + 1) * (n + 2) // 2))
    for c in range(len(chans)):
        isq = invsqrtm(refs[c])
        for e in range(n_ep):
            v = alpha * psds[c, e]
            aug = np.zeros((30, n + 1, n + 1))
            aug[:, :n, :n] = covs[c, e] + v[:, :, None] * v[:, None, :]
            aug[:, :n, n] = aug[:, n, :n] = v
            aug[:, n, n] = 1.0
            white = beta * isq @ aug @ isq
            vals, vecs = np.linalg.eigh(white)
            floored = (vecs * np.maximum(vals, eps)[:, None, :]) @ vecs.transpose(0, 2, 1)
            out[e, c] = upper(logm(floored))
    t3 = time.perf_counter()
    return out, {"covariances_s": t1 - t0, "reference_s": t2 - t1, "tokens_s": t3 - t2, "total_s": t3 - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--context", type=int, default=21, help="L, epochs per sequence (paper's best: 21)")
    parser.add_argument("--variants", nargs="+", default=["ours", "ours_ckpt", "stored_maps"])
    parser.add_argument("--epochs", type=int, default=960, help="epochs of the synthetic recording (960 = 8 h)")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-preprocessing", action="store_true")
    parser.add_argument("--authors", default=None, help="local copy of the authors' repository (not used yet)")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    report: dict[str, object] = {"threads": torch.get_num_threads()}
    if not args.skip_preprocessing:
        x, starts = recording(args.epochs)
        tok, t_ours = ours_tokens(x, starts)
        ref, t_loop = per_epoch_tokens(x)
        mid = slice(len(tok) // 10, len(tok) - len(tok) // 10)  # filter edges differ by design
        report["preprocessing"] = {"epochs": args.epochs, "ours": t_ours, "per_epoch": t_loop,
                                   "speedup": t_loop["total_s"] / t_ours["total_s"],
                                   "token_max_abs_diff_inner_80pct": float(np.abs(tok[mid] - ref[mid]).max()),
                                   "token_scale": float(np.abs(ref).max())}
        print(json.dumps(report["preprocessing"], indent=1), flush=True)
    if not args.skip_train:
        rows = {}
        for b in args.batches:
            for v in args.variants:
                rows[f"{v}@{b}"] = r = _in_subprocess(v, b, args.steps, args.context)
                print(f"batch {b:3d} {v:12s} {json.dumps(r)}", flush=True)
            if "ours" in args.variants and "stored_maps" in args.variants:
                a, s = rows[f"ours@{b}"], rows[f"stored_maps@{b}"]
                if "step_s" in a and "step_s" in s:
                    print(f"batch {b}: stored_maps / ours step time {s['step_s'] / a['step_s']:.2f}x, "
                          f"peak RSS {s['peak_rss_gib']:.2f} vs {a['peak_rss_gib']:.2f} GiB", flush=True)
        report["train"] = rows
    print("RESULTS", json.dumps(report))


if __name__ == "__main__":
    main()
