"""SPDTransNet: training step and preprocessing, ours against the authors' code, timed in the same run.

Training step (forward + backward + Adam, dropout 0.1, label smoothing 0.1, published best: L = 21,
d(m) = 351, t = 10, intra 9 heads x 5 layers, inter 3 heads x 4 layers, d_ff = FC = 1035), each
configuration ``VARIANT@BATCH`` in a fresh process so its peak RSS (``ru_maxrss``) is its own, the list run
``--repeats`` times in order (interleaved, so load from other processes hits both sides alike):

* ``authors``: their four blocks (``--authors PATH``, a local copy of github MathieuSeraphim/SPDTransNet,
  imported from that path at run time, never copied here), set up as their model's ``setup()`` does, with
  the torch-2 shims of :func:`authors_shims` (their model then has 18,605,204 parameters, 14,009,912 with
  gradients, as their code counts); input ``(B, 7, L, 30, 45)``.
* ``ours``: the plain model, SP-MHA as ``impl="auto"`` picks (:class:`~biosig_lightning.models.spdtransnet.
  recompute.SPAttention`, the combined map formed chunk by chunk and recomputed in backward);
* ``ours_cpu``: ``ours`` switched to the CPU backend (:func:`biosig_lightning.accel.enable_spdtransnet_cpu`:
  padded heads, numba map kernels), what ``cpu_kernels: true`` trains with;
* ``ours_ckpt``: ``ours`` with ``checkpoint_layers=True`` (each encoder layer recomputed in backward);
* ``ours_bf16`` / ``ours_ckpt_bf16``: the same under ``torch.autocast(bfloat16)`` (mixed precision: float32
  weights, Adam and loss; the linear maps in bfloat16 with float32 accumulation; SP-MHA's maps, softmax
  and layer norms in float32). A precision change, reported separately, never as "the same configuration";
* ``sdpa`` / ``fused`` / ``recompute`` / ``stored_maps``: SP-MHA as h SDPA outputs / the fused kernel
  (``auto``'s choice) / plain ops under checkpoint / with the h softmax maps kept for backward; any
  variant takes ``_ckpt`` and ``_bf16`` suffixes (``fused_ckpt_bf16``).

GPU (``--warmup 3``): ``--check`` compares every variant with a float64 CPU reference first, and
``--max-batch VARIANT ...`` finds the largest batch whose step fits in the GPU's memory.

Preprocessing of one synthetic 8 h recording (960 epochs, 8 electrodes, 256 Hz; the MASS SS3 stand-in):

* ``authors``: their functions and layers, the paper's path (:func:`authors_tokens`);
* ``ours``: our defaults (paper reading), ``ours_code``: the options that reproduce their code (causal
  filters, reference = augmented raw mean, no sqrt(2)); the tokens of ``ours_code`` are compared with
  theirs (max abs difference, overall and per frequency channel).
* ``--per-epoch-baseline``: our maths one epoch at a time with scipy/pyriemann (the earlier baseline).

    python benchmarks/performance/spdtransnet.py --authors /tmp/spd_authors                  # all of it
    python benchmarks/performance/spdtransnet.py --authors /tmp/spd_authors --skip-train     # preprocessing
    only
    python benchmarks/performance/spdtransnet.py --configs ours@4 ours_ckpt@32 --skip-preprocessing   #
    without their code
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

BEST = dict(d_model=351, tokens_per_epoch=10, intra_heads=9, intra_layers=5, inter_heads=3, inter_layers=4,
            d_ff=1035, fc_width=1035, dropout=0.1, pe="learnable")


# --------------------------------------------------------------------------- the authors' code (--authors
# PATH)

_A_MODEL = "_4_models._4_1_sequence_based_models"
_A_INTRA = f"{_A_MODEL}.intra_element_block.Transformer_based_feature_extraction"


def _authors_import(path: str, module: str):  # noqa: ANN202
    import importlib

    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)


def authors_shims(path: str) -> None:
    """Make the authors' model run under torch 2 , by monkeypatching at import time.

    (a) ``TransformerEncoder`` passes ``is_causal`` to the layer and the layer to ``self_attn``; both of
    their forwards reject it: wrap them to drop it. (b) Their sublayer calls
    ``TransformerEncoderLayer.__init__`` with ``device, dtype`` positionally, which since torch 2.1 land
    on ``bias, device`` (``bias=None``: linear1/linear2/norm1/norm2 silently lose their biases): give the
    sublayer a torch-1.11-signature base that forwards them by keyword with ``bias=True``. Their
    Lightning module (PL 1.9 hooks) is not used: the benchmark builds their four blocks directly.
    """
    from torch import nn

    sub_mod = _authors_import(path, f"{_A_INTRA}.layers.SPDTransformerEncoderSublayer")
    mha_mod = _authors_import(path, f"{_A_INTRA}.layers.StructurePreservingMultiheadAttention")
    sub, mha = sub_mod.SPDTransformerEncoderSublayer, mha_mod.StructurePreservingMultiheadAttention
    if getattr(sub, "_biosig_shimmed", False):
        return

    class TorchOneElevenEncoderLayer(nn.TransformerEncoderLayer):
        def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=torch.relu,  # noqa: ANN001
                     layer_norm_eps=1e-5, batch_first=False,
                     norm_first=False, device=None, dtype=None) -> None:
            super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                             batch_first,
                             norm_first, bias=True, device=device, dtype=dtype)

    sub.__bases__ = (TorchOneElevenEncoderLayer,)
    sub_forward, mha_forward = sub.forward, mha.forward
    sub.forward = lambda self, src, src_mask=None, src_key_padding_mask=None, is_causal=False: sub_forward(
        self, src, src_mask, src_key_padding_mask)
    mha.forward = lambda self, *args, is_causal=False, **kwargs: mha_forward(self, *args, **kwargs)
    sub._biosig_shimmed = True


def authors_model(path: str, context: int = 21, cfg: dict[str, Any] | None = None) -> torch.nn.Module:
    """Their four blocks (formatting, intra, inter, classification) set up as their model's ``setup()``
    does."""
    cfg = {**BEST, **(cfg or {})}
    authors_shims(path)
    fmt = _authors_import(path, f"{_A_MODEL}.data_formatting_block.SPD_from_EEG_data_reformatting."
                                "VectorizedSPDFromEEGDataMultichannelSuccessionReformattingBlock")
    intra = _authors_import(path,
                            f"{_A_INTRA}.TransformerBasedSPDSequenceToSmallerFeaturesSequenceIntraElementBlock")
    inter = _authors_import(path, f"{_A_MODEL}.inter_element_block.Transformer_based_feature_comparison."
                                  "TransformerBasedSPDLearnablePositionalEncodingSequenceToSequenceInterElementBlock")
    head = _authors_import(path,
                           f"{_A_MODEL}.classification_block.classification_from_sequence_central_feature."
                                 "CentralGroupOfFeaturesInSequenceClassificationBlock")
    t, d = cfg["tokens_per_epoch"], cfg["d_model"]
    blocks = [fmt.VectorizedSPDFromEEGDataMultichannelSuccessionReformattingBlock(),
              intra.TransformerBasedSPDSequenceToSmallerFeaturesSequenceIntraElementBlock(),
              inter.TransformerBasedSPDLearnablePositionalEncodingSequenceToSequenceInterElementBlock(),
              head.CentralGroupOfFeaturesInSequenceClassificationBlock()]
    size, per_epoch = blocks[0].setup(original_vector_size=45, initial_number_of_vectors_per_epoch=30,
                                      number_of_channels=7, final_linear_projection_to_given_vector_size=d)
    seq = blocks[1].setup(vector_size=size, number_of_vectors_per_element=per_epoch, sequence_length=context,
                          number_of_output_features=t, number_of_encoder_heads=cfg["intra_heads"],
                          encoder_feedforward_dimension=cfg["d_ff"], encoder_dropout_rate=cfg["dropout"],
                          number_of_encoder_layers=cfg["intra_layers"])
    blocks[2].setup(sequence_length=seq, vector_size=size, number_of_encoder_heads=cfg["inter_heads"],
                    encoder_feedforward_dimension=cfg["d_ff"], encoder_dropout_rate=cfg["dropout"],
                    number_of_encoder_layers=cfg["inter_layers"])
    centre = (context // 2) * t
    blocks[3].setup(sequence_length=seq, vector_size=size, number_of_classes=5,
                    relevant_feature_indices=list(range(centre, centre + t)),
                    fully_connected_intermediary_dimension=cfg["fc_width"],
                    fully_connected_dropout_rate=cfg["dropout"])
    return torch.nn.Sequential(*blocks)


def _stored_maps_forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    q, k = self._qk(x)
    return self._combined(q, k, x, self.weights())


def _cpu_seconds() -> float:
    """User + system CPU time of this process: the work done, whatever share of the cores it got."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


