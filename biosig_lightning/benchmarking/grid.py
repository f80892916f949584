"""A benchmark grid: corpora x methods x seeds (x folds), read from ``experiments/benchmarks/*.yaml``.

A grid file holds::

    name: smoke
    seeds: [1, 2]
    fit_args: {trainer.enable_progress_bar: false}     # optional, every cell
    corpora:
      apava:
        task: window_classification
        configs: [experiments/bioformer_apava.yaml]     # the corpus's reference experiment
        overlays: [experiments/overlays/synthetic.yaml] # e.g. the built-in stand-in
        overrides: {trainer.max_epochs: 3}              # budget shared by every method
        protocol:                                       # one split protocol every method shares
          split: {strategy: ratio, ratios: [0.6, 0.2, 0.2], seed: 0}
          folds: [0, 1, 2]                              # optional: the kfold/loso folds run
          fold_key: data.init_args.fold                 # the key set to the fold (this is the default)
        metrics: [f1, acc, auroc]                       # first: the one methods are ranked by
    methods:
      cnn1d:
        tasks: [window_classification]
        backbone: {class_path: CNN1D, init_args: {width: 16}}   # a catalog name or a dotted path
        recipe: {class_path: biosig_lightning.robust.DGTask, init_args: {method: mmd}}
        configs: {apava: [experiments/bioformer/baselines/transformer.yaml]}  # per corpus
        overrides: {model.init_args.lr: 1.0e-3}
        corpus_overrides:                               # this method's per-corpus settings (e.g. token size)
          sleepedf: {model.init_args.backbone.init_args.patch_len: 16}
        not_applicable: {tusz: "needs the step-major FFT features"}

A corpus may give ``data`` instead of a corpus config: the DataModule of a user's own data (:data:`OWN_DATA`:
``{bids: ...}``, ``{epochs: ...-epo.fif}`` or ``{arrays: ....npz}``), its ``configs`` then optional.
A cell is one ``biosig fit``: the corpus's ``configs`` and ``data``, the method's configs for that corpus,
backbone and recipe swaps, overrides and ``corpus_overrides``, then the corpus's ``overlays``, ``overrides``
and split (last, so every method on a corpus trains under the same data, budget and subjects), then the
grid's ``fit_args``. A method whose ``tasks`` miss the corpus's ``task``, or which names the corpus under
``not_applicable``, gets an n/a cell with its reason. Relative paths are looked up from the current
directory, then from the grid file's folder and each folder above it.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from biosig_lightning import recipes
from biosig_lightning.yaml_io import load_yaml

__all__ = ["Cell", "Corpus", "Grid", "GridError", "Method", "NotApplicable", "load_grid", "run_placement"]

DEFAULT_METRICS = ("f1", "acc", "auroc")
#: a corpus's ``data`` kinds: the key naming the data, its DataModule and the argument the path goes to
OWN_DATA: dict[str, tuple[str, str]] = {
    "bids": ("biosig_lightning.data.datamodules.BIDSDataModule", "root"),
    "epochs": ("biosig_lightning.data.datamodules.EpochsDataModule", "epochs"),
    "arrays": ("biosig_lightning.data.datamodules.ArrayFileDataModule", "file"),
}
#: the config key a fold index goes to (every DataModule's ``fold``: the test fold of a loso/kfold split)
FOLD_KEY = "data.init_args.fold"
#: the fold key of older grids and commands, still accepted with one deprecation line
OLD_FOLD_KEY = "data.init_args.split.fold"


def fold_key(key: str) -> str:
    """``key``, after one line on stderr when it is the deprecated :data:`OLD_FOLD_KEY`."""
    if key == OLD_FOLD_KEY:
        print(f"biosig: deprecated fold key {OLD_FOLD_KEY}: use {FOLD_KEY} (the same test fold of a loso or "
              f"kfold "
              "split)", file=sys.stderr, flush=True)
    return key


class GridError(ValueError):
    """A grid file that cannot be run (one line, names the file and key)."""


@dataclass(frozen=True)
class Corpus:
    """One corpus of the grid and the protocol every method on it shares."""

    name: str
    task: str
    configs: tuple[Path, ...]
    overlays: tuple[Path, ...] = ()
    overrides: Mapping[str, Any] = field(default_factory=dict)
    split: Mapping[str, Any] | None = None
    folds: tuple[int, ...] = ()
    metrics: tuple[str, ...] = DEFAULT_METRICS
    fold_key: str = FOLD_KEY
    data: Mapping[str, Any] | None = None  # own data: {"class_path": ..., "init_args": {...}}


@dataclass(frozen=True)
class Method:
    """A model and its recipe, as one leaderboard row."""

    name: str
    tasks: tuple[str, ...]
    backbone: Mapping[str, Any] | None = None
    recipe: Mapping[str, Any] | None = None
    configs: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    corpus_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """One run: a method on a corpus with one seed (and fold)."""

    corpus: str
    method: str
    seed: int
    fold: int | None = None

    @property
    def id(self) -> str:
        """``<corpus>/<method>/seed_<s>[/fold_<k>]``: the cell's queue id and its run directory under DIR."""
        tail = f"/fold_{self.fold}" if self.fold is not None else ""
        return f"{self.corpus}/{self.method}/seed_{self.seed}{tail}"

    def run_dir(self, out: Path) -> Path:
        return Path(out) / self.id


