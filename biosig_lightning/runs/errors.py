"""The one-line error policy of every ``biosig`` command.

Bad input (data, run directory, arguments) ends in one line that names the file, channel,
subject or key, with no traceback; only the project's own error types are shortened this way, so
a bug elsewhere still shows where it happened.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from biosig_lightning.data.spec import DataError


def quiet_environment() -> None:
    """What every ``biosig`` process sets first: offline dashboards and no warnings meant for others."""
    # dashboards stay on this machine unless the user asks for online sync (WANDB_MODE=online)
    os.environ.setdefault("WANDB_MODE", "offline")
    # biosig always hands LightningCLI its argv explicitly, which is what this warning is about;
    # the other one is Lightning's own use of a deprecated torch API: neither is the user's to fix
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def is_ours(err: BaseException) -> bool:
    """Whether ``err`` is one of the project's own bad-input errors (a ValueError it raised)."""
    return isinstance(err, DataError) or (isinstance(err, ValueError)
                                          and type(err).__module__.startswith("biosig_lightning."))


@contextmanager
def one_line_errors(command: str) -> Iterator[None]:
    """Turn the project's bad-input errors raised inside into ``biosig <command>: error: <message>``."""
    try:
        yield
    except ValueError as err:
        if is_ours(err):
            raise SystemExit(f"biosig {command}: error: {err}") from None
        raise
