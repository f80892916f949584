"""Reading YAML: a user's file (a grid, a search space) with one-line errors that name the file, and YAML text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: libyaml's parser where PyYAML was built with it: the same safe tags as ``yaml.SafeLoader``, much
#: faster on a run's config (every fit reads several)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, through libyaml's parser when PyYAML has it; invalid YAML raises the
    pure-Python parser's error (its wording and line/column marks are what our one-line errors quote)."""
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 -- a safe loader
    except yaml.YAMLError:
        return yaml.safe_load(text)


def load_yaml(path: str | Path, what: str, error: type[Exception]) -> Any:
    """The parsed content of ``path`` (safe loader: no Python tags); a missing file or invalid YAML raises
    ``error`` with one line that says ``what`` the file was for, its path and, for bad YAML, where."""
    path = Path(path)
    text = path.read_text() if path.is_file() else None
    if text is None:
        raise error(f"{what} {path} does not exist")
    try:
        return parse_yaml(text)
    except yaml.YAMLError as err:
        raise error(f"{what} {path}: not valid YAML ({str(err).splitlines()[0]})") from None
