"""Sinusoidal positions (Vaswani et al., 2017, Sec. 3.5) against the formula, entry by entry."""

from __future__ import annotations

import math

from biosig_lightning.models.modules.encodings import sinusoidal_positions


def test_even_columns_are_sines_and_odd_columns_cosines_of_the_same_frequency() -> None:
    n, d = 9, 6
    table = sinusoidal_positions(n, d)
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
