"""The experiment configs that ship inside the package, found by name.

``experiments/`` stays at the repository root; the build maps it into the wheel as
``biosig_lightning.experiments`` (``pyproject.toml``: ``[tool.setuptools.package-dir]``), and
:func:`packaged_root` finds it through the import system, which finds the same folder
in an editable install and in an installed wheel (:func:`importlib.util.find_spec`). So ``biosig fit --config
bioformer_apava
--config overlays/smoke`` works from any folder after ``pip install``, and from a clone the
files' own relative paths (``experiments/bioformer_apava.yaml``) keep working: a ``--config``
that names an existing file is always that file.

* :func:`names` -- every packaged config as ``group/name`` (no ``.yaml``);
* :func:`find` -- a packaged config by name, ``.yaml`` optional, ``experiments/`` prefix optional;
* :func:`resolve_config_args` -- a command line with every ``--config NAME`` that is not a file
  replaced by the packaged file's path;
* :func:`copy_out` -- a packaged config written into the user's folder for editing.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from biosig_lightning.atomic_io import atomic_write_bytes

__all__ = ["ConfigNotFound", "copy_out", "find", "names", "packaged_root", "resolve_config_args"]

PACKAGE = "biosig_lightning.experiments"


class ConfigNotFound(ValueError):
    """``--config NAME`` names neither a file nor a packaged config (one line, with near names)."""


def packaged_root() -> Path:
    """The folder holding the packaged experiment YAMLs (the repository's ``experiments/`` in a clone)."""
    # a folder of data without __init__.py is a namespace package, whose resources.files() is a
    # MultiplexedPath rather than a path: its search locations are the folders themselves
    spec = importlib.util.find_spec(PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location)
    return Path(__file__).resolve().parent.parent / "experiments"  # a source tree used without installing


def names() -> list[str]:
    """Every packaged config, as its path under ``experiments/`` without ``.yaml``, sorted."""
    root = packaged_root()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


def _key(name: str) -> str:
    key = name.strip().replace("\\", "/")
    for prefix in ("./", "experiments/"):
        key = key.removeprefix(prefix)
    return key.removesuffix(".yaml").removesuffix(".yml")


def find(name: str) -> Path | None:
    """The packaged file called ``name`` (``bioformer_apava``, ``overlays/smoke.yaml``,
    ``experiments/bioformer_apava.yaml``), or None."""
    key = _key(name)
    if not is_config_name(key):
        return None
    root = packaged_root().resolve()
    path = (root / f"{key}.yaml").resolve()
    return path if path.is_relative_to(root) and path.is_file() else None


def is_config_name(name: str) -> bool:
    """Whether ``name`` can name a packaged config: a relative path with no ``..``, so only files under
    :func:`packaged_root` are ever found (``biosig configs copy ../../x`` names nothing)."""
    path = Path(_key(name))
    return bool(name.strip()) and not path.is_absolute() and not path.drive and ".." not in path.parts


def not_found(command: str, name: str) -> ConfigNotFound:
    """The one-line error of ``biosig configs <command>`` for a ``name`` that is no packaged config."""
    if not is_config_name(name):
        return ConfigNotFound(f"{command} {name}: not a packaged config name (names are "
                              "relative, such as bioformer_apava or overlays/smoke; 'biosig configs' lists "
                              "them)")
    near = _near(name)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return ConfigNotFound(f"{command} {name}: no packaged config of that name{hint}")


def _near(name: str) -> list[str]:
    import difflib

    key = _key(name)
    known = names()
    near = [n for n in known if n.endswith("/" + key) or n == key]
    return near or difflib.get_close_matches(key, known, n=3, cutoff=0.5)


def resolve_config_args(args: list[str]) -> list[str]:
    """``args`` with each ``--config X`` that is not an existing file, but is a packaged config's
    name, replaced by that file's path; a ``--config`` that is neither is one error naming it."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--config" and i + 1 < len(out):
            j, value, prefix = i + 1, out[i + 1], ""
        elif arg.startswith("--config="):
            j, value, prefix = i, arg.split("=", 1)[1], "--config="
        else:
            continue
        if Path(value).expanduser().exists() or "\n" in value or value.lstrip().startswith("{"):
            continue  # a file (or jsonargparse's inline YAML) stays what it is
        found = find(value)
        if found is None:
            near = _near(value)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigNotFound(f"--config {value}: no such file, and no packaged config of that name "
                                 f"('biosig configs' lists them){hint}")
        out[j] = prefix + str(found)
    return out


def copy_out(name: str, dest: str | os.PathLike[str] | None = None, overwrite: bool = False) -> Path:
    """Write the packaged config ``name`` to ``dest`` (a file, or a folder to put ``<name>.yaml`` in;
    default the current folder), atomically; an existing file is kept unless ``overwrite``."""
    src = find(name)
    if src is None:
        raise not_found("copy", name)
    target = Path(dest) if dest is not None else Path.cwd()
    if target.is_dir() or dest is None or str(dest).endswith(os.sep):
        target = target / src.name
    if target.exists() and not overwrite:
        raise ConfigNotFound(f"copy: {target} exists (pass --force to replace it)")
    return atomic_write_bytes(target, src.read_bytes())
