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

Options that reproduce the authors' code (``causal``, ``reference``, ``sqrt2``, ``eps``), the reading of the
token norm and the whitening scope (which data the reference touches) are in :func:`spd_tokens`.

Everything is batched over epochs, subwindows and channels (torch FFTs in overlap-save blocks and
float32 products for the filters and covariances, float64 matrix functions whose eigendecompositions go
through :mod:`biosig_lightning.accel.jacobi` when numba is installed, ``torch.linalg.eigh`` otherwise,
with the same results to round-off); recordings, signal blocks, bands and chunks of 1,024 matrices run on
``torch.get_num_threads()`` threads. Speed against the authors' code:
``benchmarks/performance/spdtransnet.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar, cast

import numpy as np
import torch
from scipy import signal as sps

__all__ = [
    "SPD_BANDS", "SPD_ELECTRODES", "Reference", "augment", "butter_bandpass_gain", "covariance_features",
    "filter_bank",
    "invsqrtm", "logm", "mean_riemann", "recording_tokens", "spd_fn", "spd_tokens", "sym_from_tokens",
    "token_dim",
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
ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)
T = TypeVar("T")


def token_dim(n: int) -> int:
    """``d(n) = n (n + 1) / 2``, the dimension of Sym(n) (Sec. 2)."""
    return n * (n + 1) // 2


# --------------------------------------------------------------------------- stage 1


def _in_threads(fn: Callable[[int], object], items: Iterable[int]) -> list:
    """``[fn(i) for i in items]`` on ``torch.get_num_threads()`` threads (torch's FFTs, matmuls and
    ``eigh`` release the GIL, and a batch of small ``eigh`` calls does not parallelise inside torch).

    While the pool runs, torch's own intra-op threads are set to one: each worker's products would
    otherwise open an OpenMP team of ``get_num_threads()`` threads, ``workers x threads`` threads
    spinning on as many cores as there are workers."""
    items = list(items)
    threads = torch.get_num_threads()
    workers = min(threads, len(items))
    if workers <= 1:
        return [fn(i) for i in items]
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def butter_bandpass_gain(freqs: np.ndarray, lo: float, hi: float, sfreq: float, order: int = 4) -> np.ndarray:
    """``|H(f)|^2`` of ``scipy.signal.butter(order, [lo, hi], 'bandpass', fs=sfreq)`` in closed form.

    The digital Butterworth band-pass is the bilinear transform of the analog prototype, so with
    prewarped ``W = tan(pi f / sfreq)``: ``|H|^2 = 1 / (1 + X^(2 order))``,
    ``X = (W^2 - W_lo W_hi) / (W (W_hi - W_lo))`` (checked against ``sosfreqz`` in the tests).
    """
    return _gain_prewarped(np.tan(np.pi * np.clip(freqs, 0.0, sfreq / 2.0) / sfreq), lo, hi, sfreq, order)


def _gain_prewarped(w: ArrayT, lo: float, hi: float, sfreq: float, order: int) -> ArrayT:
    """:func:`butter_bandpass_gain` from the prewarped frequencies ``W`` (computed once for all bands;
    a numpy array or a torch tensor, in its own dtype)."""
    w_lo, w_hi = math.tan(math.pi * lo / sfreq), math.tan(math.pi * hi / sfreq)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = (w * w - w_lo * w_hi) / (w * (w_hi - w_lo))
        gain = 1.0 / (1.0 + x ** (2 * order))  # W = 0 (DC): x = -inf, gain 0
    out = torch.nan_to_num(gain, nan=0.0) if isinstance(gain, torch.Tensor) else np.nan_to_num(gain, nan=0.0)
    return cast(ArrayT, out)  # the type of w


