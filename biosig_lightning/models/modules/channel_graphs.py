"""Graph operators for EEG channel graphs (DCRNN's supports, electrode geometry, correlation graphs).

Everything is batched torch: a support is ``(N, N)`` or ``(B, N, N)``.

* :func:`scaled_laplacian`: ChebNet's ``2 L / lambda_max - I`` with ``L = I - D^-1/2 A D^-1/2`` of
  the symmetrised (element-wise max with the transpose) adjacency (DCRNN's "laplacian" filter).
* :func:`dual_random_walk`: the two supports ``(D_o^-1 A)^T`` and ``(D_i^-1 A^T)^T`` (DCRNN's
  "dual_random_walk" filter, for directed graphs).
* :func:`correlation_adjacency`: the per-clip correlation graph of Tang et al. (2022): zero-lag
  normalised cross-correlation ``|sum x_i x_j| / sqrt(sum x_i^2 sum x_j^2)`` of the channels'
  flattened features, unit diagonal, each row keeping its ``top_k`` largest off-diagonal entries
  (directed) and itself.
* :func:`distance_adjacency`: Gaussian kernel ``exp(-(d / sigma)^2)`` of 3-D electrode distances,
  ``sigma`` the std of all pairwise distances (zero diagonal included), zero beyond ``threshold``.
* :func:`electrode_position`: unit-sphere positions of the 10-20 electrodes; a bipolar derivation
  ``"A-B"`` sits at the normalised midpoint of ``A`` and ``B``.

Reading (10-20 geometry): an idealised spherical 10-20 layout. The circumference line
Fp1-F7-T3-T5-O1 lies on the equator at azimuths 18, 54, 90, 126, 162 degrees (Fp2... mirrored),
Cz at the pole, Fz/Pz and C3/C4 at 45 degrees elevation on the midline / coronal line, and F3, F4,
P3, P4 at the normalised centroid of the four electrodes around them on the 10-20 grid. This
reproduces the distances of the DCRNN reference's ``distances_3d.csv`` for the electrodes on those
lines (Fp1-Fp2 = Fp1-F7 = 0.618, Fp1-Fz = 0.809, Fp1-C3 = 1.250, Fp1-Cz = 1.414, Fp1-O1 = 1.902)
and comes within a few hundredths for F3/F4/P3/P4; a run that needs the reference's exact graph
passes its adjacency (``adj``) to the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "TUSZ_CHANNELS",
    "correlation_adjacency",
    "distance_adjacency",
    "dual_random_walk",
    "electrode_position",
    "random_walk",
    "scaled_laplacian",
]

#: the 19 referential channels of TUSZ in DCRNN's order
TUSZ_CHANNELS: tuple[str, ...] = ("FP1", "FP2", "F3", "F4", "C3", "C4", "P3", "P4", "O1", "O2", "F7", "F8",
                                  "T3", "T4", "T5", "T6", "FZ", "CZ", "PZ")

_ALIASES = {"T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}


def _sph(azimuth: float, elevation: float) -> tuple[float, float, float]:
    """Unit vector: x to the nose, y to the left ear, z up."""
    az, el = math.radians(azimuth), math.radians(elevation)
    return (math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el))


def _normalised(*points: tuple[float, float, float]) -> tuple[float, float, float]:
    s = [sum(p[i] for p in points) for i in range(3)]
    n = math.sqrt(sum(v * v for v in s))
    return (s[0] / n, s[1] / n, s[2] / n)


def _positions() -> dict[str, tuple[float, float, float]]:
    pos = {
        "FP1": _sph(18, 0), "FP2": _sph(-18, 0), "F7": _sph(54, 0), "F8": _sph(-54, 0),
        "T3": _sph(90, 0), "T4": _sph(-90, 0), "T5": _sph(126, 0), "T6": _sph(-126, 0),
        "O1": _sph(162, 0), "O2": _sph(-162, 0), "FZ": _sph(0, 45), "CZ": _sph(0, 90), "PZ": _sph(180, 45),
        "C3": _sph(90, 45), "C4": _sph(-90, 45),
    }
    pos["F3"] = _normalised(pos["FP1"], pos["F7"], pos["FZ"], pos["C3"])
    pos["F4"] = _normalised(pos["FP2"], pos["F8"], pos["FZ"], pos["C4"])
    pos["P3"] = _normalised(pos["O1"], pos["T5"], pos["PZ"], pos["C3"])
    pos["P4"] = _normalised(pos["O2"], pos["T6"], pos["PZ"], pos["C4"])
    return pos


_POSITIONS = _positions()


def electrode_position(name: str) -> tuple[float, float, float]:
    """Unit-sphere position of a 10-20 electrode (``"EEG FP1-REF"``, ``"Fp1"``) or bipolar pair
    (``"FP1-F7"``)."""
    label = name.upper().removeprefix("EEG ").strip()
    for suffix in ("-REF", "-LE", "-AVG"):
        label = label.removesuffix(suffix)
    parts = [p for p in label.split("-") if p]
    if len(parts) > 2 or not parts:
        raise ValueError(f"cannot place channel {name!r} on the 10-20 sphere")
    points = []
    for part in parts:
        key = _ALIASES.get(part, part)
        if key not in _POSITIONS:
            raise ValueError(f"channel {name!r}: electrode {part!r} is not one of the 10-20 electrodes "
                             f"{', '.join(sorted(_POSITIONS))} (aliases {', '.join(_ALIASES)})")
        points.append(_POSITIONS[key])
    return points[0] if len(points) == 1 else _normalised(*points)


def distance_adjacency(ch_names: Sequence[str], threshold: float = 0.9) -> torch.Tensor:
    """Gaussian-kernel distance graph ``(N, N)`` of the channels (self-loops 1, zero beyond ``threshold``)."""
    pos = torch.tensor([electrode_position(n) for n in ch_names], dtype=torch.float64)
    dist = torch.cdist(pos, pos)
    sigma = dist.flatten().std()
    adj = torch.exp(-((dist / sigma) ** 2))
    adj[dist > threshold] = 0.0
    return adj.float()


def scaled_laplacian(adj: torch.Tensor) -> torch.Tensor:
    """``2 L / lambda_max - I`` of the symmetrised adjacency (``(N, N)`` or batched)."""
    a = torch.maximum(adj, adj.transpose(-1, -2)).double()
    d = a.sum(-1)
    d_inv_sqrt = torch.where(d > 0, d.clamp_min(1e-30).rsqrt(), torch.zeros_like(d))
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    lap = eye - d_inv_sqrt.unsqueeze(-1) * a * d_inv_sqrt.unsqueeze(-2)
    lam = torch.linalg.eigvalsh(lap).abs().amax(-1)
    return (2.0 / lam[..., None, None] * lap - eye).to(adj.dtype)


def random_walk(adj: torch.Tensor) -> torch.Tensor:
    """``D_o^-1 A`` (rows of zero degree stay zero)."""
    d = adj.sum(-1, keepdim=True)
    return torch.where(d != 0, adj / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(adj))


def dual_random_walk(adj: torch.Tensor) -> list[torch.Tensor]:
    """The two supports of the dual random walk filter: ``(D_o^-1 A)^T`` and ``(D_i^-1 A^T)^T``."""
    return [random_walk(adj).transpose(-1, -2), random_walk(adj.transpose(-1, -2)).transpose(-1, -2)]


def correlation_adjacency(x: torch.Tensor, top_k: int = 3) -> torch.Tensor:
    """Per-sample correlation graphs ``(B, N, N)`` from node signals ``x`` of shape ``(B, N, L)``."""
    gram = x @ x.transpose(-1, -2)
    energy = torch.diagonal(gram, dim1=-2, dim2=-1)
    scale = torch.sqrt(energy.unsqueeze(-1) * energy.unsqueeze(-2))
    ncc = torch.where(scale > 0, gram / torch.where(scale > 0, scale, torch.ones_like(scale)), gram).abs()
    n = x.shape[-2]
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    ncc = torch.where(eye, torch.ones_like(ncc), ncc)
    k = min(top_k, n - 1)
    idx = ncc.masked_fill(eye, -1.0).topk(k, dim=-1).indices
    mask = torch.zeros_like(ncc, dtype=torch.bool).scatter_(-1, idx, True) | eye
    return ncc * mask
