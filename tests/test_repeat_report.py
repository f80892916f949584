"""``biosig repeat`` (one run per seed, resumable) and ``biosig report`` (mean ± std table + figures)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS

SMOKE = ["--config", str(EXPERIMENTS / "demo.yaml"), "--config", str(EXPERIMENTS / "smoke.yaml")]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two smoke-sized seeds of the demo, plus a second variant with known metrics (a copy)."""
    root = tmp_path_factory.mktemp("repeat")
    out = root / "demo"
    main(["repeat", *SMOKE, "--seeds", "3,4", "--out", str(out)])
    # a second row whose test metrics we set: the report must put it beside the real one
    variant = root / "variant"
    for seed, acc in ((3, 0.25), (4, 0.75)):
        shutil.copytree(out / f"seed_{seed}", variant / f"seed_{seed}")
        res = json.loads((variant / f"seed_{seed}" / "results.json").read_text())
        res["experiment"] = "variant"
        res["metrics"]["test/acc"] = acc
        (variant / f"seed_{seed}" / "results.json").write_text(json.dumps(res))
    return root


def _results(out: Path) -> dict[int, dict]:
    return {int(p.parent.name.split("_")[1]): json.loads(p.read_text()) for p in sorted(out.glob("seed_*/results.json"))}


def test_repeat_one_run_per_seed_and_resumes(repeated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = repeated / "demo"
    res = _results(out)
    assert sorted(res) == [3, 4]
    assert res[3]["seed"] == 3 and res[4]["seed"] == 4
    assert res[3]["experiment"] == res[4]["experiment"] == "demo"
    assert Path(res[3]["run_dir"]) == out / "seed_3"
    assert (out / "seed_3" / "metrics.csv").exists()
    stamps = {s: (out / f"seed_{s}" / "results.json").stat().st_mtime_ns for s in (3, 4)}
    capsys.readouterr()
    main(["repeat", *SMOKE, "--seeds", "3,4", "--out", str(out)])
    text = capsys.readouterr().out
    assert text.count("exists, skipped") == 2
    assert f"2/2 seeds finished under {out}" in text
    assert stamps == {s: (out / f"seed_{s}" / "results.json").stat().st_mtime_ns for s in (3, 4)}


def test_repeat_workers_rerun_an_interrupted_seed(repeated: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(EXPERIMENTS.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))  # same float sums as in-process
    out = tmp_path / "demo"
    shutil.copytree(repeated / "demo", out)
    (out / "seed_4" / "results.json").unlink()  # seed 4 died before writing its results
    kept = (out / "seed_3" / "results.json").read_text()
    main(["repeat", *SMOKE, "--seeds", "3,4,5", "--out", str(out), "--workers", "2"])
    text = capsys.readouterr().out
    assert "seed 3: " in text and "exists, skipped" in text
    assert "seed 4: " in text and "starting it again" in text
    res = _results(out)
    assert sorted(res) == [3, 4, 5] and res[4]["seed"] == 4 and res[5]["seed"] == 5
    assert (out / "seed_3" / "results.json").read_text() == kept
    assert (out / "seed_5.log").read_text().strip().splitlines()[-1].startswith("results: ")
    # a worker process runs the same fit as in-process mode: same seed, same metrics
    assert res[4]["metrics"] == pytest.approx(_results(repeated / "demo")[4]["metrics"])


def test_repeat_seeds_must_be_integers(in_tmp: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(["repeat", *SMOKE, "--seeds", "1,x"])
    msg = str(err.value)
    assert "'x' is not an integer" in msg and "\n" not in msg
    assert not (in_tmp / "runs").exists()


def _expected_cell(values: list[float]) -> str:
    a = np.asarray(values)
    return f"{a.mean():.3f} ± {a.std(ddof=1):.3f} (n={len(a)})"


def test_report_markdown_table_and_figures(repeated: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.md"
    main(["report", str(repeated / "demo"), str(repeated / "variant"), "--out", str(out)])
    printed = capsys.readouterr().out
    table = out.read_text().strip()
    assert table in printed
    lines = table.splitlines()
    assert lines[0] == "| model | synthetic: acc | synthetic: f1 | synthetic: auroc |"
    real = _results(repeated / "demo")
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert set(rows) == {"CNN1D (demo)", "CNN1D (variant)"}
    real_acc = [real[s]["metrics"]["test/acc"] for s in (3, 4)]
    for col, key in enumerate(("test/acc", "test/f1", "test/auroc")):
        vals = [real[s]["metrics"][key] for s in (3, 4)]
        assert rows["CNN1D (demo)"][col].strip("*") == _expected_cell(vals)
    assert rows["CNN1D (variant)"][0].strip("*") == _expected_cell([0.25, 0.75])
    # the better mean of the acc column is bold, the other is not
    demo_best = np.mean(real_acc) >= 0.5
    assert rows["CNN1D (demo)"][0].startswith("**") == demo_best
    assert rows["CNN1D (variant)"][0].startswith("**") == (np.mean(real_acc) <= 0.5)
    # f1 and auroc are equal in both rows (copied runs): both best
    assert rows["CNN1D (demo)"][1].startswith("**") and rows["CNN1D (variant)"][1].startswith("**")
    figs = tmp_path / "table_figures"
    names = sorted(p.name for p in figs.glob("*.png"))
    for prefix in ("confusion_CNN1D-demo", "reliability_CNN1D-demo", "curves_CNN1D-demo",
                   "confusion_CNN1D-variant", "spread_synthetic_acc"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    assert all((figs / n).stat().st_size > 1000 for n in names)
    assert str(figs) in printed


def test_report_csv_marks_best_with_star(repeated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(repeated), "--format", "csv", "--metrics", "acc", "--figures", str(tmp_path / "f")])
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out.split("\nfigures:")[0])))
    assert rows[0] == ["model", "synthetic/acc"]
    cells = dict(rows[1:])
    assert cells["CNN1D (variant)"].rstrip("*") == _expected_cell([0.25, 0.75])
    real_acc = [r["metrics"]["test/acc"] for r in _results(repeated / "demo").values()]
    assert cells["CNN1D (demo)"].endswith("*") == (np.mean(real_acc) >= 0.5)
    assert sum(c.endswith("*") for c in cells.values()) >= 1


def test_report_latex_renders(repeated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(repeated), "--format", "latex", "--figures", str(tmp_path / "f")])
    text = capsys.readouterr().out
    assert r"\multicolumn{3}{c}{synthetic}" in text and r"$\pm$" in text and r"\textbf{" in text


def test_report_without_results_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no results.json below .*empty"):
        main(["report", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="does not exist"):
        main(["report", str(tmp_path / "missing")])


def test_variant_overrides_name_their_own_experiment(tmp_path: Path) -> None:
    from biosig_lightning.repeat import experiment_name

    base, abl = EXPERIMENTS / "sdformer_sleepedf.yaml", EXPERIMENTS / "sdformer" / "ablations" / "no_dep.yaml"
    assert experiment_name(["--config", str(base)]) == "sdformer_sleepedf"
    # an ablation must not land in (and skip the seeds of) the full model's directory
    assert experiment_name(["--config", str(base), "--config", str(abl)]) == "sdformer_sleepedf+no_dep"
    assert experiment_name(["--config", str(base), "--config", str(abl), "--run.name", "x"]) == "x"
    named = tmp_path / "named.yaml"
    named.write_text("trainer:\n  logger:\n    class_path: CSVLogger\n    init_args: {name: mine}\n")
    assert experiment_name(["--config", str(base), "--config", str(named)]) == "mine"
