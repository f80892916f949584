"""Reading YAML: a user's file (a grid, a search space) with one-line errors that name the file, and YAML
text.

Two things PyYAML accepts are refused here, before a value is built:

* aliases that expand past :data:`ALIAS_BUDGET` nodes (a few hundred bytes of nested ``*ref`` lists
  can stand for billions of nodes): counted on libyaml's event stream, which holds one event at a time;
* a mapping that names the same key twice (PyYAML keeps the last and drops the first without a word).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

#: the nodes aliases may add to a document; a config, grid or search space uses a few dozen at most
ALIAS_BUDGET = 10_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _NoDuplicateKeys:
    """A mapping constructor that refuses a key its mapping already holds (``<<`` merges excepted)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node)  # type: ignore[attr-defined]
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ConstructorError(None, None,
                                           f"key {key!r} appears twice (lines {seen[key]} and {line}); "
                                           "YAML would keep the second and silently drop the first",
                                           key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _PyLoader(_NoDuplicateKeys, yaml.SafeLoader):
    pass


#: libyaml's parser where PyYAML was built with it: the same safe tags as ``yaml.SafeLoader``, much
#: faster on a run's config (every fit reads several)
_SAFE_LOADER: type = type("_CLoader",
                          (_NoDuplicateKeys, yaml.CSafeLoader), {}) if hasattr(yaml, "CSafeLoader") \
    else _PyLoader


def check_alias_expansion(text: str, budget: int = ALIAS_BUDGET) -> None:
    """Raise a ``yaml.MarkedYAMLError`` at the alias where the nodes added by aliases pass ``budget``.

    Each anchored node's size (its nodes, aliases inside counted expanded) is known when the node
    ends; an alias adds the size of the node it names. Nothing is built, so a bomb costs its events, not its
    expansion.
    """
    if "*" not in text:
        return
    sizes: dict[str, int] = {}
    opened: list[tuple[str | None, int]] = []  # (the collection's name, node count at its start)
    count = added = 0
    for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if isinstance(event, yaml.AliasEvent):
            size = sizes.get(event.anchor, 1)
            count += size
            added += size
            if added > budget:
                raise yaml.MarkedYAMLError(
                    None,
                    None,
                    f"its aliases expand to more than {budget} nodes (alias "
                    f"*{event.anchor}); write the values out instead",
                    event.start_mark,
                )
        elif isinstance(event, yaml.ScalarEvent):
            count += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            count += 1
            opened.append((event.anchor, count))
        elif isinstance(event, yaml.CollectionEndEvent) and opened:
            name, start = opened.pop()
            if name:
                sizes[name] = count - start + 1


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, through libyaml's parser when PyYAML has it, refusing alias bombs and
    repeated keys (module docstring); invalid YAML raises the pure-Python parser's error (its wording and
    line/column marks are what our one-line errors quote)."""
    check_alias_expansion(text)
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 -- a safe loader
    except ConstructorError:
        raise
    except yaml.YAMLError:
        return yaml.load(text, Loader=_PyLoader)  # noqa: S506 -- a safe loader


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: ``line L, column C: problem`` where it has a mark, else its first line."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        if mark is not None and err.problem:
            return f"line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    return str(err).splitlines()[0]


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
        raise error(f"{what} {path}: not valid YAML ({yaml_problem(err)})") from None
