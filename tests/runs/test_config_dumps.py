"""The config ``biosig fit`` saves (``config.yaml``) and the hyperparameters it dumps are those LightningCLI
writes, without validating the already-parsed config a second and third time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from biosig_lightning.runs.biosig_cli import BiosigCLI
from tests.conftest import EXPERIMENTS


def _cli() -> BiosigCLI:
    return BiosigCLI(args=["--config", str(EXPERIMENTS / "bioformer_apava.yaml"),
                           "--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"),
                           "--trainer.logger=false"], run=False)


def test_dumps_equal_lightnings_and_are_not_validated_again(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cli = _cli()
    assert (
        cli.config_dump["model"]["init_args"]["backbone"]["init_args"]["n_chans"] == 16
    )  # linked while instantiating
    del cli.config_dump
    cli._dump_config()
    ours = cli.config_dump
    del cli.config_dump
    LightningCLI._dump_config(cli)
    assert ours == cli.config_dump
    LightningArgumentParser.save(cli.parser, cli.config, str(tmp_path / "lightning.yaml"), multifile=False)

    def no_validation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the parsed config was validated again")

    monkeypatch.setattr(cli.parser, "validate", no_validation)
    cli.parser.save(cli.config, str(tmp_path / "ours.yaml"), multifile=False)
    assert (tmp_path / "ours.yaml").read_text() == (tmp_path / "lightning.yaml").read_text()
    del cli.config_dump
    cli._dump_config()  # without validating either
    assert cli.config_dump == ours
