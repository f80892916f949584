"""1-s step layout of the seizure models: ``(B, C, T F) -> (B, T, C, F)``, sample by sample."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models.modules.time_steps import as_steps, step_size


def test_as_steps_puts_sample_t_f_of_channel_c_at_step_t() -> None:
    b, c, t, f = 2, 3, 4, 5
    x = torch.arange(b * c * t * f, dtype=torch.float32).reshape(b, c, t * f)
    out = as_steps(x, f)
    assert out.shape == (b, t, c, f)
    for ti in range(t):
        torch.testing.assert_close(out[:, ti], x[:, :, ti * f:(ti + 1) * f])
    assert step_size("m", 20, 5.0, 0) == 5
    with pytest.raises(ValueError, match="m: n_times=21 is not a whole number of steps of 5"):
        step_size("m", 21, 5.0, 0)
