"""Loader throughput: the window cache of :class:`BiosignalDataModule` against naive per-window reads.

What is compared (same windows, same split, same batch size, same shuffling, same per-window
z-score, ``num_workers=0`` so the numbers measure the work of one process):

* ``cache``: ``SyntheticDataModule.train_dataloader()``: the memory-mapped window cache,
  read a whole batch at a time through ``WindowDataset.__getitems__`` (one fancy-indexing
  read and one vectorised normalisation per batch).
* ``cache_per_window``: the same dataset with batching switched off (the DataLoader calls
  ``__getitem__`` once per window and collates); an ablation that isolates what
  ``__getitems__`` buys over the cache layout alone.
* ``naive_mmap`` (the baseline the key ratio uses): the same windows written to per-subject
  ``Feature/feature_XX.npy`` files of shape ``(n, T, C)`` in the Medformer layout, each file
  ``np.load``-ed once with ``mmap_mode='r'``; ``__getitem__`` indexes one window,
  transposes it to ``(C, T)`` and z-scores it; a standard ``DataLoader`` collates.
* ``naive_reopen``: as ``naive_mmap`` but ``np.load`` is called inside every
  ``__getitem__`` (header parse and a new mapping per window), the most literal naive
  loader.
* ``naive_ram``: as ``naive_mmap`` but every subject file is read into memory first (what
  the Medformer loaders do); what is left is the per-window Python and collation cost.

Cold vs warm. The first setup builds the cache (for the synthetic corpus that includes
generating the windows). "Cold" then means a fresh DataModule opening the existing cache
(``load_cache`` with its quick checksum of the head and tail of the signals, plus the split)
and its first epoch after the cache files were evicted from the OS page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (per file, best effort; the resident fraction is
read back with ``fincore`` where that tool exists). "Warm" is the median over later epochs.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from biosig_lightning.data.datamodules import SyntheticDataModule
from biosig_lightning.data.module import WindowDataset, collate_batch

NaiveMode = Literal["mmap", "reopen", "ram"]


# --------------------------------------------------------------------------- naive baseline


def write_medformer_layout(root: Path, signals: np.ndarray, subjects: np.ndarray,
                           subject_labels: dict[int, int]) -> dict[int, Path]:
    """Write windows ``(N, C, T)`` as Medformer's ``Feature/feature_XX.npy`` ``(n, T, C)`` files.

    Also writes ``Label/label.npy`` (rows ``[class, subject id]``). Returns subject id -> file.
    Windows keep their cache order within each subject file.
    """
    (root / "Feature").mkdir(parents=True, exist_ok=True)
    (root / "Label").mkdir(parents=True, exist_ok=True)
    files: dict[int, Path] = {}
    for sid in np.unique(subjects).tolist():
        rows = np.flatnonzero(subjects == sid)
        path = root / "Feature" / f"feature_{sid:02d}.npy"
        np.save(path, np.ascontiguousarray(np.asarray(signals[rows]).transpose(0, 2, 1)))
        files[int(sid)] = path
    labels = np.array([[subject_labels[s], s] for s in sorted(files)], dtype=np.int64)
    np.save(root / "Label" / "label.npy", labels)
    return files


class NaiveWindowDataset(Dataset):
    """One window per ``__getitem__`` from per-subject ``.npy`` files: the baseline loader.

    Args:
        files: subject id -> ``feature_XX.npy`` of shape ``(n, T, C)``.
        items: ``(M, 2)`` int array of ``(subject id, row in that subject's file)``, in the
            order the windows are to be indexed.
        labels: ``(M,)`` class of each item.
        mode: ``mmap`` (each file mapped once, lazily), ``reopen`` (``np.load`` per item) or
            ``ram`` (each file read into memory once).
        index: ``(M,)`` window index reported in the batch (the cache index, for checking).
    """

    def __init__(self, files: dict[int, Path], items: np.ndarray, labels: np.ndarray, mode: NaiveMode,
                 index: np.ndarray) -> None:
        if mode not in ("mmap", "reopen", "ram"):
            raise ValueError(f"mode must be mmap/reopen/ram, got {mode!r}")
        self.files = files
        self.items = np.asarray(items, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.index = np.asarray(index, dtype=np.int64)
        self.mode = mode
        self._arrays: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.items)

    def _array(self, sid: int) -> np.ndarray:
        if self.mode == "reopen":
            return np.load(self.files[sid], mmap_mode="r", allow_pickle=False)
        arr = self._arrays.get(sid)
        if arr is None:
            if self.mode == "mmap":
                arr = np.load(self.files[sid], mmap_mode="r", allow_pickle=False)
            else:
                arr = np.load(self.files[sid], allow_pickle=False)
            self._arrays[sid] = arr
        return arr

    def __getitem__(self, i: int) -> dict[str, Any]:
        sid, row = int(self.items[i, 0]), int(self.items[i, 1])
        x = np.asarray(self._array(sid)[row], dtype=np.float32).T  # (T, C) -> (C, T)
        x = (x - x.mean(axis=-1, keepdims=True)) / (x.std(axis=-1, keepdims=True) + 1e-6)
        return {"x": torch.from_numpy(np.ascontiguousarray(x)), "y": int(self.labels[i]), "subject": sid,
                "index": int(self.index[i])}


class PerWindowView(Dataset):
    """A :class:`WindowDataset` without ``__getitems__``: the DataLoader reads window by window."""

    def __init__(self, ds: WindowDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.ds[i]


# --------------------------------------------------------------------------- timing helpers


def _epoch(loader: Iterable[dict[str, torch.Tensor]]) -> tuple[float, int]:
    """Seconds for one full pass over ``loader`` and the number of windows it served."""
    n = 0
    t0 = time.perf_counter()
    for batch in loader:
        n += int(batch["x"].shape[0])
    return time.perf_counter() - t0, n


def evict(paths: Iterable[Path]) -> None:
    """Drop ``paths`` from the OS page cache (``POSIX_FADV_DONTNEED``; a no-op where unsupported)."""
    if not hasattr(os, "posix_fadvise"):
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _fsync(paths: Iterable[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def resident_fraction(paths: list[Path]) -> float | None:
    """Fraction of the bytes of ``paths`` in the page cache, from ``fincore``; ``None`` if unavailable."""
    exe = shutil.which("fincore")
    if exe is None or not paths:
        return None
    try:
        out = subprocess.run([exe, "-b", "-n", "-o", "RES,SIZE", *map(str, paths)], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        res = size = 0
        for line in out.split("\n"):
            if line.strip():
                r, s = line.split()[:2]
                res, size = res + int(r), size + int(s)
        return res / size if size else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


# --------------------------------------------------------------------------- the benchmark


def bench_loader(n_subjects: int = 30, windows_per_subject: int = 200, batch_size: int = 64,
                 repeats: int = 5, seed: int = 0, workdir: str | None = None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Windows per second of the cache loader and of the naive baselines (see the module docstring).

    The warm figures are medians over ``repeats`` epochs, the loaders taking turns epoch by
    epoch so that a change of machine load hits all of them alike.
    """
    tmp = Path(tempfile.mkdtemp(prefix="biosig-bench-", dir=workdir))
    try:
        return _bench_loader(tmp, n_subjects, windows_per_subject, batch_size, repeats, seed, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _make_dm(cache_dir: Path, n_subjects: int, windows_per_subject: int, batch_size: int,
             seed: int) -> SyntheticDataModule:
    return SyntheticDataModule(n_subjects=n_subjects, windows_per_subject=windows_per_subject,
                               cache_dir=str(cache_dir), normalization="window", batch_size=batch_size,
                               num_workers=0, seed=seed)


def _bench_loader(tmp: Path, n_subjects: int, windows_per_subject: int, batch_size: int, repeats: int,
                  seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    cache_root = tmp / "cache"
    log(f"loader: building the window cache ({n_subjects} subjects x {windows_per_subject} windows)")
    t0 = time.perf_counter()
    dm = _make_dm(cache_root, n_subjects, windows_per_subject, batch_size, seed)
    with contextlib.redirect_stderr(io.StringIO()):  # the build's progress bar would clutter the report
        dm.prepare_data()
    dm.setup("fit")
    build_s = time.perf_counter() - t0
    cache = dm.cache
    cache_files = sorted(p for p in cache.dir.iterdir() if p.suffix == ".bin")
    train_idx = dm.datasets["train"].indices.copy()

    # the same windows, in the layout the corpus is published in
    t0 = time.perf_counter()
    files = write_medformer_layout(tmp / "medformer", cache.signals, np.asarray(cache.subjects),
                                   cache.subject_labels())
    write_s = time.perf_counter() - t0
    subj = np.asarray(cache.subjects)
    row_in_subject = np.empty(len(cache), dtype=np.int64)
    for sid in np.unique(subj):
        rows = np.flatnonzero(subj == sid)
        row_in_subject[rows] = np.arange(len(rows))
    items = np.stack([subj[train_idx], row_in_subject[train_idx]], axis=1)
    labels = np.asarray(cache.labels)[train_idx]
    cache_info = {"cache_windows": len(cache), "cache_signals_mb": cache.signals.nbytes / 2**20,
                  "signals_dtype": str(cache.signals.dtype)}

    # one dataset per mode for the whole run (files stay mapped / in memory across epochs, as in
    # training); each epoch gets a fresh DataLoader with the same shuffling seed
    naive_ds = {mode: NaiveWindowDataset(files, items, labels, mode, train_idx)
                for mode in ("mmap", "reopen", "ram")}

    def naive_loader(mode: NaiveMode) -> DataLoader:
        return DataLoader(naive_ds[mode], batch_size=batch_size, shuffle=True, num_workers=0,
                          generator=torch.Generator().manual_seed(seed))

    _check_same_windows(dm.datasets["train"], NaiveWindowDataset(files, items, labels, "mmap", train_idx))
    # pages mapped by a live memmap, and dirty pages, survive POSIX_FADV_DONTNEED: unmap the
    # first DataModule's cache and flush the .npy files before evicting
    del dm, cache
    gc.collect()
    _fsync(files.values())

    # cold: a fresh DataModule opens the existing cache; the files were dropped from the page cache
    evict(cache_files)
    cache_resident = resident_fraction([p for p in cache_files if p.name == "signals.bin"])
    t0 = time.perf_counter()
    dm_cold = _make_dm(cache_root, n_subjects, windows_per_subject, batch_size, seed)
    dm_cold.setup("fit")
    open_s = time.perf_counter() - t0
    cold_cache_s, n_train = _epoch(dm_cold.train_dataloader())
    evict(files.values())
    npy_resident = resident_fraction(list(files.values()))
    cold_naive_s, n_naive = _epoch(naive_loader("mmap"))
    if n_naive != n_train:
        raise RuntimeError(f"the naive loader served {n_naive} windows, the cache loader {n_train}")
    train = dm_cold.datasets["train"]

    def per_window_loader() -> DataLoader:
        return DataLoader(PerWindowView(train), batch_size=batch_size, shuffle=True, num_workers=0,
                          collate_fn=collate_batch, generator=torch.Generator().manual_seed(seed))

    loaders: dict[str, Callable[[], Iterable[dict[str, torch.Tensor]]]] = {
        "cache": dm_cold.train_dataloader,
        "cache_per_window": per_window_loader,
        "naive_mmap": lambda: naive_loader("mmap"),
        "naive_reopen": lambda: naive_loader("reopen"),
        "naive_ram": lambda: naive_loader("ram"),
    }
    for make in loaders.values():  # warm-up: page cache, first-call allocations
        _epoch(make())
    times: dict[str, list[float]] = {k: [] for k in loaders}
    for _ in range(repeats):
        for name, make in loaders.items():
            seconds, n = _epoch(make())
            if n != n_train:
                raise RuntimeError(f"loader {name} served {n} windows, expected {n_train}")
            times[name].append(seconds)
    warm = {name: {"epoch_s_median": float(np.median(t)), "epoch_s": t,
                   "windows_per_s": _rate(n_train, float(np.median(t)))} for name, t in times.items()}
    base = warm["naive_mmap"]["windows_per_s"]
    for entry in warm.values():
        entry["vs_naive_mmap"] = entry["windows_per_s"] / base
    log(f"loader: cache {warm['cache']['windows_per_s']:.0f} windows/s, naive "
        f"{warm['naive_mmap']['windows_per_s']:.0f} windows/s")
    return {
        "config": {"n_subjects": n_subjects, "windows_per_subject": windows_per_subject,
                   "n_chans": dm_cold.n_chans, "n_times": dm_cold.n_times, "batch_size": batch_size,
                   "normalization": "window", "num_workers": 0, "repeats": repeats,
                   "train_windows_per_epoch": n_train, **cache_info,
                   "npy_dtype": str(np.load(next(iter(files.values())), mmap_mode="r").dtype)},
        "cache_build_s": build_s,
        "medformer_write_s": write_s,
        "cold": {
            "open_s": open_s,
            "cache_epoch_s": cold_cache_s,
            "cache_windows_per_s": _rate(n_train, cold_cache_s),
            "naive_mmap_epoch_s": cold_naive_s,
            "naive_mmap_windows_per_s": _rate(n_train, cold_naive_s),
            "cache_resident_after_evict": cache_resident,
            "npy_resident_after_evict": npy_resident,
        },
        "warm": warm,
        "cache_vs_naive": warm["cache"]["windows_per_s"] / base,
    }


def _check_same_windows(train: WindowDataset, naive: NaiveWindowDataset, n: int = 8) -> None:
    """Both loaders must serve the same normalised window for the same position."""
    for i in np.linspace(0, len(train) - 1, n).astype(int).tolist():
        a, b = train[i], naive[i]
        same = int(a["index"]) == b["index"] and int(a["y"]) == b["y"] and int(a["subject"]) == b["subject"]
        if not same or not torch.allclose(a["x"], b["x"], atol=1e-4):
            raise RuntimeError(f"position {i}: the naive loader and the cache disagree (cache index "
                               f"{int(a['index'])}, naive {b['index']})")
