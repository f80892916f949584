"""Eigendecomposition of large batches of small symmetric matrices (the SPD preprocessing's 9 x 9 ones).

``torch.linalg.eigh`` on a CPU batch calls LAPACK's ``syevd`` once per matrix, and for a 9 x 9 matrix
that call is mostly overhead around a few thousand flops. A recording's SPD tokens need some 900,000 of
them (the Karcher mean's passes and the tokens'
logarithms, 7 frequency channels x 28,800 subwindows), most of the preprocessing's time.

:func:`eigh` computes the same decomposition with the cyclic Jacobi method (Golub & Van Loan, *Matrix
Computations*, 4th ed., Sec. 8.5) compiled by numba, many matrices at a time: a block of 64 matrices is
stored with the matrix index innermost, so each rotation ``(p, q)`` is applied to all 64 at once in
SIMD lanes (each matrix with its own angle). A rotation is skipped where
``|a_pq| <= eps * sqrt(|a_pp a_qq|)`` (the relative criterion of Demmel & Veselic, 1992: with it, the
small eigenvalues of a graded SPD matrix come out to relative accuracy, tests), and a block is done
when every pair of every matrix passes it: 9 x 9 matrices take 5-7 sweeps from scratch, 3-4 from the
eigenbasis of a nearby matrix (``basis``). The eigenvalues come in ascending order with their
eigenvectors as columns, like ``torch.linalg.eigh``, and the lower triangle is read (its default
``UPLO='L'``).

numba is optional (``pip install biosig-lightning[fast]``). Its first use on a machine compiles the
kernel (seconds), and numba caches the machine code on disk next to this module (or in its user
cache). Without it, with ``BIOSIG_NUMBA=0`` in the environment, and for float32, complex, batches under
:data:`MIN_BATCH` matrices, orders above
:data:`MAX_N`, or inputs that need gradients, :func:`eigh` is ``torch.linalg.eigh``. The kernel is
compiled with ``fastmath``, which assumes finite numbers, so a batch with a non-finite entry goes to
torch, and so does a block whose sweeps do not converge: errors and NaNs come out as torch gives them.
The kernel releases the GIL and runs on one thread (numba's own parallel loops would not nest inside
the preprocessing's thread pool): callers run chunks in threads (``features/spd.py``), and :func:`eigh`
splits a large batch over ``torch.get_num_threads()`` threads itself.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from biosig_lightning import accel

__all__ = ["MAX_N", "MIN_BATCH", "available", "eigh", "eigh_congruent"]

#: batches smaller than this go to torch (the kernel's setup is not worth it)
MIN_BATCH = 64
#: the largest matrix order the kernel takes: a sweep costs n^3 per matrix, so above about this order
#: LAPACK's per-call overhead no longer dominates and Jacobi stops paying
MAX_N = 12
_LANES = 64  # matrices per block: 64 x n x n doubles for the matrix and as many for the vectors, in L1/L2
_MAX_SWEEPS = 40
_TOL = float(np.finfo(np.float64).eps)

# numba is an optional accelerator; without it, torch.linalg.eigh (tests set _numba = None for this path)
_numba = accel.numba

_KERNEL = None
_NO_CONGRUENCE = np.zeros((0, 0))
_COMPILE_LOCK = threading.Lock()


def available() -> bool:
    """Whether the numba kernel can be used here (numba importable and not disabled by ``BIOSIG_NUMBA=0``)."""
    return accel.enabled(_numba)


def _compile():  # noqa: ANN202 - returns a numba dispatcher
    """The kernel, compiled on first use (and cached on disk by numba next to this module when writable)."""
    global _KERNEL
    with _COMPILE_LOCK:  # the first calls may come from several pool threads at once
        if _KERNEL is None:
            _KERNEL = _build(_numba.njit)
    return _KERNEL


def _build(njit):  # noqa: ANN001, ANN202

    @njit(nogil=True, cache=True, fastmath=True, boundscheck=False, error_model="numpy")
    def kernel(mats, congr, has_congr, basis, warm, vals, vecs, failed, tol, max_sweeps):  # noqa: ANN001, ANN202, PLR0913
        n_mat, n = mats.shape[0], mats.shape[1]
        lanes = 64
        a = np.empty((n, n, lanes))  # upper triangle a[p, q], p <= q, matrix index innermost
        v = np.empty((n, n, lanes))  # eigenvector columns v[:, j]
        qm = np.empty((n, n, lanes))  # with a congruence: Q = C V, T = X Q, then B = Q^T T into a
        tm = np.empty((n, n, lanes))
        c = np.empty(lanes)
        s = np.empty(lanes)
        order = np.empty(n, dtype=np.int64)
        tol2 = tol * tol
        for b0 in range(0, n_mat, lanes):
            m = min(lanes, n_mat - b0)
            for p in range(n):
                for q in range(p, n):
                    for i in range(m):
                        a[p, q, i] = mats[b0 + i, q, p]  # the lower triangle, as eigh's UPLO='L'
                    for i in range(m, lanes):
                        a[p, q, i] = 1.0 if p == q else 0.0  # idle lanes: an identity block
                for q in range(n):
                    for i in range(lanes):
                        v[p, q, i] = 1.0 if p == q else 0.0
                    if warm:  # the rotations accumulate onto the given basis: V = basis R
                        for i in range(m):
                            v[p, q, i] = basis[b0 + i, p, q]
            if has_congr:  # B = (C^T V)^T X (C^T V) = V^T W V: W = C X C^T in the start basis V
                for p in range(n):
                    for q in range(n):
                        row = qm[p, q]
                        row[:] = 0.0
                        for r in range(n):
                            crp, vrq = congr[r, p], v[r, q]
                            for i in range(lanes):
                                row[i] += crp * vrq[i]
                for p in range(n):
                    for q in range(n):
                        row = tm[p, q]
                        row[:] = 0.0
                        for r in range(n):
                            xpr = a[p, r] if p <= r else a[r, p]
                            qrq = qm[r, q]
                            for i in range(lanes):
                                row[i] += xpr[i] * qrq[i]
                for p in range(n):
                    for q in range(p, n):
                        row = a[p, q]
                        row[:] = 0.0
                        for r in range(n):
                            qrp, trq = qm[r, p], tm[r, q]
                            for i in range(lanes):
                                row[i] += qrp[i] * trq[i]
                        for i in range(m, lanes):
                            row[i] = 1.0 if p == q else 0.0
            done = False
            for _ in range(max_sweeps):
                worst = 0.0
                for p in range(n - 1):
                    for q in range(p + 1, n):
                        row_pq, row_pp, row_qq = a[p, q], a[p, p], a[q, q]
                        for i in range(lanes):
                            worst = max(worst, row_pq[i] * row_pq[i] - tol2 * abs(row_pp[i] * row_qq[i]))
                if worst <= 0.0:
                    done = True
                    break
                for p in range(n - 1):
                    for q in range(p + 1, n):
                        row_pq, row_pp, row_qq = a[p, q], a[p, p], a[q, q]  # 1-D, contiguous: SIMD loops
                        for i in range(lanes):
                            apq, app, aqq = row_pq[i], row_pp[i], row_qq[i]
                            # rotate: 1.0 where |a_pq| is above the threshold, else 0.0 (branch-free, for
                            # SIMD)
                            rotate = 1.0 * (apq * apq > tol2 * abs(app * aqq))
                            # t = tan(theta), the smaller root of t^2 + 2 tau t - 1 = 0 (GvL Alg. 8.5.1)
                            tau = (aqq - app) / (2.0 * apq + (1.0 - rotate))
                            tt = rotate * (2.0 * (tau >= 0.0) - 1.0) / (abs(tau) + np.sqrt(1.0 + tau * tau))
                            cc = 1.0 / np.sqrt(1.0 + tt * tt)
                            c[i] = cc
                            s[i] = tt * cc
                            row_pp[i] = app - tt * apq
                            row_qq[i] = aqq + tt * apq
                            row_pq[i] = (1.0 - rotate) * apq
                        for k in range(n):
                            if k == p or k == q:
                                continue
                            row_kp = a[k, p] if k < p else a[p, k]
                            row_kq = a[k, q] if k < q else a[q, k]
                            for i in range(lanes):
                                akp, akq = row_kp[i], row_kq[i]
                                row_kp[i] = c[i] * akp - s[i] * akq
                                row_kq[i] = s[i] * akp + c[i] * akq
                        for k in range(n):
                            row_vp, row_vq = v[k, p], v[k, q]
                            for i in range(lanes):
                                vkp, vkq = row_vp[i], row_vq[i]
                                row_vp[i] = c[i] * vkp - s[i] * vkq
                                row_vq[i] = s[i] * vkp + c[i] * vkq
            if not done:
                for i in range(m):
                    failed[b0 + i] = True
                continue
            for i in range(m):  # ascending eigenvalues (insertion sort of n values), vectors to match
                for j in range(n):
                    order[j] = j
                for j in range(1, n):
                    key = order[j]
                    r = j - 1
                    while r >= 0 and a[order[r], order[r], i] > a[key, key, i]:
                        order[r + 1] = order[r]
                        r -= 1
                    order[r + 1] = key
                for j in range(n):
                    vals[b0 + i, j] = a[order[j], order[j], i]
                    for k in range(n):
                        vecs[b0 + i, k, j] = v[k, order[j], i]

    return kernel


def _use_kernel(mats: torch.Tensor) -> bool:
    return (available() and mats.device.type == "cpu" and mats.dtype == torch.float64 and mats.dim() >= 2
            and 0 < mats.shape[-1] <= MAX_N and mats.shape[-1] == mats.shape[-2]
            and mats.numel() // max(mats.shape[-1] ** 2, 1) >= MIN_BATCH
            and not (mats.requires_grad and torch.is_grad_enabled()))


def eigh(mats: torch.Tensor, basis: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(eigenvalues ascending (..., n), eigenvectors as columns (..., n, n))`` of symmetric ``(..., n, n)``.

    ``torch.linalg.eigh``'s result (to round-off: both are backward stable; eigenvectors of a repeated
    eigenvalue are any orthonormal basis of its eigenspace, and each vector's sign is arbitrary),
    computed by the numba Jacobi kernel where it applies (module docstring).

    ``basis``: orthonormal ``V`` (same shape as ``mats``) in which ``mats`` are expressed,
    ``mats = V^T W V``; the result is then the eigendecomposition of ``W``, vectors ``V U``. Where ``V``
    nearly diagonalises ``W`` (the eigenvectors of a nearby matrix), Jacobi starts from ``mats``, close
    to diagonal, and needs fewer sweeps (3-4 instead of 6-7 for 9 x 9); torch's path multiplies out ``V U``.
    """
    _check_basis(mats, basis)
    if not _use_kernel(mats):
        vals, vecs = torch.linalg.eigh(mats)
        return (vals, vecs) if basis is None else (vals, basis @ vecs)
    return _kernel_eigh(mats, None, basis)


