"""numba kernels for SP-MHA's attention maps on CPUs: dropout, combination and the elementwise backward.

Used by :class:`~.spdtransnet.SPAttention` when numba is installed (``pip install biosig-lightning[fast]``)
and not disabled (``BIOSIG_NUMBA=0``); the plain torch function of the model is the reference and the
fallback.
Per chunk of sequences, with ``P_h`` the h softmax maps, ``M_h`` their keep masks (the same SFC64
words as :func:`~.spdtransnet.mask_words`: an entry is dropped where its 16-bit word is below
``thr = round(p 2^16)``) and ``ws_h = w_h / (1 - p)``:

* :func:`combine` (forward): ``C = sum_h ws_h M_h P_h``; with ``encode``, the dropped entries of
  ``P`` are negated in place. A softmax map is never negative, so the sign then carries the mask,
  and the maps and masks kept for backward cost one number per entry.
* :func:`backward`: from the signed maps ``S`` (``P = |S|`` and ``M P = S`` where ``S >= 0``, else 0)
  and ``G = dout x^T``: ``C`` as above (for ``dx = C^T dout``), ``e_h = M_h P_h G``,
  ``r_h = rowsum(e_h)``, ``dw_h += sum r_h`` and ``dS_h = ws_h (e_h - P_h r_h)`` (the formulas of
  :class:`~biosig_lightning.models.spdtransnet.recompute.SPAttention`).

Each is one pass over the maps, where the torch expressions make six or seven, and neither draws a
mask again. An entry with ``P = 0`` contributes nothing whatever its mask, so ``-0 = +0`` is harmless.
The kernels release the GIL and work on a range of sequences, so callers split a chunk over threads.
They are compiled on first use (a few seconds; numba caches them on disk), with the reassociation
that vectorises the row sums but without ``fastmath``'s no-NaN assumption: NaNs propagate as in torch.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from biosig_lightning import accel

__all__ = ["available", "backward", "combine"]

_numba: Any = accel.numba  # tests set it to None for the torch path
_KERNELS: tuple[Any, Any] | None = None
_LOCK = threading.Lock()


def available() -> bool:
    """Whether the kernels can run here (numba importable, ``BIOSIG_NUMBA`` not ``0``)."""
    return accel.enabled(_numba)


def _compiled() -> tuple[Any, Any]:
    global _KERNELS
    with _LOCK:  # first calls may come from several pool threads
        if _KERNELS is None:
            _KERNELS = _build(_numba.njit)
    return _KERNELS


def _build(njit: Any) -> tuple[Any, Any]:
    flags = {"reassoc", "contract", "arcp"}

    @njit(nogil=True, cache=True, fastmath=flags, boundscheck=False, error_model="numpy")
    def combine_kernel(probs, raw, thr, has_mask, encode, ws, comb, e0, e1):  # noqa: ANN001, ANN202, PLR0913
        h, t = probs.shape[1], probs.shape[2]
        words = raw.reshape(probs.shape) if has_mask else raw.reshape((1, 1, 1, raw.size))
        for e in range(e0, e1):
            for i in range(t):
                acc = comb[e, i]
                for j in range(t):
                    acc[j] = 0.0
                for hh in range(h):
                    w = ws[hh]
                    row = probs[e, hh, i]
                    if has_mask:
                        wrow = words[e, hh, i]
                        for j in range(t):
                            pv = row[j]
                            keep = wrow[j] >= thr
                            acc[j] += w * (pv if keep else pv * 0.0)  # selects vectorise; NaN * 0 stays NaN
                            if encode:
                                row[j] = pv if keep else -pv
                    else:
                        for j in range(t):
                            acc[j] += w * row[j]

    @njit(nogil=True, cache=True, fastmath=flags, boundscheck=False, error_model="numpy")
    def backward_kernel(signed, g, ws, ds, comb, dw, e0, e1):  # noqa: ANN001, ANN202, PLR0913
        h, t = signed.shape[1], signed.shape[2]
        for e in range(e0, e1):
            for i in range(t):
                acc = comb[e, i]
                grow = g[e, i]
                for j in range(t):
                    acc[j] = 0.0
                for hh in range(h):
                    w = ws[hh]
                    srow = signed[e, hh, i]
                    drow = ds[e, hh, i]
                    r = srow[0] * 0.0
                    for j in range(t):
                        sv = srow[j]
                        kept = sv * 0.0 if sv < 0 else sv  # NaN stays NaN
                        acc[j] += w * kept
                        ev = kept * grow[j]
                        r += ev
                        drow[j] = ev
                    dw[hh] += r
                    for j in range(t):
                        drow[j] = w * (drow[j] - abs(srow[j]) * r)

    return combine_kernel, backward_kernel


def _ranges(n: int, pool: ThreadPoolExecutor | None, workers: int) -> list[tuple[int, int]]:
    parts = max(1, min(n, workers if pool is not None else 1))
    bounds = np.linspace(0, n, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def combine(probs: np.ndarray, raw: np.ndarray | None, thr: int, ws: np.ndarray, comb: np.ndarray,
            encode: bool,
            pool: ThreadPoolExecutor | None = None, workers: int = 1) -> None:
    """``comb = sum_h ws_h M_h P_h`` for ``probs`` of shape ``(n, h, t, t)`` (C-contiguous), ``raw`` its
    16-bit mask words in the same order (``None``: no dropout); ``encode`` negates the dropped entries
    of ``probs`` in place. The ``n`` sequences are split over ``workers`` threads of ``pool``."""
    kernel = _compiled()[0]
    words = raw if raw is not None else np.zeros(1, np.uint16)
    ranges = _ranges(probs.shape[0], pool, workers)
    args = (probs, words, np.uint16(thr), raw is not None, encode, ws.astype(probs.dtype), comb)
    if len(ranges) == 1:
        kernel(*args, *ranges[0])
    else:
        assert pool is not None  # _ranges splits only over a pool
        list(pool.map(lambda r: kernel(*args, *r), ranges))


def backward(signed: np.ndarray, g: np.ndarray, ws: np.ndarray, ds: np.ndarray, comb: np.ndarray,
             pool: ThreadPoolExecutor | None = None, workers: int = 1) -> np.ndarray:
    """Fill ``ds`` (``dS_h``, the shape of ``signed``) and ``comb`` from the signed maps and ``g``
    (``(n, t, t)``); returns ``sum r_h`` per head (length h, the dtype of the maps), for ``dw``."""
    kernel = _compiled()[1]
    ranges = _ranges(signed.shape[0], pool, workers)
    dw = np.zeros((len(ranges), signed.shape[1]), signed.dtype)
    args = (signed, g, ws.astype(signed.dtype), ds, comb)
    if len(ranges) == 1:
        kernel(*args, dw[0], *ranges[0])
    else:
        assert pool is not None  # _ranges splits only over a pool
        list(pool.map(lambda k: kernel(*args, dw[k], *ranges[k]), range(len(ranges))))
    return dw.sum(0)
