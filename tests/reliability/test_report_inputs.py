"""``biosig report`` over results it cannot use: each skipped with one warning naming the file and the key,
the rest reported; figures bounded in size and written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.analysis.report import figures
from biosig_lightning.analysis.report.collect import Row
from biosig_lightning.cli import main


def _run(root: Path, name: str, acc: float, **extra: object) -> Path:
    run = root / name
    run.mkdir(parents=True)
    res = {"model": "CNN1D", "variant": "", "experiment": "demo", "dataset": "toy", "seed": int(acc * 100),
           "metrics": {"test/acc": acc}, **extra}
    (run / "results.json").write_text(json.dumps(res))
    return run / "results.json"


def test_results_the_report_cannot_use_are_skipped_one_line_each(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _run(root, "good_1", 0.5)
    _run(root, "good_2", 0.7)
    deep = root / "deep" / "results.json"
    deep.parent.mkdir()
    deep.write_text('{"metrics": ' + "[" * 100_000 + "]" * 100_000 + "}")
    bad = {"metrics_list": _run(root, "m_list", 0.1, metrics=[0.9]),
           "metric_text": _run(root, "m_text", 0.1, metrics={"test/acc": "high"}),
           "model_number": _run(root, "m_num", 0.1, model=3),
           "cm_ragged": _run(root, "cm", 0.1, confusion_matrix=[[1, 2], [3]])}
    main(["report", str(root), "--metrics", "acc", "--figures", str(tmp_path / "figs")])
    out, err = capsys.readouterr()
    assert "| CNN1D | 0.600 ± 0.141 (n=2) |" in out  # the two good runs, nothing of the bad ones
    warned = [ln for ln in err.splitlines() if "skipping" in ln]
    expected = {deep: "nested too deeply to parse",
                bad["metrics_list"]: "'metrics' is a list, not a mapping of metric names to numbers",
                bad["metric_text"]: "metrics['test/acc'] is a string, not a number",
                bad["model_number"]: "'model' is a number, not a string",
                bad["cm_ragged"]: "'confusion_matrix' is not a square table of counts"}
    assert len(warned) == len(expected), warned
    for path, why in expected.items():
        assert any(f"biosig report: warning: skipping {path}: " in ln and why in ln for ln in warned), (
            path,
            warned,
        )


def _cm_runs(n_classes: int) -> list[tuple[Path, dict]]:
    cm = np.eye(n_classes, dtype=int).tolist()
    return [(Path("r"), {"confusion_matrix": cm, "classes": [f"c{i}" for i in range(n_classes)]})]


def test_a_confusion_matrix_of_many_classes_stays_within_the_size_cap(tmp_path: Path) -> None:
    from PIL import Image

    canvas = figures._Canvas(tmp_path)
    figures._confusion(canvas, Row("M"), "toy", _cm_runs(400))
    (path,) = canvas.written
    with Image.open(path) as im:
        assert max(im.size) <= figures.MAX_INCHES * 110 + 1, im.size


def test_a_figure_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canvas = figures._Canvas(tmp_path)
    figures._confusion(canvas, Row("M"), "toy", _cm_runs(3))
    (path,) = canvas.written
    before = path.read_bytes()

    def torn(self: object, fname: object, *args: object, **kwargs: object) -> None:
        (fname.write if hasattr(fname, "write") else Path(fname).open("wb").write)(b"\x89PNG")
        raise KeyboardInterrupt  # killed half-way through the write

    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", torn)
    with pytest.raises(KeyboardInterrupt):
        figures._confusion(canvas, Row("M"), "toy", _cm_runs(3))
    assert path.read_bytes() == before  # the earlier figure, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left
