"""Channel geometry: electrode positions and fixed channel graphs for graph baselines.

Used by the static GNN baseline of SD-Former (Sec. 6: "a fixed adjacency matrix derived
from electrode distance"), and by anything else that needs a montage-aware graph.

EEG channels. Positions are the standard 10-20 template shipped with MNE
(``make_standard_montage("standard_1020")``, renamed ``"colin27_1020"`` in MNE 1.13 with
identical coordinates; we ask for the new name first). Channel names are matched
case-insensitively after normalisation:

* a leading type word is dropped (``"EEG Fpz-Cz"`` -> ``"Fpz-Cz"``, Sleep-EDF);
* a trailing pure-number token is dropped (``"T8-P8-0"``: MNE's and pyedflib's renaming
  of CHB-MIT's duplicated ``T8-P8`` channel);
* a referential channel (``"FP1-REF"``, ``"C3-LE"``, ``"Cz-AVG"``) sits at its electrode;
* a bipolar channel (``"FP1-F7"``, CHB-MIT's double-banana montage; ``"C3-M2"``) sits at
  the midpoint of the chord between its two electrodes. The chord midpoint lies slightly
  inside the scalp; only distances between channels are used, and those are what the
  midpoint reading is for.

The distance graph (:func:`gaussian_distance_adjacency`) is a thresholded Gaussian kernel of the
channel distances, scaled by their median, so it does not depend on head size or units; each channel is
also joined to its nearest neighbour (with two channels, as in Sleep-EDF's Fpz-Cz / Pz-Oz, the graph is
that one edge). Edge weights are the kernel values; the diagonal is zero (models add self-loops).

Spatial graphs of graph-signal models (:func:`spatial_graph_mask`): the distance graph above where
every channel name is placed on the 10-20 template (or the lead graph below for ECG leads); for any
other name list a ring over the channel order (each channel joined to the one before and after it),
a graph that assumes nothing about where unnamed channels are beyond their listed order.

ECG leads. Standard 12-lead names (``I, II, III, aVR, aVL, aVF, V1..V6``, case-insensitive)
have no scalp coordinates; :func:`ecg_lead_adjacency` gives a fixed, unweighted graph built
from how the leads are formed and where they look.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = [
    "ECG_LEADS",
    "channel_adjacency",
    "ecg_lead_adjacency",
    "electrode_positions",
    "gaussian_distance_adjacency",
    "is_ecg_lead_set",
    "spatial_graph_mask",
]

ECG_LEADS: tuple[str, ...] = ("I", "II", "III", "AVR", "AVL", "AVF", "V1", "V2", "V3", "V4", "V5", "V6")
_LIMB_LEADS = ("I", "II", "III", "AVR", "AVL", "AVF")
_LATERAL_LINKS = (("I", "V5"), ("I", "V6"), ("AVL", "V5"), ("AVL", "V6"))
_REFERENCE_TOKENS = frozenset({"REF", "LE", "AR", "AVG", "CAR", "AV"})
_TYPE_PREFIXES = frozenset({"EEG", "ECG", "EKG"})


@lru_cache(maxsize=1)
def _template_positions() -> dict[str, np.ndarray]:
    """Upper-cased electrode name -> 3-D position (metres) of the standard 10-20 template."""
    import mne  # heavy import, only needed when a graph is built

    try:
        montage = mne.channels.make_standard_montage("colin27_1020")
    except ValueError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            montage = mne.channels.make_standard_montage("standard_1020")
    return {
        name.upper(): np.asarray(pos, dtype=np.float64)
        for name, pos in montage.get_positions()["ch_pos"].items()
    }


def _normalise(name: str) -> str:
    words = name.strip().upper().split()
    if len(words) > 1 and words[0] in _TYPE_PREFIXES:
        words = words[1:]
    return "".join(words)


def _electrodes(name: str) -> list[str]:
    """The template electrodes a channel name refers to (one or two), or ``[]`` if unknown."""
    tokens = [t for t in _normalise(name).split("-") if t]
    if len(tokens) > 1 and tokens[-1].isdigit():
        tokens = tokens[:-1]
    if len(tokens) == 2 and tokens[1] in _REFERENCE_TOKENS:
        tokens = tokens[:1]
    positions = _template_positions()
    if not 1 <= len(tokens) <= 2 or any(t not in positions for t in tokens):
        return []
    return tokens


def electrode_positions(ch_names: Sequence[str]) -> np.ndarray:
    """Positions ``(n_chans, 3)`` in metres of EEG channels on the standard 10-20 template.

    Referential channels sit at their electrode, bipolar channels at the midpoint of their
    two electrodes (see the module docstring for the accepted name forms).

    Raises:
        ValueError: listing every channel name that could not be placed.
    """
    positions = _template_positions()
    placed, unknown = [], []
    for name in ch_names:
        electrodes = _electrodes(name)
        if not electrodes:
            unknown.append(name)
            continue
        placed.append(np.mean([positions[e] for e in electrodes], axis=0))
    if unknown:
        raise ValueError(
            f"cannot place channel(s) {unknown} on the standard 10-20 montage; expected electrode "
            "names such as 'Cz', 'FP1-F7' (bipolar) or 'EEG Fpz-Cz'"
        )
    return np.stack(placed) if placed else np.zeros((0, 3))


def gaussian_distance_adjacency(
    positions: np.ndarray, threshold: float = 0.5, connect_nearest: bool = True
) -> np.ndarray:
    """Thresholded Gaussian-kernel adjacency ``(n, n)`` of points ``positions`` ``(n, 3)``.

    ``w_ij = exp(-d_ij^2 / sigma^2)`` with ``sigma`` the median off-diagonal distance; edges
    with ``w_ij < threshold`` are dropped (the default 0.5 keeps ``d_ij <= 0.83 sigma``: roughly each
    channel's nearer half), except each node's nearest neighbour when ``connect_nearest``. The result
    is symmetric with a zero diagonal. Channels at one position (CHB-MIT records both ``T7-P7`` and
    ``P7-T7``, and ``T8-P8`` twice) are joined with weight 1.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    n = len(positions)
    if n < 2:
        return np.zeros((n, n))
    dist = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=-1)
    off = ~np.eye(n, dtype=bool)
    sigma = float(np.median(dist[off]))
    if sigma <= 0.0:
        raise ValueError(
            "more than half of the channel pairs share one position; a distance graph is undefined"
        )
    kernel = np.exp(-(dist**2) / sigma**2)
    adjacency = np.where(off & (kernel >= threshold), kernel, 0.0)
    if connect_nearest:
        nearest = np.where(off, dist, np.inf).argmin(axis=1)
        rows = np.arange(n)
        adjacency[rows, nearest] = kernel[rows, nearest]
        adjacency[nearest, rows] = kernel[nearest, rows]
    return adjacency


