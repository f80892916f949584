"""SPDTransNet's tokens from the raw windows of any corpus (its DataModule named by ``corpus``).

:class:`SPDWindowsDataModule` is :class:`~biosig_lightning.data.spd.SPDDataModule` over another corpus
DataModule's reader: the same windows (real files under ``root`` or the stand-in), the same subject split
(the corpus's default, or ``split``), cut once into the two SPD caches like the windows are.

* Subwindows: ``n_subwindows=None`` gives 1-s subwindows (the paper's 30 per 30-s epoch, Sec. 3.3), i.e.
  ``S`` = the window's length in seconds, when that is a whole number dividing the samples; otherwise one
  subwindow per window (a covariance over the whole window).
* Context: the ``L`` epochs around each centre are the neighbouring windows of the same recording where
  the windows are consecutive (one window length apart); where they are not (isolated windows, a gap, a
  recording end) the positions outside the centre's run repeat its edge window, so an isolated window is
  classified from its own tokens repeated ``L`` times (:func:`~biosig_lightning.data.spd.segment_neighbours`).
* Borders: ``trim`` and ``test_trim`` default to 0 here, so every window of every split is classified
  (the same test windows as every other method on the corpus); the paper's 24-epoch test trim is for
  whole-night recordings.
* Whitening: per recording (the paper's, Sec. 3.3) where labels vary within a recording; from the training
  recordings only where a corpus labels whole subjects (APAVA's AD vs healthy): a recording's own reference
  is its class's mean there, so whitening by it removes the class, and ``whitening: recording`` is refused.
* A corpus needs at least two channels: an SPD covariance of one electrode is a number, not a matrix.
* Tokens: ``tokens: diagonal`` serves every token with its off-diagonal entries at 0, the value the log of
  a diagonal matrix has there, so the model reads only the diagonal of each log-whitened matrix (a
  diagnosis of what the between-electrode entries add; ``benchmarks/standins_spd_probe.py``). The caches
  are the same as for ``full``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch

from biosig_lightning.data.cache import WindowCache
from biosig_lightning.data.module import BiosignalDataModule, merge_groups
from biosig_lightning.data.spd import Scope, SPDDataModule, SPDSequenceDataset
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.splits import SplitConfig, split_subjects
from biosig_lightning.features.spd import token_dim

__all__ = ["SPDWindowsDataModule", "diagonal_entries", "subwindows_for"]
Tokens = Literal["full", "diagonal"]


def diagonal_entries(width: int) -> np.ndarray:
    """Mask of a token's entries on its matrix's diagonal: a token of ``width = d(m)`` numbers is the
    row-major upper triangle of an ``m x m`` symmetric matrix
    (:func:`~biosig_lightning.features.spd.tokens_from_sym`), so entry ``k`` is on the diagonal when its
    row and column (``torch.triu_indices(m, m)[:, k]``) agree."""
    m = int(round(((8 * width + 1) ** 0.5 - 1) / 2))
    if token_dim(m) != width:
        raise ValueError(f"token width {width} is not a triangular number d(m) = m(m+1)/2")
    r, c = torch.triu_indices(m, m).numpy()
    return r == c


class _DiagonalTokens(SPDSequenceDataset):
    """The sequences of an :class:`SPDSequenceDataset` with every token's off-diagonal entries at 0."""

    def __init__(self, inner: SPDSequenceDataset) -> None:
        super().__init__(inner.cache, inner.indices, inner.neighbours)
        self.keep = torch.from_numpy(diagonal_entries(int(inner.cache.signals.shape[-1])))

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        batch = super().__getitems__(positions)
        batch["x"] = batch["x"] * self.keep.to(batch["x"].dtype)
        return batch


def subwindows_for(spec: CorpusSpec) -> int:
    """1-s subwindows (the paper's) where the window is a whole number of seconds dividing its samples, else
    1."""
    seconds = spec.window_seconds
    s = int(round(seconds))
    return s if s >= 1 and abs(seconds - s) < 1e-9 and spec.n_times % s == 0 else 1


def _corpus_class(path: str) -> type[BiosignalDataModule]:
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"data.init_args.corpus must be a dotted class path such as "
                         f"biosig_lightning.data.datamodules.APAVADataModule, got {path!r}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"data.init_args.corpus: cannot import {path!r} ({err})") from err
    if not (isinstance(cls, type) and issubclass(cls, BiosignalDataModule)) or issubclass(cls, SPDDataModule):
        raise ValueError(f"data.init_args.corpus: {path} is not a raw-window corpus DataModule")
    return cls


