"""Ctrl-C: during a fit the run is marked unfinished and the last line says how to resume it; during
start-up one line, no traceback."""

from __future__ import annotations

import json
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from biosig_lightning.cli import main
from biosig_lightning.runs import biosig_cli
from biosig_lightning.runs.rundir import INTERRUPTED
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


@pytest.fixture(autouse=True)
def _sigint_restored() -> Iterator[None]:
    handler = signal.getsignal(
        signal.SIGINT
    )  # Lightning ignores SIGINT while it shuts an interrupted fit down
    yield
    signal.signal(signal.SIGINT, handler)


def test_ctrl_c_during_a_fit_marks_the_run_and_says_how_to_resume(in_tmp: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", *DEMO, "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
            "--trainer.callbacks+=tests.helpers.InterruptAfterEpoch", "--trainer.callbacks.init_args.epoch=0"]
    with pytest.raises(SystemExit) as err:
        main(args)
    message = err.value.code
    run_dir = Path("runs/demo/version_0")
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith(f"biosig fit: interrupted (Ctrl-C) in epoch 1; {run_dir} is marked unfinished")
    marker = json.loads((run_dir / INTERRUPTED).read_text())
    assert marker["last_checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt") and marker["epoch"] == 1
    assert "Traceback" not in capsys.readouterr().err
    resume = message.split("resume it with: ", 1)[1]
    assert resume == marker["resume"] and resume.endswith("--ckpt_path last")
    # the printed command resumes the same run, which then finishes and is no longer marked
    command = shlex.split(resume)
    assert command[:2] == ["biosig", "fit"]
    main([a for a in command[1:] if "InterruptAfterEpoch" not in a and "callbacks.init_args" not in a])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"results: {run_dir}/results.json"
    assert not (run_dir / INTERRUPTED).exists()


def test_ctrl_c_during_start_up_is_one_line(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def pressed(*_: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(biosig_cli, "auto_name", pressed)  # while the config is being resolved
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO])
    assert err.value.code == "biosig fit: interrupted (Ctrl-C)"
