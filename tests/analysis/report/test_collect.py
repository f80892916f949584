"""Which runs a report covers: unreadable or unusable ``results.json`` files are skipped by name with the
key that is wrong, unfinished runs listed apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biosig_lightning.cli import main


def _run(root: Path, name: str, acc: float, **extra: object) -> Path:
    run = root / name
    run.mkdir(parents=True)
    res = {"model": "CNN1D", "variant": "", "experiment": "demo", "dataset": "toy", "seed": int(acc * 100),
           "metrics": {"test/acc": acc}, **extra}
    (run / "results.json").write_text(json.dumps(res))
    return run


def _report(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    main(["report", str(root), "--metrics", "acc", "--figures", str(root.parent / "figures")])
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_unreadable_results_are_skipped_by_name_and_the_rest_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    _run(root, "good_1", 0.5)
    _run(root, "good_2", 0.7)
    as_list = root / "as_list" / "results.json"
    as_list.parent.mkdir()
    as_list.write_text("[1, 2]")
    truncated = root / "truncated" / "results.json"
    truncated.parent.mkdir()
    truncated.write_text('{"model": "CNN1D", "metrics": {"test/acc": 0.')
    out, err = _report(root, capsys)
    # the two good runs make the cell: mean 0.6 over n=2
    assert "| CNN1D | 0.600 ± 0.141 (n=2) |" in out
    lines = err.splitlines()
    assert any(
        f"skipping {as_list}: not a results.json (its JSON is a list, not an object)" in ln for ln in lines
    )
    assert any(f"skipping {truncated}: not a readable results.json" in ln for ln in lines)


def test_only_unreadable_results_is_still_an_error(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "runs" / "r" / "results.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("[]")
    with pytest.raises(SystemExit, match="no results.json below"):
        main(["report", str(tmp_path / "runs")])
    assert f"skipping {bad}" in capsys.readouterr().err


def test_unfinished_runs_are_listed_apart_with_their_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    finished = _run(root, "done", 0.5)
    (finished / "checkpoints").mkdir()
    (finished / "checkpoints" / "last.ckpt").write_bytes(b"x")  # finished: in the table, not listed
    stopped = root / "stopped"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "config.yaml").write_text("trainer: {}\n")
    (stopped / "checkpoints" / "best-epoch000.ckpt").write_bytes(b"x")
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"x")
    trial = (
        root / "tune" / "s" / "trial_0" / "version_0"
    )  # a tune trial: scored on validation, no results.json
    (trial / "checkpoints").mkdir(parents=True)
    (trial / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (trial / "tune_trial.json").write_text('{"study": "s", "trial": 0}')
    early = root / "early"  # killed in its first epoch: nothing to resume, nothing listed
    early.mkdir()
    (early / "metrics.csv").write_text("epoch,step\n")
    out, err = _report(root, capsys)
    assert "| CNN1D | 0.500 (n=1) |" in out and "stopped" not in out
    assert "1 unfinished run (a checkpoint, no results.json), not in the table" in err
    resume = (
        f"biosig fit --config {stopped / 'config.yaml'} --ckpt_path {stopped / 'checkpoints' / 'last.ckpt'}"
    )
    assert f"  {resume}\n" in err
    assert str(finished) not in err and str(early) not in err and str(trial) not in err


def test_results_the_report_cannot_use_are_skipped_one_line_each(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _run(root, "good_1", 0.5)
    _run(root, "good_2", 0.7)
    deep = root / "deep" / "results.json"
    deep.parent.mkdir()
    deep.write_text('{"metrics": ' + "[" * 100_000 + "]" * 100_000 + "}")
    bad = {"metrics_list": _run(root, "m_list", 0.1, metrics=[0.9]) / "results.json",
           "metric_text": _run(root, "m_text", 0.1, metrics={"test/acc": "high"}) / "results.json",
           "model_number": _run(root, "m_num", 0.1, model=3) / "results.json",
           "cm_ragged": _run(root, "cm", 0.1, confusion_matrix=[[1, 2], [3]]) / "results.json"}
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
