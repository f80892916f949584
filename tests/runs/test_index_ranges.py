"""Index ranges (``--folds``, ``--seeds``): a typo that names too many indices is refused before anything
is built."""

from __future__ import annotations

import pytest

from biosig_lightning.cli import main
from biosig_lightning.runs.index_ranges import MAX_INDICES, parse_index_ranges
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def test_a_fold_range_typo_is_refused_before_it_is_built() -> None:
    class Bad(ValueError):
        pass

    assert parse_index_ranges("0-3,7", "--folds", Bad) == [0, 1, 2, 3, 7]
    with pytest.raises(Bad, match=r"^--folds: '0-3000000000' names 3,000,000,001 indices; at most 10,000"):
        parse_index_ranges("0-3000000000", "--folds", Bad)
    with pytest.raises(Bad, match="at most"):  # the count is over all parts
        parse_index_ranges(f"0-{MAX_INDICES - 2},{MAX_INDICES}-{MAX_INDICES + 5}", "--folds", Bad)
    with pytest.raises(SystemExit, match=r"^biosig cv: error: --folds: '0-3000000000' names"):
        main(["cv", *DEMO, "--folds", "0-3000000000", "--out", "nowhere"])
