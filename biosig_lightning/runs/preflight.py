"""A check a command makes before it starts many fits of one experiment (``biosig cv``): the experiment
is built once, nothing fitted or written, and its corpus opened, so that a missing corpus ends in one
line instead of failing every fit in turn.

It builds the experiment with :class:`~biosig_lightning.runs.biosig_cli.BiosigCLI`, so it sits above
it: the CLI's own start-up checks are in :mod:`biosig_lightning.runs.checks`.
"""

from __future__ import annotations

import logging

from biosig_lightning.runs.biosig_cli import BiosigCLI

__all__ = ["check_data_source"]


def check_data_source(fit_args: list[str]) -> None:
    """Build the experiment of ``fit_args`` (``biosig fit`` arguments; nothing is fitted or written) and
    open its corpus, so that a root that does not exist, an empty one or a config that does not parse
    ends here, in one line, before a command such as ``biosig cv`` starts many fits that would each stop
    on it."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:  # Lightning's start-up lines belong to the fits, not to this check
        logger.setLevel(logging.WARNING)
    try:
        cli = BiosigCLI(args=[*fit_args, "--trainer.logger=false"], run=False, save_config_callback=None)
        cli.datamodule.reader()
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