def is_ecg_lead_set(ch_names: Sequence[str]) -> bool:
    """True when every name is a standard 12-lead ECG lead (case-insensitive, optional 'ECG ' prefix)."""
    return len(ch_names) > 0 and all(_normalise(n) in ECG_LEADS for n in ch_names)


def ecg_lead_adjacency(ch_names: Sequence[str]) -> np.ndarray:
    """Fixed unweighted lead graph ``(n, n)`` for standard ECG leads, from how they are formed and look.

    * the six limb leads are all linear combinations of the same three limb electrodes
      (Einthoven: ``II = I + III``; ``aVR = -(I + II)/2`` and so on), so they are fully connected;
    * the precordial electrodes V1..V6 lie in a chain across the chest, so consecutive ones
      are joined (V1-V2, ..., V5-V6);
    * the clinical "lateral" territory groups I and aVL with V5 and V6 (they view the same
      lateral wall), so I-V5, I-V6, aVL-V5, aVL-V6 link the two groups. Inferior (II, III,
      aVF), septal (V1, V2) and anterior (V3, V4) leads get no extra links.

    Works for any subset or order of the 12 leads.

    Raises:
        ValueError: listing names that are not standard leads, or duplicated leads.
    """
    leads = [_normalise(n) for n in ch_names]
    unknown = [n for n, lead in zip(ch_names, leads, strict=True) if lead not in ECG_LEADS]
    if unknown:
        raise ValueError(f"not standard 12-lead ECG names: {unknown}; expected {list(ECG_LEADS)}")
    if len(set(leads)) != len(leads):
        raise ValueError(f"duplicated ECG leads in {list(ch_names)}")
    index = {lead: i for i, lead in enumerate(leads)}
    edges = {(a, b) for a in _LIMB_LEADS for b in _LIMB_LEADS if a != b}
    edges |= {(f"V{k}", f"V{k + 1}") for k in range(1, 6)}
    edges |= set(_LATERAL_LINKS)
    adjacency = np.zeros((len(leads), len(leads)))
    for a, b in edges:
        if a in index and b in index:
            adjacency[index[a], index[b]] = adjacency[index[b], index[a]] = 1.0
    return adjacency


