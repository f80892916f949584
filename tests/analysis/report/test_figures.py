"""``biosig report``'s figures: bounded in size and written atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.analysis.report import figures
from biosig_lightning.analysis.report.collect import Row


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