class SPDWindowsDataModule(SPDDataModule):
    """SPD token sequences of any raw-window corpus (module docstring).

    Args:
        corpus: dotted class path of the corpus's DataModule (e.g.
            ``biosig_lightning.data.datamodules.CHBMITDataModule``).
        corpus_args: that DataModule's own arguments (``montage``, ``channels``, ...); ``root``,
            ``synthetic`` and ``synthetic_options`` are this module's and passed on.
        n_subwindows: ``S``; ``None``: 1-s subwindows (:func:`subwindows_for`).
        shrinkage: towards the scaled identity (``SPDDataModule``); 0.01 by default here, since windows of a
            few seconds give few samples per band-passed subwindow.
        whitening: ``recording`` or ``train`` (``SPDDataModule``); ``None``: ``train`` for a corpus with
            subject-level labels, else ``recording`` (module docstring).
        tokens: ``full`` (the model's) or ``diagonal``: off-diagonal entries at 0 (module docstring; for
            the diagnosis only).
        context, trim, test_trim, **kwargs: :class:`~biosig_lightning.data.spd.SPDDataModule`'s.
    """

    def __init__(self, corpus: str, corpus_args: dict[str, Any] | None = None,
                 n_subwindows: int | None = None,
                 context: int = 3, trim: int | None = 0, test_trim: int = 0, shrinkage: float = 0.01,
                 whitening: Scope | None = None, tokens: Tokens = "full", **kwargs: Any) -> None:
        if tokens not in ("full", "diagonal"):
            raise ValueError(f"data.init_args.tokens must be 'full' or 'diagonal', got {tokens!r}")
        self.tokens = tokens
        cls = _corpus_class(corpus)
        self.corpus_name = corpus
        self.corpus_args = dict(corpus_args or {})
        self.corpus = cls(root=kwargs.get("root"), synthetic=bool(kwargs.get("synthetic", False)),
                          synthetic_options=kwargs.get("synthetic_options"), **self.corpus_args)
        raw = self.corpus.spec
        if raw.n_chans < 2:
            raise ValueError(f"SPDWindowsDataModule: {raw.name} has {raw.n_chans} channel; SPD tokens need a "
                             "covariance matrix of at least two channels")
        s = subwindows_for(raw) if n_subwindows is None else int(n_subwindows)
        if s < 1 or raw.n_times % s:
            raise ValueError(f"data.init_args.n_subwindows={s} does not divide the {raw.n_times}-sample "
                             f"windows "
                             f"of {raw.name}")
        per_subject = raw.label_level == "subject"
        if whitening is None:
            whitening = "train" if per_subject else "recording"
        elif whitening == "recording" and per_subject:
            raise ValueError(f"data.init_args.whitening=recording on {raw.name}, whose labels are per "
                             "subject: each recording's own reference would whiten its class away; use "
                             "whitening: train")
        self.subject_groups = self.corpus.subject_groups
        super().__init__(context=context, n_subwindows=s, trim=trim, test_trim=test_trim, shrinkage=shrinkage,
                         whitening=whitening, **kwargs)

    def raw_spec(self) -> CorpusSpec:
        return self.corpus.spec

    def make_reader(self, root: Path) -> CorpusReader:
        return self.corpus.make_reader(root)

    def default_split(self) -> SplitConfig:
        return self.corpus.default_split()

    def synthetic_defaults(self) -> dict[str, Any]:
        return self.corpus.synthetic_defaults()

    def _split(self, ids: Sequence[int], cache: WindowCache) -> dict[str, list[int]]:
        """The corpus's own split rule (its subject groups, stratified by subject labels where it has them),
        so every method on the corpus is tested on the same subjects."""
        cfg = self.split_config or self.default_split()
        if self.subject_groups:
            cfg = replace(cfg, groups=merge_groups(cfg.groups or [], self.subject_groups))
        labels = cache.subject_labels() if self.corpus.spec.label_level == "subject" else None
        return split_subjects(list(ids), cfg, labels)

    def setup(self, stage: str | None = None) -> None:
        fresh = not self.datasets
        super().setup(stage)
        if fresh and self.tokens == "diagonal":
            for split, ds in self.datasets.items():
                inner = cast(SPDSequenceDataset, ds)  # SPDDataModule's datasets
                self.datasets[split] = _DiagonalTokens(inner)  # type: ignore[assignment]  # same loader API

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["spd"].update(corpus=self.corpus_name, n_subwindows=self.n_subwindows, tokens=self.tokens)
        return out
