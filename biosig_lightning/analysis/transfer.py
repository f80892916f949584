"""Cross-dataset transfer of a frozen backbone by linear probing (``biosig transfer``).

SD-Former (Sharma, Sec. 3 and Sec. 7.2, Table 3) measures transfer as follows: train the
backbone on a source dataset, freeze it, fit a linear probe on a target dataset and report
the probe's test F1 / AUROC (CHB-MIT -> Sleep-EDF and Sleep-EDF -> CHB-MIT). This module does
exactly that for any finished ``biosig fit`` run whose backbone has ``forward_features``:

1. the source run is reopened with :func:`biosig_lightning.runs.load_run` (trained weights,
   eval mode); every backbone parameter is frozen (``requires_grad = False``) and features
   are computed under ``torch.no_grad()``, so probing cannot change the backbone;
2. the target DataModule is built from the target YAML(s) (only their ``data`` section; the
   subject split and normalisation are the target config's own);
3. target windows are adapted to the source input shape by the rule below, and the pooled
   ``forward_features`` of every target window are computed once per split;
4. a logistic-regression probe (feature standardisation fitted on target train windows, then
   one ``nn.Linear``, cross-entropy, AdamW) is trained on the target train split, with early
   stopping on the target validation split (best epoch kept);
5. the probe is evaluated on the target test split with the project's metrics
   (:func:`biosig_lightning.metrics.build_metrics`), and ``transfer.json`` (plus the probe's
   weights, ``probe.pt``) is written atomically.

Target windows are adapted to the source input by one rule for both directions (channels by nearest
10-20 position, polyphase resampling, segmenting or mirror tiling to the source length, per-window
z-scoring where the source used it): :class:`WindowAdapter`.

The probe settings the paper leaves open are :class:`ProbeSettings`' defaults.
"""

from __future__ import annotations

import copy
import io
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from biosig_lightning.atomic_io import atomic_write_bytes, atomic_write_json
from biosig_lightning.metrics import METRIC_KEYS, build_metrics
from biosig_lightning.runs import RunError, load_run
from biosig_lightning.yaml_io import parse_yaml

__all__ = [
    "ChannelMapping",
    "LinearProbe",
    "ProbeSettings",
    "TransferError",
    "TransferResult",
    "WindowAdapter",
    "build_target_datamodule",
    "fit_probe",
    "map_channels",
    "transfer",
]

RULE = (
    "channels: each source input channel is fed by the target channel whose 10-20 template position "
    "(electrode, or midpoint of a bipolar pair) is nearest (ties: same name, else first listed; "
    "unplaceable channel sets: exact name); time: target windows resampled to the source rate "
    "(polyphase, anti-aliased) and cut into ceil(T'/T_s) evenly spaced source-length segments whose "
    "features are averaged; windows shorter than the source window are mirror-tiled to its length; "
    "segments are z-scored per channel when the source run used window normalisation"
)


class TransferError(ValueError):
    """Bad ``biosig transfer`` input: source run, target config or a channel that cannot be mapped."""


# --------------------------------------------------------------------------- channel mapping


