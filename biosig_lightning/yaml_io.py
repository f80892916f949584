"""Reading a user's YAML file (a grid, a search space) with one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml(path: str | Path, what: str, error: type[Exception]) -> Any:
    """The parsed content of ``path`` (safe loader: no Python tags); a missing file or invalid YAML raises
    ``error`` with one line that says ``what`` the file was for, its path and, for bad YAML, where."""
    path = Path(path)
    text = path.read_text() if path.is_file() else None
    if text is None:
        raise error(f"{what} {path} does not exist")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise error(f"{what} {path}: not valid YAML ({str(err).splitlines()[0]})") from None