def channel_adjacency(
    ch_names: Sequence[str] | None,
    *,
    n_chans: int | None = None,
    threshold: float = 0.5,
    fallback_full: bool = False,
) -> np.ndarray:
    """Fixed channel graph ``(n, n)`` (zero diagonal) for an EEG montage or a set of ECG leads.

    ECG lead sets get :func:`ecg_lead_adjacency`; anything else is placed on the 10-20
    template and gets :func:`gaussian_distance_adjacency`.

    Args:
        ch_names: channel names in model order, or ``None``.
        n_chans: number of channels; required when ``ch_names`` is ``None`` and checked
            against ``len(ch_names)`` otherwise.
        threshold: Gaussian-kernel threshold of the EEG distance graph.
        fallback_full: only when true, a missing name list or unplaceable names give a
            fully connected graph (with a warning) instead of an error.

    Raises:
        ValueError: naming the unplaceable channels (or the missing list) unless
            ``fallback_full`` is set.
    """
    if ch_names is not None and n_chans is not None and len(ch_names) != n_chans:
        raise ValueError(f"{len(ch_names)} channel names given for n_chans={n_chans}: {list(ch_names)}")
    n = len(ch_names) if ch_names is not None else n_chans
    if n is None:
        raise ValueError("channel_adjacency needs ch_names or n_chans")
    try:
        if ch_names is None:
            raise ValueError(
                "a distance graph needs channel names (ch_names), got None; pass the corpus's "
                "channel names or request the fully connected fallback explicitly"
            )
        if is_ecg_lead_set(ch_names):
            return ecg_lead_adjacency(ch_names)
        return gaussian_distance_adjacency(electrode_positions(ch_names), threshold=threshold)
    except ValueError as error:
        if not fallback_full:
            raise
        warnings.warn(f"{error}; using a fully connected graph (fallback_full=True)", stacklevel=2)
        return np.ones((n, n)) - np.eye(n)


def spatial_graph_mask(ch_names: Sequence[str] | None, n_chans: int) -> tuple[np.ndarray, str]:
    """Boolean ``(n, n)`` spatial graph (no self-loops) of a corpus's channels, and the rule that built it.

    ``"10-20 distance"`` (or ``"ECG leads"``) where every name can be placed (:func:`channel_adjacency`),
    else ``"ring over channel order"``; one channel gives an empty graph, two channels one edge.
    """
    if ch_names is not None and len(ch_names) != n_chans:
        raise ValueError(f"{len(ch_names)} channel names given for n_chans={n_chans}: {list(ch_names)}")
    if ch_names is not None:
        try:
            adjacency = channel_adjacency(ch_names, n_chans=n_chans)
            return adjacency > 0, "ECG leads" if is_ecg_lead_set(ch_names) else "10-20 distance"
        except ValueError:
            pass
    idx = np.arange(n_chans)
    mask = np.zeros((n_chans, n_chans), dtype=bool)
    if n_chans > 1:
        mask[idx, (idx + 1) % n_chans] = mask[(idx + 1) % n_chans, idx] = True
    np.fill_diagonal(mask, False)
    return mask, "ring over channel order"