@dataclass(frozen=True)
class ChannelMapping:
    """Which target channel feeds each source input channel (the rule: :class:`WindowAdapter`).

    ``index[i]`` is the target channel index for source channel ``i``; ``distance_mm[i]`` is
    the distance between the two template positions (``None`` when matched by name).
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    index: tuple[int, ...]
    method: str  # "nearest-midpoint" or "name"
    distance_mm: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "pairs": [
                {"source": s, "target": self.target[j], "target_index": j,
                 "distance_mm": None if d is None else round(d, 2)}
                for s, j, d in zip(self.source, self.index, self.distance_mm, strict=True)
            ],
        }


def _name_key(name: str) -> str:
    words = name.strip().upper().split()
    if len(words) > 1 and words[0] in ("EEG", "ECG", "EKG"):
        words = words[1:]
    return "".join(words)


def map_channels(source: Sequence[str], target: Sequence[str]) -> ChannelMapping:
    """Nearest-midpoint channel mapping from ``target`` channels onto ``source`` inputs.

    Raises:
        TransferError: when either set cannot be placed on the 10-20 template and a source
            channel has no target channel of the same name (the message lists them).
    """
    from biosig_lightning.features.montage import electrode_positions

    source, target = tuple(source), tuple(target)
    if not source or not target:
        raise TransferError(f"channel mapping needs channels on both sides, got source={source} "
                            f"target={target}")
    try:
        src_pos = electrode_positions(source)
        tgt_pos = electrode_positions(target)
    except ValueError as err:
        keys: dict[str, int] = {}
        for j, name in enumerate(target):
            keys.setdefault(_name_key(name), j)
        missing = [s for s in source if _name_key(s) not in keys]
        if missing:
            raise TransferError(
                f"cannot map source channels {missing} onto target channels {list(target)}: they are neither "
                f"placeable on the 10-20 template ({err}) nor present by name"
            ) from err
        index = tuple(keys[_name_key(s)] for s in source)
        return ChannelMapping(source, target, index, "name", (None,) * len(source))
    dist = np.linalg.norm(src_pos[:, None, :] - tgt_pos[None, :, :], axis=-1)
    nearest_index: list[int] = []
    distance: list[float] = []
    for i, name in enumerate(source):
        nearest = np.flatnonzero(dist[i] <= dist[i].min() + 1e-9)
        same = [j for j in nearest if _name_key(target[j]) == _name_key(name)]
        j = int(same[0] if same else nearest[0])
        nearest_index.append(j)
        distance.append(float(dist[i, j] * 1000.0))
    return ChannelMapping(source, target, tuple(nearest_index), "nearest-midpoint", tuple(distance))


# --------------------------------------------------------------------------- window adapter


class WindowAdapter:
    """Target windows ``(B, C_t, T_t)`` -> source-shaped segments ``(B, n_segments, C_s, T_s)``.

    Montage and shape rule (one rule for both directions; recorded in ``transfer.json``):

    * **Channels.** Source input channel ``i`` is fed by the target channel whose position on
      the standard 10-20 template is nearest to source channel ``i``'s position
      (:func:`biosig_lightning.features.montage.electrode_positions`: a referential channel sits at
      its electrode, a bipolar channel at the midpoint of its two electrodes). Ties (CHB-MIT
      records ``T7-P7`` and ``P7-T7`` at one midpoint) go to the target channel with the same
      name, else to the first listed, so a same-montage transfer is the identity. A target
      channel may feed several source inputs (CHB-MIT -> Sleep-EDF feeds the 23 bipolar inputs
      from Fpz-Cz and Pz-Oz). Channel sets that cannot be placed on the template (ECG leads,
      synthetic ``ch0`` names) are matched by exact name instead, and a source channel with no
      same-named target channel is an error.
    * **Sampling rate.** Target windows are resampled to the source rate with an anti-aliased
      polyphase filter (``scipy.signal.resample_poly``; 256 -> 100 Hz is ``25/64``).
    * **Length.** A resampled window of ``T'`` samples that is at least the source window
      ``T_s`` is cut into ``n = ceil(T' / T_s)`` source-length segments with evenly spaced
      starts covering the whole window (the last one overlaps its neighbour when ``T_s`` does
      not divide ``T'``; a 30 s Sleep-EDF epoch gives 15 CHB-MIT-sized 2 s segments); the
      backbone features of the segments are averaged. A window shorter than the source window
      (a 2 s CHB-MIT window for a 30 s Sleep-EDF backbone) is extended to ``T_s`` by **mirror
      tiling** (``x, reversed x, x, ...``). *Why not zero padding:* SD-Former's tokens are log
      band-power trajectories over fixed frames; padding would leave most frames silent, with log
      powers at the floor that the backbone (and its BatchNorm statistics) never saw, and the
      pooled feature would describe the padding. Periodic tiling keeps the window's content in
      every frame but puts a jump at every seam (a broadband artefact); mirror tiling is
      continuous at the seams and keeps the window's amplitude distribution and, up to the
      seams' edge effects, its band powers.
    * **Scale.** When the source run z-scored each window per channel (data
      ``normalization: window``, the default), every segment is z-scored per channel again, so
      the backbone sees the input statistics it was trained on; otherwise segments keep the
      target DataModule's normalisation.

    Applies the channel mapping, resampling, segmentation or mirror tiling and the optional
    per-segment z-score described above.
    """

    def __init__(self, mapping: ChannelMapping, *, source_sfreq: float, source_n_times: int,
                 target_sfreq: float, target_n_times: int, renormalise: bool) -> None:
        ratio = Fraction(float(source_sfreq) / float(target_sfreq)).limit_denominator(1000)
        self.up, self.down = ratio.numerator, ratio.denominator
        self.mapping = mapping
        self.source_sfreq, self.target_sfreq = float(source_sfreq), float(target_sfreq)
        self.source_n_times, self.target_n_times = int(source_n_times), int(target_n_times)
        self.resampled_n_times = math.ceil(self.target_n_times * self.up / self.down)
        self.renormalise = renormalise
        t_res, t_src = self.resampled_n_times, self.source_n_times
        if t_res >= t_src:
            n = math.ceil(t_res / t_src)
            self.starts = np.round(np.linspace(0, t_res - t_src, n)).astype(np.int64)
            self.tile_index = None
        else:
            self.starts = np.zeros(1, dtype=np.int64)
            period = np.arange(t_src) % (2 * t_res)
            self.tile_index = np.where(period < t_res, period, 2 * t_res - 1 - period)

    @property
    def n_segments(self) -> int:
        return len(self.starts)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 3 or x.shape[1] != len(self.mapping.target) or x.shape[2] != self.target_n_times:
            raise TransferError(
                f"target batch of shape {tuple(x.shape)}; expected (batch, {len(self.mapping.target)}, "
                f"{self.target_n_times}) (sequence context is not supported)"
            )
        data = x.detach().cpu().numpy()[:, list(self.mapping.index), :]
        if (self.up, self.down) != (1, 1):
            from scipy.signal import resample_poly

            data = resample_poly(data, self.up, self.down, axis=-1)[..., : self.resampled_n_times]
        if self.tile_index is not None:
            segments = data[:, None, :, self.tile_index]
        else:
            segments = np.stack([data[..., s : s + self.source_n_times] for s in self.starts], axis=1)
        if self.renormalise:
            mean = segments.mean(axis=-1, keepdims=True)
            std = segments.std(axis=-1, keepdims=True)
            segments = (segments - mean) / (std + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(segments, dtype=np.float32))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": RULE,
            "channels": self.mapping.to_dict(),
            "resample": {"from_hz": self.target_sfreq, "to_hz": self.source_sfreq, "up": self.up,
                         "down": self.down, "method": "scipy.signal.resample_poly"},
            "time": {"target_n_times": self.target_n_times, "resampled_n_times": self.resampled_n_times,
                     "source_n_times": self.source_n_times, "n_segments": self.n_segments,
                     "segment_starts": self.starts.tolist(),
                     "extension": "mirror-tile" if self.tile_index is not None else "none",
                     "pooling": "mean of segment features"},
            "renormalise_segments": self.renormalise,
        }


# --------------------------------------------------------------------------- target data


def build_target_datamodule(configs: Sequence[str | Path], overrides: Sequence[str] = ()) -> Any:
    """Instantiate the ``data`` section of one or more experiment YAMLs (later files override).

    Only ``data`` is read, so a full experiment YAML (model, trainer, ...) can be named as the
    target; ``overrides`` are extra command-line arguments such as ``--data.init_args.root=/x``.
    """
    from lightning.pytorch.cli import LightningArgumentParser

    import biosig_lightning.data.datamodules  # noqa: F401  (registers the short class names)
    from biosig_lightning.data.module import BiosignalDataModule

    args: list[str] = []
    for path in configs:
        path = Path(path)
        if not path.is_file():
            raise TransferError(f"target config {path} not found")
        try:
            loaded = parse_yaml(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise TransferError(f"{path}: not valid YAML ({err})") from err
        if not isinstance(loaded, dict):
            raise TransferError(f"{path}: expected a mapping at the top level")
        if loaded.get("data") is not None:
            args += ["--data", json.dumps(loaded["data"])]
    if not args:
        raise TransferError(f"no `data:` section in the target config(s) {[str(c) for c in configs]}")
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(BiosignalDataModule, "data", required=True, fail_untyped=False)
    try:
        cfg = parser.parse_args(args + list(overrides))
    except Exception as err:  # jsonargparse reports every config problem as its own error type
        raise TransferError(f"target config {[str(c) for c in configs]}: {err}") from err
    return parser.instantiate(cfg).data


def _split_loader(dm: Any, split: str, batch_size: int) -> torch.utils.data.DataLoader:
    """An unshuffled, unsampled loader over one split of a set-up BiosignalDataModule."""
    from biosig_lightning.data.module import collate_batch

    return torch.utils.data.DataLoader(dm.datasets[split], batch_size=batch_size, shuffle=False,
                                       collate_fn=collate_batch, num_workers=dm.num_workers)


@torch.no_grad()
def extract_features(backbone: nn.Module, loader: Any, adapter: WindowAdapter, device: torch.device,
                     chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pooled frozen features ``(N, D)`` and labels ``(N,)`` of every window a loader yields."""
    model: Any = backbone  # any backbone with forward_features (BiosignalModel's feature interface)
    feats, labels = [], []
    for batch in loader:
        segments = adapter(batch["x"])  # (B, n, C_s, T_s)
        b, n = segments.shape[:2]
        flat = segments.reshape(b * n, *segments.shape[2:])
        out = torch.cat([model.forward_features(flat[i : i + chunk].to(device)).float().cpu()
                         for i in range(0, flat.shape[0], chunk)])
        feats.append(out.view(b, n, -1).mean(dim=1))
        labels.append(batch["y"].long())
    return torch.cat(feats), torch.cat(labels)


# --------------------------------------------------------------------------- probe


class LinearProbe(nn.Module):
    """Logistic regression on standardised features: ``W (f - mu) / sigma + b``.

    ``mu`` and ``sigma`` are fitted on the target training features and stored as buffers,
    so the saved probe is self-contained.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, feature_dim: int, n_classes: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(feature_dim))
        self.register_buffer("std", torch.ones(feature_dim))
        self.linear = nn.Linear(feature_dim, n_classes)

    def fit_standardisation(self, features: torch.Tensor) -> None:
        self.mean.copy_(features.mean(0))
        self.std.copy_(features.std(0, unbiased=False).clamp_min(1e-6))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.mean) / self.std)


@dataclass(frozen=True)
class ProbeSettings:
    """Optimisation of the linear probe.

    Probe settings the paper leaves open (our defaults, all options): AdamW, ``lr=1e-3``,
    ``weight_decay=1e-4``, batch 256, up to 100 epochs, patience 10 on the validation
    cross-entropy (``--monitor loss``; any metric key may be chosen instead), no class weights
    (``--class-weight balanced`` is available). Table 3's Sleep-EDF -> CHB-MIT macro F1 of
    0.440 +- 0.033 for four of five models is what a probe that always predicts "background"
    scores (``F1 = p / (1 + p)`` for a background fraction ``p``, 0.44 at ``p ~ 0.79``), which
    suggests the paper's probe was unweighted; note that this makes F1 uninformative in that
    direction, and AUROC the number to read.
    """

    lr: float = 1e-3
    weight_decay: float = 1e-4
    epochs: int = 100
    patience: int = 10
    batch_size: int = 256
    monitor: str = "loss"
    class_weight: str = "none"
    seed: int | None = None  # None: the source run's seed


def _evaluate(probe: LinearProbe, feats: torch.Tensor, labels: torch.Tensor, n_classes: int,
              prefix: str) -> dict[str, float]:
    """All metrics of :func:`build_metrics` plus the cross-entropy, keyed ``prefix + name``."""
    with torch.no_grad():
        logits = probe(feats)
        metrics = build_metrics(n_classes, prefix=prefix)
        metrics.update(logits.softmax(-1), labels)
        out = {k: float(v) for k, v in metrics.compute().items()}
        out[f"{prefix}loss"] = float(F.cross_entropy(logits, labels))
    return out


def _monitor_value(probe: LinearProbe, feats: torch.Tensor, labels: torch.Tensor, monitor: str,
                   metrics: Any) -> float:
    """One validation quantity; the loss path skips the metric collection (it runs every epoch)."""
    with torch.no_grad():
        logits = probe(feats)
        if monitor == "loss":
            return float(F.cross_entropy(logits, labels))
        metrics.reset()
        metrics.update(logits.softmax(-1), labels)
        return float(metrics.compute()[monitor])


def fit_probe(train: tuple[torch.Tensor, torch.Tensor], val: tuple[torch.Tensor, torch.Tensor],
              n_classes: int, settings: ProbeSettings) -> tuple[LinearProbe, dict[str, Any]]:
    """Train a :class:`LinearProbe` on ``train`` features with early stopping on ``val``.

    Returns the probe at its best validation epoch and a summary (best epoch, epochs run,
    validation metrics at the best epoch). A ``nan`` monitor value (e.g. AUROC on a
    one-class validation split) never counts as an improvement.
    """
    if settings.monitor != "loss" and settings.monitor not in METRIC_KEYS:
        raise TransferError(f"--monitor must be 'loss' or one of {list(METRIC_KEYS)}, got "
                            f"{settings.monitor!r}")
    minimise = settings.monitor in ("loss", "ece")
    x_tr, y_tr = train
    seed = settings.seed or 0
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the caller's RNG
        torch.manual_seed(seed)
        probe = LinearProbe(x_tr.shape[1], n_classes)
    probe.fit_standardisation(x_tr)
    weight = None
    if settings.class_weight == "balanced":
        counts = torch.bincount(y_tr, minlength=n_classes).float()
        weight = torch.where(counts > 0, counts.sum() / (n_classes * counts.clamp_min(1)),
                             torch.zeros_like(counts))
    elif settings.class_weight != "none":
        raise TransferError(f"--class-weight must be 'none' or 'balanced', got {settings.class_weight!r}")
    metrics = build_metrics(n_classes) if settings.monitor != "loss" else None
    opt = torch.optim.AdamW(probe.linear.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    best_score, best_state, best_epoch, stale, epoch = math.inf, copy.deepcopy(probe.state_dict()), 0, 0, 0
    for epoch in range(1, settings.epochs + 1):
        probe.train()
        for idx in torch.randperm(len(y_tr), generator=generator).split(settings.batch_size):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(probe(x_tr[idx]), y_tr[idx], weight=weight).backward()
            opt.step()
        probe.eval()
        value = _monitor_value(probe, *val, settings.monitor, metrics)
        score = value if minimise else -value
        if math.isfinite(score) and score < best_score:
            best_score, best_state, best_epoch, stale = score, copy.deepcopy(probe.state_dict()), epoch, 0
        else:
            stale += 1
            if stale >= settings.patience:
                break
    probe.load_state_dict(best_state)
    probe.eval()
    summary = {"best_epoch": best_epoch, "epochs_run": epoch,
               "val": _evaluate(probe, *val, n_classes, "val/")}
    return probe, summary


@dataclass
class TransferResult:
    """What :func:`transfer` produced: the report written to ``transfer.json``, its path, the
    frozen backbone that was probed and the fitted probe."""

    report: dict[str, Any]
    path: Path
    backbone: nn.Module
    probe: LinearProbe


def transfer(source: str | Path, target_configs: Sequence[str | Path], *, overrides: Sequence[str] = (),
             out: str | Path | None = None, checkpoint: str = "best", settings: ProbeSettings | None = None,
             device: str | None = None) -> TransferResult:
    """Linear-probe transfer of ``source``'s frozen backbone to the data of ``target_configs``.

    ``settings=None`` uses the :class:`ProbeSettings` defaults; a ``None`` seed becomes the
    source run's seed.
    Writes ``transfer.json`` and ``probe.pt`` into ``out`` (default
    ``source/transfer/<target dataset>``); the module docstring lists the steps.
    """
    started = time.perf_counter()
    configs = [Path(c) for c in target_configs]
    target = build_target_datamodule(configs, overrides)  # config errors first: cheaper than a model
    if getattr(target, "context", 0):
        raise TransferError("target data with sequence context (data.init_args.context > 0) is not supported")
    try:
        loaded = load_run(source, checkpoint=checkpoint)
    except RunError as err:
        raise TransferError(f"--source: {err}") from err
    backbone = getattr(loaded.task, "backbone", None)
    if backbone is None or not callable(getattr(backbone, "forward_features", None)):
        raise TransferError(f"--source {source}: the run's backbone "
                            f"({type(backbone).__name__}) has no forward_features(x); cannot probe it")
    src_dm, results = loaded.datamodule, loaded.results
    if getattr(src_dm, "context", 0):
        raise TransferError(f"--source {source}: runs with sequence context are not supported")
    settings = settings or ProbeSettings()
    if settings.seed is None:
        settings = replace(settings, seed=int(results.get("seed") or 0))
    torch_device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # eval mode matters beyond dropout: SD-Former's tokenizer BatchNorm would otherwise update
    # its running statistics on target data even under no_grad
    backbone.eval().to(torch_device)
    for p in backbone.parameters():
        p.requires_grad_(False)

    target.prepare_data()
    target.setup("fit")
    src_spec, tgt_spec = src_dm.spec, target.spec
    mapping = map_channels(src_spec.ch_names, tgt_spec.ch_names)
    adapter = WindowAdapter(mapping, source_sfreq=src_spec.sfreq, source_n_times=src_spec.n_times,
                            target_sfreq=tgt_spec.sfreq, target_n_times=tgt_spec.n_times,
                            renormalise=getattr(src_dm, "normalization", None) == "window")
    feats = {split: extract_features(backbone, _split_loader(target, split, settings.batch_size), adapter,
                                     torch_device, settings.batch_size)
             for split in ("train", "val", "test")}
    n_classes = tgt_spec.n_outputs
    probe, summary = fit_probe(feats["train"], feats["val"], n_classes, settings)
    metrics = _evaluate(probe, *feats["test"], n_classes, "test/")

    out_dir = Path(out) if out is not None else Path(source) / "transfer" / target.dataset_name
    buf = io.BytesIO()
    torch.save(probe.state_dict(), buf)
    atomic_write_bytes(out_dir / "probe.pt", buf.getvalue())
    report = {
        "source": {"run_dir": str(source), "checkpoint": str(loaded.checkpoint),
                   "model": results.get("model", type(backbone).__name__),
                   "dataset": results.get("dataset", src_dm.dataset_name), "seed": results.get("seed"),
                   "spec": src_spec.to_dict()},
        "target": {"dataset": target.dataset_name, "configs": [str(c) for c in configs],
                   "overrides": list(overrides), "spec": tgt_spec.to_dict(),
                   "subjects": {k: list(map(int, v)) for k, v in target.subjects.items()},
                   "windows": {s: int(len(feats[s][1])) for s in feats}},
        "mapping": adapter.to_dict(),
        "probe": {**asdict(settings), "kind": "logistic regression on standardised frozen features",
                  "optimizer": "adamw", "feature_dim": int(feats["train"][0].shape[1]),
                  "best_epoch": summary["best_epoch"], "epochs_run": summary["epochs_run"],
                  "path": str(out_dir / "probe.pt")},
        "backbone_frozen": True,
        "metrics": _finite(metrics),
        "val_metrics": _finite(summary["val"]),
        "seconds": round(time.perf_counter() - started, 3),
        "device": str(torch_device),
    }
    path = atomic_write_json(out_dir / "transfer.json", report)
    return TransferResult(report=report, path=path, backbone=backbone, probe=probe)


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    """JSON has no NaN: undefined metrics (AUROC with one class present) become null."""
    return {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
