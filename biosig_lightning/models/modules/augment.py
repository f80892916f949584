"""In-model augmentations of BioFormer (Appendix B.1) and Medformer (its authors' code).

Both models draw, per forward pass in training mode, one operator from a list given as the
authors spell it (``"jitter0.2"``, ``"scale0.1"``, ``"drop0.35"``, ``"none"``) and apply it to
a 3-D tensor: :func:`parse_augmentation` reads one entry, :func:`augment` applies it, and
:func:`augment_each` applies a drawn operator to each of several stacked copies at once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch.nn import functional as F

__all__ = ["AUGMENTATION_KINDS", "augment", "augment_each", "parse_augmentation"]

# Canonical kind -> default strength. "drop" and "none" are the authors' spellings.
AUGMENTATION_KINDS = {"jitter": 0.1, "scale": 0.1, "dropout": 0.1, "identity": 0.0}
_ALIASES = {"drop": "dropout", "none": "identity"}
_SPEC = re.compile(r"^(jitter|scale|dropout|drop|identity|none)((?:\d+\.?\d*|\.\d+)(?:e-?\d+)?)?$")


def parse_augmentation(spec: str) -> tuple[str, float]:
    """Parse ``"jitter"``, ``"scale0.2"``, ``"drop0.5"``, ``"none"`` ... into ``(kind, strength)``.

    Kinds (Appendix B.1): ``jitter`` adds ``s * N(0, 1)``; ``scale`` multiplies each
    (sample, embedding channel) by ``1 + s * N(0, 1)``; ``dropout`` (alias ``drop``) is
    dropout with probability ``s``; ``identity`` (alias ``none``) does nothing. A numeric
    suffix sets ``s`` (the authors' notation, Appendix C.3); the default is 0.1.
    """
    match = _SPEC.match(spec.strip().lower()) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(
            f"unknown augmentation {spec!r}; expected jitter|scale|dropout|drop|identity|none "
            "with an optional strength suffix, e.g. 'scale0.1', 'drop0.25'"
        )
    kind = _ALIASES.get(match.group(1), match.group(1))
    strength = float(match.group(2)) if match.group(2) else AUGMENTATION_KINDS[kind]
    if kind == "dropout" and not 0.0 <= strength < 1.0:
        raise ValueError(f"dropout augmentation {spec!r} needs a probability in [0, 1)")
    if strength < 0:
        raise ValueError(f"augmentation {spec!r} needs a non-negative strength")
    return kind, strength


def augment(e: torch.Tensor, kind: str, strength: float, lead: int = 2) -> torch.Tensor:
    """Apply one parsed augmentation to ``e`` ``(B, S, ...)``: ``scale`` draws one factor per ``(B, S)`` slice
    (per slice of the first ``lead`` axes)."""
    if kind == "jitter":
        return e + strength * torch.randn_like(e)
    if kind == "scale":
        factor_shape = (*e.shape[:lead], *([1] * (e.ndim - lead)))
        return e * (1.0 + strength * torch.randn(factor_shape, dtype=e.dtype, device=e.device))
    if kind == "dropout":
        return F.dropout(e, strength, training=True)
    return e


def augment_each(e: torch.Tensor, n_copies: int, ops: Sequence[tuple[str, float]]) -> torch.Tensor:
    """``n_copies`` copies ``(J, B, S, ...)`` of ``e`` ``(B, S, ...)``, each augmented by its own operator
    drawn
    uniformly from ``ops``.

    The same distribution as ``stack([augment(e, *ops[c]) for c in randint(len(ops), (J,))])``, draws
    taken per copy, but the drawn indices are never read back to the host: every operator is applied to
    all ``J`` copies and each copy keeps the one its draw names (a one-hot blend). So the step has no
    host-device synchronisation and no data-dependent branch (``torch.compile`` and CUDA graphs capture it).
    """
    copies = e.unsqueeze(0).expand(n_copies, *e.shape)
    if len(ops) == 1:
        return augment(copies, *ops[0], lead=3)
    choice = torch.randint(len(ops), (n_copies,), device=e.device)
    # one-hot by comparison (F.one_hot reads the indices back to check their range)
    pick = (torch.arange(len(ops), device=e.device).unsqueeze(1) == choice).to(e.dtype)
    pick = pick.reshape(len(ops), n_copies, *([1] * e.ndim))
    out = pick[0] * augment(copies, *ops[0], lead=3)
    for k in range(1, len(ops)):
        out = out + pick[k] * augment(copies, *ops[k], lead=3)
    return out
