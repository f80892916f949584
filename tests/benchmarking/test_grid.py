"""A benchmark grid's recipes are checked at load: one that names no recipe is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import EXPERIMENTS


def test_a_grid_recipe_that_names_no_recipe_is_refused_at_load(tmp_path: Path) -> None:
    from biosig_lightning.benchmarking.grid import GridError, load_grid

    spec = yaml.safe_load((EXPERIMENTS / "benchmarks" / "smoke.yaml").read_text())
    for name, recipe in (("short", "NoSuchTask"), ("dotted", "biosig_lightning.robust.NoSuchTask")):
        method = next(iter(spec["methods"].values()))
        method["recipe"] = {"class_path": recipe}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        with pytest.raises(GridError, match=rf"recipe: class_path '{recipe}' names no recipe"):
            load_grid(path)
    load_grid(EXPERIMENTS / "benchmarks" / "smoke.yaml")  # its recipes, short and dotted, all resolve
