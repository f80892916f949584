"""Short-time band-power features: the spectral front end shared by several models.

What it computes. A window ``x`` of shape ``(..., n_times)`` is cut into ``n_frames``
Hann-tapered frames of ``win`` samples, each frame's periodogram is taken with a real
FFT, and the power spectral density is averaged inside each frequency band. The result
is a band-power *trajectory* ``(..., n_bands, n_frames)``: how much delta, theta, alpha,
beta and gamma power the channel carries at each moment of the window. SD-Former's
spectral tokenizer (SD-Former, Sec. 4: "short-time frequency representations ...
summarized into five physiologically motivated bands") is built on it, and the static
GNN baseline or an analysis script can use the time-averaged version
(:func:`band_power`).

Conventions (our choices, stated once here):

* Bands are the usual clinical EEG bands, delta [0.5, 4), theta [4, 8), alpha [8, 13),
  beta [13, 30) and gamma [30, 100] Hz (:data:`EEG_BANDS`). Each band is half-open
  except the last, which includes its upper edge; the gamma band is capped at the
  Nyquist frequency, so at 100 Hz sampling it is [30, 50] Hz. A band with no FFT bin
  (window too short for its resolution, or lying above Nyquist) is an error naming the
  band, never a silent zero.
* Frames are evenly spaced, ``starts = round(linspace(0, n_times - win, n_frames))``,
  so the frame count is the same for any window length and the first and last frames
  touch the window's edges. Frames may overlap heavily for short windows (CHB-MIT's 2 s
  windows with 1 s frames); that only smooths the trajectory.
* Each frame is demeaned before tapering, so the DC offset does not leak into the
  delta band through the taper's side lobes.
* Power is a one-sided periodogram density, ``2 |X_k|^2 / (sfreq * sum(w^2))`` (the DC
  and Nyquist bins are not doubled), in squared input units per Hz; a band's value is
  the mean density over its bins, so bands of different width are comparable.
* ``log=True`` returns ``log(power + eps)``. ``eps = 1e-20`` is far below the PSD of any
  real recording in volts (~1e-12 V^2/Hz for EEG), in microvolts or standardised units,
  so it only guards flat (all-zero) channels against ``log(0)``.
* Everything runs in float32 with autocast disabled: bfloat16 FFTs and logs would lose
  the dynamic range the features exist to expose.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

__all__ = [
    "EEG_BANDS",
    "ShortTimeBandPower",
    "band_averaging_matrix",
    "band_power",
    "frame_starts",
    "log_fft_steps",
    "resolve_bands",
]

Band = tuple[str, float, float]

EEG_BANDS: tuple[Band, ...] = (
    ("delta", 0.5, 4.0),
    ("theta", 4.0, 8.0),
    ("alpha", 8.0, 13.0),
    ("beta", 13.0, 30.0),
    ("gamma", 30.0, 100.0),
)


def resolve_bands(sfreq: float, bands: Sequence[Band] = EEG_BANDS) -> tuple[Band, ...]:
    """Return ``bands`` with every upper edge capped at the Nyquist frequency ``sfreq / 2``.

    Raises:
        ValueError: when ``sfreq`` is not positive, a band is malformed (``low >= high``)
            or a band starts at or above Nyquist (it would hold no frequency at all).
    """
    if not sfreq > 0:
        raise ValueError(f"sfreq must be positive, got {sfreq}")
    nyquist = sfreq / 2.0
    resolved = []
    for name, low, high in bands:
        if not low < high:
            raise ValueError(f"band {name!r} must have low < high, got [{low}, {high}]")
        if low >= nyquist:
            raise ValueError(
                f"band {name!r} starts at {low} Hz, at or above the Nyquist frequency {nyquist} Hz "
                f"of sfreq={sfreq}"
            )
        resolved.append((name, float(low), float(min(high, nyquist))))
    return tuple(resolved)


def band_averaging_matrix(win: int, sfreq: float, bands: Sequence[Band]) -> torch.Tensor:
    """Matrix ``(win // 2 + 1, n_bands)`` that averages rFFT bins of a ``win``-sample frame per band.

    Column ``b`` holds ``1 / n_b`` on the ``n_b`` bins with ``low <= f < high`` (``<= high``
    for the last band) and zero elsewhere, so ``psd @ M`` is the mean density per band.
    ``bands`` should already be capped at Nyquist (:func:`resolve_bands`).

    Raises:
        ValueError: naming the band when it contains no FFT bin at this resolution.
    """
    freqs = torch.fft.rfftfreq(win, d=1.0 / sfreq, dtype=torch.float64)
    matrix = torch.zeros(freqs.numel(), len(bands), dtype=torch.float64)
    for b, (name, low, high) in enumerate(bands):
        upper = freqs <= high if b == len(bands) - 1 else freqs < high
        members = (freqs >= low) & upper
        n_bins = int(members.sum())
        if n_bins == 0:
            raise ValueError(
                f"band {name!r} [{low}, {high}] Hz holds no FFT bin with {win}-sample frames at "
                f"{sfreq} Hz (resolution {sfreq / win:.3g} Hz); use longer frames"
            )
        matrix[members, b] = 1.0 / n_bins
    return matrix.to(torch.float32)


def frame_starts(n_times: int, win: int, n_frames: int) -> torch.Tensor:
    """Start indices of ``n_frames`` evenly spaced ``win``-sample frames covering ``n_times``."""
    if win > n_times:
        raise ValueError(f"frame length {win} exceeds the window length {n_times} samples")
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    return torch.linspace(0, n_times - win, n_frames, dtype=torch.float64).round().long()


class ShortTimeBandPower(nn.Module):
    """Band-power trajectories ``(..., n_bands, n_frames)`` of windows ``(..., n_times)``.

    Args:
        sfreq: sampling rate in Hz.
        n_times: samples per window (fixes the frame positions).
        win_seconds: frame length in seconds (rounded to whole samples); sets the
            frequency resolution ``1 / win_seconds`` Hz.
        n_frames: frames per window (evenly spaced, see the module docstring).
        bands: ``(name, low_hz, high_hz)`` triples; the last band is capped at Nyquist.
        log: return ``log(power + eps)`` instead of power.
        eps: floor inside the logarithm.

    All constants (frame indices, taper, band matrix) are non-persistent buffers, so the
    module has no parameters and never enters checkpoints.
    """

    index: torch.Tensor
    taper: torch.Tensor
    band_matrix: torch.Tensor


    def __init__(
        self,
        *,
        sfreq: float,
        n_times: int,
        win_seconds: float = 1.0,
        n_frames: int = 64,
        bands: Sequence[Band] = EEG_BANDS,
        log: bool = True,
        eps: float = 1e-20,
    ) -> None:
        super().__init__()
        self.bands = resolve_bands(sfreq, bands)
        self.win = int(round(win_seconds * sfreq))
        if self.win < 2:
            raise ValueError(f"win_seconds={win_seconds} gives a frame of {self.win} samples at {sfreq} Hz")
        self.sfreq = float(sfreq)
        self.n_times = n_times
        self.n_frames = n_frames
        self.log = log
        self.eps = eps
        starts = frame_starts(n_times, self.win, n_frames)
        self.register_buffer("index", starts[:, None] + torch.arange(self.win), persistent=False)
        taper = torch.hann_window(self.win, periodic=True, dtype=torch.float64)
        self.register_buffer("taper", taper.to(torch.float32), persistent=False)
        # One-sided density scale; DC and (even-length) Nyquist bins are their own mirror.
        scale = torch.full((self.win // 2 + 1,), 2.0, dtype=torch.float64)
        scale[0] = 1.0
        if self.win % 2 == 0:
            scale[-1] = 1.0
        scale = scale / (self.sfreq * float((taper**2).sum()))
        matrix = band_averaging_matrix(self.win, self.sfreq, self.bands)
        self.register_buffer("band_matrix", (scale[:, None].float() * matrix), persistent=False)

    @property
    def n_bands(self) -> int:
        return len(self.bands)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.n_times:
            raise ValueError(
                f"ShortTimeBandPower built for {self.n_times} samples, got input of shape {tuple(x.shape)}"
            )
        with torch.autocast(device_type=x.device.type, enabled=False):
            frames = x.float()[..., self.index]  # (..., n_frames, win)
            frames = (frames - frames.mean(dim=-1, keepdim=True)) * self.taper
            spectrum = torch.fft.rfft(frames, dim=-1)
            density = spectrum.real.square() + spectrum.imag.square()
            power = density @ self.band_matrix  # (..., n_frames, n_bands)
            if self.log:
                power = torch.log(power + self.eps)
        return power.transpose(-1, -2)


def band_power(
    x: torch.Tensor,
    sfreq: float,
    *,
    win_seconds: float = 1.0,
    n_frames: int = 8,
    bands: Sequence[Band] = EEG_BANDS,
    log: bool = True,
    eps: float = 1e-20,
) -> torch.Tensor:
    """Time-averaged band power ``(..., n_bands)`` of ``x`` ``(..., n_times)`` (a Welch-style estimate).

    The power (not its logarithm) is averaged over ``n_frames`` short-time frames, then the
    logarithm is taken when ``log`` is true.
    """
    extractor = ShortTimeBandPower(
        sfreq=sfreq, n_times=x.shape[-1], win_seconds=win_seconds, n_frames=n_frames, bands=bands, log=False
    ).to(x.device)
    power = extractor(x).mean(dim=-1)
    return torch.log(power + eps) if log else power


def log_fft_steps(x: np.ndarray, step: int) -> np.ndarray:
    """Log FFT amplitudes of consecutive ``step``-sample steps, laid out step-major.

    The DCRNN reference's clip features (Tang et al. 2022, ``computeFFT``): the window
    ``x`` ``(..., n_times)`` is cut into ``n_times // step`` non-overlapping steps; each
    step's FFT with ``n = step`` keeps its first ``step // 2`` bins (0 Hz up to, not
    including, Nyquist), takes the amplitude, replaces exact zeros by ``1e-8`` and takes
    the natural log. The result is ``(..., n_steps * (step // 2))`` with step ``t``'s
    bins at ``[t * n_bins, (t + 1) * n_bins)``. Computed in float64, returned as float32.
    """
    x = np.asarray(x, dtype=np.float64)
    if step < 2:
        raise ValueError(f"log_fft_steps: step must be >= 2 samples, got {step}")
    n_steps = x.shape[-1] // step
    if n_steps < 1:
        raise ValueError(f"log_fft_steps: a window of {x.shape[-1]} samples holds no step of {step}")
    steps = x[..., : n_steps * step].reshape(*x.shape[:-1], n_steps, step)
    amp = np.abs(np.fft.fft(steps, n=step, axis=-1)[..., : step // 2])
    amp[amp == 0.0] = 1e-8
    return np.log(amp).reshape(*x.shape[:-1], n_steps * (step // 2)).astype(np.float32)