class NotApplicable(NamedTuple):
    """A method x corpus pair the grid lists but does not run, and why."""

    corpus: str
    method: str
    reason: str


@dataclass(frozen=True)
class Grid:
    """A parsed grid file (module docstring)."""

    name: str
    path: Path
    seeds: tuple[int, ...]
    corpora: Mapping[str, Corpus]
    methods: Mapping[str, Method]
    fit_args: Mapping[str, Any] = field(default_factory=dict)

    def not_applicable(self) -> list[NotApplicable]:
        """Every method x corpus pair that gets no runs, with its reason."""
        out = []
        for c in self.corpora.values():
            for m in self.methods.values():
                reason = self.reason_not_applicable(m, c)
                if reason:
                    out.append(NotApplicable(c.name, m.name, reason))
        return out

    @staticmethod
    def reason_not_applicable(method: Method, corpus: Corpus) -> str | None:
        if corpus.name in method.not_applicable:
            return method.not_applicable[corpus.name]
        if corpus.task not in method.tasks:
            return f"{method.name} applies to {', '.join(method.tasks)}; {corpus.name} is {corpus.task}"
        return None

    def cells(self) -> list[Cell]:
        """Every applicable cell, corpus by corpus, method by method, seed by seed, fold by fold."""
        out: list[Cell] = []
        for c in self.corpora.values():
            for m in self.methods.values():
                if self.reason_not_applicable(m, c):
                    continue
                for s in self.seeds:
                    folds: tuple[int | None, ...] = c.folds or (None,)
                    out.extend(Cell(c.name, m.name, s, k) for k in folds)
        return out

    def base_args(self, cell: Cell) -> list[str]:
        """The ``biosig fit`` arguments of ``cell`` without its seed and run placement."""
        c, m = self.corpora[cell.corpus], self.methods[cell.method]
        args = [a for p in c.configs for a in ("--config", str(p))]
        if c.data is not None:
            args += _own_data_args(c, m)
        args += [a for p in m.configs.get(c.name, ()) for a in ("--config", str(p))]
        if m.recipe is not None:
            args += _swap("model", m.recipe)
        if m.backbone is not None:
            args += _swap("model.init_args.backbone", m.backbone)
        args += _flat(m.overrides)
        args += _flat(m.corpus_overrides.get(c.name, {}))
        args += [a for p in c.overlays for a in ("--config", str(p))]
        args += _flat(c.overrides)
        if c.split is not None:
            args.append(f"--data.init_args.split={json.dumps(dict(c.split))}")
        if cell.fold is not None:
            args.append(f"--{c.fold_key}={cell.fold}")
        args += _flat(self.fit_args)
        return args

    def cell_args(self, cell: Cell, out: Path) -> list[str]:
        """The complete ``biosig fit`` arguments that run ``cell`` into ``cell.run_dir(out)``."""
        return [*self.base_args(cell), "--seed_everything", str(cell.seed),
                *run_placement(cell.run_dir(out), f"{cell.corpus}/{cell.method}")]


def run_placement(run_dir: Path, group: str) -> list[str]:
    """``biosig fit``'s ``--run.*`` arguments that put a run (every logger) into ``run_dir``, its wandb
    run grouped under ``group``."""
    return ["--run.save_dir", str(run_dir.parent.parent), "--run.name", run_dir.parent.name,
            "--run.version", run_dir.name, "--run.group", group]


def _own_data_args(c: Corpus, m: Method) -> list[str]:
    """The own-data DataModule swapped in, or, where the method trains on a DataModule that wraps a corpus's
    (one with a ``corpus`` argument, e.g. SPD tokens of the windows; its ``data.class_path`` in the method's
    overrides), that wrapper with the own-data DataModule as its ``corpus`` and its arguments as
    ``corpus_args``
    (``root`` and the shared DataModule arguments stay the wrapper's)."""
    assert c.data is not None
    wrapper = {**m.overrides, **m.corpus_overrides.get(c.name, {})}.get("data.class_path")
    if wrapper is None:
        return _swap("data", c.data)
    from biosig_lightning.data.module import BiosignalDataModule

    shared = set(inspect.signature(BiosignalDataModule.__init__).parameters)
    own = {k: v for k, v in c.data["init_args"].items() if k not in shared}
    outer = {k: v for k, v in c.data["init_args"].items() if k in shared}
    return _swap("data", {"class_path": str(wrapper), "init_args": {"corpus": c.data["class_path"],
                                                                    "corpus_args": own, **outer}})


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _flat(overrides: Mapping[str, Any]) -> list[str]:
    return [f"--{k}={_value(v)}" for k, v in overrides.items()]