def filter_bank(x: np.ndarray, sfreq: float, bands: Mapping[str, tuple[float, float]] = SPD_BANDS,
                order: int = 4, causal: bool = False) -> np.ndarray:
    """``(n_channels, n_times)`` -> ``(1 + len(bands), n_channels, n_times)`` float32: raw then band-passed.

    Zero-phase (default): the forward-backward Butterworth filter, computed in the frequency domain as
    the signal's FFT times ``|H(f)|^2`` per band (:func:`butter_bandpass_gain`; overlap-save blocks, each
    output sample seeing 20 s of signal either side; what a
    forward-backward pass applies to a signal extended by zeros, and it differs from
    ``scipy.signal.sosfiltfilt`` only within the filter's decay time of a run's two ends, where
    sosfiltfilt pads by odd reflection). ``causal``: one forward ``sosfilt`` pass, the authors' ``lfilter``.
    """
    _check_bands(bands, sfreq)
    x = np.asarray(x, dtype=np.float64)
    out = torch.empty((1 + len(bands),) + x.shape, dtype=torch.float32)
    out[0] = torch.from_numpy(x)
    source = lambda lo, hi: torch.from_numpy(x[:, lo:hi])  # noqa: E731
    if causal:
        for k, edges in enumerate(bands.values(), start=1):
            for a, b, sig in _causal_blocks(source, x.shape[-1], sfreq, edges, order, 1 << 16):
                out[k, :, a:b] = sig
        return out.numpy()
    bank = _ZeroPhaseBank(source, x.shape[-1], sfreq, bands, order, align=1)
    for i in range(bank.n_blocks):
        for k, a, b, sig in bank.block(i):
            out[k, :, a:b] = sig
    return out.numpy()


def _check_bands(bands: Mapping[str, tuple[float, float]], sfreq: float) -> None:
    nyq = sfreq / 2.0
    for name, (lo, hi) in bands.items():
        if not 0 < lo < hi < nyq:
            raise ValueError(f"band {name!r} [{lo}, {hi}] Hz does not fit below Nyquist ({nyq:g} Hz)")


