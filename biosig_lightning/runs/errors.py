"""The one-line error policy of every ``biosig`` command.

Bad input (data, run directory, arguments) ends in one line that names the file, channel,
subject or key, with no traceback; only the project's own error types are shortened this way, so
a bug elsewhere still shows where it happened.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biosig_lightning.atomic_io import is_storage_error, storage_message

#: Lightning's refusals of an accelerator that the machine lacks
ACCELERATOR_HINT = re.compile(r"gpu|cuda|mps|tpu|accelerator", re.IGNORECASE)


def quiet_environment() -> None:
    """What every ``biosig`` process sets first: offline dashboards and no warnings meant for others."""
    # dashboards stay on this machine unless the user asks for online sync (WANDB_MODE=online)
    os.environ.setdefault("WANDB_MODE", "offline")
    # biosig always hands LightningCLI its argv explicitly, which is what this warning is about;
    # the other one is Lightning's own use of a deprecated torch API: neither is the user's to fix
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def _is_misconfiguration(err: BaseException) -> bool:
    """Lightning's ``MisconfigurationException`` (by name: ``biosig --help`` does not import Lightning)."""
    return type(err).__name__ == "MisconfigurationException" and type(err).__module__.startswith("lightning")


def is_ours(err: BaseException) -> bool:
    """Whether ``err`` is bad input rather than a bug: one of the project's own errors (a ValueError it
    raised), the disk refusing a write (full, read-only), or Lightning refusing a trainer setting
    (an accelerator this machine does not have)."""
    from biosig_lightning.data.spec import DataError  # here, not at the top: `biosig --help` stays light

    return (isinstance(err, DataError) or is_storage_error(err) or _is_misconfiguration(err)
            or (isinstance(err, ValueError) and type(err).__module__.startswith("biosig_lightning.")))


def our_cause(err: BaseException) -> BaseException | None:
    """``err`` or the first of its causes that is one of the project's errors.

    The config parser wraps an error raised while it builds a value (a ``SplitError`` from
    ``data.init_args.split``) in errors of its own; the project's error is the one to show.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if is_ours(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def message(err: BaseException) -> str:
    """The one line shown for one of the project's errors (a split error names its config key)."""
    from biosig_lightning.data.splits import SplitError

    if isinstance(err, OSError):  # a write the disk refused, outside any :func:`writing` block
        where = Path(err.filename).parent if err.filename else "the run's directories"
        what = Path(err.filename).name if err.filename else "a file"
        return storage_message(err, what, where)
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if _is_misconfiguration(err) and ACCELERATOR_HINT.search(text):
        text = (f"trainer.accelerator: {text} (this machine has no such device: use --trainer.accelerator "
                f"auto "
                "or cpu)")
    if isinstance(err, SplitError) and not text.startswith("data."):
        text = f"data.init_args.split: {text}"
    return text


@contextmanager
def one_line_errors(command: str) -> Iterator[None]:
    """Turn the project's bad-input errors raised inside (or wrapped by a library) into
    ``biosig <command>: error: <message>``; anything else keeps its traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise SystemExit(f"biosig {command}: interrupted (Ctrl-C)") from None
    except Exception as err:
        ours = our_cause(err)
        if ours is not None:
            raise SystemExit(f"biosig {command}: error: {message(ours)}") from None
        raise
