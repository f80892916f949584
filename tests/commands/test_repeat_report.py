"""``biosig repeat`` (one run per seed, resumable) and ``biosig report`` (mean ± std table + figures)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS
from tests.helpers import csv_val_epochs

SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml")]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two smoke-sized seeds of the demo, plus a copy posing as a second experiment with known metrics."""
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
    return {
        int(p.parent.name.split("_")[1]): json.loads(p.read_text())
        for p in sorted(out.glob("seed_*/results.json"))
    }


def test_repeat_one_run_per_seed_and_resumes(repeated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = repeated / "demo"
    res = _results(out)
    assert sorted(res) == [3, 4]
    assert res[3]["seed"] == 3 and res[4]["seed"] == 4
    assert res[3]["experiment"] == res[4]["experiment"] == "demo"
    assert res[3]["variant"] == "smoke"  # the report's row: CNN1D +smoke
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
    (out / "seed_5").mkdir()  # seed 5 died in its first epoch: a directory without last.ckpt
    (out / "seed_5" / "metrics.csv").write_text("epoch,step\n")
    kept = (out / "seed_3" / "results.json").read_text()
    main(["repeat", *SMOKE, "--seeds", "3,4,5", "--out", str(out), "--workers", "2"])
    text = capsys.readouterr().out
    assert "seed 3: " in text and "exists, skipped" in text
    assert f"seed 4: resuming from {out / 'seed_4' / 'checkpoints' / 'last.ckpt'} into {out / 'seed_4'}, " \
           f"log {out / 'seed_4.log'}" in text
    assert "seed 5: " in text and "no last.ckpt (an interrupted run), starting it again" in text
    # each seed says when it starts and, as it ends, its score and where its results are
    assert f"seed 5: fitting into {out / 'seed_5'}, log {out / 'seed_5.log'}" in text
    for seed in (4, 5):
        assert re.search(rf"seed {seed}: done in \d+ s, test/f1 \d\.\d{{4}}, results "
                         rf"{re.escape(str(out))}/seed_{seed}/results.json",
                         text), text
    assert "it/s]" not in (out / "seed_5.log").read_text()  # no progress bars in the logs
    res = _results(out)
    assert sorted(res) == [3, 4, 5] and res[4]["seed"] == 4 and res[5]["seed"] == 5
    assert (out / "seed_3" / "results.json").read_text() == kept
    assert (out / "seed_5.log").read_text().strip().splitlines()[-1].startswith("results: ")
    # a worker process runs the same fit as in-process mode: same seed, same metrics
    assert res[4]["metrics"] == pytest.approx(_results(repeated / "demo")[4]["metrics"])


def test_repeat_resumes_a_seed_killed_mid_run_with_its_whole_learning_curve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    three = [*SMOKE, "--trainer.max_epochs", "3", "--trainer.callbacks+=tests.helpers.RecordEpochs"]
    with pytest.raises((SystemExit, KeyboardInterrupt)):  # the crash ends the repeat too
        main(["repeat", *three, "--trainer.callbacks+=tests.helpers.InterruptAfterEpoch",
              "--trainer.callbacks.init_args.epoch", "1", "--seeds", "6", "--out", str(out)])
    run_dir = out / "seed_6"
    assert not (run_dir / "results.json").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    capsys.readouterr()
    main(["repeat", *three, "--seeds", "6", "--out", str(out)])
    assert "resuming from" in capsys.readouterr().out
    res = json.loads((run_dir / "results.json").read_text())
    assert res["epochs"] == 3 and res["seed"] == 6
    assert json.loads((run_dir / "epochs_trained.json").read_text()) == [2]  # only the missing epoch ran
    assert csv_val_epochs(run_dir / "metrics.csv") == [0, 1, 2]


def test_repeat_seeds_must_be_integers(in_tmp: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(["repeat", *SMOKE, "--seeds", "1,x"])
    msg = str(err.value)
    assert "'x' is not an integer" in msg and "\n" not in msg
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_repeat_seeds_out_of_range_are_named_before_any_run(in_tmp: Path, seed: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(["repeat", *SMOKE, "--seeds", f"1,{seed}"])
    msg = str(err.value)
    assert f"--seeds: {seed} is out of range" in msg and "0..4294967295" in msg and "\n" not in msg
    assert not (in_tmp / "runs").exists()


def test_repeat_help_names_config_and_pass_through(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["repeat", "--help"])
    assert err.value.code == 0
    text = capsys.readouterr().out
    assert "--config X.yaml" in text and "goes to `biosig fit`" in text and "--seeds" in text


def _expected_cell(values: list[float]) -> str:
    a = np.asarray(values)
    return f"{a.mean():.3f} ± {a.std(ddof=1):.3f} (n={len(a)})"


DEMO_ROW, COPY_ROW = "CNN1D +smoke (demo)", "CNN1D +smoke (variant)"


def _markdown_rows(table: str) -> dict[str, list[str]]:
    return {
        ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in table.splitlines()[2:]
    }


def test_report_markdown_table_and_figures(repeated: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.md"
    main(["report", str(repeated / "demo"), str(repeated / "variant"), "--out", str(out)])
    captured = capsys.readouterr()
    table = out.read_text().strip()
    assert captured.out.strip() == table  # stdout is the table; status lines go to stderr
    lines = table.splitlines()
    assert lines[0] == "| model | synthetic: acc | synthetic: f1 | synthetic: auroc | synthetic: ece |"
    real = _results(repeated / "demo")
    rows = _markdown_rows(table)
    # one model+variant from two experiments on one dataset: kept apart by experiment, not averaged
    assert set(rows) == {DEMO_ROW, COPY_ROW}
    assert "comes from several experiments (demo, variant)" in captured.err
    real_acc = [real[s]["metrics"]["test/acc"] for s in (3, 4)]
    for col, key in enumerate(("test/acc", "test/f1", "test/auroc", "test/ece")):
        vals = [real[s]["metrics"][key] for s in (3, 4)]
        assert rows[DEMO_ROW][col].strip("*") == _expected_cell(vals)
    assert rows[COPY_ROW][0].strip("*") == _expected_cell([0.25, 0.75])
    # the better mean of the acc column is bold, the other is not
    shown = float(f"{np.mean(real_acc):.3f}")
    assert rows[DEMO_ROW][0].startswith("**") == (shown >= 0.5)
    assert rows[COPY_ROW][0].startswith("**") == (shown <= 0.5)
    # f1, auroc and ece are equal in both rows (copied runs): both best
    for col in (1, 2, 3):
        assert rows[DEMO_ROW][col].startswith("**") and rows[COPY_ROW][col].startswith("**")
    figs = tmp_path / "table_figures"
    names = sorted(p.name for p in figs.glob("*.png"))
    for prefix in ("confusion_CNN1D-smoke-demo", "reliability_CNN1D-smoke-demo", "curves_CNN1D-smoke-demo",
                   "confusion_CNN1D-smoke-variant", "spread_synthetic_acc"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    assert all((figs / n).stat().st_size > 1000 for n in names)
    assert f"figures: {len(names)} PNG files in {figs}" in captured.err and f"table: {out}" in captured.err


def test_report_csv_has_mean_std_n_best_columns_and_nothing_else(repeated: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(repeated), "--format", "csv", "--metrics", "acc", "--figures", str(tmp_path / "f")])
    captured = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(captured.out)))  # all of stdout is CSV (`> table.csv`)
    assert list(rows[0]) == ["model", "variant", "experiment", "synthetic/acc/mean", "synthetic/acc/std",
                             "synthetic/acc/n", "synthetic/acc/best"]
    by_exp = {r["experiment"]: r for r in rows}
    assert set(by_exp) == {"demo", "variant"} and {r["model"] for r in rows} == {"CNN1D"}
    assert {r["variant"] for r in rows} == {"smoke"}
    copy = by_exp["variant"]
    assert float(copy["synthetic/acc/mean"]) == pytest.approx(0.5)
    assert float(copy["synthetic/acc/std"]) == pytest.approx(np.std([0.25, 0.75], ddof=1))
    assert copy["synthetic/acc/n"] == "2"
    real_acc = np.mean([r["metrics"]["test/acc"] for r in _results(repeated / "demo").values()])
    assert by_exp["demo"]["synthetic/acc/best"] == str(int(float(f"{real_acc:.3f}") >= 0.5))
    assert "figures:" in captured.err


def test_report_latex_renders(repeated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(repeated), "--format", "latex", "--figures", str(tmp_path / "f")])
    text = capsys.readouterr().out
    assert r"\multicolumn{4}{c}{synthetic}" in text and r"$\pm$" in text and r"\textbf{" in text


def test_report_counts_a_run_once_when_directories_overlap(repeated: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    demo = repeated / "demo"
    main(["report", str(demo), str(demo), str(demo / "seed_3"), "--metrics", "acc",
          "--figures", str(tmp_path / "f")])
    captured = capsys.readouterr()
    assert "(n=2)" in captured.out and "(n=4)" not in captured.out and "(n=5)" not in captured.out
    assert "twice" not in captured.err and "times" not in captured.err
    # a copy of one run under another name is a different file: counted, but named as suspicious
    dup = tmp_path / "dup"
    shutil.copytree(demo, dup / "demo")
    shutil.copytree(demo / "seed_3", dup / "demo" / "seed_3_copy")
    main(["report", str(dup), "--metrics", "acc", "--figures", str(tmp_path / "g")])
    captured = capsys.readouterr()
    assert "(n=3)" in captured.out
    assert "holds seed 3 2 times" in captured.err and "seed_3_copy" in captured.err


def _result(root: Path, exp: str, model: str, dataset: str, seed: int, f1: float, variant: str | None = None,
            ece: float = 0.1) -> None:
    run = root / exp / f"seed_{seed}"
    run.mkdir(parents=True)
    res = {"model": model, "experiment": exp, "dataset": dataset, "seed": seed,
           "metrics": {"test/f1": f1, "test/ece": ece}}
    if variant is not None:
        res["variant"] = variant
    (run / "results.json").write_text(json.dumps(res))


def test_report_rows_are_model_and_variant_columns_are_datasets(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two datasets x two variants: a 2 x 2 table, not four block-diagonal rows."""
    for seed in (1, 2):
        _result(tmp_path, "bioformer_apava+medformer", "Medformer", "apava", seed, 0.70, variant="")
        _result(tmp_path, "bioformer_ptb+medformer", "Medformer", "ptb", seed, 0.80, variant="")
        _result(tmp_path, "bioformer_apava+medformer+mmd", "Medformer", "apava", seed, 0.75, variant="mmd")
        _result(tmp_path, "bioformer_ptb+medformer+mmd", "Medformer", "ptb", seed, 0.60, variant="mmd")
    main(["report", str(tmp_path), "--metrics", "f1,ece", "--figures", str(tmp_path / "f")])
    table = capsys.readouterr().out.strip()
    rows = _markdown_rows(table)
    assert table.splitlines()[0] == "| model | apava: f1 | apava: ece | ptb: f1 | ptb: ece |"
    assert list(rows) == ["Medformer", "Medformer +mmd"]
    assert rows["Medformer"][0] == "0.700 ± 0.000 (n=2)" and rows["Medformer"][2] == "**0.800 ± 0.000 (n=2)**"
    assert (
        rows["Medformer +mmd"][0] == "**0.750 ± 0.000 (n=2)**"
        and rows["Medformer +mmd"][2] == "0.600 ± 0.000 (n=2)"
    )
    # ECE: lower is better, and equal ECEs are a tie: both marked
    assert all(rows[r][c].startswith("**") for r in rows for c in (1, 3))


def test_report_derives_the_variant_of_older_results(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # results.json written before `variant` existed: the experiment name's '+' parts, minus the dataset's
    _result(tmp_path, "bioformer_apava+synthetic+smoke", "BioFormer", "apava-synthetic", 1, 0.5)
    _result(tmp_path, "bioformer_ptb+synthetic+smoke", "BioFormer", "ptb-synthetic", 1, 0.6)
    _result(tmp_path, "bioformer_ptb+no_scln+synthetic+smoke", "BioFormer", "ptb-synthetic", 1, 0.7)
    main(["report", str(tmp_path), "--metrics", "f1", "--figures", str(tmp_path / "f")])
    assert list(_markdown_rows(capsys.readouterr().out.strip())) == ["BioFormer +smoke",
                                                                     "BioFormer +no_scln+smoke"]


def test_best_cell_needs_two_rows_and_compares_displayed_values() -> None:
    from biosig_lightning.analysis.report import Row, best_cells

    a, b, c = Row("A"), Row("B"), Row("C")
    stats = {
        (a, "d1", "f1"): (0.8, 0.0, 3),  # alone in its column: nothing to be best against
        (a, "d2", "f1"): (0.70001, 0.0, 3), (b, "d2", "f1"): (0.70006, 0.0, 3),  # 0.700 vs 0.700: a tie
        (c, "d2", "f1"): (0.65, 0.0, 3),
        (a, "d2", "ece"): (0.1204, 0.0, 3), (b, "d2", "ece"): (0.1196, 0.0, 3),  # 0.120 vs 0.120
        (c, "d2", "ece"): (0.2, 0.0, 3),
    }
    assert best_cells(stats, digits=3) == {(a, "d2", "f1"), (b, "d2", "f1"),
                                           (a, "d2", "ece"), (b, "d2", "ece")}
    assert best_cells(stats, digits=4) == {(b, "d2", "f1"), (b, "d2", "ece")}


def test_report_without_results_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no results.json below .*empty"):
        main(["report", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="does not exist"):
        main(["report", str(tmp_path / "missing")])


def test_variant_overrides_name_their_own_experiment(tmp_path: Path) -> None:
    from biosig_lightning.runs.naming import experiment_name

    base, abl = EXPERIMENTS / "sdformer_sleepedf.yaml", EXPERIMENTS / "sdformer" / "variants" / "no_dep.yaml"
    assert experiment_name(["--config", str(base)]) == "sdformer_sleepedf"
    # an ablation must not land in (and skip the seeds of) the full model's directory
    assert experiment_name(["--config", str(base), "--config", str(abl)]) == "sdformer_sleepedf+no_dep"
    assert experiment_name(["--config", str(base), "--config", str(abl), "--run.name", "x"]) == "x"
    named = tmp_path / "named.yaml"
    named.write_text("trainer:\n  logger:\n    class_path: CSVLogger\n    init_args: {name: mine}\n")
    assert experiment_name(["--config", str(base), "--config", str(named)]) == "mine"
    # tune's exported best config is named after its study, so two studies' bests never share a folder
    best = tmp_path / "runs" / "tune" / "lr_search" / "best.yaml"
    best.parent.mkdir(parents=True)
    best.write_text("model:\n  init_args: {lr: 0.001}\n")
    assert experiment_name(["--config",
                            str(base), "--config", str(best)]) == "sdformer_sleepedf+lr_search_best"


def test_logging_overlays_do_not_rename_the_experiment(tmp_path: Path) -> None:
    from biosig_lightning.runs.naming import experiment_name, is_overlay

    demo, smoke, synthetic = (str(EXPERIMENTS / f"{n}.yaml") for n in ("demo", "smoke", "synthetic"))
    bars = tmp_path / "quiet.yaml"
    bars.write_text("trainer: {enable_progress_bar: false}\nwandb: {tags: [x]}\nrun: {group: g}\n")
    for overlay in (EXPERIMENTS / "overlays" / "wandb.yaml",
                    EXPERIMENTS / "overlays" / "tensorboard.yaml", bars):
        assert is_overlay(overlay), overlay
        assert experiment_name(["--config", demo, "--config", smoke,
                                "--config", str(overlay)]) == "demo+smoke"
    # files that change results keep their place in the name
    assert not is_overlay(smoke) and not is_overlay(synthetic)
    assert experiment_name(["--config", demo, "--config",
                            synthetic, "--config", smoke]) == "demo+synthetic+smoke"


def test_repeat_with_a_dashboard_overlay_resumes_the_same_seeds(repeated: Path, in_tmp: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(repeated / "demo", in_tmp / "runs" / "repeat" / "demo+smoke")
    main(["repeat", *SMOKE, "--config", str(EXPERIMENTS / "overlays" / "tensorboard.yaml"), "--seeds", "3,4"])
    text = capsys.readouterr().out
    assert text.count("exists, skipped") == 2 and "2/2 seeds finished under runs/repeat/demo+smoke" in text


def test_variant_leaves_out_what_the_row_and_column_already_say() -> None:
    from biosig_lightning.runs.naming import variant_of

    t3 = EXPERIMENTS / "bioformer" / "baselines"
    configs = [EXPERIMENTS / "bioformer_apava.yaml", t3 / "medformer.yaml", t3 / "mmd.yaml",
               EXPERIMENTS / "overlays" / "synthetic.yaml", EXPERIMENTS / "overlays" / "smoke.yaml",
               EXPERIMENTS / "overlays" / "wandb.yaml"]
    # medformer.yaml picks the model (the row's name), synthetic.yaml the dataset (the column), wandb changes
    # nothing
    assert variant_of(configs) == "mmd+smoke"
    assert variant_of(configs[:1]) == ""
    assert variant_of([EXPERIMENTS / "sdformer_sleepedf.yaml",
                       EXPERIMENTS / "sdformer" / "variants" / "no_dag.yaml"]) \
        == "no_dag"


def test_report_per_subject_reads_real_test_predictions(repeated: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--per-subject`` on runs written by ``biosig fit``: the npz keys and subject ids as a real run saves
    them."""
    main(["report", str(repeated / "demo"), "--metrics", "acc", "--per-subject", "--format", "csv",
          "--figures", str(tmp_path / "f")])
    _, block = capsys.readouterr().out.strip().split("\n\n")
    (row,) = list(csv.DictReader(io.StringIO(block)))
    correct: dict[int, list[np.ndarray]] = {}
    for seed in (3, 4):
        with np.load(repeated / "demo" / f"seed_{seed}" / "test_predictions.npz") as z:
            hit = z["probs"].argmax(1) == z["y"]
            for s in np.unique(z["subject"]):
                correct.setdefault(int(s), []).append(hit[z["subject"] == s])
    acc = np.array([np.concatenate(parts).mean() for parts in correct.values()])
    assert len(acc) >= 2 and row["synthetic/subject_acc/n"] == str(len(acc))
    assert float(row["synthetic/subject_acc/mean"]) == pytest.approx(acc.mean(), abs=1e-12)
    assert float(row["synthetic/subject_acc/std"]) == pytest.approx(acc.std(ddof=1), abs=1e-12)
    assert (
        float(row["synthetic/subject_acc/min"]) == acc.min()
        and float(row["synthetic/subject_acc/max"]) == acc.max()
    )
