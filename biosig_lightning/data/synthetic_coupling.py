"""A planted directed dependency structure for the synthetic stand-ins (the truth a learned graph is scored
against).

SD-Former (Sharma, Sec. 3) assumes each window is governed by "a sparse dependency structure over
channels or channel-derived tokens" and learns a directed graph per window (Sec. 4); its
Limitations (Sec. 8) note that the learned graphs were never compared with anything. On real
EEG/ECG the true graph is unknown, so the stand-ins plant one:

* **Edges**: ``n_edges`` couplings ``parent -> child``, each in one band (theta or alpha,
  as ``features.spectral.EEG_BANDS`` defines them; bands reaching the Nyquist frequency are not used),
  drawn once from the stand-in's ``seed`` (:func:`plant_coupling`), so **every subject shares
  them**. The channels are put in a random causal order and a parent always precedes its child,
  so the planted graph is a DAG (what NOTEARS's acyclicity penalty drives the learned one to).
  Each child has at most one parent per band (children without a parent are served first); a
  corpus with few channels (Sleep-EDF: 2) couples one pair in several bands.
* **Signal** (:func:`apply_coupling`): in the rFFT domain of a window,
  ``X_child(f) += gain * H_band(f) * exp(-2 pi i f lag) * X_parent(f)``: the child receives a
  band-pass filtered copy of its parent (``H`` flat over the band, 1 Hz ramps outside it), delayed
  by ``lag`` (20-100 ms; a circular shift of the window), ``gain = 3``: inside the band the child's
  power is its own plus nine times its parent's.
  Edges are applied in causal order, so a child's own coupled input travels on to its children,
  as in a linear structural equation model. The generator applies it to the physiological
  activity, before the subject's spectral drift, channel mixing and sensor noise, so every
  subject has the same graph seen through its own nuisances.
* **Truth** (:func:`truth_adjacency`): the planted graph on a model's graph nodes, in
  SD-Former's orientation ``a_ij = 1`` when ``j -> i`` (row ``i`` lists ``i``'s parents): on
  channel nodes (band pooling) the channel pairs; on channel-band nodes ``"<channel>/<band>"``
  the pair in the coupled band.

Everything is JSON-able (:meth:`PlantedEdge.to_dict`) and is part of the reader's ``config()``
(the cache key and the record of the truth), from which ``biosig graphs`` reads it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["COUPLING_BANDS", "PlantedEdge", "apply_coupling", "plant_coupling", "truth_adjacency"]

#: bands a coupling may live in (names as in ``features.spectral.EEG_BANDS``), Hz at full Nyquist
#: (beta is left out: its power is low under a 1/f background, so white sensor noise dominates a beta
#: power trajectory; the measurement is in docs/results/synthetic_coupling_design.json)
COUPLING_BANDS: tuple[tuple[str, float, float], ...] = (("theta", 4.0, 8.0), ("alpha", 8.0, 13.0))
#: amplitude of the coupled copy relative to the parent inside the passband: the child's band power becomes
#: ``own + gain^2 * parent's``, so the coupled part dominates the child's band (and its power trajectory).
#: How strongly the trajectories then correlate at gains 2, 3 and 5:
#: docs/results/synthetic_coupling_design.json.
COUPLING_GAIN = 3.0
_LAG_SECONDS = (0.02, 0.1)
_COUPLING_STREAM = 5  # purpose key of the random stream (synthetic.py uses 0-4)


@dataclass(frozen=True)
class PlantedEdge:
    """One planted coupling ``parent -> child`` (channel indices) in ``band`` (``lo``-``hi`` Hz)."""

    parent: int
    child: int
    band: str
    lo: float
    hi: float
    lag: float  # seconds
    gain: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plant_coupling(n_chans: int, n_edges: int, seed: int, nyquist: float = np.inf) -> list[PlantedEdge]:
    """Draw ``n_edges`` couplings on ``n_chans`` channels from ``seed`` alone (the same for every subject).

    Only bands below ``nyquist`` (minus the 1 Hz ramp) are used; band edges are never rescaled,
    so a planted band is the band of the same name in a model's band-power tokens.
    The edges come back in causal order (a parent's own inputs are listed before its outputs).
    """
    if n_edges < 0 or int(n_edges) != n_edges:
        raise ValueError(f"coupling_edges must be a non-negative integer, got {n_edges!r}")
    if n_edges and n_chans < 2:
        raise ValueError(f"coupling_edges={n_edges} needs at least 2 channels, got {n_chans}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, _COUPLING_STREAM]))
    order = rng.permutation(n_chans)  # causal order: parents precede children
    rank = np.empty(n_chans, dtype=np.int64)
    rank[order] = np.arange(n_chans)
    usable = [b for b, (_, _, hi) in enumerate(COUPLING_BANDS) if hi + 1.0 < nyquist]
    if n_edges and not usable:
        raise ValueError(f"coupling_edges={n_edges}: no coupling band lies below the Nyquist frequency "
                         f"{nyquist:g} Hz")
    n_bands = len(usable)
    chosen: list[tuple[int, int, int]] = []
    while len(chosen) < n_edges:
        # every (child, band) has at most one parent, so a child's band is a clean copy of one parent's
        # (two parents would share it, and each one's band-power trajectory would explain only part of it);
        # children without any parent first, so the edges spread over the channels
        taken = {(c, b) for _, c, b in chosen}
        open_slots = [(int(c), b) for c in order[1:] for b in usable if (int(c), b) not in taken]
        if not open_slots:
            raise ValueError(f"coupling_edges={n_edges} exceeds the {(n_chans - 1) * n_bands} couplings "
                             f"{n_chans} channels allow (one parent per child and band)")
        fresh = [(c, b) for c, b in open_slots if all(c != cc for _, cc, _ in chosen)]
        pool = fresh or open_slots
        c, b = pool[int(rng.integers(len(pool)))]
        parents = order[: rank[c]]
        chosen.append((int(parents[int(rng.integers(len(parents)))]), int(c), b))
    chosen.sort(key=lambda e: (rank[e[1]], rank[e[0]]))
    edges = []
    for p, c, b in chosen:
        name, lo, hi = COUPLING_BANDS[b]
        edges.append(PlantedEdge(parent=p, child=c, band=name, lo=lo, hi=hi,
                                 lag=float(rng.uniform(*_LAG_SECONDS)), gain=COUPLING_GAIN))
    return edges


def apply_coupling(spectrum: np.ndarray, freqs: np.ndarray, edges: list[PlantedEdge]) -> np.ndarray:
    """Add each edge's filtered, delayed parent to its child; ``spectrum``: ``(n, C, F)`` rFFT, in place.

    ``X_child += gain * H(f) * exp(-2 pi i f lag) * X_parent`` with a band-pass ``H`` that is 1 on
    ``[lo, hi]`` and falls to 0 over 1 Hz outside it (linear ramps), edges in causal order.
    """
    for e in edges:
        passband = np.clip(freqs - e.lo + 1.0, 0.0, 1.0) * np.clip(e.hi - freqs + 1.0, 0.0, 1.0)
        response = e.gain * passband * np.exp(-2j * np.pi * freqs * e.lag)
        spectrum[:, e.child] += response * spectrum[:, e.parent]
    return spectrum


def truth_adjacency(edges: list[dict[str, Any]] | list[PlantedEdge], ch_names: list[str],
                    node_names: list[str]) -> np.ndarray:
    """The planted graph ``(M, M)`` on a model's nodes, ``a_ij = 1`` when ``j -> i``.

    ``node_names`` are channel names (channel nodes) or ``"<channel>/<band>"`` (channel-band
    nodes, SD-Former without band pooling); a channel-band edge links the coupled band of the
    parent to the same band of the child.
    """
    index = {name: i for i, name in enumerate(node_names)}
    truth = np.zeros((len(node_names), len(node_names)), dtype=bool)
    for e in edges:
        e = e.to_dict() if isinstance(e, PlantedEdge) else e
        parent, child = ch_names[int(e["parent"])], ch_names[int(e["child"])]
        if parent in index and child in index:
            truth[index[child], index[parent]] = True
            continue
        p, c = f"{parent}/{e['band']}", f"{child}/{e['band']}"
        if p not in index or c not in index:
            raise ValueError(f"planted edge {parent} -> {child} ({e['band']}) has no node among "
                             f"{node_names[:4]}...")
        truth[index[c], index[p]] = True
    return truth
