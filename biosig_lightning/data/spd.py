"""SPDTransNet's data path: EEG epochs -> cached SPD tokens -> sequences of L epochs.

Two cache stages, each an ordinary window-cache directory (:mod:`biosig_lightning.data.cache`) keyed by
everything that shapes it, so an Optuna trial that changes alpha, beta or eps rebuilds only stage 2:

* :class:`CovarianceStage` (key: the corpus reader's config + filter settings): per epoch
  ``(C * S, n * n + n)`` float32 rows: each subwindow's covariance (flattened) and PSD vector
  (:func:`biosig_lightning.features.spd.covariance_features`). The raw signals themselves are never
  cached (MASS SS3 would take 15 GB).
* :class:`TokenStage` (key: stage 1's key + alpha, beta, eps, reference, scope, sqrt2 and, for the
  training-only scope, the training recordings): per epoch ``(C * S, d(n + 1))`` tokens
  (:func:`biosig_lightning.features.spd.spd_tokens`).

:class:`SPDDataModule` serves sequences: ``x`` of shape ``(B, L * C * S, d(n+1))``, the ``L`` epochs'
token grids one after another (epoch-major, then frequency channel, then subwindow: the order of the
paper's Fig. 2), so a backbone built with ``n_chans = L * C * S`` and ``n_times = d(n+1)`` takes it
as an ordinary ``(batch, n_chans, n_times)`` window. ``y`` is the central epoch's stage.

Gaps: epochs are grouped into *segments* of consecutive start times (a gap appears where the reader
dropped an unscored epoch). A context window never crosses a gap or a recording end: positions
outside the centre's segment repeat the segment's edge epoch. Borders (paper Sec. 4, authors' code):
``trim`` centres are dropped at each recording end for train/val (``None``: ``l = (L - 1) / 2``) and
``test_trim`` (24 in the paper) for test; a recording too short for that keeps its middle epoch
(only tiny synthetic smoke runs meet this).

Rebalancing: ``oversample`` duplicates training centres of every class up to the largest class's
count, drawn once with the seed and fixed for the run (the authors' ``RandomOverSampler``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from biosig_lightning.data.cache import WindowCache, load_or_build
from biosig_lightning.data.module import SPLITS, BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, DataError, WindowBlock
from biosig_lightning.data.splits import split_fingerprint, split_subjects
from biosig_lightning.data.synthetic import SyntheticReader
from biosig_lightning.features.spd import (
    SPD_BANDS,
    Reference,
    covariance_features,
    mean_riemann,
    recording_tokens,
    spd_tokens,
    token_dim,
    whitening_reference,
)

__all__ = ["CovarianceStage", "SPDDataModule", "SPDSequenceDataset", "TokenStage", "oversample",
           "segment_neighbours"]

Scope = Literal["recording", "train"]
STAGE_VERSION = (
    3  # 2: float32 Gram + float64 mean correction, accelerated Karcher flow; 3: block-wise zero-phase bank
)
#: the authors' search couples the eigenvalue floor to beta (its hundredths digit switches the floor on)
EPS_BY_BETA: dict[float, float | None] = {1.0: None, 1.01: 1e-2, 10.0: None, 10.01: 1e-1}


def _grid_names(n_bands: int, n_sub: int) -> tuple[str, ...]:
    return tuple(f"c{c}s{s}" for c in range(n_bands) for s in range(n_sub))


class CovarianceStage:
    """Stage 1 as a corpus reader: each raw block -> ``(E, C*S, n*n + n)`` covariances + PSD vectors."""

    def __init__(self, raw: CorpusReader, n_subwindows: int = 30, causal: bool = False, zscore: bool = True,
                 bands: dict[str, tuple[float, float]] | None = None, filter_order: int = 4) -> None:
        self.raw = raw
        self.n_subwindows = n_subwindows
        self.causal = causal
        self.zscore = zscore
        self.bands = dict(bands or SPD_BANDS)
        self.filter_order = filter_order
        n = raw.spec.n_chans
        c = 1 + len(self.bands)
        self.spec = CorpusSpec(name=f"{raw.spec.name}-spdcov", ch_names=_grid_names(c, n_subwindows),
                               sfreq=raw.spec.sfreq, n_times=n * n + n, classes=raw.spec.classes)

    def config(self) -> dict[str, Any]:
        return {"stage": "spd_covariances", "version": STAGE_VERSION, "raw": self.raw.config(),
                "raw_spec": self.raw.spec.to_dict(), "n_subwindows": self.n_subwindows, "causal": self.causal,
                "zscore": self.zscore, "bands": self.bands, "filter_order": self.filter_order}

    def iter_blocks(self) -> Iterator[WindowBlock]:
        n = self.raw.spec.n_chans
        for block in self.raw.iter_blocks():
            order = np.argsort(block.start, kind="stable")
            x, y, t = block.x[order], block.y[order], block.start[order]
            cov, psd = covariance_features(x, t, self.raw.spec.sfreq, self.n_subwindows, self.bands,
                                           self.filter_order, self.causal, self.zscore)
            e, c, s = cov.shape[:3]
            rows = np.concatenate([cov.reshape(e, c * s, n * n), psd.reshape(e, c * s, n)], axis=-1)
            yield WindowBlock(subject=block.subject, recording=block.recording, x=rows, y=y, start=t)


def _unpack(cache: WindowCache, rows: np.ndarray, n: int, c: int, s: int,
            shrinkage: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    arr = torch.from_numpy(np.asarray(cache.signals[rows], dtype=np.float64))
    e = arr.shape[0]
    cov = arr[..., : n * n].reshape(e, c, s, n, n)
    cov = 0.5 * (cov + cov.transpose(-1, -2))
    if shrinkage > 0:  # (1 - g) C + g tr(C)/n I: same trace, smallest eigenvalue >= g tr(C)/n
        scale = cov.diagonal(dim1=-2, dim2=-1).mean(-1)[..., None, None]
        cov = (1 - shrinkage) * cov + shrinkage * scale * torch.eye(n, dtype=cov.dtype)
    psd = arr[..., n * n:].reshape(e, c, s, n)
    return cov, psd


class TokenStage:
    """Stage 2 as a corpus reader over a stage-1 cache: tokens ``(E, C*S, d(n+1))`` per recording."""

    def __init__(self, covariances: WindowCache, n_electrodes: int, n_subwindows: int, alpha: float,
                 beta: float,
                 eps: float | None, reference: Reference = "augmented", scope: Scope = "recording",
                 sqrt2: bool = True,
                 train_recordings: Sequence[str] | None = None, shrinkage: float = 0.0) -> None:
        if scope not in ("recording", "train"):
            raise ValueError(f"whitening scope must be 'recording' or 'train', got {scope!r}")
        if scope == "train" and not train_recordings:
            raise ValueError("whitening scope 'train' needs the training recordings")
        if not alpha > 0 or not beta > 0:
            raise ValueError(f"alpha and beta must be positive, got alpha={alpha}, beta={beta}")
        self.cov = covariances
        self.n, self.s = n_electrodes, n_subwindows
        self.c = covariances.spec.n_chans // n_subwindows
        self.alpha, self.beta, self.eps = float(alpha), float(beta), eps
        self.reference, self.scope, self.sqrt2 = reference, scope, sqrt2
        if not 0.0 <= shrinkage < 1.0:
            raise ValueError(f"data.shrinkage must lie in [0, 1), got {shrinkage}")
        self.shrinkage = float(shrinkage)
        self.train_recordings = sorted(train_recordings) if scope == "train" and train_recordings else None
        base = covariances.spec.name.removesuffix("-spdcov")
        self.spec = CorpusSpec(name=base, ch_names=covariances.spec.ch_names, sfreq=covariances.spec.sfreq,
                               n_times=token_dim(n_electrodes + 1), classes=covariances.spec.classes)

    def config(self) -> dict[str, Any]:
        return {"stage": "spd_tokens", "version": STAGE_VERSION, "covariances": self.cov.manifest["key"],
                "alpha": self.alpha, "beta": self.beta, "eps": self.eps, "reference": self.reference,
                "scope": self.scope, "sqrt2": self.sqrt2, "train_recordings": self.train_recordings,
                **({"shrinkage": self.shrinkage} if self.shrinkage else {})}

    def _rows(self, rec: int) -> np.ndarray:
        rows = np.flatnonzero(self.cov.recordings == rec)
        return rows[np.argsort(self.cov.starts[rows], kind="stable")]

    def _train_reference(self) -> torch.Tensor:
        names = self.cov.recording_names
        refs, weights = [], []
        for name in self.train_recordings or []:
            if name not in names:
                raise DataError(f"training recording {name!r} is not in the covariance cache {self.cov.dir}")
            rows = self._rows(names.index(name))
            cov, psd = _unpack(self.cov, rows, self.n, self.c, self.s, self.shrinkage)
            refs.append(whitening_reference(cov, psd, self.alpha, self.reference))
            weights.append(float(len(rows)))
        stack = torch.stack(refs, dim=1)  # (C, R, n+1, n+1)
        w = torch.tensor(weights, dtype=stack.dtype).expand(stack.shape[0], -1)
        return mean_riemann(stack, w)

    def iter_blocks(self) -> Iterator[WindowBlock]:
        shared = self._train_reference() if self.scope == "train" else None
        for rec, name in enumerate(self.cov.recording_names):
            rows = self._rows(rec)
            if not len(rows):
                continue
            cov, psd = _unpack(self.cov, rows, self.n, self.c, self.s, self.shrinkage)
            if shared is None:
                tok, _ = recording_tokens(cov, psd, self.alpha, self.beta, self.eps,
                                          self.reference, self.sqrt2)
            else:
                tok = spd_tokens(cov, psd, self.alpha, self.beta, self.eps, shared, self.sqrt2)
            e = tok.shape[0]
            yield WindowBlock(subject=int(self.cov.subjects[rows[0]]), recording=name,
                              x=tok.reshape(e, self.c * self.s, -1).numpy().astype(np.float32),
                              y=np.asarray(self.cov.labels[rows]), start=np.asarray(self.cov.starts[rows]))


def segment_neighbours(recordings: np.ndarray, starts: np.ndarray, epoch_seconds: float,
                       context: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Context windows that never cross a gap or a recording end.

    Returns ``(neighbours (N, 2*context+1), position in recording (N,), recording length (N,))``.
    Windows are indexed as given; within a recording they are ordered by start time, and a
    *segment* is a run of windows ``epoch_seconds`` apart. Neighbour positions outside the centre's
    segment are clipped to the segment's edge.
    """
    n = len(recordings)
    order = np.lexsort((starts, recordings))
    rec_o, t_o = recordings[order], starts[order]
    new_rec = np.r_[True, rec_o[1:] != rec_o[:-1]]
    gap = np.r_[True, np.abs(np.diff(t_o) - epoch_seconds) > 1e-3]
    seg_id = np.cumsum(new_rec | gap) - 1
    seg_first = np.flatnonzero(new_rec | gap)
    seg_last = np.r_[seg_first[1:], n] - 1
    rec_first = np.flatnonzero(new_rec)
    rec_len = np.diff(np.r_[rec_first, n])
    rec_idx = np.cumsum(new_rec) - 1
    k = np.arange(n)
    lo, hi = seg_first[seg_id], seg_last[seg_id]
    offs = np.arange(-context, context + 1)
    pos = np.clip(k[:, None] + offs, lo[:, None], hi[:, None])
    nb = np.empty((n, 2 * context + 1), dtype=np.int64)
    nb[order] = order[pos]
    pos_in_rec = np.empty(n, dtype=np.int64)
    pos_in_rec[order] = k - rec_first[rec_idx]
    length = np.empty(n, dtype=np.int64)
    length[order] = rec_len[rec_idx]
    return nb, pos_in_rec, length


