"""In-model augmentations of BioFormer (Appendix B.1) and Medformer (its authors' code).

Both models draw, per forward pass in training mode, one operator from a list given as the
authors spell it (``"jitter0.2"``, ``"scale0.1"``, ``"drop0.35"``, ``"none"``) and apply it to
a 3-D tensor: :func:`parse_augmentation` reads one entry, :func:`augment` applies it.
"""

from __future__ import annotations

import re

import torch
from torch.nn import functional as F

__all__ = ["AUGMENTATION_KINDS", "augment", "parse_augmentation"]

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


def augment(e: torch.Tensor, kind: str, strength: float) -> torch.Tensor:
    """Apply one parsed augmentation to ``e`` ``(B, S, ...)``: ``scale`` draws one factor per ``(B, S)`` slice."""
    if kind == "jitter":
        return e + strength * torch.randn_like(e)
    if kind == "scale":
        return e * (1.0 + strength * torch.randn(e.shape[0], e.shape[1], 1, dtype=e.dtype, device=e.device))
    if kind == "dropout":
        return F.dropout(e, strength, training=True)
    return e
