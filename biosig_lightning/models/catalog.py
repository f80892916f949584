"""The backbone catalog: name -> class, filled by importing :mod:`biosig_lightning.models`.

Each model file registers its class with :func:`register_backbone` right where it is defined;
this module imports no model, so it can be imported from anywhere. ``import
biosig_lightning.models`` imports every model package and so fills the catalog.

An entry also records what the one contract test (``tests/models/test_catalog_contract.py``)
needs to check the backbone without a test edit:

* ``shapes``: the corpus shapes the backbone is configured for in ``experiments/``, as
  ``{corpus: Shape(n_chans, n_outputs, n_times, sfreq)}``, or simply a list of names from
  :data:`CORPORA` (the shapes the corpus DataModules report; the contract test checks that
  table against the DataModules, so a model file never restates a corpus shape);
* ``kwargs``: per-corpus constructor arguments (e.g. a paper's per-corpus hyperparameters),
  ``{corpus: {...}}``, merged over the defaults;
* ``param_pins``: exact trainable-parameter counts a paper (or the authors' code) gives,
  ``{corpus: count}``, checked exactly;
* ``test_kwargs``: arguments that make the backbone small enough for the memorisation check
  (shape-independent), used where the full paper size would be slow on a CPU.

YAML ``class_path`` keeps working with full dotted paths; :func:`resolve` also accepts a short
catalog name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

__all__ = ["CORPORA", "BackboneEntry", "Shape", "entries", "get", "names", "register_backbone", "resolve"]

T = TypeVar("T", bound=type)


class Shape(NamedTuple):
    """A corpus's signal shape under braindecode's names."""

    n_chans: int
    n_outputs: int
    n_times: int
    sfreq: float

    def as_kwargs(self) -> dict[str, Any]:
        return {"n_chans": self.n_chans, "n_outputs": self.n_outputs,
                "n_times": self.n_times, "sfreq": self.sfreq}


#: Shapes of the corpora the shipped experiments use, under the DataModules' own names
#: (``tests/models/test_catalog_contract.py`` builds each DataModule and compares).
CORPORA: dict[str, Shape] = {
    # BioFormer (Medformer layout, BCI IV): experiments/bioformer_*.yaml and bioformer/table3
    "apava": Shape(16, 2, 256, 256.0),
    "adftd": Shape(19, 3, 256, 256.0),
    "ptb": Shape(15, 2, 300, 250.0),
    "ptbxl_medformer": Shape(12, 5, 250, 250.0),  # PTBXLMedformerDataModule: 1 s windows at 250 Hz
    "bci2a": Shape(3, 4, 250, 62.5),
    "bci2b": Shape(3, 2, 250, 62.5),
    # SD-Former: experiments/sdformer_*.yaml and sdformer/
    "sleepedf": Shape(2, 5, 3000, 100.0),
    "chbmit": Shape(23, 2, 512, 256.0),  # montage "23", 2 s windows
    "ptbxl": Shape(12, 5, 1000, 100.0),  # PTBXLDataModule: 10 s records at 100 Hz
    # SPDTransNet: experiments/spdtransnet_*.yaml; n_chans = L * 7 * 30 tokens (L = 21), n_times = token
    # length
    "mass_ss3": Shape(21 * 210, 5, 45, 256.0),
    "sleep_edf_spd": Shape(21 * 210, 5, 6, 100.0),
    # signed-graph unrolling: experiments/signed_graph_*.yaml
    "turkish_epilepsy": Shape(35, 2, 6000, 500.0),
    "tuab": Shape(21, 2, 6000, 250.0),
    # STDRO: experiments/stdro_*.yaml and stdro/ (TUSZ as 12 one-second log|FFT| steps of 100 bins)
    "tusz": Shape(19, 2, 1200, 200.0),
    "tusz_classification": Shape(19, 4, 1200, 200.0),
    "chbmit_stdro": Shape(18, 2, 128, 64.0),  # features: fft, 4 steps of 32 bins
    "dodh": Shape(16, 5, 7500, 250.0),
    # the built-in demo corpus: experiments/overlays/demo.yaml
    "synthetic": Shape(16, 2, 256, 256.0),
}


@dataclass(frozen=True)
class BackboneEntry:
    """One catalog row: the class and what its contract checks run on."""

    name: str
    cls: type
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    param_pins: Mapping[str, int] = field(default_factory=dict)
    test_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def class_path(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def build(self, corpus: str, **overrides: Any) -> Any:
        """Instantiate the backbone at ``corpus``'s shape with its per-corpus arguments."""
        if corpus not in self.shapes:
            raise KeyError(f"backbone {self.name!r} has no shape for corpus {corpus!r}; "
                           f"known: {', '.join(sorted(self.shapes)) or 'none'}")
        kwargs = {**self.shapes[corpus].as_kwargs(), **dict(self.kwargs.get(corpus, {})), **overrides}
        return self.cls(**kwargs)


_CATALOG: dict[str, BackboneEntry] = {}


def register_backbone(
    name: str | None = None,
    *,
    shapes: Mapping[str, Shape | tuple[int, int, int, float]] | Sequence[str] | None = None,
    kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    param_pins: Mapping[str, int] | None = None,
    test_kwargs: Mapping[str, Any] | None = None,
) -> Callable[[T], T]:
    """Class decorator that adds a backbone to the catalog under ``name`` (default: the class name)."""

    def decorate(cls: T) -> T:
        key = name or cls.__name__
        if key in _CATALOG and _CATALOG[key].cls is not cls:
            raise ValueError(f"backbone name {key!r} is taken by {_CATALOG[key].class_path}")
        pins = dict(param_pins or {})
        if shapes is None or isinstance(shapes, Mapping):
            shape_map = {k: Shape(*v) for k, v in (shapes or {}).items()}
        else:
            unknown_corpora = sorted(set(shapes) - set(CORPORA))
            if unknown_corpora:
                raise ValueError(f"backbone {key!r}: unknown corpora {', '.join(unknown_corpora)}; "
                                 f"known: {', '.join(CORPORA)} (or pass shapes as a mapping)")
            shape_map = {k: CORPORA[k] for k in shapes}
        unknown = sorted((set(pins) | set(kwargs or {})) - set(shape_map))
        if unknown:
            raise ValueError(f"backbone {key!r}: pins/kwargs name corpora without a shape: "
                             f"{', '.join(unknown)}")
        _CATALOG[key] = BackboneEntry(key, cls, shape_map, dict(kwargs or {}), pins, dict(test_kwargs or {}))
        return cls

    return decorate


def names() -> list[str]:
    """Every registered backbone name, sorted."""
    return sorted(_CATALOG)


def entries() -> Iterator[BackboneEntry]:
    """Every catalog entry, by name."""
    return (_CATALOG[k] for k in names())


def get(name: str) -> BackboneEntry:
    """The entry registered as ``name``; one clear error listing the known names otherwise."""
    try:
        return _CATALOG[name]
    except KeyError:
        raise KeyError(f"no backbone named {name!r} in the catalog; known: {', '.join(names())}") from None


def resolve(name_or_path: str) -> type:
    """A backbone class from a catalog name or a full dotted class path."""
    if name_or_path in _CATALOG:
        return _CATALOG[name_or_path].cls
    for entry in _CATALOG.values():
        if entry.class_path == name_or_path:
            return entry.cls
    raise KeyError(f"{name_or_path!r} is neither a catalog name nor the class path of a registered backbone; "
                   f"known: {', '.join(names())}")
