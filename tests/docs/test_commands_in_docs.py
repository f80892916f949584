"""The ``biosig`` commands shown in README.md and docs/: each names a real command, and every option a
non-LightningCLI command is shown with is one its parser knows (or a config key it hands to ``biosig fit``).
Whether the configs and keys parse is a ``biosig fit ... --print_config`` per line, too slow for the suite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from biosig_lightning.cli import COMMANDS, LIGHTNING, main

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
#: ``biosig WORD ...`` where a shell command starts: a line's start, after ``$``, ``;``, ``&&`` or ``do``
COMMAND = re.compile(r"(?:^|\$ |; *|&& *|\bdo +)biosig ([a-z][a-z-]*)((?: +[^\s#;|]+)*)")


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """``(page, command word, options)`` of every ``biosig`` line in a fenced block of the README or docs."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                for word, rest in COMMAND.findall(line.split(" # ")[0].strip()):
                    options = [o.split("=")[0] for o in re.findall(r"(?<![\w-])--[a-z][\w.-]*", rest)]
                    found.append((page.relative_to(ROOT).as_posix(), word, options))
    return found


def _passed_to_fit(option: str) -> bool:
    """``repeat``, ``cv``, ``tune`` and ``profile`` hand ``--config`` and dotted keys to ``biosig fit``."""
    return option == "--config" or "." in option


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def test_every_shown_command_exists_and_its_options_are_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    shown = shown_commands()
    assert len(shown) > 50
    assert {"fit", "repeat", "cv", "report", "benchmark", "tune"} <= {word for _, word, _ in shown}
    helps: dict[str, str] = {}
    for page, word, options in shown:
        assert word in COMMANDS, f"{page}: 'biosig {word}' is not a biosig command"
        if word in LIGHTNING or word == "configs":  # LightningCLI's keys; configs takes words, not options
            continue
        text = helps.setdefault(word, _help(word, capsys))
        unknown = [o for o in options if not re.search(rf"{re.escape(o)}\b", text) and not _passed_to_fit(o)]
        assert not unknown, f"{page}: 'biosig {word}' is shown with {unknown}, which its parser does not know"
