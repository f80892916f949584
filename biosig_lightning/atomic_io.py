"""Small helpers shared across layers: atomic file writes and JSON that never half-exists."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a torn one.

    ``exclusive=True`` never replaces an existing ``path``: the complete temporary file is
    hard-linked to the name, which fails with ``FileExistsError`` when the name exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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
    return path


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
