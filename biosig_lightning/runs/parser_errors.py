"""Command-line and config errors of ``biosig fit|validate|test|predict`` in one line.

jsonargparse reports a rejected value as a usage dump of every option followed by a nested
report of each type it tried (``Does not validate against any of the Union subtypes ...``).
:class:`BiosigArgumentParser` replaces that with one line naming the full config key, what was
wrong with it and the value given, plus a pointer to ``--help`` (which still prints every
option). A misspelt option is matched against the known ones (``did you mean ...``).
"""

from __future__ import annotations

import difflib
import re
from typing import Any, NoReturn

from jsonargparse._util import argument_error
from lightning.pytorch.cli import LightningArgumentParser

_PARSER_KEY = re.compile(r'^\s*Parser key "([^"]+)":\s*(.*)$')
_NESTED = re.compile(r"NestedArg\(key='([^']*)', val=(.*)\)$")
_CLASS = re.compile(r"<class '([\w.]+)'>")
_NONE_ALTERNATIVE = re.compile(r"^Expected a <class 'NoneType'>$")


def _plain(text: str) -> str:
    """``<class 'int'>`` -> ``int``; dotted class names keep their last part."""
    return _CLASS.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text).strip()


def _full_key(top: str, nested: str) -> str:
    """The config key a nested value (``--model.init_args.lr``) was given for, in full."""
    head = nested.split(".", 1)[0]
    return f"{top}.{nested}" if head in ("class_path",
                                         "init_args", "dict_kwargs") else f"{top}.init_args.{nested}"


def _reason(lines: list[str]) -> str:
    """The innermost reason in jsonargparse's report: the deepest line of the first error item
    that is not the ``None`` alternative of an optional value."""
    items: list[list[str]] = []
    in_errors = False
    for line in lines:
        stripped = line.strip()
        if stripped == "Errors:":
            in_errors = True
            continue
        if stripped.startswith(("Given value type:", "Given value:", "Subtypes:")):
            in_errors = False
            continue
        if in_errors:
            if stripped.startswith("- "):
                items.append([stripped[2:]])
            elif items:
                items[-1].append(stripped)
    for item in items:
        if not _NONE_ALTERNATIVE.match(item[0]):
            detail = [ln for ln in item if not ln.startswith(("Problem with given class_path", "Parser key"))]
            return _plain(detail[-1] if detail else item[-1])
    return ""


def condense(message: str, options: list[str] | None = None) -> str:
    """One line for a jsonargparse error ``message`` (``options``: the parser's option strings,
    for a ``did you mean`` on an unrecognised one)."""
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return "invalid arguments"
    first = lines[0].strip()
    if first.startswith("unrecognized arguments:") and options:
        unknown = first.split(":", 1)[1].split()
        guesses = []
        for arg in unknown:
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.8)
            if name.startswith("--") and close:
                guesses.append(close[0])
        return first + (f" (did you mean {', '.join(guesses)}?)" if guesses else "")
    match = _PARSER_KEY.match(first)
    if match is None:
        return _plain(" ".join(ln.strip() for ln in lines))
    key, rest = match.group(1), match.group(2).strip()
    given = next((ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("Given value:")), None)
    reason = _reason(lines) or _plain(rest) or _plain(" ".join(ln.strip() for ln in lines[1:]))
    got = re.search(r"\.?\s*Got value: (.*)$", reason)
    if got is not None:
        reason, given = reason[: got.start()], given if given is not None else got.group(1)
    nested = _NESTED.match(given) if given else None
    if nested is not None:
        key, given = _full_key(key, nested.group(1)), nested.group(2).strip("'\"")
    if reason.startswith("Expected a dot import path string"):
        reason = "no such class (give a class registered with biosig, or its full import path)"
    elif reason.startswith("Expected a "):
        reason = "expected " + reason[len("Expected a "):].replace("<", "").replace(">", "")
    if reason.startswith("Option ") and reason.endswith("is not accepted"):
        return f"{key}: unknown option ({reason.split(' ')[1]} is not an argument of that class)"
    if given is not None and given not in reason:
        return f"{key}: {reason}, got {given!r}" if reason else f"{key}: invalid value {given!r}"
    return f"{key}: {reason}" if reason else f"{key}: invalid value"


class BiosigArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, with its errors in one line (:func:`condense`) instead of a usage dump.

    :meth:`save` (LightningCLI's ``config.yaml``) does not validate the config again: it was
    validated when parsed, and re-checking every class type is most of what a save costs.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # a truncated key (``--trainer.max_epoch``) is refused by name, not read as the key it abbreviates
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def save(self, cfg: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("skip_validation", True)
        super().save(cfg, path, *args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:  # jsonargparse's own inner parsers: they raise, and their caller reports
            raise argument_error(message) from ex
        command = self.prog.split()[-1] if " " in self.prog else "fit"
        options = [s for action in self._actions for s in action.option_strings if s.startswith("--")]
        raise SystemExit(f"biosig {command}: error: {condense(message, options)} "
                         f"(`biosig {command} --help` lists every option)")

