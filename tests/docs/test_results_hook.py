"""The docs hook that renders docs/results/*.json, and the committed result files themselves."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _hook():
    spec = importlib.util.spec_from_file_location("docs_results_hook", ROOT / "docs" / "hooks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()


def _write(folder: Path, name: str, **fields) -> None:
    doc = {"title": "T", "machine": "M", "dates": ["2026-01-02"], "command": "biosig report runs",
           "page": "results",
           "items": [{"text": "before"}, {"table": {"columns": ["model", "f1"], "rows": [["A", "0.5"]],
                                                    "align": ["left", "right"]}}]}
    doc.update(fields)
    (folder / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")


def test_a_marker_becomes_the_files_provenance_and_its_table(tmp_path: Path) -> None:
    _write(tmp_path, "one")
    out = hook.expand("intro\n<!-- results: one -->\nafter\n", tmp_path, "page.md")
    assert "**Machine:** M" in out and "**Date:** 2026-01-02" in out and "`biosig report runs`" in out
    assert "| model | f1 |\n|---|---:|\n| A | 0.5 |" in out
    assert out.index("before") < out.index("| model |") and out.endswith("after\n")


def test_an_unknown_name_or_a_ragged_table_fails_the_build(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="page.md: results marker names 'missing'"):
        hook.expand("<!-- results: missing -->", tmp_path, "page.md")
    _write(tmp_path, "ragged", items=[{"table": {"columns": ["a", "b"], "rows": [["1"]]}}])
    with pytest.raises(ValueError, match="a row has 1 cells, the header 2"):
        hook.expand("<!-- results: ragged -->", tmp_path, "page.md")
    _write(tmp_path, "nodate", dates=None)
    data = json.loads((tmp_path / "nodate.json").read_text())
    del data["dates"]
    (tmp_path / "nodate.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="missing keys \\['dates'\\]"):
        hook.expand("<!-- results: nodate -->", tmp_path, "page.md")


def test_a_page_marker_renders_every_file_of_that_page(tmp_path: Path) -> None:
    _write(tmp_path, "b_second", title="Second")
    _write(tmp_path, "a_first", title="First")
    _write(tmp_path, "other", title="Elsewhere", page="performance")
    out = hook.expand("<!-- results-page: results -->", tmp_path, "results.md")
    assert out.index("### First") < out.index("### Second") and "Elsewhere" not in out


def test_every_committed_result_file_renders_and_is_named_by_a_page() -> None:
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 10
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    for path in files:
        doc = hook.load(RESULTS, path.stem, "test")
        hook.render(doc, path.stem)
        shown = f"results: {path.stem} " in pages or f"results-page: {doc.get('page')} " in pages
        assert shown, (
            f"{path.name} is rendered by no page (no marker names it or its page {doc.get('page')!r})"
        )


def test_readings_are_collected_from_the_paper_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "biosig_lightning" / "robust" / "stdro"
    pkg.mkdir(parents=True)
    (pkg / "task.py").write_text(
        '"""Recipe.\n\nReading (schedule): the outer loop runs ``N`` times\nand the inner one '
        'N_theta.\n\nOther text.\n"""\n'
    )
    out = hook.render_readings(tmp_path / "biosig_lightning", "stdro")
    assert out == ("- **`biosig_lightning.robust.stdro.task`**: Reading (schedule): the outer loop runs `N` "
                   "times "
                   "and the inner one N_theta.")


def test_the_recipe_table_is_generated_from_the_catalog() -> None:
    from biosig_lightning import recipes

    assert hook.RECIPES_MARKER in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = hook.render_recipes().splitlines()
    assert table[0] == "| recipe | class_path | what it is for | backbones |"
    assert [row.split(" | ")[0] for row in table[2:]] == [f"| `{name}`" for name in recipes.names()]