_IMPLS = {"ours": "auto", "ours_cpu": "auto", "sdpa": "sdpa", "fused": "fused", "recompute": "recompute",
          "stored_maps": "recompute"}


def parse_variant(variant: str) -> tuple[str, bool, bool]:
    """``BASE[_ckpt][_bf16]`` -> (base, checkpoint_layers, bf16); base in ``authors`` or :data:`_IMPLS`."""
    base, ckpt, bf16 = variant, False, False
    if base.endswith("_bf16"):
        base, bf16 = base[:-5], True
    if base.endswith("_ckpt"):
        base, ckpt = base[:-5], True
    if base not in ("authors", *_IMPLS) or (base == "authors" and ckpt):
        raise ValueError(f"unknown variant {variant!r}: BASE[_ckpt][_bf16] with BASE in authors, "
                         f"{', '.join(_IMPLS)} (authors without _ckpt)")
    return base, ckpt, bf16


def build(variant: str, context: int = 21, authors: str | None = None, device: str = "cpu",
          cfg: dict[str, Any] | None = None) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """The model of ``variant`` on ``device`` and the shape of one input sequence (without the batch)."""
    base, ckpt, _ = parse_variant(variant)
    if base == "authors":
        if not authors:
            raise ValueError("variant 'authors' needs --authors PATH")
        return authors_model(authors, context, cfg).to(device), (7, context, 30, 45)
    from biosig_lightning.models.spdtransnet import SPDTransNet, SPMultiheadAttention

    if base == "stored_maps":
        SPMultiheadAttention.forward = _stored_maps_forward
    model = SPDTransNet(n_chans=context * 210, n_outputs=5, n_times=45, sfreq=256.0,
                        attention_impl=_IMPLS[base],
                        checkpoint_layers=ckpt, **{**BEST, **(cfg or {})}).to(device)
    if base == "ours_cpu" and device == "cpu":
        from biosig_lightning import accel

        accel.enable_spdtransnet_cpu(model)
    return model, (context * 210, 45)