def _causal_blocks(
    source: Callable[[int, int], torch.Tensor],
    n_samples: int,
    sfreq: float,
    edges: tuple[float, float],
    order: int,
    block: int,
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """One band of a run through a single forward ``sosfilt`` pass (the authors' causal filter), block by
    block with the filter state carried across blocks: ``(a, b, signal)`` for samples ``[a, b)``, exactly
    the whole-run filter without the whole run in memory."""
    nyq = sfreq / 2.0
    sos = sps.butter(order, [edges[0] / nyq, edges[1] / nyq], btype="bandpass", output="sos")
    state = None
    for a in range(0, n_samples, block):
        b = min(a + block, n_samples)
        x = source(a, b).numpy()
        if state is None:
            state = np.zeros((sos.shape[0], x.shape[0], 2))
        y, state = sps.sosfilt(sos, x, axis=-1, zi=state)
        yield a, b, torch.from_numpy(y)


class _ZeroPhaseBank:
    """The zero-phase filter bank of one continuous run as overlap-save blocks.

    Block ``i`` covers output samples ``[i hop, (i + 1) hop)``; its FFT of ``nfft`` samples adds ``pad``
    samples (20 s; zeros beyond the run's ends) on each side, room for the forward-backward filter's
    decay, so every output sample sees the same +-20 s of signal as one FFT of the whole zero-padded run
    would give it. ``hop`` is a multiple of ``align`` (an epoch, so that a block holds whole epochs and
    its covariances are computed while its bands are still in cache: no band of the whole run is ever
    materialised, 1.6 GB for an 8 h recording). Blocks are independent (threads).

    ``source(lo, hi)`` returns the run's samples ``[lo, hi)`` as a float64 ``(n_channels, hi - lo)``
    tensor (z-scored by the caller).
    """

    def __init__(self, source: Callable[[int, int], torch.Tensor], n_samples: int, sfreq: float,
                 bands: Mapping[str, tuple[float, float]], order: int, align: int = 1) -> None:
        _check_bands(bands, sfreq)
        self.source, self.n = source, n_samples
        pad = int(min(n_samples, 20 * sfreq))
        nfft = max(1 << 15, 1 << (8 * pad - 1).bit_length(), 1 << (2 * pad + align - 1).bit_length())
        self.pad, self.nfft = pad, nfft
        self.hop = (nfft - 2 * pad) // align * align
        self.n_blocks = -(-n_samples // self.hop)
        # |H|^2 of every band on the block's bins, float32 like the spectrum (the gain's own error, 1e-7,
        # is below the signal's); tan once for all bands
        prewarped = torch.from_numpy(np.tan(np.pi * np.fft.rfftfreq(nfft, d=1.0 / sfreq) / sfreq)).float()
        self.gains = [_gain_prewarped(prewarped, lo, hi, sfreq, order) for lo, hi in bands.values()]

    def block(self, i: int) -> Iterator[tuple[int, int, int, torch.Tensor]]:
        """``(k, a, b, signal)`` for frequency channel ``k`` over output samples ``[a, b)``: ``k = 0`` the
        raw float64 samples, then each band (float32), computed one after the other from one FFT."""
        a = i * self.hop
        b = min(a + self.hop, self.n)
        start = a - self.pad  # the FFT window's first sample (negative: zeros before the run)
        lo, hi = max(start, 0), min(start + self.nfft, self.n)
        raw = self.source(lo, hi)
        yield 0, a, b, raw[:, a - lo: b - lo]
        seg = torch.zeros((raw.shape[0], self.nfft), dtype=torch.float32)
        seg[:, lo - start: hi - start] = raw
        spectrum = torch.fft.rfft(seg, dim=-1)
        for k, gain in enumerate(self.gains, start=1):
            yield k, a, b, torch.fft.irfft(spectrum * gain, n=self.nfft, dim=-1)[:,
                                                                                 self.pad: self.pad + b - a]


def _subwindow_covariances(sig: torch.Tensor, n_epochs: int, n_subwindows: int) -> torch.Tensor:
    """``(n, e * t)`` float32 or float64 -> ``(e, S, n, n)`` float64: the unbiased covariance of every
    subwindow.

    The Gram matrices come from one batched matmul over a strided view of the signal (no transposed
    copy); the mean correction ``- w mu mu^T`` is applied in float64.
    """
    n = sig.shape[0]
    k = n_epochs * n_subwindows
    w = sig.shape[1] // k
    if sig.stride(1) != 1:
        sig = sig.contiguous()
    # (e S, n, w) as a view: subwindow j of electrode i starts at i * row_stride + j * w (a band's rows
    # are slices of a longer FFT output, so row_stride need not be e * t)
    sub = sig.as_strided((k, n, w), (w, sig.stride(0), 1), sig.storage_offset())
    mu = sig.unflatten(1, (k, w)).mean(-1).transpose(0, 1).double()  # (e S, n); contiguous rows: fast
    gram = torch.bmm(sub, sub.transpose(1, 2)).double()
    cov = (gram - w * mu.unsqueeze(-1) * mu.unsqueeze(-2)) / (w - 1)
    return cov.reshape(n_epochs, n_subwindows, n, n)


def _runs(starts: np.ndarray, epoch_seconds: float) -> list[slice]:
    """Slices of consecutive epochs (start times ``epoch_seconds`` apart)."""
    if len(starts) == 0:
        return []
    breaks = np.flatnonzero(np.abs(np.diff(starts) - epoch_seconds) > 1e-3) + 1
    edges = np.concatenate([[0], breaks, [len(starts)]])
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _electrode_stats(x: np.ndarray, chunk: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) standard deviation of each electrode of ``(E, n, t)`` epochs over the whole
    recording: float64 statistics of chunks of epochs (in threads) merged by Chan et al.'s pairwise
    update, without a copy of the recording."""

    def part(i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        block = torch.from_numpy(np.ascontiguousarray(x[i: i + chunk])).double()
        var, mean = torch.var_mean(block, dim=(0, 2), correction=0)
        return var, mean, block.shape[0] * block.shape[2]

    parts = _in_threads(part, range(0, x.shape[0], chunk))
    if not parts:  # no epochs: nothing to standardise
        return torch.zeros(x.shape[1], dtype=torch.float64), torch.ones(x.shape[1], dtype=torch.float64)
    m2, mean, count = parts[0][0] * parts[0][2], parts[0][1], parts[0][2]
    for var_c, mean_c, n_c in parts[1:]:
        delta = mean_c - mean
        total = count + n_c
        mean = mean + delta * (n_c / total)
        m2 = m2 + var_c * n_c + delta * delta * (count * n_c / total)
        count = total
    std = (m2 / count).sqrt()
    return mean, torch.where(std > 0, std, 1.0)


def covariance_features(epochs: np.ndarray, starts: np.ndarray, sfreq: float, n_subwindows: int = 30,
                        bands: Mapping[str, tuple[float, float]] = SPD_BANDS, order: int = 4,
                        causal: bool = False, zscore: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 for one recording: covariances and PSD vectors of every subwindow.

    Args:
        epochs: ``(n_epochs, n, n_times)`` the recording's epochs in time order (float32 or float64;
            not copied as a whole).
        starts: ``(n_epochs,)`` epoch starts in seconds. Epochs that follow each other without a gap
            are joined back into one continuous signal before filtering; the filters restart after
            a gap (an epoch dropped by the reader), so no filter state crosses it.
        sfreq: sampling rate in Hz.
        n_subwindows: ``S`` subwindows per epoch (``n_times`` must divide by it).
        zscore: standardise each electrode over the whole recording (all its epochs) first.

    Returns:
        ``cov`` ``(n_epochs, C, S, n, n)`` and ``psd`` ``(n_epochs, C, S, n)`` in float64 (band-passed
        signals and their products in float32, the subwindow-mean correction in float64), with
        ``C = 1 + len(bands)`` frequency channels.

    The zero-phase bank runs block by block (:class:`_ZeroPhaseBank`, blocks of whole epochs in
    threads): each block is gathered from the epochs, z-scored, filtered, and reduced to its
    covariances while it is in cache, so the recording is never copied or filtered as a whole.
    """
    x = np.asarray(epochs)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    n_ep, n, t = x.shape
    if t % n_subwindows:
        raise ValueError(f"epochs of {t} samples do not split into {n_subwindows} equal subwindows")
    _check_bands(bands, sfreq)
    mean, std = _electrode_stats(x) if zscore else (torch.zeros(n, dtype=torch.float64),
                                                    torch.ones(n, dtype=torch.float64))
    mean, std = mean[:, None], std[:, None]
    c = 1 + len(bands)
    w = t // n_subwindows
    cov = torch.empty((n_ep, c, n_subwindows, n, n), dtype=torch.float64)
    for run in _runs(np.asarray(starts, dtype=np.float64), t / sfreq):
        epochs_run = x[run]

        def source(lo: int, hi: int, epochs_run: np.ndarray = epochs_run) -> torch.Tensor:
            """Samples ``[lo, hi)`` of the run, z-scored, float64 ``(n, hi - lo)``."""
            e0, e1 = lo // t, -(-hi // t)
            slab = (
                torch.from_numpy(epochs_run[e0:e1])
                .transpose(0, 1)
                .reshape(n, -1)[:, lo - e0 * t : hi - e0 * t]
            )
            return (slab.double() - mean) / std

        e = run.stop - run.start
        if causal:
            step = max(1, (1 << 16) // t) * t  # whole epochs per block

            def fill(k: int, first: int = run.start, e: int = e,
                     source: Callable = source, step: int = step) -> None:
                blocks: Iterator[tuple[int, int, torch.Tensor]]
                if k == 0:
                    blocks = ((a, min(a + step, e * t),
                               source(a, min(a + step, e * t))) for a in range(0, e * t, step))
                else:
                    blocks = _causal_blocks(source, e * t, sfreq, list(bands.values())[k - 1], order, step)
                for a, b, sig in blocks:
                    cov[first + a // t: first + b // t, k] = _subwindow_covariances(
                        sig if k == 0 else sig.float(), (b - a) // t, n_subwindows)

            _in_threads(fill, range(c))
            continue
        bank = _ZeroPhaseBank(source, e * t, sfreq, bands, order, align=t)

        def fill_block(i: int, first: int = run.start, bank: _ZeroPhaseBank = bank) -> None:
            for k, a, b, sig in bank.block(i):
                cov[first + a // t: first + b // t, k] = _subwindow_covariances(sig,
                                                                                (b - a) // t, n_subwindows)

        _in_threads(fill_block, range(bank.n_blocks))
    # mean over the one-sided periodogram bins (constant detrend, boxcar, density): by Parseval the
    # bins sum to sum((x - mean)^2) / sfreq, and there are w // 2 + 1 of them
    psd = torch.diagonal(cov, dim1=-2, dim2=-1) * ((w - 1) / (sfreq * (w // 2 + 1)))
    return cov.numpy(), psd.numpy()


# --------------------------------------------------------------------------- matrix functions


def spd_fn(mats: torch.Tensor, fn: str, floor: float | None = None) -> torch.Tensor:
    """``U f(diag) U^T`` of symmetric matrices (batched ``eigh``); eigenvalues floored at ``floor``."""
    from biosig_lightning.accel import jacobi  # numba, where there, is imported on first use

    vals, vecs = jacobi.eigh(mats)
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


def _sqrt_pair(mats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(M^{1/2}, M^{-1/2})`` from one ``eigh``."""
    vals, vecs = torch.linalg.eigh(mats)
    return ((vecs * vals.sqrt().unsqueeze(-2)) @ vecs.transpose(-1, -2),
            (vecs * vals.rsqrt().unsqueeze(-2)) @ vecs.transpose(-1, -2))


#: matrices per chunk of a pass: a chunk's temporaries (10 or so of 81 doubles per matrix) stay in cache
#: and in the allocator's reused memory; whole-batch temporaries of 28,800 matrices cost more in page
#: faults than in arithmetic
_CHUNK = 1024


def _log_divided_differences(d: torch.Tensor) -> torch.Tensor:
    """``(..., n)`` positive -> ``(..., n, n)``: the divided differences ``log[d_j, d_k]`` (``1 / d_j`` on the
    diagonal): ``(log d_j - log d_k) / (d_j - d_k)``, and for close values (``|x| < 1e-3``,
    ``x = (d_j - d_k) / (d_j + d_k)``) its series ``2 / (d_j + d_k) (1 + x^2 / 3 + x^4 / 5)``, free of the
    difference quotient's cancellation."""
    a, b = d.unsqueeze(-1), d.unsqueeze(-2)
    total, diff = a + b, a - b
    x2 = (diff / total).square_()
    series = (x2 / 5.0).add_(1.0 / 3.0).mul_(x2).add_(1.0).mul_(2.0 / total)
    log_d = d.log()
    quotient = (log_d.unsqueeze(-1) - log_d.unsqueeze(-2)).div_(diff)
    return torch.where(x2 < 1e-6, series, quotient)


def _logs_in_basis(inner: torch.Tensor, basis: torch.Tensor, mats: torch.Tensor, cm12: torch.Tensor,
                   use_basis: bool, scale: float = 1.0, floor: float | None = None, accuracy: float = 0.0,
                   warm: bool = False) -> tuple[torch.Tensor, int]:
    """``log(scale W_k)`` of SPD matrices ``W_k`` as ``V_k L_k V_k^T``: returns ``(L, n_eigh)``.

    ``basis`` holds orthonormal ``V_k`` that nearly diagonalise the ``W_k`` (the eigenvectors of nearby
    matrices, e.g. the same matrices whitened by the previous Karcher iterate) and ``inner`` the
    matrices in that basis, ``B = V^T W V = D + E`` (``E`` off-diagonal). Where the scale-free
    off-diagonal part is small, ``eta^2 <= accuracy`` with ``eta = ||D^{-1/2} E D^{-1/2}||_F``, the
    first-order Daleckii-Krein expansion ``log B = log D + log[D] o E`` (divided differences of ``log``
    on ``diag D``, Hadamard product) is used; its error is second order, at most ``0.5 eta^2`` for
    ``eta^2 <= 1e-2`` (measured on 9 x 9 matrices, tests). The other matrices (all of them when
    ``use_basis`` is false) get a full ``eigh`` of their whitened matrices ``W = M^{-1/2} X M^{-1/2}``
    (``mats`` the ``X``, ``cm12`` the ``M^{-1/2}``; :func:`~biosig_lightning.accel.jacobi.eigh_congruent`),
    with ``warm`` started from their eigenbases in ``basis`` (from a nearby ``M``: Jacobi starts close to
    diagonal). Their eigenvectors replace their basis in ``basis`` and their diagonal ``B`` their rows of
    ``inner`` (in place); without ``use_basis`` or ``warm``, ``inner`` and ``basis`` are only outputs.
    ``floor``: eigenvalues of ``scale W`` floored there; a matrix whose floor
    might be active (``scale min(D) (1 - eta) <= floor``: the eigenvalues of ``B`` are at least
    ``min(D) (1 - eta)``) always gets its ``eigh``.

    (A second-order expansion, ``- (P E - E P)_jk / (d_k - d_j)`` with ``P = log[D] o E``, error at most
    ``0.2 eta^3``, widens the radius in which ``eigh`` can be skipped from ``accuracy^(1/2)`` to
    ``accuracy^(1/3)``, but in torch's small-tensor operations it cost more than the ``eigh`` it saved
    for a recording's tokens; see docs/performance.md), so it was tried and dropped.
    """
    redo: torch.Tensor | slice = slice(None)
    logs = None
    if use_basis and accuracy > 0.0:
        d = torch.diagonal(inner, dim1=-2, dim2=-1)
        root = d.clamp_min(torch.finfo(d.dtype).tiny).sqrt_()
        eta2 = (
            (inner / (root.unsqueeze(-1) * root.unsqueeze(-2))).square_().sum((-2, -1)).sub_(inner.shape[-1])
        )
        ok = (eta2 <= accuracy) & (d.amin(-1) > 0)
        if floor is not None:
            ok &= scale * d.amin(-1) * (1.0 - eta2.clamp_min(0.0).sqrt()) > floor
        logs = _log_divided_differences(d).mul_(inner)  # the diagonal: d / d = 1 ...
        logs.diagonal(dim1=-2, dim2=-1).copy_((scale * d).log_())  # ... replaced by log(scale d)
        redo = torch.nonzero(~ok).squeeze(-1)
        if not len(redo):
            return logs, 0
    from biosig_lightning.accel import jacobi

    vals, vecs = jacobi.eigh_congruent(mats[redo], cm12, basis[redo] if warm else None)
    diag = torch.diag_embed(vals)
    scaled = scale * vals
    diag_logs = torch.diag_embed((scaled if floor is None else scaled.clamp_min(floor)).log_())
    if logs is None:
        inner.copy_(diag)
        basis.copy_(vecs)
        return diag_logs, vals.shape[0]  # diagonal
    logs[redo], inner[redo], basis[redo] = diag_logs, diag, vecs
    return logs, vals.shape[0]  # len(redo)


def _whitened_log(mats: torch.Tensor, weights: torch.Tensor, cm12: torch.Tensor, inner: torch.Tensor,
                  basis: torch.Tensor, use_basis: bool,
                  accuracy: float, warm: bool = False) -> tuple[torch.Tensor, int]:
    """One pass over all matrices: ``J = sum_k w_k log(M^{-1/2} X_k M^{-1/2})`` and the number of ``eigh``
    calls. ``inner`` and ``basis`` (:func:`_logs_in_basis`) are updated in place; ``basis`` is read with
    ``use_basis`` or ``warm`` (it then holds eigenvectors from an earlier pass), ``inner`` is recomputed
    from it with ``use_basis``. Chunks of :data:`_CHUNK` matrices, on ``torch.get_num_threads()`` threads."""
    n_mat, n = mats.shape[0], mats.shape[-1]

    def chunk(i0: int) -> tuple[torch.Tensor, int]:
        sl = slice(i0, min(i0 + _CHUNK, n_mat))
        if use_basis:
            q = cm12 @ basis[sl]
            inner[sl] = q.transpose(-1, -2) @ mats[sl] @ q
        logs, n_eigh = _logs_in_basis(inner[sl], basis[sl], mats[sl], cm12, use_basis,
                                      accuracy=accuracy, warm=warm)
        # sum_k w_k V_k L_k V_k^T as one (n, K n) x (K n, n) product, no K dense logs
        if use_basis:
            left = (basis[sl] @ logs).mul_(weights[sl, None, None])
        else:  # L diagonal
            left = basis[sl] * (torch.diagonal(logs, dim1=-2, dim2=-1) * weights[sl, None]).unsqueeze(-2)
        return left.permute(1, 0, 2).reshape(n, -1) @ basis[sl].permute(1, 0, 2).reshape(n, -1).T, n_eigh

    out = _in_threads(chunk, range(0, n_mat, _CHUNK))
    return torch.stack([o[0] for o in out]).sum(0), sum(o[1] for o in out)


def _karcher(mats: torch.Tensor, weights: torch.Tensor, tol: float, maxiter: int, keep_eig: bool,
             memory: int = 5, stats: dict[str, int] | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Affine-invariant mean of ``(N, n, n)`` SPD matrices; with ``keep_eig`` also, for the matrices whitened
    by it, bases ``V`` that (nearly) diagonalise them and the matrices in those bases ``B = V^T W V`` (what
    the tokens need: :func:`_logs_in_basis` then takes their logarithms without a further ``eigh``).

    The fixed point is pyriemann's (``mean_riemann``): ``M`` with gradient
    ``J = sum_k w_k log(M^{-1/2} X_k M^{-1/2})`` of Frobenius norm ``<= tol``, from the same start (the
    arithmetic mean). The iteration is the same unit-step flow ``M <- M^{1/2} exp(J) M^{1/2}``, with
    Anderson acceleration (depth ``memory``) in the log-coordinates ``S`` of ``M = G0^{1/2} exp(S) G0^{1/2}``
    around the start ``G0``: on EEG subwindow covariances (28,800 per channel and recording) it reaches
    ``tol = 1e-8`` in 5-8 passes over the matrices where the plain flow takes 10-11. A step that raises
    ``||J||`` restarts the acceleration and halves the step (pyriemann's safeguard).

    Each pass needs ``log`` of every whitened matrix. Early passes diagonalise all of them (a batched
    ``eigh``, the whole cost of a pass; from the second pass on, in each matrix's eigenbasis from the
    pass before, where Jacobi starts close to diagonal, when numba's kernel is in use). Once the iterate moves
    by less than ``sqrt(tol / 10)``, a pass
    expresses each matrix in its last eigenbasis and uses the first-order expansion of ``log`` wherever
    its error bound (``eta^2``, :func:`_logs_in_basis`) is below ``tol / 10``, so ``J`` is still computed
    to a tenth of the tolerance (a pass of expansions costs half a pass of ``eigh``); only the matrices
    that moved more get a new ``eigh`` (near the fixed point, few or none). Each pass's chunks run in threads
    (:func:`_whitened_log`; callers with several
    independent means run those in threads instead, :func:`_over_means`). ``stats``, if given,
    counts ``passes`` and ``eigh`` (matrices diagonalised).
    """
    n = mats.shape[-1]
    w = weights / weights.sum()
    mean = torch.einsum("k,kij->ij", w, mats)
    r0, r0i = _sqrt_pair(mean)
    coords = torch.zeros_like(mean)
    g_hist: list[torch.Tensor] = []
    f_hist: list[torch.Tensor] = []
    nu, last = 1.0, math.inf
    inner, basis = torch.empty_like(mats), torch.empty_like(mats)
    evaluated = mean
    stats = {} if stats is None else stats
    passes = 0
    for _ in range(maxiter):
        c12, cm12 = _sqrt_pair(mean)
        # the expansion pays only once the iterate moves by less than its validity radius
        # (sqrt(accuracy), shrunk further by the matrices' conditioning); before that every matrix fails it
        near = last <= math.sqrt(0.1 * tol)
        # from the second pass on, each matrix's last eigenbasis starts its Jacobi sweeps
        # (jacobi.eigh_congruent)
        tangent, n_eigh = _whitened_log(mats, w, cm12, inner, basis, near, 0.1 * tol, warm=passes > 0)
        passes += 1
        stats["passes"] = stats.get("passes", 0) + 1
        stats["eigh"] = stats.get("eigh", 0) + n_eigh
        evaluated = mean  # the mean that inner, basis belong to (also when maxiter ends the loop)
        crit = float(torch.linalg.matrix_norm(tangent))
        if crit <= tol or nu <= tol:
            break
        if crit > last:  # the accelerated step overshot: plain, shorter steps from here
            g_hist, f_hist, nu = [], [], 0.5 * nu
        last = crit
        step = c12 @ spd_fn(nu * tangent, "exp") @ c12
        g = spd_fn(r0i @ step @ r0i, "log").reshape(-1)  # the plain step, in coordinates
        g_hist.append(g)
        f_hist.append(g - coords.reshape(-1))
        if len(f_hist) > 1:
            d_f = torch.stack([b - a for a, b in zip(f_hist[:-1], f_hist[1:], strict=True)], -1)
            d_g = torch.stack([b - a for a, b in zip(g_hist[:-1], g_hist[1:], strict=True)], -1)
            gamma = torch.linalg.lstsq(d_f, f_hist[-1].unsqueeze(-1)).solution
            g = g - (d_g @ gamma).squeeze(-1)
        g_hist, f_hist = g_hist[-memory:], f_hist[-memory:]
        coords = g.reshape(n, n)
        coords = 0.5 * (coords + coords.transpose(0, 1))
        mean = r0 @ spd_fn(coords, "exp") @ r0
    if not keep_eig:
        return evaluated, None, None
    return evaluated, inner, basis


def mean_riemann(mats: torch.Tensor, weights: torch.Tensor | None = None, tol: float = 1e-8,
                 maxiter: int = 50) -> torch.Tensor:
    """Affine-invariant (Karcher) mean over axis ``-3``, batched over leading axes.

    ``mats`` ``(..., N, n, n)`` -> ``(..., n, n)``: pyriemann's ``mean_riemann`` (same start, fixed
    point, tolerance and iteration cap), reached in fewer passes (:func:`_karcher`).
    """
    lead = mats.shape[:-3]
    n_mat, n = mats.shape[-3], mats.shape[-1]
    flat = mats.reshape(-1, n_mat, n, n)
    w_all = (torch.ones(flat.shape[:2], dtype=mats.dtype) if weights is None else weights).reshape(-1, n_mat)
    means = _over_means(lambda i: _karcher(flat[i], w_all[i], tol, maxiter, keep_eig=False)[0], flat.shape[0])
    return torch.stack(means).reshape(*lead, n, n)


def _over_means(fn: Callable[[int], T], k: int) -> list[T]:
    """``[fn(i) for i in range(k)]`` for ``k`` independent means: in threads when there are at least as
    many means as threads (independent means parallelise better: no joins), else one after the other
    with each Karcher pass's chunks in threads."""
    if k >= torch.get_num_threads():
        return _in_threads(fn, range(k))
    return [fn(i) for i in range(k)]


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


def _triu(n: int) -> torch.Tensor:
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
                        reference: Reference = "augmented", tol: float = 1e-8) -> torch.Tensor:
    """``G`` per frequency channel of one recording: ``cov`` ``(E, C, S, n, n)`` -> ``(C, n+1, n+1)``.

    ``augmented``: affine-invariant mean of the augmented matrices (paper). ``augmented_raw``:
    augmentation of (affine-invariant mean of ``cov``, arithmetic mean of ``psd``) (authors' code).
    ``tol``: the Karcher flow's gradient-norm tolerance (pyriemann's default).
    """
    e, c, s, n, _ = cov.shape
    per_channel = cov.transpose(0, 1).reshape(c, e * s, n, n)
    psd_c = psd.transpose(0, 1).reshape(c, e * s, n)
    if reference == "augmented":
        return mean_riemann(augment(per_channel, psd_c, alpha), tol=tol)
    if reference == "augmented_raw":
        return augment(mean_riemann(per_channel, tol=tol), psd_c.mean(1), alpha)
    raise ValueError(f"whitening reference must be 'augmented' or 'augmented_raw', got {reference!r}")


def recording_tokens(cov: torch.Tensor, psd: torch.Tensor, alpha: float, beta: float, eps: float | None,
                     reference: Reference = "augmented", sqrt2: bool = True, tol: float = 1e-8,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2 of one recording whitened by its own reference: ``(tokens (E, C, S, d(n+1)), G (C, n+1,
    n+1))``.

    The same tokens as ``spd_tokens(..., whitening_reference(...))`` (to ``tol / 10``, far below their
    float32 storage). With the paper's reference (``augmented``) the Karcher flow's last pass has already
    whitened every ``A`` by ``G`` and holds a basis that (nearly) diagonalises it, and ``beta`` is a
    scalar, so ``log(beta W)`` comes from :func:`_logs_in_basis` without an ``eigh`` of its own (a
    quarter of the stage's time otherwise); only matrices whose eigenvalue floor may be active get one.
    """
    if reference != "augmented":
        ref = whitening_reference(cov, psd, alpha, reference, tol)
        return spd_tokens(cov, psd, alpha, beta, eps, ref, sqrt2), ref
    e, c, s, n, _ = cov.shape
    floor = torch.finfo(cov.dtype).eps if eps is None else float(eps)
    ones = torch.ones(e * s, dtype=cov.dtype)

    def channel(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        aug = augment(cov[:, i].reshape(e * s, n, n), psd[:, i].reshape(e * s, n), alpha)
        g, inner, basis = _karcher(aug, ones, tol, 50, keep_eig=True)
        assert inner is not None and basis is not None  # keep_eig=True returns them
        gm12 = invsqrtm(g)
        chan = torch.empty((e * s, token_dim(n + 1)), dtype=aug.dtype)
        for i0 in range(0, e * s, _CHUNK):
            sl = slice(i0, min(i0 + _CHUNK, e * s))
            logs, _ = _logs_in_basis(inner[sl], basis[sl], aug[sl], gm12, True, beta,
                                     floor, 0.1 * tol, warm=True)
            chan[sl] = tokens_from_sym(basis[sl] @ logs @ basis[sl].transpose(-1, -2), sqrt2)
        return g, chan.reshape(e, s, -1)

    refs, tokens = zip(*_over_means(channel, c), strict=True)
    return torch.stack(tokens, dim=1), torch.stack(refs)


def spd_tokens(cov: torch.Tensor, psd: torch.Tensor, alpha: float, beta: float, eps: float | None,
               reference_matrix: torch.Tensor, sqrt2: bool = True) -> torch.Tensor:
    """Stage 2: ``(E, C, S, n, n)``, ``(E, C, S, n)`` -> tokens ``(E, C, S, d(n+1))``.

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

    ``reference_matrix`` ``(C, n+1, n+1)`` is ``G``; ``W = beta G^{-1/2} A G^{-1/2}``, eigenvalues
    floored at ``eps`` (machine epsilon for ``None``), ``log``, upper triangle.
    """
    aug = augment(cov, psd, alpha)
    g = invsqrtm(reference_matrix)[None, :, None]  # (1, C, 1, n+1, n+1)
    white = beta * (g @ aug @ g)
    white = 0.5 * (white + white.transpose(-1, -2))  # exact symmetry for eigh
    floor = torch.finfo(white.dtype).eps if eps is None else float(eps)
    return tokens_from_sym(logm(white, floor), sqrt2)