def eigh_congruent(mats: torch.Tensor, congruence: torch.Tensor,
                   basis: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`eigh` of ``W = C X C^T`` for each ``X`` of ``mats`` (``(..., n, n)``, lower triangles read) and
    one ``C`` (``(n, n)``, e.g. a whitening ``M^{-1/2}``), without materialising the ``W``.

    ``basis``: orthonormal ``V`` that nearly diagonalise the ``W`` (the kernel starts from ``V^T W V``;
    torch's path ignores it, LAPACK takes no start). The kernel forms the products per block of 64
    matrices in SIMD lanes; torch's path is ``torch.linalg.eigh(C @ X @ C^T)``.
    """
    _check_basis(mats, basis)
    if congruence.shape != mats.shape[-2:]:
        raise ValueError(f"eigh_congruent: congruence of shape {tuple(congruence.shape)} does not match "
                         f"matrices of shape {tuple(mats.shape[-2:])}")
    if not (_use_kernel(mats) and congruence.dtype == mats.dtype):
        return _torch_fallback(mats, congruence, None)
    return _kernel_eigh(mats, congruence, basis)


def _check_basis(mats: torch.Tensor, basis: torch.Tensor | None) -> None:
    if basis is not None and basis.shape != mats.shape:
        raise ValueError(f"eigh: basis of shape {tuple(basis.shape)} does not match matrices "
                         f"{tuple(mats.shape)}")


def _as_array(t: torch.Tensor, n: int) -> np.ndarray:
    return t.detach().reshape(-1, n, n).to(torch.float64).contiguous().numpy()


def _kernel_eigh(mats: torch.Tensor, congruence: torch.Tensor | None,
                 basis: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    lead, n = mats.shape[:-2], mats.shape[-1]
    flat = _as_array(mats, n)
    start = _as_array(basis, n) if basis is not None else np.empty((0, n, n))
    congr = _as_array(congruence, n)[0] if congruence is not None else _NO_CONGRUENCE
    if not (np.isfinite(flat).all() and np.isfinite(start).all() and np.isfinite(congr).all()):
        return _torch_fallback(mats, congruence, basis)  # the kernel assumes finite numbers (fastmath)
    kernel = _compile()
    n_mat, warm, has_congr = flat.shape[0], basis is not None, congruence is not None
    vals = np.empty((n_mat, n))
    vecs = np.empty((n_mat, n, n))
    failed = np.zeros(n_mat, dtype=np.bool_)

    def run(sl: slice) -> None:
        kernel(flat[sl], congr, has_congr, start[sl] if warm else start, warm, vals[sl], vecs[sl], failed[sl],
               _TOL, _MAX_SWEEPS)

    workers = min(torch.get_num_threads(), n_mat // (16 * _LANES))
    if workers > 1:  # whole blocks per worker
        step = -(-n_mat // workers // _LANES) * _LANES
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, [slice(i, min(i + step, n_mat)) for i in range(0, n_mat, step)]))
    else:
        run(slice(None))
    out_vals, out_vecs = torch.from_numpy(vals), torch.from_numpy(vecs)
    if failed.any():  # unconverged blocks: torch's answer (or error) for those matrices
        idx = torch.from_numpy(np.flatnonzero(failed))
        out_vals[idx], out_vecs[idx] = _torch_fallback(
            torch.from_numpy(flat)[idx], None if congruence is None else torch.from_numpy(congr),
            None if basis is None else torch.from_numpy(start)[idx])
    return out_vals.reshape(*lead, n), out_vecs.reshape(*lead, n, n)


def _torch_fallback(mats: torch.Tensor, congruence: torch.Tensor | None,
                    basis: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if congruence is not None:  # (a contiguous C^T: the batched product with a transposed view was slower)
        return torch.linalg.eigh(congruence @ mats @ congruence.transpose(-1, -2).contiguous())
    vals, vecs = torch.linalg.eigh(mats)
    return (vals, vecs) if basis is None else (vals, basis @ vecs)
