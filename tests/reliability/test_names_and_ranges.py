"""Names and ranges checked before any work: packaged config names, fold ranges, a search space's ends,
a grid's recipes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from biosig_lightning import configs
from biosig_lightning.cli import main
from biosig_lightning.runs.index_ranges import MAX_INDICES, parse_index_ranges
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


@pytest.mark.parametrize("name", ["../pyproject", "overlays/../../pyproject.toml", "/etc/passwd",
                                  str(EXPERIMENTS / "bioformer_apava")])
def test_configs_copy_and_path_resolve_only_shipped_configs(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert configs.find(name) is None
    for action in ("path", "copy"):
        with pytest.raises(SystemExit,
                           match=rf"^biosig configs: error: {action} {name}: not a packaged config name"):
            main(["configs", action, name])
    assert list(tmp_path.iterdir()) == []
    assert configs.find("overlays/smoke") == (EXPERIMENTS / "overlays" / "smoke.yaml").resolve()


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


def test_a_grid_recipe_that_names_no_task_is_refused_at_load(tmp_path: Path) -> None:
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
