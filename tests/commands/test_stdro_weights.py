"""``biosig stdro-weights``: Fig. 2 panels from a run's stdro_weights.npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.commands.stdro_weights import figure_panels, run


def test_panels_are_first_period_then_differences_and_changes() -> None:
    rng = np.random.default_rng(0)
    history = rng.standard_normal((3, 4, 5, 5))
    p = figure_panels(history)
    assert np.allclose(p["top"][0], history[-1, 0])
    for t in range(1, 4):
        assert np.allclose(p["top"][t], history[-1, t] - history[-1, 0])
    assert np.allclose(p["change"], history[-1] - history[0])
    assert np.allclose(figure_panels(history, at="start")["top"][0], history[0, 0])


def test_command_writes_the_figure(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    history = rng.standard_normal((2, 4, 3, 3))
    np.savez(tmp_path / "stdro_weights.npz", w=history[0], m=np.eye(3)[None].repeat(4, 0), history=history,
             epochs=np.array([0, 25]), variant=np.asarray("stdro"))
    run([str(tmp_path), "--channels", "A,B,C"])
    assert (tmp_path / "stdro_weights.png").stat().st_size > 10_000
    saved = np.load(tmp_path / "stdro_weights_panels.npz")
    assert np.allclose(saved["change"], history[1] - history[0])
    with pytest.raises(FileNotFoundError, match="stdro_weights.npz"):
        run([str(tmp_path / "nowhere")])