def trimmed(pos: np.ndarray, length: np.ndarray, trim: int) -> np.ndarray:
    """Mask of centres at least ``trim`` epochs from both recording ends (the middle epoch of too-short
    ones)."""
    t = np.minimum(trim, (length - 1) // 2)
    return (pos >= t) & (pos < length - t)


def oversample(labels: np.ndarray, seed: int) -> np.ndarray:
    """Positions ``0..len-1`` plus random duplicates bringing every class to the largest count."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    extra = [rng.choice(np.flatnonzero(labels == c), size=counts.max() - n, replace=True)
             for c, n in zip(classes, counts, strict=True) if n < counts.max()]
    return np.concatenate([np.arange(len(labels)), *extra]).astype(np.int64)


class SPDSequenceDataset(Dataset):
    """Sequences of ``L`` token grids around each centre epoch (``x``: ``(L * C * S, d)``)."""

    def __init__(self, cache: WindowCache, centres: np.ndarray, neighbours: np.ndarray) -> None:
        self.cache = cache
        self.indices = np.asarray(centres, dtype=np.int64)
        self.neighbours = neighbours

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = self.indices[np.asarray(positions, dtype=np.int64)]
        nb = self.neighbours[idx]  # (B, L)
        sig = self.cache.signals
        x = np.asarray(sig[nb.reshape(-1)], dtype=np.float32).reshape(len(idx), -1, sig.shape[-1])
        return {"x": torch.from_numpy(np.ascontiguousarray(x)),
                "y": torch.from_numpy(np.asarray(self.cache.labels[idx], dtype=np.int64)),
                "subject": torch.from_numpy(np.asarray(self.cache.subjects[idx], dtype=np.int64)),
                "index": torch.from_numpy(idx)}


class SPDDataModule(BiosignalDataModule):
    """SPDTransNet's data: tokens of log-whitened augmented covariances, in sequences of ``L`` epochs.

    A corpus subclass gives :meth:`raw_spec` (its signal shape), :meth:`make_reader` and
    :meth:`default_split`. The model-facing shape is ``n_chans = L * C * S`` tokens of
    ``n_times = d(n + 1)`` numbers (see the module docstring); ``sfreq`` stays the signal's rate.

    Args:
        context: ``L``, epochs per sequence (odd; the paper uses 13, 21, 29), centre classified.
        alpha: PSD augmentation factor (Sec. 3.3; best L=21: 2.4904).
        beta: whitened-matrix scale (best: 1.01).
        eps: eigenvalue floor before the log (best: 0.01; ``None``: machine epsilon; ``by_beta``: the
            authors' search coupling, :data:`EPS_BY_BETA`: beta 1 or 10 -> None, 1.01 -> 0.01, 10.01 -> 0.1).
        reference: whitening reference, ``augmented`` (paper) or ``augmented_raw`` (authors' code).
        whitening: ``recording`` (per recording over all its epochs, the authors'; touches the test
            recordings' unlabelled signals) or ``train`` (one reference from training recordings only).
        sqrt2: sqrt(2) on off-diagonal token entries (``False``: authors' code).
        causal: causal single-pass band filters (authors' code) instead of zero-phase.
        zscore: z-score each electrode over its recording before filtering.
        n_subwindows: ``S`` subwindows per epoch.
        oversample: rebalance the training set by fixed random duplication (authors'); evaluation
            sets are never rebalanced.
        trim: centres dropped at each recording end for train/val (``None``: ``(L - 1) / 2``).
        test_trim: centres dropped at each end of test recordings (paper: 24).
        shrinkage: ``g`` of ``(1 - g) C + g tr(C)/n I`` applied to every subwindow covariance before
            the tokens (0: none, the paper's). Short subwindows leave band-passed covariances nearly
            singular (a 1-s delta-band signal has few degrees of freedom for many electrodes), which the
            affine-invariant mean cannot average.
        **kwargs: :class:`BiosignalDataModule`'s (``root``, ``synthetic``, ``split``, ``batch_size``...);
            ``normalization`` is ``none`` (the tokens are already whitened) and its ``context``,
            ``balanced_sampler``, ``augment`` and ``group_by`` do not apply.
    """

    def __init__(self, context: int = 21, alpha: float = 2.4904, beta: float = 1.01,
                 eps: float | Literal["by_beta"] | None = 0.01,
                 reference: Reference = "augmented", whitening: Scope = "recording", sqrt2: bool = True,
                 causal: bool = False, zscore: bool = True, n_subwindows: int = 30, oversample: bool = True,
                 trim: int | None = None, test_trim: int = 24, shrinkage: float = 0.0, **kwargs: Any) -> None:
        if context < 1 or context % 2 == 0:
            raise ValueError(f"data.context is L, the odd number of epochs per sequence (13, 21, 29), got "
                             f"{context}")
        if whitening not in ("recording", "train"):
            raise ValueError(f"data.whitening must be 'recording' or 'train', got {whitening!r}")
        for key, off in (("balanced_sampler", False), ("augment", None), ("group_by", "none")):
            if kwargs.get(key, off) not in (off, False, None):
                raise ValueError(f"SPDDataModule does not take data.{key} of BiosignalDataModule")
        kwargs["normalization"] = "none"
        if eps == "by_beta":
            if float(beta) not in EPS_BY_BETA:
                raise ValueError(f"data.eps 'by_beta' needs beta in {sorted(EPS_BY_BETA)}, got {beta}")
            eps = EPS_BY_BETA[float(beta)]
        self.seq_len = context
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.reference, self.whitening, self.sqrt2 = reference, whitening, sqrt2
        self.causal, self.zscore, self.n_subwindows = causal, zscore, n_subwindows
        self.oversample = oversample
        self.trim = (context - 1) // 2 if trim is None else int(trim)
        self.test_trim = int(test_trim)
        self.shrinkage = float(shrinkage)
        super().__init__(**kwargs)
        self.n_bands = 1 + len(SPD_BANDS)

    # ---- what a corpus subclass provides -------------------------------------------------
    def raw_spec(self) -> CorpusSpec:
        """The corpus's signal shape (electrodes, rate, 30 s epochs, classes)."""
        raise NotImplementedError

    def corpus_spec(self) -> CorpusSpec:
        raw = self.raw_spec()
        c = 1 + len(SPD_BANDS)
        return CorpusSpec(name=raw.name, ch_names=_grid_names(c, self.n_subwindows), sfreq=raw.sfreq,
                          n_times=token_dim(raw.n_chans + 1), classes=raw.classes)

    # ---- model-facing shape --------------------------------------------------------------------
    @property
    def n_chans(self) -> int:
        return self.seq_len * self.spec.n_chans

    @property
    def grid(self) -> dict[str, int]:
        """What the backbone needs besides the shape: sequence length, frequency channels, subwindows."""
        return {"seq_len": self.seq_len, "n_bands": self.n_bands, "n_subwindows": self.n_subwindows}

    # ---- building --------------------------------------------------------------------------------
    def reader(self) -> CorpusReader:
        if self.synthetic:
            return SyntheticReader(self.raw_spec(), **{**self.synthetic_defaults(), **self.synthetic_options})
        return super().reader()

    def covariance_cache(self) -> WindowCache:
        stage = CovarianceStage(self.reader(), self.n_subwindows, self.causal, self.zscore)
        return load_or_build(stage, self.cache_dir, rebuild=self.rebuild_cache, progress=False)

    def _split(self, ids: Sequence[int], cache: WindowCache) -> dict[str, list[int]]:
        cfg = self.split_config or self.default_split()
        return split_subjects(list(ids), cfg, None)

    @property
    def cache(self) -> WindowCache:
        if self._cache is None:
            cov = self.covariance_cache()
            train = None
            if self.whitening == "train":
                subjects = self._split(cov.subject_ids().tolist(), cov)
                keep = np.isin(cov.subjects, subjects["train"])
                train = sorted({cov.recording_names[r] for r in np.unique(cov.recordings[keep])})
            stage = TokenStage(cov, self.raw_spec().n_chans, self.n_subwindows, self.alpha, self.beta,
                               self.eps,
                               self.reference, self.whitening, self.sqrt2, train, self.shrinkage)
            self._cache = load_or_build(stage, self.cache_dir, rebuild=self.rebuild_cache, progress=False)
            self.rebuild_cache = False
        return self._cache

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        cache = self.cache
        self.subjects = self._split(cache.subject_ids().tolist(), cache)
        self.split_id = split_fingerprint(self.subjects)
        ell = (self.seq_len - 1) // 2
        nb, pos, length = segment_neighbours(np.asarray(cache.recordings), np.asarray(cache.starts),
                                             self.raw_spec().window_seconds, ell)
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        for s in SPLITS:
            idx = cache.indices_for_subjects(self.subjects[s])
            idx = idx[trimmed(pos[idx], length[idx], self.test_trim if s == "test" else self.trim)]
            if len(idx) == 0:
                raise DataError(f"{self.dataset_name}: split {s!r} (subjects {self.subjects[s]}) has no "
                                f"epoch left")
            if s == "train" and self.oversample:
                idx = idx[oversample(np.asarray(cache.labels[idx]), seed)]
            self.datasets[s] = SPDSequenceDataset(cache, idx, nb)  # type: ignore[assignment]  # same loader API
        if self.whitening == "recording":
            warnings.warn("SPD whitening per recording (the authors' choice) uses every recording's own "
                          "unlabelled signals, test recordings included; set data.whitening: train to avoid "
                          "it",
                          stacklevel=2)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["spd"] = {"context": self.seq_len, "alpha": self.alpha, "beta": self.beta, "eps": self.eps,
                      "reference": self.reference, "whitening": self.whitening, "sqrt2": self.sqrt2,
                      "causal": self.causal, "oversample": self.oversample, "trim": self.trim,
                      "test_trim": self.test_trim, "shrinkage": self.shrinkage}
        return out

