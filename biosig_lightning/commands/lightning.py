"""``biosig fit|validate|test|predict``: LightningCLI
(:class:`~biosig_lightning.runs.biosig_cli.BiosigCLI`)."""

from __future__ import annotations

from biosig_lightning.runs.biosig_cli import run_lightning


def run(argv: list[str]) -> None:
    """Entry point; unlike the other commands, ``argv`` starts with the subcommand word (``fit`` ...),
    which LightningCLI parses itself."""
    run_lightning(argv)
