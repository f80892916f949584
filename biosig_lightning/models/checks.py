"""Argument and input checks shared by every model, so a bad value fails with one clear message."""

from __future__ import annotations

from typing import Any

import torch


def check_positive_ints(owner: str, **values: Any) -> None:
    """Raise ``ValueError("<owner>: <name> must be a positive integer ...")`` for the first bad value."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def check_window(owner: str, x: torch.Tensor, n_chans: int, n_times: int) -> None:
    """Inputs are ``(batch, n_chans, n_times)`` windows of exactly the shape the model was built for."""
    if x.ndim != 3 or x.shape[1] != n_chans or x.shape[2] != n_times:
        raise ValueError(f"{owner} expects x of shape (batch, n_chans={n_chans}, n_times={n_times}), "
                         f"got {tuple(x.shape)}")
