"""``BiosignalDataModule``: the one LightningDataModule every corpus reuses.

A corpus DataModule is a thin subclass that says three things: its shape
(:meth:`corpus_spec`), how to read its public on-disk layout (:meth:`make_reader`), and its
paper's default subject split (:meth:`default_split`). Everything else lives here:
the window cache, the subject-disjoint split, normalisation, samplers, sequence context,
subject group labels and train-only augmentation.

Batches are dicts: ``x`` (B, C, T) float32 — or (B, L, C, T) with sequence context —,
``y`` (B,) int64, ``subject`` (B,) int64, ``index`` (B,) int64 (window index in the cache),
and ``group`` (B,) int64 when ``group_by`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset

from biosig_lightning.data.cache import WindowCache, load_or_build
from biosig_lightning.data.samplers import ClassBalancedSampler
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, DataError
from biosig_lightning.data.splits import SplitConfig, SplitError, split_fingerprint, split_subjects
from biosig_lightning.data.synthetic import SyntheticReader, infer_kind
from biosig_lightning.data.transforms import Augment, Normalization, channel_stats

GroupBy = Literal["none", "subject", "subject_class"]
SPLITS = ("train", "val", "test")


def default_cache_dir() -> Path:
    """``$BIOSIG_CACHE`` if set, else ``~/.cache/biosig_lightning``."""
    env = os.environ.get("BIOSIG_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "biosig_lightning"


class WindowDataset(Dataset):
    """Windows of one split, served a whole batch at a time.

    ``__getitems__`` lets the DataLoader fetch a batch with one fancy-indexing read of the
    memory-mapped cache instead of one read per window, which keeps the loader far ahead
    of the model (see ``benchmarks/``).
    """

    def __init__(self, cache: WindowCache, indices: np.ndarray, normalization: Normalization,
                 stats: dict[str, np.ndarray], context: int = 0,
                 groups: np.ndarray | None = None) -> None:
        self.cache = cache
        self.indices = np.asarray(indices, dtype=np.int64)
        self.normalization = normalization
        self.stats = stats
        self.context = context
        self.groups = groups
        self.neighbours = cache.neighbours(self.indices, context) if context > 0 else None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        batch = self.__getitems__([i])
        return {k: v[0] for k, v in batch.items()}

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        pos = np.asarray(positions, dtype=np.int64)
        idx = self.indices[pos]
        subjects = np.asarray(self.cache.subjects[idx])
        if self.neighbours is not None:
            nbr = self.neighbours[pos]  # (B, L)
            x = np.asarray(self.cache.signals[nbr.reshape(-1)]).reshape(
                nbr.shape + self.cache.signals.shape[1:]
            )
        else:
            x = np.asarray(self.cache.signals[idx])
        x = self._normalise(x.astype(np.float32, copy=False), subjects)
        out = {
            "x": torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
            "y": torch.from_numpy(np.asarray(self.cache.labels[idx], dtype=np.int64)),
            "subject": torch.from_numpy(subjects.astype(np.int64)),
            "index": torch.from_numpy(idx),
        }
        if self.groups is not None:
            out["group"] = torch.from_numpy(self.groups[pos])
        return out

    def _normalise(self, x: np.ndarray, subjects: np.ndarray) -> np.ndarray:
        if self.normalization == "window":
            mean = x.mean(axis=-1, keepdims=True)
            std = x.std(axis=-1, keepdims=True)
            return (x - mean) / (std + 1e-6)
        if self.normalization == "channel":
            return (x - self.stats["mean"][:, None]) / self.stats["std"][:, None]
        if self.normalization == "subject":
            rows = np.searchsorted(self.stats["subject_ids"], subjects)
            mean = self.stats["subject_mean"][rows][:, :, None]
            std = self.stats["subject_std"][rows][:, :, None]
            if x.ndim == 4:
                mean, std = mean[:, None], std[:, None]
            return (x - mean) / std
        return x


def collate_batch(batch: Any) -> dict[str, torch.Tensor]:
    """Batches already come collated from ``__getitems__``; single items get stacked."""
    if isinstance(batch, dict):
        return batch
    return {k: torch.stack([item[k] for item in batch]) for k in batch[0]}


class BiosignalDataModule(LightningDataModule):
    """Subject-disjoint windows of one corpus, from its real files or its synthetic stand-in.

    Args:
        root: the corpus in its own public on-disk layout. Required unless ``synthetic``.
        synthetic: use the built-in stand-in with this corpus's shape (channels, rate,
            window, classes) and fewer subjects. Never a silent fallback: a missing
            ``root`` with ``synthetic: false`` is an error.
        split: subject split strategy (fixed lists, ratio+seed, LOSO, k-fold); ``None``
            uses the corpus's paper protocol (:meth:`default_split`).
        fold: the test fold of a ``loso`` or ``kfold`` split (replaces ``split.fold``): the one
            fold key of ``biosig cv`` and benchmark grids (``data.init_args.fold``).
        batch_size: training batch size; ``eval_batch_size`` defaults to it.
        normalization: ``window`` (per-window z-score), ``channel`` (per-channel stats
            fitted on training subjects only), ``subject`` (per-subject z-score from each
            subject's own windows, the SubjectNorm baseline), or ``none``.
        balanced_sampler: oversample minority classes in training (DDP-aware).
        augment: train-only augmentation strengths (jitter, scaling, channel dropout).
        context: ``l``; each item carries the ``2l+1`` windows centred on it from the same
            recording (sequence-to-epoch sleep staging), shape (L, C, T).
        group_by: add a ``group`` label per window for domain generalisation and robust
            training: ``subject`` (contiguous index of the training subject) or
            ``subject_class`` (subject x class cells). Evaluation splits get -1.
        synthetic_options: overrides for the stand-in generator (n_subjects, kind, ...).
        cache_dir: where window caches live (default ``$BIOSIG_CACHE`` or
            ``~/.cache/biosig_lightning``).
        rebuild_cache: rebuild the window cache even if a valid one exists.
        seed: data-order seed; ``None`` follows the global seed set by ``seed_everything``.
        num_workers: DataLoader worker processes.
    """

    #: subjects that must share a split (e.g. CHB-MIT chb01/chb21 are one child)
    subject_groups: list[list[int]] | None = None

    def __init__(
        self,
        root: str | None = None,
        synthetic: bool = False,
        split: SplitConfig | None = None,
        fold: int | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        normalization: Normalization = "window",
        balanced_sampler: bool = False,
        augment: Augment | None = None,
        context: int = 0,
        group_by: GroupBy = "none",
        synthetic_options: dict[str, Any] | None = None,
        cache_dir: str | None = None,
        rebuild_cache: bool = False,
        seed: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if normalization not in ("window", "channel", "subject", "none"):
            raise ValueError(f"data.normalization must be one of window/channel/subject/none, got "
                             f"{normalization!r}")
        if context < 0:
            raise ValueError(f"data.context must be >= 0, got {context}")
        self.root = root
        self.synthetic = synthetic
        self.split_config = split
        self.split_fold = fold
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.normalization = normalization
        self.balanced_sampler = balanced_sampler
        self.augment = augment or Augment()
        self.context = context
        self.group_by = group_by
        self.synthetic_options = dict(synthetic_options or {})
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.rebuild_cache = rebuild_cache
        self.seed = seed
        self.num_workers = num_workers
        self.spec: CorpusSpec = self.corpus_spec()
        self.subjects: dict[str, list[int]] = {}
        self.datasets: dict[str, WindowDataset] = {}
        self._cache: WindowCache | None = None
        self.n_groups = 0

    # ---- what a corpus subclass provides -------------------------------------------------
    def corpus_spec(self) -> CorpusSpec:
        """The corpus's shape as configured; must not read any file."""
        raise NotImplementedError(f"{type(self).__name__} must define corpus_spec()")

    def make_reader(self, root: Path) -> CorpusReader:
        """The reader for the corpus's public layout under ``root``."""
        raise DataError(f"{type(self).__name__} has no reader for real files (data.init_args.root={root}); "
                        "set data.init_args.synthetic: true")

    def default_split(self) -> SplitConfig:
        """The paper's subject split for this corpus."""
        return SplitConfig(strategy="ratio", ratios=(0.6, 0.2, 0.2), seed=0,
                           stratify=self.spec.label_level == "subject")

    def synthetic_defaults(self) -> dict[str, Any]:
        """Generator options of the stand-in (subject count scaled down, signal kind)."""
        return {"n_subjects": 12, "windows_per_subject": 40, "kind": infer_kind(self.spec)}

    def select_training_windows(self, cache: WindowCache, train_idx: np.ndarray) -> np.ndarray:
        """The training windows actually used (all by default; a corpus may undersample here).

        Runs before normalisation statistics are fitted, so they describe what is trained on.
        """
        return train_idx

    # ---- braindecode names, known at construction ------------------------------------------
    @property
    def n_chans(self) -> int:
        return self.spec.n_chans

    @property
    def n_outputs(self) -> int:
        return self.spec.n_outputs

    @property
    def n_times(self) -> int:
        return self.spec.n_times

    @property
    def sfreq(self) -> float:
        return self.spec.sfreq

    @property
    def ch_names(self) -> list[str]:
        return list(self.spec.ch_names)

    @property
    def step_bins(self) -> int:
        """FFT bins per 1-s step when ``x`` holds step-major spectra (see ``LogFFTReader``); 0 for raw
        signals."""
        return 0

    @property
    def dataset_name(self) -> str:
        if self.synthetic and not self.spec.name.startswith("synthetic"):
            return f"{self.spec.name}-synthetic"
        return self.spec.name

    # ---- building ----------------------------------------------------------------------------
    def reader(self) -> CorpusReader:
        if self.synthetic:
            options = {**self.synthetic_defaults(), **self.synthetic_options}
            return SyntheticReader(self.spec, **options)
        if not self.root:
            raise DataError(
                f"{type(self).__name__}: no corpus given: set data.init_args.root to the {self.spec.name} "
                "corpus in its public on-disk layout, or data.init_args.synthetic: true for the built-in "
                "stand-in")
        root = Path(self.root).expanduser()
        if not root.exists():
            raise DataError(f"{self.spec.name}: corpus root {root} does not exist "
                            f"(data.init_args.root); expected the {self.spec.name} public layout there")
        if root.is_dir() and not any(root.iterdir()):
            raise DataError(f"{self.spec.name}: corpus root {root} is empty (data.init_args.root)")
        return self.make_reader(root)

    @property
    def cache(self) -> WindowCache:
        if self._cache is None:
            reader = self.reader()
            self._cache = load_or_build(reader, self.cache_dir, rebuild=self.rebuild_cache)
            self.rebuild_cache = False
        return self._cache

    def prepare_data(self) -> None:
        # builds the cache once (rank 0 / main process); setup() then only loads it
        _ = self.cache

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        cache = self.cache
        cfg = self.split_config or self.default_split()
        if self.split_fold is not None:
            if cfg.strategy not in ("loso", "kfold"):
                raise SplitError(f"data.fold={self.split_fold} needs a loso or kfold split, and "
                                 f"{type(self).__name__}'s is {cfg.strategy!r} (set "
                                 f"data.init_args.split.strategy)")
            cfg = _replace(cfg, fold=self.split_fold)
        if self.subject_groups:
            # the corpus's groups are facts about its subjects (one person recorded twice), so
            # they hold whatever groups the user adds: merged, never replaced
            cfg = _replace(cfg, groups=merge_groups(cfg.groups or [], self.subject_groups))
        subject_labels = cache.subject_labels() if self.spec.label_level == "subject" else None
        self.subjects = split_subjects(cache.subject_ids().tolist(), cfg, subject_labels)
        self.split_id = split_fingerprint(self.subjects)
        indices = {s: cache.indices_for_subjects(self.subjects[s]) for s in SPLITS}
        indices["train"] = self.select_training_windows(cache, indices["train"])
        for s in SPLITS:
            if len(indices[s]) == 0:
                raise DataError(f"{self.dataset_name}: split {s!r} has subjects {self.subjects[s]} but no "
                                f"windows")
        stats = self._fit_stats(cache, indices["train"])
        groups = self._group_labels(cache, indices)
        self.datasets = {
            s: WindowDataset(cache, indices[s], self.normalization, stats, self.context, groups.get(s))
            for s in SPLITS
        }

    def _fit_stats(self, cache: WindowCache, train_idx: np.ndarray) -> dict[str, np.ndarray]:
        if self.normalization == "channel":
            mean, std = channel_stats(cache.signals, train_idx)
            return {"mean": mean, "std": std}
        if self.normalization == "subject":
            ids = cache.subject_ids()
            means, stds = [], []
            for sid in ids:
                m, s = channel_stats(cache.signals, cache.indices_for_subjects([int(sid)]))
                means.append(m)
                stds.append(s)
            return {"subject_ids": np.asarray(ids), "subject_mean": np.stack(means),
                    "subject_std": np.stack(stds)}
        return {}

    def _group_labels(self, cache: WindowCache, indices: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.group_by == "none":
            return {}
        train_subjects = np.asarray(self.subjects["train"])
        out = {}
        for s, idx in indices.items():
            subj = np.asarray(cache.subjects[idx])
            if s != "train":
                out[s] = np.full(len(idx), -1, dtype=np.int64)
                continue
            row = np.searchsorted(train_subjects, subj)
            if self.group_by == "subject":
                out[s] = row.astype(np.int64)
                self.n_groups = len(train_subjects)
            else:
                out[s] = (row * self.spec.n_outputs + np.asarray(cache.labels[idx])).astype(np.int64)
                self.n_groups = len(train_subjects) * self.spec.n_outputs
        return out

    # ---- loaders -------------------------------------------------------------------------------
    def _generator(self) -> torch.Generator:
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        return torch.Generator().manual_seed(seed)

    def _loader(self, split: str, train: bool) -> DataLoader:
        if not self.datasets:
            self.setup()
        ds = self.datasets[split]
        kwargs: dict[str, Any] = dict(batch_size=self.batch_size if train else self.eval_batch_size,
                                      num_workers=self.num_workers, collate_fn=collate_batch,
                                      persistent_workers=self.num_workers > 0)
        if train and self.balanced_sampler:
            seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
            kwargs["sampler"] = ClassBalancedSampler(np.asarray(self.cache.labels[ds.indices]), seed=seed)
        elif train:
            kwargs.update(shuffle=True, generator=self._generator())
        return DataLoader(ds, **kwargs)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def on_after_batch_transfer(
        self, batch: dict[str, torch.Tensor], dataloader_idx: int
    ) -> dict[str, torch.Tensor]:
        trainer = getattr(self, "trainer", None)
        if trainer is not None and trainer.training and self.augment.active:
            batch = dict(batch)
            batch["x"] = self.augment(batch["x"])
        return batch

    # ---- bookkeeping ---------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What a results file records about the data of a run."""
        out: dict[str, Any] = {"dataset": self.dataset_name, "spec": self.spec.to_dict(),
                               "subjects": {k: list(map(int, v)) for k, v in self.subjects.items()}}
        if self.datasets:
            out["windows"] = {s: len(d) for s, d in self.datasets.items()}
            out["split_id"] = self.split_id
            out["cache"] = str(self._cache.dir) if self._cache is not None else None
        return out

    def __getstate__(self) -> dict[str, Any]:
        # memory maps must not be pickled into spawned DDP ranks or workers (that would copy
        # the whole cache): each process reopens the cache in setup()
        state = self.__dict__.copy()
        state["_cache"] = None
        state["datasets"] = {}
        return state


def merge_groups(*group_lists: Sequence[Sequence[int]]) -> list[list[int]]:
    """Union of several lists of split groups: groups sharing a subject become one sorted group.

    ``merge_groups([[2, 3]], [[1, 21]])`` keeps both groups; ``merge_groups([[1, 2]], [[1, 21]])``
    gives ``[[1, 2, 21]]``, since 1 must stay with 2 and with 21. Groups come out sorted by
    their smallest subject.
    """
    parent: dict[int, int] = {}

    def root(s: int) -> int:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for groups in group_lists:
        for group in groups:
            members = [int(s) for s in group]
            for s in members:
                parent.setdefault(s, s)
            for s in members[1:]:
                parent[root(s)] = root(members[0])
    merged: dict[int, list[int]] = {}
    for s in parent:
        merged.setdefault(root(s), []).append(s)
    return sorted((sorted(g) for g in merged.values()), key=lambda g: g[0])


def _replace(cfg: SplitConfig, **changes: Any) -> SplitConfig:
    from dataclasses import replace

    return replace(cfg, **changes)
