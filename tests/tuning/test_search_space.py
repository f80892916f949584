"""A search space checked against the real ``biosig fit`` parser: an end a fit refuses is named before any
trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def test_a_search_space_whose_end_a_fit_refuses_is_named_before_any_trial(tmp_path: Path) -> None:
    from biosig_lightning.tuning.errors import TuneError
    from biosig_lightning.tuning.search_space import load_search_space, validate_space

    key = "model.init_args.backbone.init_args.dropout"
    path = tmp_path / "space.yaml"
    path.write_text(f"{key}: {{type: float, low: 0.0, high: 1.5}}\n")
    with pytest.raises(TuneError,
                       match=rf"^search-space key '{key}' \(value 1.5\) is not accepted by biosig fit: "
                                        rf"{key} must be a probability in \[0, 1\), got 1.5$"):
        validate_space(DEMO, load_search_space(path))
