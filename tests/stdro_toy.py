"""A tiny seizure-like corpus for STDRO tests: bursts with patient drift, environments, FFT-like layout.

Windows are ``(C=4, n_steps * step_bins)`` step-major "features" (8 steps of 4 bins). A seizure
window (label 1) carries a burst: for 3-5 consecutive steps the bins of channels 0-1 rise
together (a focal, spatially correlated event); background windows have none. Every patient
scales and shifts its channels (drift), so cross-patient generalisation is needed. Patients
fall into two drift families; :meth:`ToySeizureDataModule.environments` groups the training
patients by k-means-free rule (their family), which is what the real DataModules' k-means
recovers on such data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset

N_CHANS, N_STEPS, STEP_BINS = 4, 8, 4
N_TIMES = N_STEPS * STEP_BINS


def make_windows(subject: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    family = subject % 2
    gain = 1.0 + 0.3 * rng.standard_normal(N_CHANS) + 0.5 * family
    offset = 0.3 * rng.standard_normal(N_CHANS)
    x = rng.standard_normal((n, N_CHANS, N_STEPS, STEP_BINS)) * 0.7
    y = (rng.random(n) < 0.5).astype(np.int64)
    for i in np.flatnonzero(y):
        length = int(rng.integers(3, 6))
        start = int(rng.integers(0, N_STEPS - length + 1))
        amp = 1.5 + 0.5 * rng.random()
        x[i, :2, start:start + length, :] += amp
    x = x * gain[None, :, None, None] + offset[None, :, None, None]
    return x.reshape(n, N_CHANS, N_TIMES).astype(np.float32), y


class ToyDataset(Dataset):
    def __init__(self, x: np.ndarray, y: np.ndarray, s: np.ndarray) -> None:
        self.x, self.y, self.s = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(s)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i], "subject": self.s[i], "index": torch.tensor(i)}


class ToySeizureDataModule(LightningDataModule):
    """Train/val/test patients 0-7 / 8-9 / 10-11 (disjoint); ``step_bins`` = 4."""

    n_chans, n_outputs, n_times, sfreq, step_bins = N_CHANS, 2, N_TIMES, 4.0, STEP_BINS

    def __init__(self, windows_per_subject: int = 24, batch_size: int = 16, seed: int = 0) -> None:
        super().__init__()
        self.windows_per_subject, self.batch_size, self.seed = windows_per_subject, batch_size, seed
        self.subjects = {"train": list(range(8)), "val": [8, 9], "test": [10, 11]}
        self.datasets: dict[str, ToyDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        rng = np.random.default_rng(self.seed)
        for split, subs in self.subjects.items():
            xs, ys, ss = [], [], []
            for s in subs:
                x, y = make_windows(s, self.windows_per_subject, rng)
                xs.append(x)
                ys.append(y)
                ss.append(np.full(len(y), s))
            self.datasets[split] = ToyDataset(np.concatenate(xs), np.concatenate(ys), np.concatenate(ss))

    @property
    def train_dataset(self) -> ToyDataset:
        return self.datasets["train"]

    def environments(self, k: int, seed: int) -> dict[int, int]:
        return {s: s % min(k, 2) for s in self.subjects["train"]}

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.datasets[split], batch_size=self.batch_size, shuffle=shuffle, generator=gen)

    def train_dataloader(self) -> Any:
        return self._loader("train", True)

    def val_dataloader(self) -> Any:
        return self._loader("val", False)

    def test_dataloader(self) -> Any:
        return self._loader("test", False)