def train_step(variant: str, batch: int, steps: int, context: int = 21, authors: str | None = None,
               threads: int | None = None, warmup: int = 0) -> dict[str, Any]:
    """Median seconds per training step and peak RSS of this process (call in a fresh process).

    ``variant``: ``BASE[_ckpt][_bf16]`` (see the module docstring). Same loss (cross-entropy on the
    central epoch, label smoothing 0.1), optimiser (Adam, lr 5.8e-5, eps 1e-7, weight decay 1e-5) and
    dropout 0.1. ``warmup`` steps run first, untimed (CUDA: kernel selection, cuBLAS handles, the
    caching allocator's first growth).
    """
    if threads:
        torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16 = parse_variant(variant)[2]
    torch.manual_seed(0)
    model, shape = build(variant, context, authors, device)
    x = torch.randn(batch, *shape, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=5.8e-5, eps=1e-7, weight_decay=1e-5)
    y = torch.randint(0, 5, (batch,), device=device)
    times, cpu = [], []
    for i in range(warmup + steps):
        if device == "cuda":
            torch.cuda.synchronize()
        t, c = time.perf_counter(), _cpu_seconds()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t)
            cpu.append(_cpu_seconds() - c)
    out: dict[str, Any] = {
        "step_s": float(np.median(times)), "steps_s": [round(t, 4) for t in times],
        "step_cpu_s": float(np.median(cpu)), "steps_cpu_s": [round(t, 2) for t in cpu],
        "sequences_per_s": batch / float(np.median(times)),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "device": device,
        "threads": torch.get_num_threads(),
        "sp_mha_maps": _map_kernels_in_use(variant, device),
        "params": sum(p.numel() for p in model.parameters()),
        "params_with_grad": sum(p.numel() for p in model.parameters() if p.grad is not None)}
    if device == "cuda":
        out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["gpu"] = torch.cuda.get_device_name()
    return out


