"""Subject-disjoint train/val/test splits.

Cross-subject evaluation is only meaningful when no subject contributes windows to two
partitions, so every split produced here is checked by :func:`assert_disjoint` before it
is returned: disjointness is asserted, never assumed.

Four strategies, chosen by :class:`SplitConfig.strategy`:

``fixed``
    The paper's own subject lists (APAVA, BCI IV 2a, MASS-SS3 folds...).
``ratio``
    A seeded train/val/test split by fractions. With ``stratify`` and subject labels it
    is done per class, which is how BioFormer and Medformer split ADFTD, PTB and PTB-XL:
    per class the first ``floor(0.6 n)`` subjects go to train, the next
    ``floor(0.8 n) - floor(0.6 n)`` to val and the rest to test. With ``shuffle=False``
    the subjects of a class are taken in ascending id order, which reproduces their
    prefix split exactly when the corpus numbers subjects in ``label.npy`` row order;
    by default they are shuffled with ``seed`` first.
``loso``
    Leave one subject (unit) out: fold ``i`` tests the ``i``-th subject in ascending id
    order (the leave-one-subject-out protocol of the signed-graph-unrolling paper).
``kfold``
    ``n_folds`` subject-level folds; fold ``fold`` is the test set.

For ``loso`` and ``kfold`` the validation subjects come from the subjects left after the
test fold: a fixed ``val`` list when given (those subjects are then never tested), else a
``val_ratio`` fraction of the remaining ones, drawn with ``seed`` (class-proportional
when stratifying).

``groups`` lists subjects that must always land in the same partition (CHB-MIT's chb01
and chb21 are one child recorded twice). Each group acts as one unit in every strategy:
it is counted once by ratios and folds, and it is left out or tested as a whole.
Group members absent from the corpus being split are ignored, so one YAML can serve a
subset of the corpus.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .spec import DataError

__all__ = ["SplitConfig", "SplitError", "assert_disjoint", "split_fingerprint", "split_subjects"]

SPLIT_NAMES = ("train", "val", "test")
Strategy = Literal["fixed", "ratio", "loso", "kfold"]
Unit = tuple[int, ...]

# Fractions such as 0.29 * 100 = 28.999999999999996 must floor to 29, not 28.
_EPS = 1e-9


class SplitError(DataError):
    """A subject split is impossible or unsafe: overlap, empty partition, unknown ids..."""


@dataclass
class SplitConfig:
    """How to split a corpus's subjects into train/val/test (every field is YAML-settable).

    Attributes:
        strategy: ``"fixed"``, ``"ratio"``, ``"loso"`` or ``"kfold"`` (see the module docstring).
        train: fixed train subjects; ``None`` means every subject not in ``val``/``test``.
        val: fixed validation subjects (``fixed``, ``loso``, ``kfold``).
        test: fixed test subjects (``fixed`` only).
        ratios: train/val/test fractions for ``ratio``; positive, summing to 1.
        seed: seed of the subject shuffles (``numpy.random.default_rng``); the split depends
            on it and on the subject ids only, never on their input order.
        shuffle: shuffle subjects before cutting (``ratio``), dealing folds (``kfold``) or
            drawing validation subjects; ``False`` takes them in ascending id order.
        stratify: split each class separately when subject labels are given, so every
            partition holds every class (``ratio``), folds are class-balanced (``kfold``)
            and validation draws are class-proportional.
        fold: which fold is the test set (``loso``, ``kfold``), 0-based.
        n_folds: number of folds for ``kfold``.
        val_ratio: fraction of the non-test subjects used for validation (``loso``,
            ``kfold``) when no ``val`` list is given; at least one subject is drawn.
        groups: lists of subjects that must stay in the same partition.
    """

    strategy: Strategy = "ratio"
    train: list[int] | None = None
    val: list[int] | None = None
    test: list[int] | None = None
    ratios: tuple[float, float, float] = (0.6, 0.2, 0.2)
    seed: int = 0
    shuffle: bool = True
    stratify: bool = True
    fold: int = 0
    n_folds: int = 5
    val_ratio: float = 0.2
    groups: list[list[int]] | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise :class:`SplitError` for settings that are wrong whatever the corpus."""
        if self.strategy not in ("fixed", "ratio", "loso", "kfold"):
            raise SplitError(
                f"unknown split strategy {self.strategy!r}; expected fixed, ratio, loso or kfold"
            )
        ratios = tuple(float(r) for r in self.ratios)
        if len(ratios) != 3 or any(not (r > 0) for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
            raise SplitError(f"split ratios {list(self.ratios)} must be three positive train/val/test "
                             f"fractions summing to 1 (they sum to {sum(ratios):g})")
        self.ratios = ratios
        lists = {"train": self.train, "val": self.val, "test": self.test}
        allowed = {"fixed": ("train", "val", "test"), "ratio": (), "loso": ("val",), "kfold": ("val",)}
        extra = [name for name,
                 lst in lists.items() if lst is not None and name not in allowed[self.strategy]]
        if extra:
            raise SplitError(f"split strategy {self.strategy!r} does not take fixed subject list(s) "
                             f"{', '.join(extra)}; set them to null or use strategy 'fixed'")
        if self.strategy == "kfold":
            if self.n_folds < 2:
                raise SplitError(f"kfold needs n_folds >= 2, got {self.n_folds}")
            if not 0 <= self.fold < self.n_folds:
                raise SplitError(f"kfold fold {self.fold} is out of range 0..{self.n_folds - 1} "
                                 f"(n_folds={self.n_folds})")
        if self.strategy == "loso" and self.fold < 0:
            raise SplitError(f"loso fold {self.fold} must be >= 0")
        if not 0.0 < self.val_ratio < 1.0:
            raise SplitError(f"val_ratio {self.val_ratio} must lie strictly between 0 and 1")
        owner: dict[int, list[int]] = {}
        for group in self.groups or []:
            for s in group:
                if int(s) in owner and owner[int(s)] is not group:
                    raise SplitError(f"subject {int(s)} is in two split groups: {list(owner[int(s)])} and "
                                     f"{list(group)}; merge them into one group")
                owner[int(s)] = group


def split_subjects(subject_ids: Sequence[int], cfg: SplitConfig,
                   subject_labels: Mapping[int, int] | None = None) -> dict[str, list[int]]:
    """Split ``subject_ids`` into sorted, disjoint ``train``/``val``/``test`` lists.

    Args:
        subject_ids: the corpus's subjects (any order, duplicates ignored).
        cfg: the split settings.
        subject_labels: one class per subject (e.g. ``WindowCache.subject_labels()``);
            used only when ``cfg.stratify``. Pass it for subject-level diagnoses
            (ADFTD, PTB); for window-level labels (sleep stages) a subject's majority
            class rarely means much.

    Raises:
        SplitError: naming the offending subjects, split and strategy.
    """
    cfg.check()
    known = sorted({int(s) for s in subject_ids})
    if not known:
        raise SplitError(f"no subjects to split (strategy {cfg.strategy!r})")
    units = _units(known, cfg.groups)
    labels = _unit_labels(units, subject_labels) if (cfg.stratify and subject_labels is not None) else None
    rng = np.random.default_rng(cfg.seed)

    if cfg.strategy == "fixed":
        splits = _fixed(known, cfg)
    elif cfg.strategy == "ratio":
        splits = _ratio(units, labels, cfg, rng)
    else:
        splits = _held_out(units, labels, known, cfg, rng)

    splits = {name: sorted(int(s) for s in splits[name]) for name in SPLIT_NAMES}
    assert_disjoint(splits, strategy=cfg.strategy, groups=[u for u in units if len(u) > 1])
    unknown = sorted(set().union(*map(set, splits.values())) - set(known))
    if unknown:  # only a bug in a strategy could reach this; keep it loud all the same
        raise SplitError(f"split ({cfg.strategy}) uses unknown subject ids {unknown}; {_known_text(known)}")
    return splits


def assert_disjoint(splits: Mapping[str, Sequence[int]], strategy: str | None = None,
                    groups: Sequence[Sequence[int]] | None = None) -> None:
    """Raise :class:`SplitError` unless the partitions are non-empty, disjoint and keep groups whole.

    Args:
        splits: partition name -> subject ids.
        strategy: named in the messages, so a user sees which setting to change.
        groups: subjects that must share one partition (members absent from every
            partition are ignored).
    """
    how = f" (split strategy {strategy!r})" if strategy else ""
    for name, ids in splits.items():
        if len(ids) == 0:
            raise SplitError(f"the {name} split is empty{how}; give it at least one subject")
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = sorted(set(map(int, splits[a])) & set(map(int, splits[b])))
            if both:
                raise SplitError(f"subject(s) {both} are in both the {a} and the {b} split{how}: "
                                 f"subject-disjoint evaluation would leak")
    where = {int(s): name for name in names for s in splits[name]}
    for group in groups or []:
        placed = {name: sorted(int(s) for s in group if where.get(int(s)) == name) for name in names}
        placed = {name: ids for name, ids in placed.items() if ids}
        if len(placed) > 1:
            parts = ", ".join(f"{name} {ids}" for name, ids in placed.items())
            raise SplitError(f"subject group {sorted(int(s) for s in group)} is split across {parts}{how}; "
                             f"its subjects must share one split")


def split_fingerprint(splits: Mapping[str, Sequence[int]]) -> str:
    """A short, order-independent hash of a split, so results can record the exact split."""
    canon = {name: sorted(int(s) for s in ids) for name, ids in splits.items()}
    blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# --------------------------------------------------------------------------- helpers


def _known_text(known: Sequence[int]) -> str:
    return f"known subject ids: {known[0]}..{known[-1]} ({len(known)} subjects)"


def _units(known: Sequence[int], groups: Sequence[Sequence[int]] | None) -> list[Unit]:
    """Subjects bundled into split units: each group is one unit, every other subject its own."""
    known_set = set(known)
    units: list[Unit] = []
    grouped: set[int] = set()
    for group in groups or []:
        members = tuple(sorted({int(s) for s in group} & known_set))
        if members:
            units.append(members)
            grouped.update(members)
    units.extend((s,) for s in known if s not in grouped)
    return sorted(units)


def _unit_labels(units: Sequence[Unit], subject_labels: Mapping[int, int]) -> list[int]:
    """The majority class of each unit's subjects (ties go to the smaller class index)."""
    lab = {int(k): int(v) for k, v in subject_labels.items()}
    missing = sorted(s for u in units for s in u if s not in lab)
    if missing:
        raise SplitError(f"subject_labels has no class for subject(s) {missing}; give every subject a class "
                         f"or set stratify: false")
    out = []
    for u in units:
        values, counts = np.unique([lab[s] for s in u], return_counts=True)
        out.append(int(values[np.argmax(counts)]))
    return out


def _order(n: int, cfg: SplitConfig, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(n) if cfg.shuffle else np.arange(n)


def _flatten(units: Sequence[Unit]) -> list[int]:
    return [s for u in units for s in u]


def _fixed(known: Sequence[int], cfg: SplitConfig) -> dict[str, list[int]]:
    known_set = set(known)
    for name in SPLIT_NAMES:
        lst = getattr(cfg, name)
        unknown = sorted({int(s) for s in lst or []} - known_set)
        if unknown:
            raise SplitError(f"fixed {name} list names unknown subject id(s) {unknown}; {_known_text(known)}")
    val = {int(s) for s in cfg.val or []}
    test = {int(s) for s in cfg.test or []}
    train = {int(s) for s in cfg.train} if cfg.train is not None else known_set - val - test
    return {"train": sorted(train), "val": sorted(val), "test": sorted(test)}


def _cut_sizes(n: int, ratios: Sequence[float]) -> list[int]:
    """Partition sizes by the cumulative-floor rule, then at least one per partition when n >= 3."""
    c1 = math.floor(ratios[0] * n + _EPS)
    c2 = math.floor((ratios[0] + ratios[1]) * n + _EPS)
    sizes = [c1, c2 - c1, n - c2]
    while n >= len(sizes) and min(sizes) == 0:
        # Borrow from the largest partition; deterministic (first largest wins).
        sizes[int(np.argmax(sizes))] -= 1
        sizes[sizes.index(0)] += 1
    return sizes


def _ratio(units: list[Unit], labels: list[int] | None, cfg: SplitConfig,
           rng: np.random.Generator) -> dict[str, list[int]]:
    strata: dict[int | None, list[Unit]]
    if labels is None:
        strata = {None: units}
    else:
        strata = {}
        for u, label in zip(units, labels, strict=True):
            strata.setdefault(label, []).append(u)
    out: dict[str, list[int]] = {name: [] for name in SPLIT_NAMES}
    for c in sorted(strata, key=lambda k: -1 if k is None else k):
        members = strata[c]
        if len(members) < 3:
            what = f"class {c}" if c is not None else "the corpus"
            fix = "set stratify: false or use strategy 'fixed'" if c is not None else "use more subjects"
            raise SplitError(f"ratio split: {what} has only {len(members)} subject unit(s) "
                             f"({_flatten(members)}) but train, val and test each need one; {fix}")
        ordered = [members[i] for i in _order(len(members), cfg, rng)]
        sizes = _cut_sizes(len(ordered), cfg.ratios)
        start = 0
        for name, size in zip(SPLIT_NAMES, sizes, strict=True):
            out[name].extend(_flatten(ordered[start:start + size]))
            start += size
    return out


def _held_out(units: list[Unit], labels: list[int] | None, known: Sequence[int], cfg: SplitConfig,
              rng: np.random.Generator) -> dict[str, list[int]]:
    """``loso`` and ``kfold``: a test fold, then validation drawn from what is left."""
    label_of = dict(zip(units, labels, strict=True)) if labels is not None else None
    fixed_val: set[int] = set()
    if cfg.val is not None:
        unknown = sorted({int(s) for s in cfg.val} - set(known))
        if unknown:
            raise SplitError(f"{cfg.strategy} val list names unknown subject id(s) {unknown}; "
                             f"{_known_text(known)}")
        fixed_val = {int(s) for s in cfg.val}
    # A unit touching the fixed val list is a validation unit: it is never tested.
    val_units = [u for u in units if fixed_val & set(u)]
    candidates = [u for u in units if u not in val_units]

    if cfg.strategy == "loso":
        if not 0 <= cfg.fold < len(candidates):
            raise SplitError(f"loso fold {cfg.fold} is out of range 0..{len(candidates) - 1} "
                             f"({len(candidates)} testable subject units)")
        test_units = [candidates[cfg.fold]]
    else:
        if cfg.n_folds > len(candidates):
            raise SplitError(f"kfold with n_folds={cfg.n_folds} needs at least that many testable subject "
                             f"units, got {len(candidates)}")
        fold_of = _deal_folds(candidates, label_of, cfg, rng)
        test_units = [u for u in candidates if fold_of[u] == cfg.fold]

    rest = [u for u in candidates if u not in test_units]
    if not val_units:
        val_units = _draw_val(rest, label_of, cfg, rng)
    train_units = [u for u in rest if u not in val_units]
    return {"train": _flatten(train_units), "val": _flatten(val_units), "test": _flatten(test_units)}


def _deal_folds(candidates: list[Unit], label_of: dict[Unit, int] | None, cfg: SplitConfig,
                rng: np.random.Generator) -> dict[Unit, int]:
    """Deal units round-robin into folds, class by class, so folds are class-balanced and
    their sizes differ by at most one."""
    if label_of is None:
        strata = [candidates]
    else:
        classes = sorted({label_of[u] for u in candidates})
        strata = [[u for u in candidates if label_of[u] == c] for c in classes]
    fold_of: dict[Unit, int] = {}
    k = 0
    for members in strata:
        for i in _order(len(members), cfg, rng):
            fold_of[members[i]] = k % cfg.n_folds
            k += 1
    return fold_of


def _draw_val(rest: list[Unit], label_of: dict[Unit, int] | None, cfg: SplitConfig,
              rng: np.random.Generator) -> list[Unit]:
    """Draw ``val_ratio`` of ``rest`` (at least one, leaving at least one for training).

    Stratified draws use systematic sampling: within each class the (shuffled) units get
    keys ``(k + 0.5) / n_class`` and the smallest keys are taken, so each class gets a
    share of the validation set proportional to its size.
    """
    if len(rest) < 2:
        raise SplitError(f"{cfg.strategy}: only {len(rest)} subject unit(s) left after the test fold; "
                         f"train and val need at least one each")
    n_val = min(len(rest) - 1, max(1, math.floor(cfg.val_ratio * len(rest) + 0.5)))
    order = _order(len(rest), cfg, rng)
    if label_of is None:
        return [rest[i] for i in order[:n_val]]
    seen: dict[int, int] = {}
    counts: dict[int, int] = {}
    for u in rest:
        counts[label_of[u]] = counts.get(label_of[u], 0) + 1
    keys = np.empty(len(rest))
    for pos, i in enumerate(order):
        c = label_of[rest[i]]
        keys[pos] = (seen.get(c, 0) + 0.5) / counts[c]
        seen[c] = seen.get(c, 0) + 1
    # Stable sort: among equal keys the shuffled order decides.
    chosen = order[np.argsort(keys, kind="stable")[:n_val]]
    return [rest[i] for i in chosen]
