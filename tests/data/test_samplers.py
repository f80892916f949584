"""ClassBalancedSampler: class balance, determinism per (seed, epoch), and DDP sharding."""

from __future__ import annotations

import math

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from biosig_lightning.data.samplers import ClassBalancedSampler

# 11 windows (odd, so the shards need one padding draw): 8 of class 0, 3 of class 1.
LABELS = np.array([0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0])


def _draw(labels: np.ndarray, epoch: int = 0, **kwargs) -> list[int]:
    sampler = ClassBalancedSampler(labels, **kwargs)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_is_a_distributed_sampler_so_lightning_keeps_it() -> None:
    # Lightning only leaves a custom sampler alone under DDP when it already is one
    assert isinstance(ClassBalancedSampler(LABELS), DistributedSampler)


def test_single_replica_length_and_range() -> None:
    draw = _draw(LABELS, seed=0)
    assert len(draw) == len(LABELS) == len(ClassBalancedSampler(LABELS))
    assert all(isinstance(i, int) and 0 <= i < len(LABELS) for i in draw)
    assert len(_draw(LABELS, num_samples=40)) == 40


def test_classes_are_drawn_equally_often_and_windows_uniformly_within_a_class() -> None:
    labels = np.array([0] * 90 + [1] * 10)
    draw = np.array(_draw(labels, num_samples=6000, seed=1))
    frac = labels[draw].mean()
    assert abs(frac - 0.5) < 0.04, frac  # 6 sigma of a fair coin over 6000 draws is 0.039
    # within the minority class every window is drawn, each about 300 times
    minority = np.bincount(draw, minlength=100)[90:]
    assert minority.min() > 200 and minority.max() < 400, minority
    # three classes with 70/20/10 windows: each class about a third
    labels3 = np.array([0] * 70 + [1] * 20 + [2] * 10)
    freq = np.bincount(labels3[_draw(labels3, num_samples=6000, seed=2)], minlength=3) / 6000
    assert np.allclose(freq, 1 / 3, atol=0.04), freq


def test_draw_depends_only_on_seed_and_epoch() -> None:
    a = _draw(LABELS, seed=5, epoch=0)
    assert a == _draw(LABELS, seed=5, epoch=0)
    assert a != _draw(LABELS, seed=5, epoch=1)
    assert a != _draw(LABELS, seed=6, epoch=0)
    # set_epoch on one object changes its next iteration, and going back restores it
    sampler = ClassBalancedSampler(LABELS, seed=5)
    first = list(sampler)
    sampler.set_epoch(3)
    assert list(sampler) != first
    sampler.set_epoch(0)
    assert list(sampler) == first


@pytest.mark.parametrize("epoch", [0, 4])
def test_two_ranks_interleave_to_the_global_draw(epoch: int) -> None:
    n = len(LABELS)
    per_rank = math.ceil(n / 2)
    r0 = _draw(LABELS, epoch=epoch, seed=3, num_replicas=2, rank=0)
    r1 = _draw(LABELS, epoch=epoch, seed=3, num_replicas=2, rank=1)
    assert len(r0) == len(r1) == per_rank
    assert len(ClassBalancedSampler(LABELS, num_replicas=2, rank=1)) == per_rank
    assert r0 != r1
    merged = [0] * (2 * per_rank)
    merged[0::2] = r0
    merged[1::2] = r1
    # the global draw of (seed, epoch), padded to a multiple of the world size ...
    assert merged == _draw(LABELS, epoch=epoch, seed=3, num_samples=2 * per_rank)
    # ... whose first N draws are the single-replica epoch
    assert merged[:n] == _draw(LABELS, epoch=epoch, seed=3)


def test_three_ranks_partition_the_global_draw() -> None:
    labels = np.array([0] * 20 + [1] * 5)
    ranks = [_draw(labels, epoch=2, seed=9, num_replicas=3, rank=r) for r in range(3)]
    assert all(len(r) == math.ceil(25 / 3) for r in ranks)
    glob = _draw(labels, epoch=2, seed=9, num_samples=3 * math.ceil(25 / 3))
    for r in range(3):
        assert ranks[r] == glob[r::3]


def test_no_windows_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one window"):
        ClassBalancedSampler(np.array([], dtype=np.int64))
