"""The boundary where a reader hands a user's recording to mne, mne-bids, pyedflib or wfdb.

Whatever those libraries raise while reading a file (a ``channels.tsv`` that names other channels than
the recording, an empty ``.eeg``, a header they cannot parse) comes out of :func:`reading` as one
:class:`~biosig_lightning.data.spec.DataError` naming the file and what was wrong, which every
``biosig`` command prints as one line. Only library calls go inside the block: a bug in the reader's
own code keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biosig_lightning.data.spec import DataError

#: the longest library message quoted in the line
MAX_REASON = 300


def reason(err: BaseException) -> str:
    """``Type: first line of the message`` (at most :data:`MAX_REASON` characters)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


@contextmanager
def reading(path: str | Path, what: str = "the recording") -> Iterator[None]:
    """Turn any exception a reading library raises inside the block into ``DataError("<path>: cannot read
    this <what> (<Type>: <message>)")``; a :class:`DataError` (the reader's own line) and Ctrl-C pass."""
    try:
        yield
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - the libraries raise every kind; each becomes the same one line
        raise DataError(f"{path}: cannot read {what} ({reason(err)}){_empty_companions(Path(path))}") from err


def _empty_companions(path: Path) -> str:
    """``; X is empty (0 bytes)`` for the first empty file of ``path``'s recording (same name, any extension:
    a BrainVision ``.vhdr`` keeps its samples in ``.eeg``), the likely cause when a library says little."""
    try:
        empty = [
            p for p in sorted(path.parent.glob(f"{path.stem}.*")) if p.is_file() and p.stat().st_size == 0
        ]
    except OSError:
        return ""
    return f"; {empty[0].name} is empty (0 bytes)" if empty else ""
