"""Command-line and config mistakes end in one line naming the key or file, not a usage dump."""

from __future__ import annotations

from pathlib import Path

# Lightning binds its log handlers to the sys.stderr of its first import: imported here, at collection,
# not inside the first test's capture (a closed stream for every later test when this file runs alone)
import lightning.pytorch  # noqa: F401
import pytest

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS

DEMO = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
        str(EXPERIMENTS / "overlays" / "smoke.yaml")]


def _line(err: pytest.ExceptionInfo[SystemExit], capsys: pytest.CaptureFixture[str]) -> str:
    message = err.value.code
    assert isinstance(message, str) and message.startswith("biosig fit: error: ") and "\n" not in message, (
        message
    )
    printed = capsys.readouterr()
    assert "usage:" not in printed.err and "Traceback" not in printed.err, printed.err[-2000:]
    return message


@pytest.mark.parametrize(("args", "expected"), [
    (["--trainer.max_epocs=3"],
     "unrecognized arguments: --trainer.max_epocs=3 (did you mean --trainer.max_epochs?)"),
    # a truncated key is refused, not read as the one it abbreviates (argparse's allow_abbrev)
    (["--trainer.max_epoch=3"],
     "unrecognized arguments: --trainer.max_epoch=3 (did you mean --trainer.max_epochs?)"),
    (["--trainer.max_epochs=abc"], "trainer.max_epochs: expected int, got 'abc'"),
    (["--model.class_path=NoSuchTask"], "model.class_path: no such class"),
    (["--model.init_args.backbone.class_path=NoSuchNet"],
     "model.init_args.backbone.class_path: no such class"),
    (["--model.init_args.backbone.init_args.widht=3"],
     "model.init_args.backbone.init_args.widht: unknown option ('widht' is not an argument of that class)"),
])
def test_rejected_arguments_are_one_line_naming_the_key(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                         args: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, *args])
    message = _line(err, capsys)
    assert expected in message and message.endswith("(`biosig fit --help` lists every option)"), message


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such file"),
    ("- trainer\n- model\n", "holds a list, not config keys"),
    ("3\n", "holds a single int value, not config keys"),
])
def test_a_config_file_that_is_missing_a_list_or_a_scalar_is_named(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = in_tmp / "override.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, "--config", str(path)])
    assert f"--config {path}: {expected}" in _line(err, capsys)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("model.init_args.lr", "-0.1", "must be a number >= 0 (a learning rate), got -0.1"),
    ("model.init_args.weight_decay", "-1", "must be a number >= 0, got -1"),
    ("model.init_args.label_smoothing", "1.5", "must be a probability in [0, 1), got 1.5"),
    ("model.init_args.backbone.init_args.dropout", "1.0", "must be a probability in [0, 1), got 1.0"),
    ("model.init_args.backbone.init_args.width", "0", "must be a positive integer (a size), got 0"),
])
def test_out_of_range_hyperparameters_name_their_key(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                     key: str,
                                                     value: str, expected: str) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", *DEMO, f"--{key}={value}"])
    assert f"error: {key} {expected}" in _line(err, capsys)
    assert not Path("runs").exists() or not any(Path("runs").rglob("version_*"))


def test_help_still_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["fit", "--help"])
    assert err.value.code == 0
    out = capsys.readouterr().out
    assert "--trainer.max_epochs" in out and "--ckpt_path" in out and len(out.splitlines()) > 100
