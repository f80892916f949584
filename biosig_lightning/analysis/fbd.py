"""``biosig fbd``: Frequency-Band Discriminability of a trained run (BioFormer Sec. 5.4, Appendix F).

``biosig fbd RUN_DIR [--split test] [--out DIR] [--bin-hz 2] [--layer final|scln|input]
[--bands SPEC] [--demean] [--checkpoint best] [--batch-size 256] [--device auto]`` reopens the run
with :func:`biosig_lightning.runs.load_run`, passes the windows of one split through the frozen
backbone and writes ``fbd.json`` and ``fbd.png`` to ``--out`` (default ``RUN_DIR/analysis``).

Definitions (Appendix F). For a representation ``z`` with ``D`` channels over ``L`` time steps
sampled at ``fs``:

* ``PSD_d(f) = |F{z_d}|^2`` (Eq. 14), on 2 Hz bins ``b_k = [2k, 2k + 2)`` covering
  ``[0, fs/2]`` (Eq. 15);
* band power of one window ``E_b = (1/D) sum_d int_{f in b} PSD_d(f) df`` (Eq. 16), averaged
  over the windows of subject ``s`` with class ``y`` into ``E_b^(y,s)``;
* ``Intra(b) = (1/C) sum_y Std_s E_b^(y,s)`` (Eq. 17), ``mu_b^(y) = mean_s E_b^(y,s)`` (Eq. 18),
  ``Inter(b) = max_y mu_b^(y) - min_y mu_b^(y)`` (Eq. 19),
  ``FBD(b) = Inter(b) / (Intra(b) + eps)`` (Eq. 20), ``FBD > 1`` meaning class structure
  dominates subject variation in that bin;
* band-level FBD: the mean of the bin FBDs inside a wider band ("Band-Level Aggregation").

FBD is computed twice: on the input windows (as the model sees them, after the run's
normalisation: "before alignment") and on the final-layer embeddings ("after alignment").

The readings chosen where the paper is silent or ambiguous (PSD scaling, DC, bin edges, the subject
spread, the embedding's time axis, layers, bands) are listed in :func:`compute_fbd`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from biosig_lightning.features.spectral import EEG_BANDS
from biosig_lightning.runs import LoadedRun

__all__ = [
    "DEFAULT_BANDS",
    "AnalysisError",
    "FBDResult",
    "band_power",
    "band_summary",
    "fbd_from_band_power",
    "parse_bands",
    "resolve_device",
    "split_batches",
]

EPS = 1e-12
LAYERS = ("final", "scln", "input")
SPLIT_CHOICES = ("train", "val", "test", "all")
Band = tuple[str, float, float]
DEFAULT_BANDS: tuple[Band, ...] = (("low", 0.0, 20.0),) + tuple(EEG_BANDS)


class AnalysisError(ValueError):
    """Bad input to an analysis command (one line, names the run, split, layer or key)."""


# --------------------------------------------------------------------------- the math


def band_power(z: np.ndarray, fs: float,
               bin_hz: float = 2.0, demean: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Band power ``E_b`` of every window (Eqs. 14-16).

    Args:
        z: ``(N, D, L)`` -- ``N`` windows, ``D`` channels, ``L`` time steps.
        fs: sampling rate of the last axis in Hz.
        bin_hz: bin width (2 Hz in the paper).
        demean: remove each channel's mean before the FFT (reading 2 of :func:`compute_fbd`).

    Returns:
        ``(E, edges)``: ``E`` of shape ``(N, n_bins)`` (NaN for bins holding no FFT frequency)
        and the ``n_bins + 1`` bin edges in Hz, the last one at Nyquist.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 3 or z.shape[-1] < 2:
        raise AnalysisError(f"band_power expects z of shape (N, D, L) with L >= 2, got {z.shape}")
    if not fs > 0 or not bin_hz > 0:
        raise AnalysisError(f"band_power needs fs > 0 and bin_hz > 0, got fs={fs}, bin_hz={bin_hz}")
    n_steps = z.shape[-1]
    if demean:
        z = z - z.mean(axis=-1, keepdims=True)
    psd = np.abs(np.fft.rfft(z, axis=-1)) ** 2 / (fs * n_steps)
    psd[..., 1:] *= 2.0
    if n_steps % 2 == 0:
        psd[..., -1] /= 2.0  # the Nyquist bin has no mirror image
    freqs = np.fft.rfftfreq(n_steps, d=1.0 / fs)
    nyquist = fs / 2.0
    n_bins = max(1, math.ceil(nyquist / bin_hz - 1e-9))
    edges = np.minimum(bin_hz * np.arange(n_bins + 1), nyquist)
    which = np.minimum(np.floor(freqs / bin_hz + 1e-9).astype(np.int64), n_bins - 1)
    onehot = np.zeros((freqs.size, n_bins))
    onehot[np.arange(freqs.size), which] = 1.0
    power = psd.mean(axis=1) @ onehot * (fs / n_steps)
    power[:, onehot.sum(axis=0) == 0] = np.nan
    return power, edges


@dataclass
class FBDResult:
    """Eqs. 17-20 for every bin, plus what went into them."""

    intra: np.ndarray
    inter: np.ndarray
    fbd: np.ndarray
    class_means: np.ndarray  # (n_classes, n_bins): mu_b^(y), Eq. 18
    classes: list[int]
    subjects_per_class: dict[int, list[int]]
    classes_without_spread: list[int]


def fbd_from_band_power(power: np.ndarray, labels: np.ndarray,
                        subjects: np.ndarray, eps: float = EPS) -> FBDResult:
    """FBD per bin (Eqs. 17-20) from per-window band powers ``(N, n_bins)``.

    Subject-class cells are averaged over their windows first; ``Std_s`` is the sample standard
    deviation over the subjects of a class, and classes with a single subject are left out of
    Eq. 17's average (readings 4-5 of :func:`compute_fbd`).
    """
    power = np.asarray(power, dtype=np.float64)
    labels = np.asarray(labels).astype(np.int64)
    subjects = np.asarray(subjects).astype(np.int64)
    if power.ndim != 2 or labels.shape != (power.shape[0],) or subjects.shape != labels.shape:
        raise AnalysisError(
            f"FBD needs power (N, n_bins) with N labels and N subjects, got {power.shape}, {labels.shape}, "
            f"{subjects.shape}"
        )
    classes = [int(c) for c in np.unique(labels)]
    if len(classes) < 2:
        raise AnalysisError(f"FBD needs windows of at least two classes, got only class(es) {classes}")
    means, spreads, members, without = [], [], {}, []
    for c in classes:
        in_class = labels == c
        subs = np.unique(subjects[in_class])
        members[c] = [int(s) for s in subs]
        cells = np.stack([power[in_class & (subjects == s)].mean(axis=0) for s in subs])
        means.append(cells.mean(axis=0))
        if len(subs) >= 2:
            spreads.append(cells.std(axis=0, ddof=1))
        else:
            without.append(c)
    if not spreads:
        raise AnalysisError(
            f"FBD needs a class with at least two subjects to measure subject spread (Eq. 17); subjects per "
            f"class: "
            f"{members}"
        )
    class_means = np.stack(means)
    intra = np.mean(np.stack(spreads), axis=0)
    inter = class_means.max(axis=0) - class_means.min(axis=0)
    return FBDResult(intra=intra, inter=inter, fbd=inter / (intra + eps), class_means=class_means,
                     classes=classes,
                     subjects_per_class=members, classes_without_spread=without)


def parse_bands(spec: str | None) -> tuple[Band, ...]:
    """``"low:0-20,alpha:8-13"`` -> bands; ``None`` -> :data:`DEFAULT_BANDS`."""
    if spec is None:
        return DEFAULT_BANDS
    bands = []
    for item in spec.split(","):
        try:
            name, rng = item.split(":")
            lo, hi = (float(v) for v in rng.split("-"))
        except ValueError:
            raise AnalysisError(
                f"--bands: cannot parse {item!r}; expected NAME:LOW-HIGH, e.g. low:0-20"
            ) from None
        if not 0 <= lo < hi:
            raise AnalysisError(f"--bands: band {name!r} needs 0 <= low < high, got {lo}-{hi}")
        bands.append((name.strip(), lo, hi))
    return tuple(bands)


def band_summary(fbd: np.ndarray, edges: np.ndarray, bands: Sequence[Band]) -> dict[str, dict[str, Any]]:
    """Band-level FBD: mean of the bin FBDs whose bin centre lies in ``[lo, min(hi, Nyquist))``.

    The last band that reaches Nyquist also takes the last bin. Bands with no (finite) bin are
    left out. ``all`` summarises every finite bin.
    """
    fbd = np.asarray(fbd, dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2.0
    nyquist = float(edges[-1])
    out: dict[str, dict[str, Any]] = {}
    for name, lo, hi in [*bands, ("all", 0.0, math.inf)]:
        hi_c = min(hi, nyquist)
        inside = (centres >= lo) & ((centres < hi_c) | ((hi >= nyquist) & (centres <= nyquist)))
        inside &= np.isfinite(fbd)
        if not inside.any():
            continue
        values = fbd[inside]
        out[name] = {"range_hz": [lo, hi_c], "n_bins": int(inside.sum()), "fbd_mean": float(values.mean()),
                     "fbd_median": float(np.median(values)), "frac_above_1": float((values > 1.0).mean())}
    return out


# --------------------------------------------------------------------------- windows of a run


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else is passed to :class:`torch.device`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise AnalysisError(f"--device: {err}") from None


def split_batches(loaded: LoadedRun, split: str, batch_size: int = 256) -> Iterator[dict[str, torch.Tensor]]:
    """Batches (``x``, ``y``, ``subject``) of one split of a reopened run, in a fixed order.

    ``split`` is ``train``, ``val``, ``test`` or ``all`` (the three, one after another). The
    windows are those the run used, normalised the same way, without training augmentation.
    """
    if split not in SPLIT_CHOICES:
        raise AnalysisError(f"--split must be one of {', '.join(SPLIT_CHOICES)}, got {split!r}")
    dm = loaded.datamodule
    names = ("train", "val", "test") if split == "all" else (split,)
    datasets = getattr(dm, "datasets", None)
    if datasets is not None:  # a BiosignalDataModule: plain, unshuffled loaders over its datasets
        from biosig_lightning.data.module import collate_batch

        dm.setup("test")
        loaders = [DataLoader(dm.datasets[n], batch_size=batch_size, shuffle=False, collate_fn=collate_batch)
                   for n in names]
    else:
        stages = {"train": "fit", "val": "validate", "test": "test"}
        loaders = []
        for n in names:
            dm.setup(stages[n])
            loaders.append(getattr(dm, f"{n}_dataloader")())
    for loader in loaders:
        for batch in loader:
            if batch["x"].ndim != 3:
                raise AnalysisError(
                    f"run {loaded.run_dir}: windows have shape {tuple(batch['x'].shape)}; the analyses need "
                    "(batch, n_chans, n_times) windows (sequence context is not supported)"
                )
            yield batch


def _token_fn(backbone: nn.Module, layer: str) -> Callable[[torch.Tensor], list[torch.Tensor]]:
    """The function giving the layer's token sequences ``[(B, L_j, D)]`` (readings 7 and 10 of
    :func:`compute_fbd`)."""
    name = type(backbone).__name__
    if layer == "final":
        tokens = getattr(backbone, "forward_tokens", None)
        if tokens is None:
            raise AnalysisError(
                f"--layer final: backbone {name} has no forward_tokens(x) -> (B, L, D) temporal embedding, "
                f"and FBD "
                "is a spectrum over time (Appendix F); BioFormer, TransformerClassifier and Medformer "
                "provide one. "
                "Use --layer input for the input FBD alone"
            )

        def final(x: torch.Tensor) -> list[torch.Tensor]:
            out = tokens(x)
            return [out] if isinstance(out, torch.Tensor) else list(out)

        return final
    if layer == "scln":
        if not all(hasattr(backbone, a) for a in ("encode", "norm", "seq_lens")):
            raise AnalysisError(f"--layer scln needs a BioFormer backbone (encode, norm, seq_lens), got "
                                f"{name}")
        bioformer: Any = backbone  # checked above: a BioFormer's encode, norm and seq_lens
        return lambda x: list(bioformer.norm(bioformer.encode(x)).split(bioformer.seq_lens, dim=1))
    raise AnalysisError(f"--layer must be one of {', '.join(LAYERS)}, got {layer!r}")


def collect_band_powers(loaded: LoadedRun, split: str, layer: str, bin_hz: float, demean: bool,
                        batch_size: int,
                        device: torch.device) -> dict[str, Any]:
    """Per-window band powers of the input and of every token branch, with labels and subjects."""
    sfreq = getattr(loaded.datamodule, "sfreq", None)
    if not sfreq:
        raise AnalysisError(f"run {loaded.run_dir}: its DataModule exposes no sfreq; FBD needs the sampling "
                            f"rate")
    backbone = loaded.task.backbone.to(device).eval()
    tokens = _token_fn(backbone, layer) if layer != "input" else None
    parts: dict[str, list[np.ndarray]] = {"y": [], "subject": [], "input": []}
    branch_power: list[list[np.ndarray]] = []
    rates: list[float] = []
    edges: dict[str, np.ndarray] = {}
    with torch.inference_mode():
        for batch in split_batches(loaded, split, batch_size):
            x = batch["x"].float()
            n_times = x.shape[-1]
            parts["y"].append(batch["y"].numpy())
            parts["subject"].append(batch["subject"].numpy())
            power, edges["input"] = band_power(x.numpy(), float(sfreq), bin_hz, demean)
            parts["input"].append(power)
            if tokens is None:
                continue
            seqs = tokens(x.to(device))
            if not branch_power:
                branch_power = [[] for _ in seqs]
                rates = [float(sfreq) * s.shape[1] / n_times for s in seqs]
            for j, seq in enumerate(seqs):
                if seq.ndim != 3:
                    raise AnalysisError(f"layer {layer}: expected token sequences (B, L, D), got "
                                        f"{tuple(seq.shape)}")
                power, edges[f"branch{j}"] = band_power(seq.float().transpose(1, 2).cpu().numpy(), rates[j],
                                                        bin_hz, demean)
                branch_power[j].append(power)
    if not parts["y"]:
        raise AnalysisError(f"run {loaded.run_dir}: split {split!r} has no windows")
    out: dict[str, Any] = {k: np.concatenate(v) for k, v in parts.items()}
    out["branches"] = [np.concatenate(p) for p in branch_power]
    out["rates"] = rates
    out["edges"] = edges
    return out


# --------------------------------------------------------------------------- report


def _finite_list(a: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in np.asarray(a, dtype=np.float64).ravel()]


def _entry(result: FBDResult, edges: np.ndarray, fs: float, bands: Sequence[Band]) -> dict[str, Any]:
    return {
        "fs_hz": fs,
        "bin_edges_hz": [float(e) for e in edges],
        "intra": _finite_list(result.intra),
        "inter": _finite_list(result.inter),
        "fbd": _finite_list(result.fbd),
        "class_mean_power": [_finite_list(row) for row in result.class_means],
        "bands": band_summary(result.fbd, edges, bands),
        "classes_without_spread": result.classes_without_spread,
    }


def plot(path: Path, report: dict[str, Any], class_names: list[str]) -> None:
    from matplotlib.figure import Figure

    views = [("input", report["input"])] + (
        [("embedding", report["embedding"])] if "embedding" in report else []
    )
    fig = Figure(figsize=(9, 3.2 * (1 + len(views))), layout="constrained")
    axes = fig.subplots(1 + len(views), 1)
    ax = axes[0]
    for (name, view), color in zip(views, ("tab:gray", "tab:red"), strict=False):
        edges = np.asarray(view["bin_edges_hz"])
        centres = (edges[:-1] + edges[1:]) / 2
        values = np.array([np.nan if v is None else v for v in view["fbd"]])
        ax.plot(centres, values, marker="o", ms=3, color=color, label=f"{name} (all-bin mean "
                f"{view['bands'].get('all', {}).get('fbd_mean', float('nan')):.2f})")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set(xlabel="frequency (Hz)", ylabel="FBD = Inter / Intra",
           title=f"FBD per {report['bin_hz']:g} Hz bin "
           f"({report['split']} split, {report['n_windows']} windows, {len(report['subjects'])} subjects)")
    ax.legend()
    for ax, (name, view) in zip(axes[1:], views, strict=True):
        edges = np.asarray(view["bin_edges_hz"])
        centres = (edges[:-1] + edges[1:]) / 2
        for cls, row in zip(report["classes"], view["class_mean_power"], strict=True):
            label = class_names[cls] if cls < len(class_names) else str(cls)
            ax.plot(centres, [np.nan if v is None else v for v in row], marker=".", label=label)
        ax.set_yscale("log")
        ax.set(xlabel="frequency (Hz)", ylabel="band power (class mean)",
               title=f"{name}: class-mean band power")
        ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def compute_fbd(loaded: LoadedRun, split: str = "test", layer: str = "final", bin_hz: float = 2.0,
                bands: Sequence[Band] = DEFAULT_BANDS, demean: bool = False, batch_size: int = 256,
                device: torch.device | None = None) -> dict[str, Any]:
    """The ``fbd.json`` report of a reopened run (definitions: the module docstring).

    Readings chosen where the paper is silent or ambiguous:

    1. PSD scaling: the one-sided periodogram density ``2 |X_k|^2 / (fs L)`` (DC and Nyquist not
       doubled) integrated as a sum times ``df = fs / L``, so that ``sum_b E_b`` is the mean
       square of ``z`` (Parseval). FBD is invariant to any global scale of the PSD; the scaling only
       makes ``E_b`` readable as power.
    2. Eq. 14 transforms ``z`` as it is, so its mean (DC) belongs to bin ``[0, 2)`` Hz;
       ``--demean`` removes each channel's mean first.
    3. Bins are half-open except the last, which also holds the Nyquist frequency. A bin that
       holds no FFT frequency (a window shorter than ``1 / bin_hz`` seconds) is NaN, never 0.
    4. ``Std_s`` in Eq. 17 is the sample standard deviation (ddof=1) over the subjects that have
       windows of class ``y``. A class with a single subject in the split has no measurable
       subject spread: it is left out of the class average (listed in the JSON under
       ``classes_without_spread``) rather than counted as 0, which would inflate FBD. When no class
       has two subjects the command fails (use ``--split all`` or a split with more subjects).
    5. ``mu_b^(y)`` (Eq. 18) weighs every subject once, whatever its number of windows.
    6. Time axis of the embedding. BioFormer's final-layer temporal embedding is three token
       sequences (pyramid branches of ``ceil(T/2)``, ``ceil(T/4)``, ``ceil(T/8)`` tokens); branch
       ``j`` with ``L_j`` tokens samples the window at ``fs_j = sfreq * L_j / n_times``. FBD is
       computed per branch (``branches`` in the JSON); the headline ``embedding`` is the finest
       branch, which spans the widest frequency range.
    7. ``--layer final`` (default) is the output of the last hybrid layer before the final
       normalisation (:meth:`BioFormer.forward_tokens`); ``--layer scln`` is after the final
       SCLN/LayerNorm (the tokens the head flattens); ``--layer input`` computes the input FBD only.
    8. Bands of the summary (``--bands``, default): the paper's low range ``0-20`` Hz (Sec. 5.4)
       and the clinical EEG bands (:data:`biosig_lightning.features.spectral.EEG_BANDS`), upper
       edges capped at Nyquist. A bin belongs to a band when its centre lies in ``[lo, hi)``.
       Each band reports the mean bin FBD and ``frac_above_1``, the share of its bins with
       ``FBD > 1`` (the red area of Fig. 6).
    9. ``eps = 1e-12`` (Eq. 20).
    10. FBD is a spectral measure, so it needs a representation that is a signal over time. BioFormer,
        the Transformer baseline (one token per time step or patch) and Medformer (one sequence per
        granularity, routers left out) provide ``forward_tokens``, so Fig. 6's comparison of methods can
        be made; a backbone without it (CNN1D, PatchTST, ...) is refused with a clear error instead of
        guessing a time axis; ``--layer input`` still works for it.

    """
    if layer not in LAYERS:
        raise AnalysisError(f"--layer must be one of {', '.join(LAYERS)}, got {layer!r}")
    if not bin_hz > 0:
        raise AnalysisError(f"--bin-hz must be positive, got {bin_hz}")
    data = collect_band_powers(loaded, split, layer, bin_hz, demean, batch_size,
                               device or torch.device("cpu"))
    y, subjects = data["y"], data["subject"]
    sfreq = float(loaded.datamodule.sfreq)
    inp = fbd_from_band_power(data["input"], y, subjects)
    report: dict[str, Any] = {
        "run_dir": str(loaded.run_dir), "checkpoint": str(loaded.checkpoint),
        "model": loaded.results.get("model"),
        "split": split, "layer": layer, "bin_hz": bin_hz, "demean": demean, "eps": EPS,
        "n_windows": int(len(y)), "subjects": sorted(int(s) for s in np.unique(subjects)),
        "classes": inp.classes, "subjects_per_class": {str(k): v for k, v in inp.subjects_per_class.items()},
        "input": _entry(inp, data["edges"]["input"], sfreq, bands),
    }
    branches = []
    for j, (power, fs) in enumerate(zip(data["branches"], data["rates"], strict=True)):
        entry = _entry(fbd_from_band_power(power, y, subjects), data["edges"][f"branch{j}"], fs, bands)
        entry["branch"] = j
        branches.append(entry)
    if branches:
        report["embedding"] = branches[0]
        report["branches"] = branches
        report["comparison"] = {
            name: {"input": band["fbd_mean"], "embedding": report["embedding"]["bands"][name]["fbd_mean"]}
            for name, band in report["input"]["bands"].items() if name in report["embedding"]["bands"]
        }
    return report
