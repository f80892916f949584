"""Small helpers shared across layers: atomic file writes and JSON that never half-exists."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the process's umask, read once: the files written here get the mode ``open()`` would give them
#: (``tempfile.mkstemp`` makes them 0600, unreadable to the other machines and users of a shared run folder)
_FILE_MODE = 0o666 & ~_umask()


def atomic_write_bytes(path: str | Path, data: bytes | memoryview, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a torn one.

    ``exclusive=True`` never replaces an existing ``path``: the complete temporary file is
    hard-linked to the name, which fails with ``FileExistsError`` when the name exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where the file system allows opening a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str | Path, obj: Any, exclusive: bool = False) -> Path:
    """JSON-encode ``obj`` (non-JSON values become strings) and write it atomically (see
    :func:`atomic_write_bytes` for ``exclusive``)."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=_jsonable)
    return atomic_write_bytes(path, (text + "\n").encode(), exclusive=exclusive)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


#: what the disk says when a file cannot be written there: full, over quota, read-only, not allowed
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


class StorageError(ValueError):
    """A file a run writes cannot be written (disk full, read-only, no permission): one line that names
    the directory and what was being written."""


def is_storage_error(err: BaseException) -> bool:
    """Whether ``err`` is the disk refusing a write (:data:`STORAGE_ERRNOS`), not a bug."""
    return isinstance(err, OSError) and err.errno in STORAGE_ERRNOS


def storage_message(err: OSError, what: str, directory: str | Path, advice: str = "") -> str:
    """``cannot write <what> in <directory>: <reason>[; advice]``."""
    reason = err.strerror or os.strerror(err.errno or 0) or type(err).__name__
    return f"cannot write {what} in {directory}: {reason}" + (f"; {advice}" if advice else "")


@contextmanager
def writing(what: str, directory: str | Path, advice: str = "") -> Iterator[None]:
    """Turn the disk refusing a write inside the block into a :class:`StorageError` naming ``what``
    (``"checkpoint last.ckpt"``) and ``directory``; other errors pass unchanged."""
    try:
        yield
    except OSError as err:
        if not is_storage_error(err):
            raise
        raise StorageError(storage_message(err, what, directory, advice)) from err
