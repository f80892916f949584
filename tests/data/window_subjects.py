"""Window-level subject-disjointness: every window's true subject, recovered without the split code,
lies in exactly one of train/val/test.

The split code only sees the subject ids the reader wrote into the cache; a reader that numbers a
person twice (once per session), a cache reused under other ids, or rows of one subject read as
another's all keep those id lists disjoint while one person's windows reach two splits. These
helpers look at the windows a DataModule actually serves and ask who they belong to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

SPLITS = ("train", "val", "test")


def served_windows(dm, split: str) -> np.ndarray:
    """Every window ``dm`` serves for ``split``, as its loader yields them (set the DataModule's
    ``normalization`` to ``none`` so the values are the cached ones)."""
    loader = {"train": dm.train_dataloader, "val": dm.val_dataloader, "test": dm.test_dataloader}[split]()
    return np.concatenate([batch["x"].numpy() for batch in loader])


def true_subjects_by_split(dm, true_subject: Callable[[np.ndarray], np.ndarray]) -> dict[str, set[int]]:
    """``{split: {true subject of each window served}}``; ``true_subject`` maps a stack of windows to
    their subjects (from the signal itself, never from the DataModule)."""
    dm.setup()
    return {s: {int(v) for v in true_subject(served_windows(dm, s))} for s in SPLITS}


def assert_each_person_in_one_split(by_split: dict[str, set[int]], everyone: set[int]) -> None:
    """Every person's windows in exactly one split, every person served, no split empty."""
    for s in SPLITS:
        assert by_split[s], f"split {s} serves no window"
    for person in everyone:
        holding = [s for s in SPLITS if person in by_split[s]]
        assert len(holding) == 1, f"subject {person}'s windows are in {holding or 'no split'}"
    assert set().union(*by_split.values()) == everyone


def window_digest(window: np.ndarray) -> str:
    """A window's identity: the digest of its float32 bytes."""
    return hashlib.blake2b(
        np.ascontiguousarray(window, dtype=np.float32).tobytes(), digest_size=16
    ).hexdigest()