def _map_kernels_in_use(variant: str, device: str) -> str | None:
    """Which SP-MHA maps our CPU step used: ``numba`` (``ours_cpu`` with numba: the CPU backend's map
    kernels, maps kept for backward at batch 4) or ``torch`` (the model's own recompute function)."""
    base = parse_variant(variant)[0]
    if base == "authors" or device != "cpu":
        return None
    from biosig_lightning.accel import map_kernels

    return "numba" if base == "ours_cpu" and map_kernels.available() else "torch"


def check(variants: list[str], batch: int = 2, context: int = 5, seed: int = 0) -> dict[str, Any]:
    """Each variant on this device against the same weights in float64 on the CPU (SP-MHA ``recompute``):
    relative error of the logits and of all parameter gradients, ``||out - ref|| / ||ref||``, at dropout
    0 on fresh random inputs. Float32 lands far under 1e-3 (CUDA matmuls may use TF32 if enabled),
    bf16 autocast between 1e-3 and 1e-2; a wrong kernel lands near 1.
    """
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = {"dropout": 0.0}
    torch.manual_seed(seed)
    ref, shape = build("recompute", context, None, "cpu", cfg)
    ref = ref.double()
    x = torch.randn(batch, *shape, dtype=torch.float64)
    y = torch.randint(0, 5, (batch,))
    loss = torch.nn.functional.cross_entropy(ref(x), y)
    loss.backward()
    ref_out = ref(x).detach()
    ref_grads = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
    rows: dict[str, Any] = {}
    for variant in variants:
        if parse_variant(variant)[0] == "authors":
            continue
        model, _ = build(variant, context, None, device, cfg)
        model.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
        with torch.autocast(device, dtype=torch.bfloat16, enabled=parse_variant(variant)[2]):
            logits = model(x.float().to(device))
        torch.nn.functional.cross_entropy(logits.float(), y.to(device)).backward()
        grads = dict(model.named_parameters())
        num = sum(float((grads[n].grad.double().cpu() - g).norm() ** 2) for n, g in ref_grads.items()
                  if grads[n].grad is not None)
        den = sum(float(g.norm() ** 2) for g in ref_grads.values())
        rows[variant] = {
            "logits_rel_err": float((logits.detach().double().cpu() - ref_out).norm() / ref_out.norm()),
            "grads_rel_err": (num / den) ** 0.5,
            "grads_missing": sorted(n for n in ref_grads if grads[n].grad is None),
        }
        print(f"check {variant:16s} {json.dumps(rows[variant])}", flush=True)
    return {"device": device, "batch": batch, "context": context, "variants": rows}


