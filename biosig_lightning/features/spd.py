"""SPD preprocessing of SPDTransNet (Seraphim et al., Sec. 3.3): EEG -> tokens of log-whitened SPD(n+1).

The pipeline, in two cached stages (so a trial that changes alpha, beta or eps reuses stage 1):

**Stage 1, signal statistics** (:func:`covariance_features`; depends on the signal and the filter
settings only):

1. z-score each electrode over the whole recording (``zscore``);
2. 7 frequency channels (:data:`SPD_BANDS`): the raw signal and six 4th-order Butterworth band-passes
   delta 0.5-4, theta 4-8, alpha 8-13, low beta 13-22, high beta 22-30, gamma 30-45 Hz. Zero-phase
   (forward-backward, ``causal=False``) by default; ``causal=True`` is the authors' code (a single
   forward pass, phase-shifting). Both use second-order sections (numerically the same filter as the
   code's transfer-function ``lfilter`` form, without its round-off at low cut-offs);
3. each 30 s epoch cut into ``S = 30`` non-overlapping 1 s subwindows;
4. per subwindow and channel: the unbiased covariance (``np.cov``, pyriemann ``estimator='cov'``) in
   SPD(n) and the PSD vector: the mean over all frequency bins of the one-sided periodogram density
   (constant detrend, boxcar window; the code's ``scipy.signal.periodogram`` statistic), one number
   per electrode (computed exactly from the covariance's diagonal, by Parseval).

**Stage 2, tokens** (:func:`spd_tokens`; depends on stage 1 and ``alpha, beta, eps, reference,
sqrt2``):

5. augmentation SPD(n) -> SPD(n+1): ``A = [[C + a a^T, a], [a^T, 1]]`` with ``a = alpha * psd``
   (SPD by the Schur complement: ``A / 1 = C``);
6. whitening ``W = G^{-1/2} A G^{-1/2}`` by a reference ``G`` per frequency channel (see ``reference``
   and the scope below), then scaling by ``beta``;
7. eigenvalues floored at ``eps`` and the matrix logarithm (Sec. 1, the log-Euclidean map onto
   Sym(n+1));
8. tokens: the upper triangle in row-major order, ``d(n+1) = (n+1)(n+2)/2`` numbers (45 for 8
   electrodes), off-diagonal entries times sqrt(2) by default.

Options that reproduce the authors' code (each a quirk of it, named here):

* ``causal=True``: single-pass causal band-pass (code: ``lfilter``).
* ``reference="augmented_raw"``: ``G`` is the augmentation (with the same alpha) of the affine-invariant
  mean of the raw SPD(n) covariances and the arithmetic mean of the PSD vectors, which is what the
  code builds; ``reference="augmented"`` (default) is the affine-invariant mean of the augmented
  SPD(n+1) matrices themselves, the paper's "we augment our matrices ... before whitening them ...
  average all relevant matrices using the standard affine invariant metric".
* ``sqrt2=False``: off-diagonal entries unscaled (code; also the literal coordinates in the paper's
  basis ``B_m``, Sec. 2).
* ``eps=None``: the floor is machine epsilon (code's ``svd_singular_value_minimum: None``).

Reading (sqrt(2)): the paper calls Sec. 1's ``||X||_2`` "the L2 norm applied to the upper
triangular", which taken literally is the code's unscaled token; but the log-Euclidean distance of
Arsigny et al. [1] that eq. (1) cites is the Frobenius norm of ``log A - log B``, and the Euclidean
norm of the token equals it only with sqrt(2) on the off-diagonals. We default to the isometric
tokens (then pyriemann's ``upper`` is exactly our token) and keep the code's as ``sqrt2=False``.

Whitening scope (which data the reference touches): ``scope="recording"`` is the authors' choice, one
``G`` per recording and channel from all of that recording's subwindows, so the test recordings'
own (unlabelled) signals shape their tokens: transductive. ``scope="train"`` uses one ``G`` per channel
for every recording, computed from training recordings only. Reading: that ``G`` is the
affine-invariant mean of the training recordings' per-recording means (one matrix per recording,
weighted by its subwindow count), which avoids a Karcher flow over millions of matrices and equals the
pooled mean when recordings agree.

Everything is batched over epochs, subwindows and channels (numpy for filters/covariances, torch
float64 for the matrix functions); the only Python loops are over recordings and filter bands.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Literal

import numpy as np
import torch
from scipy import fft as sp_fft
from scipy import signal as sps

__all__ = [
    "SPD_BANDS", "SPD_ELECTRODES", "Reference", "augment", "butter_bandpass_gain", "covariance_features", "filter_bank",
    "invsqrtm", "logm", "mean_riemann", "spd_fn", "spd_tokens", "sym_from_tokens", "token_dim",
    "tokens_from_sym", "whitening_reference",
]

#: the 8 electrodes of the paper (Sec. 3.3), in model order
SPD_ELECTRODES: tuple[str, ...] = ("F3", "F4", "C3", "C4", "T3", "T4", "O1", "O2")
#: the 6 band-passes after the raw channel, in Hz (authors' channel-wise transformations config)
SPD_BANDS: Mapping[str, tuple[float, float]] = {
    "delta": (0.5, 4.0), "theta": (4.0, 8.0), "alpha": (8.0, 13.0),
    "low_beta": (13.0, 22.0), "high_beta": (22.0, 30.0), "gamma": (30.0, 45.0),
}

Reference = Literal["augmented", "augmented_raw"]


def token_dim(n: int) -> int:
    """``d(n) = n (n + 1) / 2``, the dimension of Sym(n) (Sec. 2)."""
    return n * (n + 1) // 2


# --------------------------------------------------------------------------- stage 1


def butter_bandpass_gain(freqs: np.ndarray, lo: float, hi: float, sfreq: float, order: int = 4) -> np.ndarray:
    """``|H(f)|^2`` of ``scipy.signal.butter(order, [lo, hi], 'bandpass', fs=sfreq)`` in closed form.

    The digital Butterworth band-pass is the bilinear transform of the analog prototype, so with
    prewarped ``W = tan(pi f / sfreq)``: ``|H|^2 = 1 / (1 + X^(2 order))``,
    ``X = (W^2 - W_lo W_hi) / (W (W_hi - W_lo))`` (checked against ``sosfreqz`` in the tests).
    """
    return _gain_prewarped(np.tan(np.pi * np.clip(freqs, 0.0, sfreq / 2.0) / sfreq), lo, hi, sfreq, order)


def _gain_prewarped(w: np.ndarray, lo: float, hi: float, sfreq: float, order: int) -> np.ndarray:
    """:func:`butter_bandpass_gain` from the prewarped frequencies ``W`` (computed once for all bands)."""
    w_lo, w_hi = np.tan(np.pi * lo / sfreq), np.tan(np.pi * hi / sfreq)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = (w * w - w_lo * w_hi) / (w * (w_hi - w_lo))
        gain = 1.0 / (1.0 + x ** (2 * order))
    return np.nan_to_num(gain, nan=0.0)


def filter_bank(x: np.ndarray, sfreq: float, bands: Mapping[str, tuple[float, float]] = SPD_BANDS,
                order: int = 4, causal: bool = False) -> np.ndarray:
    """``(n_channels, n_times)`` -> ``(1 + len(bands), n_channels, n_times)`` float32: raw then band-passed.

    Zero-phase (default): the forward-backward Butterworth filter, computed in the frequency domain as
    one real FFT of the signal times ``|H(f)|^2`` per band (:func:`butter_bandpass_gain`; exactly what a
    forward-backward pass applies to a signal extended by zeros, and it differs from
    ``scipy.signal.sosfiltfilt`` only within the filter's decay time of a run's two ends, where
    sosfiltfilt pads by odd reflection). ``causal``: one forward ``sosfilt`` pass, the authors' ``lfilter``.
    """
    x = np.asarray(x, dtype=np.float64)
    out = torch.empty((1 + len(bands),) + x.shape, dtype=torch.float32)
    for k, sig in _band_signals(x, sfreq, bands, order, causal):
        out[k] = sig
    return out.numpy()


def _band_signals(x: np.ndarray, sfreq: float, bands: Mapping[str, tuple[float, float]], order: int,
                  causal: bool) -> Iterator[tuple[int, torch.Tensor]]:
    """:func:`filter_bank`'s channels one at a time, ``(k, (n_channels, n_times) float32)``: only one
    band-passed copy of the recording is alive at once (the whole bank of an 8 h recording is 1.6 GB)."""
    nyq = sfreq / 2.0
    for name, (lo, hi) in bands.items():
        if not 0 < lo < hi < nyq:
            raise ValueError(f"band {name!r} [{lo}, {hi}] Hz does not fit below Nyquist ({nyq:g} Hz)")
    yield 0, torch.from_numpy(x).float()
    n = x.shape[-1]
    if causal:
        for k, (lo, hi) in enumerate(bands.values(), start=1):
            sos = sps.butter(order, [lo / nyq, hi / nyq], btype="bandpass", output="sos")
            yield k, torch.from_numpy(sps.sosfilt(sos, x, axis=-1)).float()
        return
    pad = int(min(n, 20 * sfreq))  # room for the filters' decay at both ends (no wrap-around)
    nfft = sp_fft.next_fast_len(n + 2 * pad, real=True)
    spectrum = torch.fft.rfft(torch.from_numpy(x).float(), n=nfft, dim=-1)  # float32: covariances need no more
    prewarped = np.tan(np.pi * np.fft.rfftfreq(nfft, d=1.0 / sfreq) / sfreq)  # tan once, not per band
    for k, (lo, hi) in enumerate(bands.values(), start=1):
        gain = torch.from_numpy(_gain_prewarped(prewarped, lo, hi, sfreq, order)).float()  # fwd + bwd: |H|^2
        yield k, torch.fft.irfft(spectrum * gain, n=nfft, dim=-1)[..., :n]


def _runs(starts: np.ndarray, epoch_seconds: float) -> list[slice]:
    """Slices of consecutive epochs (start times ``epoch_seconds`` apart)."""
    if len(starts) == 0:
        return []
    breaks = np.flatnonzero(np.abs(np.diff(starts) - epoch_seconds) > 1e-3) + 1
    edges = np.concatenate([[0], breaks, [len(starts)]])
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def covariance_features(epochs: np.ndarray, starts: np.ndarray, sfreq: float, n_subwindows: int = 30,
                        bands: Mapping[str, tuple[float, float]] = SPD_BANDS, order: int = 4,
                        causal: bool = False, zscore: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 for one recording: covariances and PSD vectors of every subwindow.

    Args:
        epochs: ``(n_epochs, n, n_times)`` the recording's epochs in time order.
        starts: ``(n_epochs,)`` epoch starts in seconds. Epochs that follow each other without a gap
            are joined back into one continuous signal before filtering; the filters restart after
            a gap (an epoch dropped by the reader), so no filter state crosses it.
        sfreq: sampling rate in Hz.
        n_subwindows: ``S`` subwindows per epoch (``n_times`` must divide by it).
        zscore: standardise each electrode over the whole recording (all its epochs) first.

    Returns:
        ``cov`` ``(n_epochs, C, S, n, n)`` and ``psd`` ``(n_epochs, C, S, n)`` in float64 (filtered
        signals and sums in float32, centred per subwindow before the product), with
        ``C = 1 + len(bands)`` frequency channels.
    """
    x = np.asarray(epochs, dtype=np.float64)
    n_ep, n, t = x.shape
    if t % n_subwindows:
        raise ValueError(f"epochs of {t} samples do not split into {n_subwindows} equal subwindows")
    if zscore:
        mean = x.mean(axis=(0, 2), keepdims=True)
        std = x.std(axis=(0, 2), keepdims=True)
        x = (x - mean) / np.where(std > 0, std, 1.0)
    c = 1 + len(bands)
    w = t // n_subwindows
    cov = torch.empty((n_ep, c, n_subwindows, n, n), dtype=torch.float64)
    for run in _runs(np.asarray(starts, dtype=np.float64), t / sfreq):
        e = run.stop - run.start
        cont = x[run].transpose(1, 0, 2).reshape(n, -1)  # (n, e * t)
        for k, sig in _band_signals(cont, sfreq, bands, order, causal):  # (n, e * t) float32, one band at a time
            sub = sig.reshape(n, e, n_subwindows, w).permute(1, 2, 0, 3)  # (e, S, n, w)
            sub = sub - sub.mean(-1, keepdim=True)
            cov[run, k] = (sub @ sub.transpose(-1, -2)).double() / (w - 1)
    # mean over the one-sided periodogram bins (constant detrend, boxcar, density): by Parseval the
    # bins sum to sum((x - mean)^2) / sfreq, and there are w // 2 + 1 of them
    psd = torch.diagonal(cov, dim1=-2, dim2=-1) * ((w - 1) / (sfreq * (w // 2 + 1)))
    return cov.numpy(), psd.numpy()


# --------------------------------------------------------------------------- matrix functions


def spd_fn(mats: torch.Tensor, fn: str, floor: float | None = None) -> torch.Tensor:
    """``U f(diag) U^T`` of symmetric matrices (batched ``eigh``); eigenvalues floored at ``floor``."""
    vals, vecs = torch.linalg.eigh(mats)
    if floor is not None:
        vals = vals.clamp_min(floor)
    f = {"log": torch.log, "sqrt": torch.sqrt, "invsqrt": torch.rsqrt, "exp": torch.exp}[fn](vals)
    return (vecs * f.unsqueeze(-2)) @ vecs.transpose(-1, -2)


def logm(mats: torch.Tensor, floor: float | None = None) -> torch.Tensor:
    """Matrix logarithm of SPD matrices."""
    return spd_fn(mats, "log", floor)


def invsqrtm(mats: torch.Tensor) -> torch.Tensor:
    """``M^{-1/2}`` of SPD matrices."""
    return spd_fn(mats, "invsqrt")


def mean_riemann(mats: torch.Tensor, weights: torch.Tensor | None = None, tol: float = 1e-8,
                 maxiter: int = 50) -> torch.Tensor:
    """Affine-invariant (Karcher) mean over axis ``-3``, batched over leading axes.

    ``mats`` ``(..., N, n, n)`` -> ``(..., n, n)``. The gradient-descent flow with the adaptive step of
    pyriemann's ``mean_riemann`` (same initialisation, tolerance, iteration cap and step rule), run on
    every leading index at once; each batch element stops (and leaves the computation) once its own
    criterion is met.
    """
    lead = mats.shape[:-3]
    n_mat, n = mats.shape[-3], mats.shape[-1]
    flat = mats.reshape(-1, n_mat, n, n)
    if weights is None:
        weights = torch.ones(flat.shape[:2], dtype=mats.dtype, device=mats.device)
    w_all = weights.reshape(-1, n_mat)
    w_all = w_all / w_all.sum(-1, keepdim=True)
    mean = torch.einsum("bk,bkij->bij", w_all, flat)
    k = mean.shape[0]
    nu = torch.ones(k, dtype=mats.dtype)
    tau = torch.full((k,), torch.finfo(mats.dtype).max, dtype=mats.dtype)
    active = torch.arange(k)
    for _ in range(maxiter):
        if active.numel() == 0:
            break
        vals, vecs = torch.linalg.eigh(mean[active])
        c12 = (vecs * vals.sqrt().unsqueeze(-2)) @ vecs.transpose(-1, -2)
        cm12 = (vecs * vals.rsqrt().unsqueeze(-2)) @ vecs.transpose(-1, -2)
        every = active.numel() == k  # no gather copy of all the matrices while every mean is still moving
        inner = cm12.unsqueeze(1) @ (flat if every else flat[active]) @ cm12.unsqueeze(1)
        tangent = torch.einsum("bk,bkij->bij", w_all if every else w_all[active], logm(inner))
        mean[active] = c12 @ spd_fn(nu[active, None, None] * tangent, "exp") @ c12
        crit = torch.linalg.matrix_norm(tangent)
        h = nu[active] * crit
        shrink = h < tau[active]
        nu[active] = torch.where(shrink, 0.95 * nu[active], 0.5 * nu[active])
        tau[active] = torch.where(shrink, h, tau[active])
        active = active[~((crit <= tol) | (nu[active] <= tol))]
    return mean.reshape(*lead, n, n)


def augment(cov: torch.Tensor, psd: torch.Tensor, alpha: float) -> torch.Tensor:
    """SPD(n) -> SPD(n+1): ``[[C + a a^T, a], [a^T, 1]]`` with ``a = alpha * psd`` (Sec. 3.3)."""
    a = alpha * psd
    n = cov.shape[-1]
    out = torch.empty(cov.shape[:-2] + (n + 1, n + 1), dtype=cov.dtype, device=cov.device)
    out[..., :n, :n] = cov + a.unsqueeze(-1) * a.unsqueeze(-2)
    out[..., :n, n] = a
    out[..., n, :n] = a
    out[..., n, n] = 1.0
    return out


def _triu(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.triu_indices(n, n)  # row-major: (0,0), (0,1), ..., (0,n-1), (1,1), ...


def tokens_from_sym(mats: torch.Tensor, sqrt2: bool = True) -> torch.Tensor:
    """``(..., n, n)`` symmetric -> ``(..., d(n))`` row-major upper triangle (sqrt(2) off-diagonal)."""
    n = mats.shape[-1]
    r, c = _triu(n)
    tok = mats[..., r, c]
    if sqrt2:
        tok = tok * torch.where(r == c, 1.0, math.sqrt(2.0)).to(tok.dtype)
    return tok


def sym_from_tokens(tokens: torch.Tensor, sqrt2: bool = True) -> torch.Tensor:
    """Inverse of :func:`tokens_from_sym`: ``(..., d(m))`` -> ``(..., m, m)`` symmetric matrices."""
    d = tokens.shape[-1]
    m = int(round((math.sqrt(8 * d + 1) - 1) / 2))
    if token_dim(m) != d:
        raise ValueError(f"token width {d} is not a triangular number d(m) = m(m+1)/2")
    r, c = _triu(m)
    vals = tokens / torch.where(r == c, 1.0, math.sqrt(2.0)).to(tokens.dtype) if sqrt2 else tokens
    out = tokens.new_zeros(tokens.shape[:-1] + (m, m))
    out[..., r, c] = vals
    out[..., c, r] = vals
    return out


# --------------------------------------------------------------------------- stage 2


def whitening_reference(cov: torch.Tensor, psd: torch.Tensor, alpha: float,
                        reference: Reference = "augmented") -> torch.Tensor:
    """``G`` per frequency channel of one recording: ``cov`` ``(E, C, S, n, n)`` -> ``(C, n+1, n+1)``.

    ``augmented``: affine-invariant mean of the augmented matrices (paper). ``augmented_raw``:
    augmentation of (affine-invariant mean of ``cov``, arithmetic mean of ``psd``) (authors' code).
    """
    e, c, s, n, _ = cov.shape
    per_channel = cov.transpose(0, 1).reshape(c, e * s, n, n)
    psd_c = psd.transpose(0, 1).reshape(c, e * s, n)
    if reference == "augmented":
        return mean_riemann(augment(per_channel, psd_c, alpha))
    if reference == "augmented_raw":
        return augment(mean_riemann(per_channel), psd_c.mean(1), alpha)
    raise ValueError(f"whitening reference must be 'augmented' or 'augmented_raw', got {reference!r}")


def spd_tokens(cov: torch.Tensor, psd: torch.Tensor, alpha: float, beta: float, eps: float | None,
               reference_matrix: torch.Tensor, sqrt2: bool = True) -> torch.Tensor:
    """Stage 2: ``(E, C, S, n, n)``, ``(E, C, S, n)`` -> tokens ``(E, C, S, d(n+1))``.

    ``reference_matrix`` ``(C, n+1, n+1)`` is ``G``; ``W = beta G^{-1/2} A G^{-1/2}``, eigenvalues
    floored at ``eps`` (machine epsilon for ``None``), ``log``, upper triangle.
    """
    aug = augment(cov, psd, alpha)
    g = invsqrtm(reference_matrix)[None, :, None]  # (1, C, 1, n+1, n+1)
    white = beta * (g @ aug @ g)
    white = 0.5 * (white + white.transpose(-1, -2))  # exact symmetry for eigh
    floor = torch.finfo(white.dtype).eps if eps is None else float(eps)
    return tokens_from_sym(logm(white, floor), sqrt2)
