"""The recipe catalog: complete over tasks/ and robust/, every entry importable, and every recipe an
experiment or a benchmark grid names is in it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import yaml
from lightning.pytorch import LightningModule

import biosig_lightning.models  # noqa: F401  (fills the backbone catalog)
import biosig_lightning.robust
import biosig_lightning.tasks
from biosig_lightning import recipes
from biosig_lightning.models import catalog
from tests.conftest import EXPERIMENTS


def _lightning_modules(package: object) -> set[str]:
    """Every public LightningModule class defined in a module of ``package``, as a dotted path."""
    found = set()
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):  # type: ignore[attr-defined]
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and issubclass(cls, LightningModule)
                    and not name.startswith("_")):
                found.add(f"{cls.__module__}.{cls.__qualname__}")
    return found


def test_every_lightning_module_of_tasks_and_robust_has_one_entry() -> None:
    defined = _lightning_modules(biosig_lightning.tasks) | _lightning_modules(biosig_lightning.robust)
    listed = {f"{recipes.load(r.name).__module__}.{r.name}" for r in recipes.RECIPES}
    assert defined == listed
    assert len(recipes.names()) == len(set(recipes.names()))


@pytest.mark.parametrize("entry", recipes.RECIPES, ids=lambda r: r.name)
def test_an_entry_imports_as_the_recipe_it_names(entry: recipes.RecipeEntry) -> None:
    cls = recipes.load(entry.name)
    assert issubclass(cls, LightningModule) and cls.__name__ == entry.name
    assert recipes.load(entry.class_path) is cls
    assert entry.purpose and entry.takes
    assert set(entry.backbones or ()) <= set(catalog.names())


def test_every_recipe_the_shipped_configs_name_is_in_the_catalog() -> None:
    named = set()
    for path in EXPERIMENTS.rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        model = doc.get("model") if isinstance(doc, dict) else None
        if isinstance(model, dict) and "class_path" in model:
            named.add(model["class_path"])
        for method in (doc.get("methods") or {}).values() if isinstance(doc, dict) else ():
            if isinstance(method, dict) and isinstance(method.get("recipe"), dict):
                named.add(method["recipe"]["class_path"])
    assert {"biosig_lightning.robust.DGTask", "ClassificationTask", "SDFormerTask"} <= named
    for class_path in named:
        recipes.get(class_path)
    with pytest.raises(KeyError, match="no recipe 'NoSuchTask'; known: ClassificationTask, DGTask"):
        recipes.get("NoSuchTask")


def test_the_matrix_rows_are_the_recipes_that_wrap_any_backbone() -> None:
    from biosig_lightning.robust.dg import METHODS
    from biosig_lightning.robust.matrix import RECIPES

    assert [r.name for r in recipes.wrapping_any()] == ["ClassificationTask", "DGTask", "STDROTask"]
    assert RECIPES == ("erm", *[m for m in METHODS if m != "erm"], "stdro")