def max_batch(variant: str, args: argparse.Namespace, start: int = 32, limit: int = 4096) -> dict[str, Any]:
    """The largest batch whose training step completes on this GPU (doubling from ``start``, then bisection;
    each try a fresh process, so one try's out-of-memory leaves nothing behind), and that step's figures."""
    fits: dict[int, dict[str, Any]] = {}
    lo, hi, b = 0, None, start
    while hi is None and b <= limit:
        r = _in_subprocess(variant, b, 1, args.context, args.authors, args.threads, warmup=1)
        print(f"max-batch {variant} @{b}: {'fits' if 'step_s' in r else 'does not fit'}", flush=True)
        if "step_s" in r:
            fits[b], lo, b = r, b, b * 2
        else:
            hi = b
    if hi is None:
        return {"largest": lo, "capped_at": limit, **fits.get(lo, {})}
    while hi - lo > max(1, lo // 16):  # to within ~6 %
        mid = (lo + hi) // 2
        r = _in_subprocess(variant, mid, 1, args.context, args.authors, args.threads, warmup=1)
        print(f"max-batch {variant} @{mid}: {'fits' if 'step_s' in r else 'does not fit'}", flush=True)
        if "step_s" in r:
            fits[mid], lo = r, mid
        else:
            hi = mid
    return {"largest": lo, "smallest_failing": hi,
            **({k: v for k, v in fits[lo].items() if k != "steps_cpu_s"}
                                                      if lo in fits else {})}


def _in_subprocess(variant: str, batch: int, steps: int, context: int = 21, authors: str | None = None,
                   threads: int | None = None,
                   env: dict[str, str] | None = None, warmup: int = 0) -> dict[str, Any]:
    code = (f"import json, sys; sys.path.insert(0, {str(REPO)!r}); from benchmarks.performance.spdtransnet "
            f"import train_step; "
            f"print('RESULT', json.dumps(train_step({variant!r}, {batch}, {steps}, {context}, {authors!r}, "
            f"{threads!r}, {warmup})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout)[-800:], "returncode": proc.returncode}


def recording(n_epochs: int = 960, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from biosig_lightning.data.corpora.mass_ss3 import MASSSS3
    from biosig_lightning.data.synthetic import SyntheticReader

    reader = SyntheticReader(MASSSS3.make_spec(), n_subjects=1,
                             windows_per_subject=n_epochs, kind="sleep", seed=seed)
    block = next(reader.iter_blocks())
    return block.x.astype(np.float64), block.start


def ours_tokens(x: np.ndarray, starts: np.ndarray, alpha: float = 2.4904, beta: float = 1.01,
                eps: float = 0.01, code: bool = False) -> tuple[np.ndarray, dict[str, float]]:
    """Our preprocessing of one recording -> tokens ``(E, C, S, 45)`` and stage timings.

    ``code=False``: the paper's reading (our defaults: zero-phase filters, reference = affine-invariant
    mean of the augmented matrices, sqrt(2) on off-diagonals). ``code=True``: the options that reproduce
    the authors' code (causal filters, reference = augmentation of the raw mean, no sqrt(2)).
    """
    from biosig_lightning.features import spd

    c0, t0 = _cpu_seconds(), time.perf_counter()
    cov, psd = spd.covariance_features(x, starts, 256.0, 30, causal=code)
    t1 = time.perf_counter()
    ct, pt = torch.from_numpy(cov), torch.from_numpy(psd)
    # the reader's path (data/spd.py TokenStage): reference and tokens in one call
    tok = spd.recording_tokens(ct, pt, alpha, beta, eps, "augmented_raw" if code else "augmented",
                               sqrt2=not code)[0].numpy()
    t2 = time.perf_counter()
    return tok, {"covariances_s": t1 - t0, "reference_and_tokens_s": t2 - t1, "total_s": t2 - t0,
                 "total_cpu_s": _cpu_seconds() - c0}


def authors_tokens(path: str, x: np.ndarray, alpha: float = 2.4904, beta: float = 1.01, eps: float = 0.01,
                   sfreq: float = 256.0) -> tuple[np.ndarray, dict[str, float]]:
    """The authors' preprocessing of one recording, their functions and layers, the paper's path only.

    Stage 1 is what their ``SPDFromEEGPreprocessor.per_recording_preprocessing`` computes for the
    z-score strategy, the 7 channels, the ``cov`` estimator and the ``psd`` statistic, then the
    recording's ``mean matrix`` (pyriemann ``mean_riemann``) and mean PSD vector. Stage 2 is their
    Dataset ``setup()``: per epoch, float32 torch, augmentation -> whitening -> log -> upper triangle
    with their three layers. Left out (so their figure is a lower bound of what their pipeline takes):
    the raw-signal strategy, the OAS estimator and the other statistics it also computes, and all disk
    I/O (per-epoch pickles written by stage 1 and read and rewritten by stage 2).
    """
    from biosig_lightning.features.spd import SPD_BANDS

    u = _authors_import(path, "_2_data_preprocessing._2_3_preprocessors.SPD_matrices_from_EEG_signals.utils")
    lay = "_3_data_management._3_2_data_modules.SPD_matrices_from_EEG_signals.layers"
    augment = _authors_import(path, f"{lay}.MatrixAugmentationLayer").MatrixAugmentationLayer()
    whiten = _authors_import(path, f"{lay}.MatrixWhiteningLayer").MatrixWhiteningLayer()
    vectorise = _authors_import(path, f"{lay}.MatrixVectorizationLayer").MatrixVectorizationLayer()
    augment.setup(matrix_size=x.shape[1], augmentation_size=1, initial_augmentation_factor=alpha)
    whiten.setup(matrix_size=x.shape[1] + 1, operate_whitening=True, extra_dimensions=1,
                 matrix_multiplication_factor=beta)
    vectorise.setup(matrix_size=x.shape[1] + 1, svd_singular_value_minimum=eps)
    n_ep, n, t = x.shape
    signal = x.transpose(1, 0, 2).reshape(n, -1)
    channels = [("none", None)] + [("bandpass_filtering", [lo, hi]) for lo, hi in SPD_BANDS.values()]
    c0, t0 = _cpu_seconds(), time.perf_counter()
    z = u.signal_preprocessing(signal, "z_score_normalization")
    covs, psds = [], []
    for kind, cfg in channels:
        sig = u.channel_wise_signal_transformation(z, kind, cfg, sampling_frequency=sfreq)
        windows, shape = u.batch_windowed_signal_reformatting(u.subdivide_signal(sig, t // 30, 30))
        covs.append(u.batch_windowed_signal_to_covariance_matrices(windows, shape, "cov", None))
        psds.append(u.batch_windowed_signal_to_statistic_vectors(windows, shape, "psd",
                                                                 sampling_frequency=sfreq))
    t1 = time.perf_counter()
    means = np.stack([u.batch_spd_matrices_affine_invariant_mean(c) for c in covs])
    mean_psd = np.stack([u.batch_vectors_euclidean_mean(p) for p in psds])
    t2 = time.perf_counter()
    with torch.no_grad():
        ref = augment(torch.Tensor(means), torch.Tensor(mean_psd).unsqueeze(-1))
        cov_t, psd_t = (
            torch.Tensor(np.stack(covs)),
            torch.Tensor(np.stack(psds)),
        )  # (C, E, S, n, n), (C, E, S, n)
        out = [vectorise(whiten(augment(cov_t[:, e], psd_t[:, e].unsqueeze(-1)), ref)) for e in range(n_ep)]
    t3 = time.perf_counter()
    return torch.stack(out).numpy(), {"covariances_s": t1 - t0, "reference_s": t2 - t1, "tokens_s": t3 - t2,
                                      "total_s": t3 - t0, "total_cpu_s": _cpu_seconds() - c0}


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
    chans = [cont] + [sps.sosfiltfilt(sps.butter(4, [lo / 128, hi / 128],
                                                 "bandpass", output="sos"), cont, axis=-1)
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


def _load() -> list[str]:
    return open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else []


def _ratio(rows: dict[str, Any], a: str, b: str, key: str) -> float | None:
    sa, sb = rows.get(a, {}).get(key), rows.get(b, {}).get(key)
    return sa / sb if sa and sb else None


def _one_recording(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    x, starts = recording(args.epochs, seed)
    out: dict[str, Any] = {"seed": seed, "load_before": _load()}
    tok_code = None
    for name in (["authors"] if args.authors else []) + ["ours", "ours_code"]:
        if name == "authors":
            theirs, out["authors"] = authors_tokens(args.authors, x)
        elif name == "ours":
            _, out["ours"] = ours_tokens(x, starts)
        else:
            tok_code, out["ours_code"] = ours_tokens(x, starts, code=True)
        print(f"recording {seed}", name, json.dumps(out[name]), flush=True)
    if args.authors and tok_code is not None:
        diff = np.abs(tok_code - theirs)  # (E, C, S, 45)
        out["token_max_abs_diff"] = float(diff.max())
        out["token_max_abs_diff_per_channel"] = [float(d) for d in diff.max(axis=(0, 2, 3))]
        out["token_scale"] = float(np.abs(theirs).max())
        for k in ("ours", "ours_code"):
            out[f"speedup_{k}"] = out["authors"]["total_s"] / out[k]["total_s"]
            out[f"speedup_cpu_{k}"] = out["authors"]["total_cpu_s"] / out[k]["total_cpu_s"]
            print(f"recording {seed}: authors / {k} = {out[f'speedup_{k}']:.2f}x wall, "
                  f"{out[f'speedup_cpu_{k}']:.2f}x CPU", flush=True)
    if args.per_epoch_baseline:
        _, out["per_epoch"] = per_epoch_tokens(x)
    out["load_after"] = _load()
    return out


def preprocessing_report(args: argparse.Namespace) -> dict[str, Any]:
    """Ours (paper options, code options) and theirs (``--authors``) on ``--recordings`` recordings, one
    after the other in this process (the first pays each code's first-call costs: thread pools, malloc
    arenas, page faults; later ones are what a corpus run sees per recording), tokens compared."""
    return {"epochs": args.epochs,
            "recordings": [_one_recording(args, seed) for seed in range(args.recordings)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", default=None, help="local copy of github MathieuSeraphim/SPDTransNet")
    parser.add_argument("--configs", nargs="+", default=["authors@4", "ours@4", "ours_ckpt@32"],
                        help="VARIANT@BATCH training configurations, each in a fresh process, run in this "
                             "order "
                             "--repeats times (variants: authors, ours, ours_ckpt, sdpa, stored_maps)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over --configs (interleaved)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per process (median reported)")
    parser.add_argument("--steps-large", type=int, default=1, help="steps per process at batch >= 16")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in every process (default: torch's)")
    parser.add_argument("--context", type=int, default=21, help="L, epochs per sequence (paper's best: 21)")
    parser.add_argument("--epochs", type=int, default=960,
                        help="epochs of the synthetic recording (960 = 8 h)")
    parser.add_argument("--recordings", type=int, default=1,
                        help="recordings (seeds 0, 1, ...) preprocessed one after the other by each code")
    parser.add_argument("--per-epoch-baseline", action="store_true",
                        help="also time our maths written one epoch at a time with scipy/pyriemann")
    parser.add_argument("--warmup", type=int, default=0,
                        help="untimed training steps before the timed ones (use >= 2 on a GPU)")
    parser.add_argument("--check", action="store_true",
                        help="first compare each --configs variant on this device with a float64 CPU "
                             "reference")
    parser.add_argument("--max-batch", nargs="+", default=[], metavar="VARIANT",
                        help="(GPU) find the largest batch whose training step fits, for each variant")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-preprocessing", action="store_true")
    args = parser.parse_args()
    configs = [c for c in args.configs if args.authors or not c.startswith("authors@")]
    if args.threads:  # the preprocessing runs in this process (ours chunks its batched eigh over the threads)
        torch.set_num_threads(args.threads)
    from biosig_lightning.accel import jacobi

    # which eigendecomposition our preprocessing used: the numba Jacobi kernel (the 'fast' extra) or torch's
    # (BIOSIG_NUMBA=0 or numba absent)
    report: dict[str, Any] = {"threads": args.threads or torch.get_num_threads(), "cpus": os.cpu_count(),
                              "eigh": "numba jacobi" if jacobi.available() else "torch.linalg.eigh"}
    print(f"our preprocessing's eigh: {report['eigh']}", flush=True)
    if args.check:
        report["check"] = check(sorted({c.split("@")[0] for c in configs}))
    if not args.skip_preprocessing:
        report["preprocessing"] = preprocessing_report(args)
    if not args.skip_train:
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for _ in range(args.repeats):
            for c in configs:
                variant, batch = c.split("@")
                load = _load()
                steps = args.steps if int(batch) < 16 else args.steps_large
                r = _in_subprocess(variant, int(batch), steps, args.context, args.authors, args.threads,
                                   warmup=args.warmup)
                r["load_before"] = load
                runs[c].append(r)
                print(f"{c:16s} {json.dumps(r)}", flush=True)
        rows = {
            c: {
                "step_s": float(np.median([r["step_s"] for r in rs if "step_s" in r] or [np.nan])),
                "step_cpu_s": float(
                    np.median([r["step_cpu_s"] for r in rs if "step_cpu_s" in r] or [np.nan])
                ),
                "peak_rss_gib": max([r.get("peak_rss_gib", 0.0) for r in rs]),
                "runs": rs,
            }
            for c, rs in runs.items()
        }
        for b in sorted({c.split("@")[1] for c in configs}):
            for ours in ("ours", "ours_bf16"):
                ratio = _ratio(rows, f"authors@{b}", f"{ours}@{b}", "step_s")
                ratio_cpu = _ratio(rows, f"authors@{b}", f"{ours}@{b}", "step_cpu_s")
                if ratio:
                    rows[f"authors/{ours}@{b}"] = {"step_ratio": ratio, "step_cpu_ratio": ratio_cpu}
                    print(
                        f"batch {b}: authors' step / {ours} = {ratio:.2f}x wall, {ratio_cpu:.2f}x CPU",
                        flush=True,
                    )
        report["train"] = rows
    if args.max_batch:
        if not torch.cuda.is_available():
            parser.error("--max-batch needs a GPU (on the CPU the limit is RAM; see peak_rss_gib)")
        report["max_batch"] = {v: max_batch(v, args) for v in args.max_batch}
        for v, r in report["max_batch"].items():
            print(f"largest batch {v}: {r['largest']} ({r.get('step_s', float('nan')):.3f} s/step, "
                  f"{r.get('peak_gpu_gib', float('nan')):.1f} GiB)", flush=True)
    print("RESULTS", json.dumps(report))


if __name__ == "__main__":
    main()
