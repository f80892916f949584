"""Window blocks with non-finite values are refused naming each bad value's own window and channel."""

from __future__ import annotations

import numpy as np
import pytest

from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

SPEC = CorpusSpec(name="apava", ch_names=("Fp1", "Fp2", "F3"), sfreq=10.0, n_times=4, classes=("a", "b"))


def _block(x: np.ndarray) -> WindowBlock:
    n = len(x)
    return WindowBlock(subject=3, recording="feature_03.npy", x=x, y=np.zeros(n, dtype=np.int64),
                       start=np.arange(n, dtype=float) * 2.0)


def test_nan_and_inf_are_each_named_with_their_own_window_and_channel() -> None:
    x = np.zeros((5, 3, 4), dtype=np.float32)
    x[4, 0, 1] = np.nan  # the NaN: last window, first channel
    x[1, 2, 3] = np.inf  # the Inf: an earlier window, another channel
    with pytest.raises(DataError) as err:
        _block(x).validate(SPEC)
    message = str(err.value)
    assert "NaN in channel 'Fp1' (window 4, t=8 s)" in message, message
    assert "Inf in channel 'F3' (window 1, t=2 s)" in message, message


def test_negative_inf_alone_is_named() -> None:
    x = np.zeros((2, 3, 4), dtype=np.float32)
    x[1, 1, 0] = -np.inf
    with pytest.raises(DataError,
                       match=r"feature_03.npy \(subject 3\): Inf in channel 'Fp2' \(window 1, t=2 s\)$"):
        _block(x).validate(SPEC)
