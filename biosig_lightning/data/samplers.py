"""Samplers that are correct under DDP.

Lightning leaves a sampler alone when it already is a ``DistributedSampler``, so the
class-balanced sampler subclasses it: every rank draws the same global sequence from
``(seed, epoch)`` and keeps its own stride of it, so ranks never see the same draw twice
and together cover the whole epoch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler


class _Sized(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class ClassBalancedSampler(DistributedSampler):
    """Oversample minority classes: each draw picks a class uniformly, then a window of it.

    Args:
        labels: class index of every window the loader can serve (in dataset order).
        num_samples: draws per epoch over all ranks; defaults to ``len(labels)``.
        seed: base seed; the draw of epoch ``e`` depends only on ``(seed, e)``.
        num_replicas, rank: DDP world size and rank; read from ``torch.distributed``
            when it is initialised, else a single replica.
    """

    def __init__(self, labels: np.ndarray, num_samples: int | None = None, seed: int = 0,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        labels = np.asarray(labels)
        super().__init__(_Sized(len(labels)), num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        if len(labels) == 0:
            raise ValueError("ClassBalancedSampler needs at least one window")
        self.labels = labels
        total = int(num_samples or len(labels))
        self.num_samples = math.ceil(total / num_replicas)
        self.total_size = self.num_samples * num_replicas
        classes, counts = np.unique(labels, return_counts=True)
        weights = 1.0 / counts[np.searchsorted(classes, labels)]
        self._p = weights / weights.sum()

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        draw = rng.choice(len(self.labels), size=self.total_size, replace=True, p=self._p)
        return iter(draw[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples
