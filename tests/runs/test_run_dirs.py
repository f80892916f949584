"""Run directories: claimed create-exclusive, resumed only from the same experiment, never overwritten once
finished."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS, REPO

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_fits_started_at_once_get_two_complete_run_dirs(in_tmp: Path) -> None:
    barrier = in_tmp / "barrier"
    # the console script as a user starts it (progress bars on): each fit's last line on stdout names its
    # results
    cmd = [sys.executable, "-m", "biosig_lightning.cli", "fit", *DEMO,
           "--model.class_path=tests.runs.helpers.BarrierTask", f"--model.init_args.barrier_dir={barrier}"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    last = [out.strip().splitlines()[-1] for out, _ in outs]
    assert all(line.startswith("results: ") for line in last), last
    printed = [Path(line.removeprefix("results: ")) for line in last]
    assert all(p.is_file() for p in printed), printed
    assert printed[0] != printed[1]
    assert sorted(p.parent.name for p in printed) == ["version_0", "version_1"]
    for path in printed:
        run_dir = path.parent
        results = json.loads(path.read_text())
        assert Path(results["run_dir"]) == run_dir
        ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
        # one best and one last checkpoint, none of them versioned against the other run's (-v1)
        assert len(ckpts) == 2 and "last.ckpt" in ckpts and not any("-v" in c for c in ckpts), ckpts
        assert Path(results["best_checkpoint"]).parent == run_dir / "checkpoints"
        # one run's learning curve: a single epoch validated once, not two runs interleaved
        rows = _csv_rows(run_dir / "metrics.csv")
        assert [r["epoch"] for r in rows if r.get("val/loss")] == ["0"]


def _interrupted_run(capsys: pytest.CaptureFixture[str], name: str) -> Path:
    with pytest.raises((SystemExit, KeyboardInterrupt)):
        main(["fit", *DEMO, "--trainer.max_epochs", "3", "--trainer.logger.init_args.name", name,
              "--trainer.callbacks+=tests.helpers.InterruptAfterEpoch",
              "--trainer.callbacks.init_args.epoch", "0"])
    capsys.readouterr()
    run_dir = Path("runs") / name / "version_0"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (run_dir / "results.json").exists()
    return run_dir


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_resume_last_refuses_a_checkpoint_of_another_corpus(in_tmp: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _interrupted_run(capsys, "mixed")
    before = _snapshot(run_dir)
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--trainer.max_epochs", "3", "--trainer.logger.init_args.name", "mixed",
              "--data.init_args.kind", "motif", "--ckpt_path", "last"])
    message = str(err.value)
    assert message.startswith("biosig fit: error: --ckpt_path runs/mixed/version_0/checkpoints/last.ckpt")
    assert "data.init_args.kind ('bands' there, 'motif' here)" in message and "\n" not in message
    assert _snapshot(run_dir) == before  # nothing of the interrupted run was touched
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]  # and no new run was started


def test_explicit_checkpoint_into_a_run_of_another_model_is_refused(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _interrupted_run(capsys, "other")
    before = _snapshot(run_dir)
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--trainer.logger.init_args.name", "other", "--run.version", "version_0",
              "--model.init_args.backbone.class_path", "TransformerClassifier",
              "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt")])
    assert "model.init_args.backbone.class_path ('CNN1D' there, 'TransformerClassifier' here)" in str(
        err.value
    )
    assert _snapshot(run_dir) == before  # the interrupted run's checkpoint, config and curve are untouched
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]


def test_a_finished_run_is_never_resumed_nor_overwritten(in_tmp: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    main(["fit", *DEMO, "--trainer.logger.init_args.name", "done"])
    capsys.readouterr()
    run_dir = Path("runs/done/version_0")
    before = _snapshot(run_dir)
    with pytest.raises(SystemExit, match=r"every run under runs/done with a last.ckpt has finished"):
        main(["fit", *DEMO, "--trainer.logger.init_args.name", "done", "--trainer.max_epochs", "2",
              "--ckpt_path", "last"])
    with pytest.raises(SystemExit, match=r"runs/done/version_0 is a finished run \(results.json exists\)"):
        main(["fit", *DEMO, "--trainer.logger.init_args.name", "done", "--run.version", "version_0"])
    assert _snapshot(run_dir) == before
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]


def test_results_json_is_written_create_exclusive(tmp_path: Path) -> None:
    from biosig_lightning.runs.rundir import RunDirError, write_results_once

    first = write_results_once(tmp_path, {"seed": 1})
    with pytest.raises(RunDirError,
                       match=r"results.json exists .* this run's results are in .*results.1.json"):
        write_results_once(tmp_path, {"seed": 2})
    assert json.loads(first.read_text()) == {"seed": 1}
    assert json.loads((tmp_path / "results.1.json").read_text()) == {"seed": 2}


@pytest.mark.parametrize("crash_in", ["fsync", "link"])
def test_a_results_write_interrupted_before_its_rename_leaves_no_results_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_in: str) -> None:
    """The bytes go to a temporary file in the run directory and only a complete file gets the name: a crash
    after the data is written (``fsync``) or at the rename (``link``) leaves no ``results.json`` at all, no
    temporary debris, and the retried write succeeds."""
    import biosig_lightning.atomic_io as atomic_io
    from biosig_lightning.runs.rundir import write_results_once

    seen: list[str] = []
    real = getattr(os, crash_in)

    def crash(*args: object) -> None:
        seen.append(str(args[0]))
        raise OSError(5, f"injected crash in {crash_in}")

    monkeypatch.setattr(atomic_io.os, crash_in, crash)
    with pytest.raises(OSError, match="injected crash"):
        write_results_once(tmp_path, {"seed": 1, "metrics": {"test/acc": 0.5}})
    assert seen, f"the write never reached {crash_in}: results.json is not written through a temporary file"
    if (
        crash_in == "link"
    ):  # the complete temporary file that would have been renamed sits beside results.json
        assert Path(seen[0]).parent == tmp_path and Path(seen[0]).name != "results.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.setattr(atomic_io.os, crash_in, real)
    path = write_results_once(tmp_path, {"seed": 1})
    assert json.loads(path.read_text()) == {"seed": 1} and sorted(p.name for p in tmp_path.iterdir()) == [
        "results.json"
    ]


def test_a_version_claim_never_takes_a_directory_another_process_just_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes list ``version_*`` at once and both pick ``version_0``; the one whose ``mkdir`` comes
    second must move on to ``version_1``. Played deterministically: ``version_0`` already exists but the
    listing this claim reads is the stale, empty one."""
    from biosig_lightning.runs import rundir

    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_0" / "marker").write_text("the other process's run")
    monkeypatch.setattr(rundir, "_versions", lambda experiment_dir: [])
    assert rundir.claim_new_version(tmp_path) == 1
    assert (tmp_path / "version_1").is_dir() and (tmp_path / "version_0" / "marker").exists()


def test_a_named_claim_reports_whether_this_call_created_the_directory(tmp_path: Path) -> None:
    from biosig_lightning.runs.rundir import claim_named

    assert claim_named(tmp_path / "version_7") is True
    assert claim_named(tmp_path / "version_7") is False  # the second claimant did not create it
