"""The rFFT (``norm="ortho"``) of several real token sequences laid end to end, and its inverse.

FBAM (BioFormer, Sec. 4.2, Eqs. 1 and 8) transforms each of BioFormer's three pyramid branches
along its token axis, edits the non-DC bins, and transforms back. :func:`sequence_spectra` and
:func:`sequence_signals` give the bins of all sequences at once as real and imaginary planes,
``(2, ..., bins)``, and take them back, so that the editing between the transforms is real
element-wise arithmetic (:func:`magnitude`, ``atan2``, ``cos``/``sin``): ``torch.compile`` fuses it,
where it runs complex operators one kernel each, and on a CPU the contiguous planes keep those
operators vectorised.

Each transform's gradient is the other transform (the adjoint of a DFT is its inverse): for the
ortho rFFT ``X = F x`` of a length-``P`` sequence, ``dL/dx = irfft(h)`` with ``h_k = G_k / 2`` on the
bins that ``irfft`` counts twice (``0 < k < P / 2``) and ``h_k = G_k`` on DC and Nyquist; for
``x = irfft(X)``, ``dL/dX = rfft(g)`` doubled on the same bins. The two autograd functions below
say so, so a backward pass is one batch of FFTs on the planes, with none of the complex padding,
slicing and copying that autograd's generic rFFT backward runs (and Inductor leaves unfused).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["magnitude", "sequence_signals", "sequence_spectra"]


def _weighted(bins: torch.Tensor, length: int, weight: float) -> list[torch.Tensor]:
    """One sequence's non-DC bins ``(..., floor(P / 2))``, those that ``irfft`` counts twice
    (``0 < k < P / 2``) multiplied by ``weight``, as the pieces to concatenate."""
    doubled = (length - 1) // 2
    middle = bins[..., :doubled]
    return [middle * weight if weight != 1.0 else middle, bins[..., doubled:]]


def _spectra(x: torch.Tensor, lengths: tuple[int, ...], weight: float = 1.0) -> torch.Tensor:
    """DC bins then non-DC bins, ``(2, ..., S + K)``, of the sequences of ``x``."""
    planes = [torch.view_as_real(torch.fft.rfft(part, dim=-1, norm="ortho")).movedim(-1, 0)
              for part in x.split(list(lengths), dim=-1)]
    bins = [piece for plane, p in zip(planes, lengths, strict=True)
            for piece in _weighted(plane[..., 1:], p, weight)]
    return torch.cat([plane[..., :1] for plane in planes] + bins, dim=-1)


def _signals(dc: torch.Tensor, bins: torch.Tensor, lengths: tuple[int, ...],
             weight: float = 1.0) -> torch.Tensor:
    """The sequences whose DC bins are ``dc`` ``(2, ..., S)`` and non-DC bins ``bins`` ``(2, ..., K)``."""
    n_bins = [p // 2 for p in lengths]
    pieces = [piece for d, b, p in zip(dc.split(1, dim=-1), bins.split(n_bins, dim=-1), lengths, strict=True)
              for piece in [d, *_weighted(b, p, weight)]]
    spectrum = torch.view_as_complex(torch.cat(pieces, dim=-1).movedim(0, -1).contiguous())
    parts = spectrum.split([n + 1 for n in n_bins], dim=-1)
    return torch.cat([torch.fft.irfft(part, n=p, dim=-1, norm="ortho")
                      for part, p in zip(parts, lengths, strict=True)], dim=-1)


class _Spectra(torch.autograd.Function):
    """``_spectra`` whose backward is ``_signals`` of the halved gradient (the rFFT's adjoint)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lengths: tuple[int, ...]) -> torch.Tensor:
        ctx.lengths = lengths
        return _spectra(x, lengths)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        n_seq = len(ctx.lengths)
        return _signals(grad[..., :n_seq], grad[..., n_seq:], ctx.lengths, 0.5), None


class _Signals(torch.autograd.Function):
    """``_signals`` whose backward is ``_spectra`` of the gradient, doubled (the inverse rFFT's adjoint)."""

    @staticmethod
    def forward(ctx: Any, dc: torch.Tensor, bins: torch.Tensor, lengths: tuple[int, ...]) -> torch.Tensor:
        ctx.lengths = lengths
        return _signals(dc, bins, lengths)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        n_seq = len(ctx.lengths)
        both = _spectra(grad, ctx.lengths, 2.0)
        return both[..., :n_seq], both[..., n_seq:], None


def sequence_spectra(x: torch.Tensor, lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """DC bins ``(2, ..., S)`` and non-DC bins ``(2, ..., K)`` of the ``S`` sequences laid end to end on
    the last axis of ``x`` ``(..., sum(lengths))``, ``K = sum_s floor(P_s / 2)`` (Nyquist included),
    sequence by sequence; plane 0 holds the real parts, plane 1 the imaginary parts."""
    lengths = tuple(int(p) for p in lengths)
    both = _Spectra.apply(x, lengths)
    return both[..., :len(lengths)], both[..., len(lengths):]


def sequence_signals(dc: torch.Tensor, bins: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """The sequences ``(..., sum(lengths))`` whose bins are ``dc`` and ``bins`` (as
    :func:`sequence_spectra` lays them out): ``irfft(n=P_s)`` of each, which ignores the imaginary
    parts of DC and Nyquist bins."""
    return _Signals.apply(dc, bins, tuple(int(p) for p in lengths))


def magnitude(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``|re + j im|``, with ``torch.abs``'s gradient at 0 (zero; ``hypot``'s is NaN there)."""
    zero = (re == 0) & (im == 0)
    return torch.hypot(torch.where(zero, 1.0, re), im).masked_fill(zero, 0.0)
