"""``biosig fit`` builds the argument parser of ``fit`` alone, not those of all four subcommands."""

from __future__ import annotations

from typing import Any

import pytest
from lightning.pytorch.cli import LightningCLI

from biosig_lightning.runs.biosig_cli import BiosigCLI
from tests.conftest import EXPERIMENTS


class _Parsed(Exception):
    """Raised in place of parsing, once every parser is built."""


def _built_parsers(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> list[str]:
    built: list[str] = []
    original = LightningCLI._prepare_subcommand_parser

    def spy(self: Any, klass: type, subcommand: str, **kwargs: Any) -> Any:
        built.append(subcommand)
        return original(self, klass, subcommand, **kwargs)

    def stop(self: Any, parser: Any, args: Any) -> None:
        raise _Parsed

    monkeypatch.setattr(LightningCLI, "_prepare_subcommand_parser", spy)
    monkeypatch.setattr(BiosigCLI, "parse_arguments", stop)
    with pytest.raises(_Parsed):
        BiosigCLI(args=args)
    return built


@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_only_the_requested_subcommand_parser_is_built(
    monkeypatch: pytest.MonkeyPatch, subcommand: str
) -> None:
    config = str(EXPERIMENTS / "bioformer_apava.yaml")
    assert _built_parsers(monkeypatch, [subcommand, "--config", config]) == [subcommand]


def test_without_a_subcommand_every_parser_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _built_parsers(monkeypatch, ["--config", str(EXPERIMENTS / "bioformer_apava.yaml")]) == [
        "fit", "validate", "test", "predict"]