def _swap(key: str, spec: Mapping[str, Any]) -> list[str]:
    """``--key.class_path X --key.init_args.a=1 ...``: a class swapped in, keeping the arguments it shares."""
    args = [f"--{key}.class_path={spec['class_path']}"]
    return args + [f"--{key}.init_args.{k}={_value(v)}" for k, v in (spec.get("init_args") or {}).items()]


# ---- reading ------------------------------------------------------------------------------------------
def _find(path: str, grid: Path, where: str) -> Path:
    p = Path(path)
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = [Path.cwd() / p] + [d / p for d in grid.resolve().parents]
    for cand in candidates:
        if cand.is_file():
            return cand.resolve()
    raise GridError(f"{grid}: {where}: config file {path!r} not found (looked in the current directory and "
                    f"above "
                    "the grid file)")


def _mapping(value: Any, where: str, grid: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GridError(f"{grid}: {where} must be a mapping, got {type(value).__name__}")
    return value


def _paths(value: Any, where: str, grid: Path) -> tuple[Path, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GridError(f"{grid}: {where} must be a list of config paths")
    return tuple(_find(v, grid, where) for v in value)


def _class_spec(value: Any, where: str, grid: Path, catalog_name: bool = False) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"class_path": value}
    spec = _mapping(value, where, grid)
    extra = set(spec) - {"class_path", "init_args"}
    if "class_path" not in spec or extra:
        raise GridError(f"{grid}: {where} needs class_path (and optional init_args), got keys {sorted(spec)}")
    name = str(spec["class_path"])
    if (
        catalog_name and "." not in name
    ):  # a catalog name (a recipe's short name is LightningCLI's to resolve)
        import biosig_lightning.models  # noqa: F401  (fills the catalog)
        from biosig_lightning.models import catalog

        try:
            name = catalog.get(name).class_path
        except KeyError as err:
            raise GridError(f"{grid}: {where}: {err.args[0]}") from None
    elif not catalog_name and not _recipe_exists(name):  # else every cell of the method would run and fail
        raise GridError(f"{grid}: {where}: class_path {name!r} names no recipe (neither an importable class "
                        f"nor one of {', '.join(recipes.names())})")
    return {"class_path": name, "init_args": _mapping(spec.get("init_args"), f"{where}.init_args", grid)}


def _recipe_exists(class_path: str) -> bool:
    """Whether a recipe's ``class_path`` resolves as LightningCLI would: a dotted path that imports, or the
    short name of a recipe of the catalog (:mod:`biosig_lightning.recipes`)."""
    import importlib

    module, _, attr = class_path.rpartition(".")
    if module:
        try:
            return hasattr(importlib.import_module(module), attr)
        except ImportError:
            return False
    return class_path in recipes.names()


def _own_data(value: Any, where: str, grid: Path) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` of a corpus's ``data``: exactly one key of :data:`OWN_DATA` naming an
    existing path, the other keys the DataModule's arguments (checked against its signature)."""
    from biosig_lightning.data import datamodules
    from biosig_lightning.data.module import BiosignalDataModule

    spec = dict(_mapping(value, where, grid))
    kinds = [k for k in OWN_DATA if k in spec]
    if len(kinds) != 1:
        raise GridError(f"{grid}: {where} needs exactly one of {', '.join(OWN_DATA)} (the data's path), "
                        f"got keys {sorted(spec)}")
    class_path, path_arg = OWN_DATA[kinds[0]]
    raw = Path(str(spec.pop(kinds[0]))).expanduser()
    candidates = [raw] if raw.is_absolute() else [Path.cwd() / raw, grid.resolve().parent / raw]
    found = next((p for p in candidates if p.exists()), None)
    if found is None:
        raise GridError(f"{grid}: {where}.{kinds[0]}: {str(raw)!r} not found (looked in the current "
                        f"directory and "
                        "the grid file's folder)")
    cls = getattr(datamodules, class_path.rsplit(".", 1)[1])
    allowed = {p for c in (cls, BiosignalDataModule) for p in inspect.signature(c.__init__).parameters} - {
        "self", "kwargs", "root", path_arg}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise GridError(f"{grid}: {where}: {cls.__name__} has no argument(s) {unknown} (it takes "
                        f"{sorted(allowed)})")
    return {"class_path": class_path, "init_args": {path_arg: str(found.resolve()), **spec}}


def _ints(value: Any, where: str, grid: Path) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value):
        raise GridError(f"{grid}: {where} must be a non-empty list of integers, got {value!r}")
    if len(set(value)) < len(value):
        raise GridError(f"{grid}: {where} repeats a value: {value!r}")
    return tuple(value)


def _known(d: dict[str, Any], allowed: set[str], where: str, grid: Path) -> None:
    extra = set(d) - allowed
    if extra:
        raise GridError(f"{grid}: {where}: unknown key(s) {sorted(extra)} (allowed: {sorted(allowed)})")


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every problem is one :class:`GridError` naming the file and key."""
    path = Path(path)
    raw = _mapping(load_yaml(path, "grid file", GridError), "the file", path)
    _known(raw, {"name", "seeds", "corpora", "methods", "fit_args"}, "top level", path)
    corpora: dict[str, Corpus] = {}
    for name, spec in _mapping(raw.get("corpora"), "corpora", path).items():
        where = f"corpora.{name}"
        spec = _mapping(spec, where, path)
        _known(spec, {"task", "configs", "data", "overlays", "overrides", "protocol", "metrics"}, where, path)
        if not isinstance(spec.get("task"), str):
            raise GridError(f"{path}: {where}.task must name the corpus's task (e.g. window_classification)")
        protocol = _mapping(spec.get("protocol"), f"{where}.protocol", path)
        _known(protocol, {"split", "folds", "fold_key"}, f"{where}.protocol", path)
        split = protocol.get("split")
        if split is not None:
            split = _mapping(split, f"{where}.protocol.split", path)
        folds = _ints(protocol["folds"], f"{where}.protocol.folds", path) if "folds" in protocol else ()
        metrics = spec.get("metrics", list(DEFAULT_METRICS))
        if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
            raise GridError(f"{path}: {where}.metrics must be a non-empty list of test metric names")
        configs = _paths(spec.get("configs"), f"{where}.configs", path)
        data = _own_data(spec["data"], f"{where}.data", path) if spec.get("data") is not None else None
        if not configs and data is None:
            raise GridError(f"{path}: {where}: give configs (the corpus's reference experiment YAML) or data "
                            f"(your own: {', '.join(OWN_DATA)})")
        corpora[str(name)] = Corpus(str(name), spec["task"], configs,
                                    _paths(spec.get("overlays"), f"{where}.overlays",
                                    path), _mapping(spec.get("overrides"), f"{where}.overrides", path), split,
                                    folds,
                                    tuple(m.removeprefix("test/") for m in metrics),
                                    fold_key(str(protocol.get("fold_key", FOLD_KEY))), data)
    methods: dict[str, Method] = {}
    for name, spec in _mapping(raw.get("methods"), "methods", path).items():
        where = f"methods.{name}"
        spec = _mapping(spec, where, path)
        _known(spec,
               {"tasks", "backbone", "recipe", "configs", "overrides", "corpus_overrides", "not_applicable"},
               where, path)
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
            raise GridError(f"{path}: {where}.tasks must list the tasks the method applies to")
        method_configs = {str(c): _paths(v, f"{where}.configs.{c}", path)
                          for c, v in _mapping(spec.get("configs"), f"{where}.configs", path).items()}
        per_corpus = {str(c): _mapping(v, f"{where}.corpus_overrides.{c}", path)
                      for c,
                      v in _mapping(spec.get("corpus_overrides"), f"{where}.corpus_overrides", path).items()}
        named: Mapping[str, object]
        for key, named in (("configs", method_configs), ("corpus_overrides", per_corpus)):
            unknown = sorted(set(named) - set(corpora))
            if unknown:
                raise GridError(f"{path}: {where}.{key} names corpora the grid does not have: {unknown}")
        na = {str(k): str(v) for k, v in _mapping(spec.get("not_applicable"), f"{where}.not_applicable",
                                                 path).items()}
        methods[str(name)] = Method(str(name), tuple(tasks),
                                    _class_spec(spec.get("backbone"), f"{where}.backbone",
                                    path, catalog_name=True),
                                    _class_spec(spec.get("recipe"), f"{where}.recipe", path), method_configs,
                                    _mapping(spec.get("overrides"),
                                             f"{where}.overrides", path), na, per_corpus)
    if not corpora or not methods:
        raise GridError(f"{path}: a grid needs at least one corpus and one method")
    for n in [*corpora, *methods]:
        if not n or "/" in n or n.startswith("."):
            raise GridError(f"{path}: {n!r} cannot name a run folder (no '/', no leading '.')")
    seeds = _ints(raw.get("seeds"), "seeds", path)
    grid = Grid(str(raw.get("name") or path.stem), path, seeds, corpora, methods,
                _mapping(raw.get("fit_args"), "fit_args", path))
    if not grid.cells():
        raise GridError(f"{path}: no method applies to any corpus (every cell is n/a)")
    return grid
