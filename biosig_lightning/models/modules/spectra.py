"""The rFFT (``norm="ortho"``) of several real token sequences laid end to end, and its inverse.

FBAM (BioFormer, Sec. 4.2, Eqs. 1 and 8) transforms each of BioFormer's three pyramid branches
along its token axis, edits the non-DC bins, and transforms back. :func:`sequence_spectra` and
:func:`sequence_signals` give the bins of all sequences at once as real and imaginary planes,
``(2, ..., bins)``, and take them back, so that the editing between the transforms is real
element-wise arithmetic (:func:`magnitude`, ``atan2``, ``cos``/``sin``): ``torch.compile`` fuses it,
where it runs complex operators one kernel each (and their backward as several), and on a CPU the
contiguous planes keep those operators vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["magnitude", "sequence_signals", "sequence_spectra"]


def sequence_spectra(x: torch.Tensor, lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """DC bins ``(2, ..., S)`` and non-DC bins ``(2, ..., K)`` of the ``S`` sequences laid end to end on
    the last axis of ``x`` ``(..., sum(lengths))``, ``K = sum_s floor(P_s / 2)`` (Nyquist included),
    sequence by sequence; plane 0 holds the real parts, plane 1 the imaginary parts."""
    planes = [torch.view_as_real(torch.fft.rfft(part, dim=-1, norm="ortho")).movedim(-1, 0)
              for part in x.split(list(lengths), dim=-1)]
    both = torch.cat([p[..., :1] for p in planes] + [p[..., 1:] for p in planes], dim=-1)
    return both.split([len(planes), both.shape[-1] - len(planes)], dim=-1)


def sequence_signals(dc: torch.Tensor, bins: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """The sequences ``(..., sum(lengths))`` whose bins are ``dc`` and ``bins`` (as
    :func:`sequence_spectra` lays them out): ``irfft(n=P_s)`` of each, which ignores the imaginary
    parts of DC and Nyquist bins."""
    n_bins = [p // 2 for p in lengths]
    pieces = [piece for d, b in zip(dc.split(1, dim=-1), bins.split(n_bins, dim=-1), strict=True)
              for piece in (d, b)]
    spectrum = torch.view_as_complex(torch.cat(pieces, dim=-1).movedim(0, -1).contiguous())
    parts = spectrum.split([n + 1 for n in n_bins], dim=-1)
    return torch.cat([torch.fft.irfft(part, n=p, dim=-1, norm="ortho")
                      for part, p in zip(parts, lengths, strict=True)], dim=-1)


def magnitude(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``|re + j im|``, with ``torch.abs``'s gradient at 0 (zero; ``hypot``'s is NaN there)."""
    zero = (re == 0) & (im == 0)
    return torch.hypot(torch.where(zero, 1.0, re), im).masked_fill(zero, 0.0)
