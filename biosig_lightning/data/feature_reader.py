"""Feature readers: wrap any corpus reader and hand the cache features instead of signals.

:class:`LogFFTReader` turns each window of a reader into the DCRNN reference's
log-amplitude spectra (:func:`~biosig_lightning.features.spectral.log_fft_steps`), so a
corpus DataModule can offer ``features: fft`` on real files and on its synthetic
stand-in alike, and the window cache stores the features once.

Layout of a feature window (the interface the seizure backbones read): ``(n_chans,
n_steps * n_bins)``, 1-s steps laid out step-major along the last axis, ``n_bins =
step // 2`` (100 at 200 Hz, 32 at 64 Hz). The wrapped spec keeps the channel names,
classes and ``sfreq`` (the signal's rate) and sets ``n_times`` to the feature length.

Zero-padded steps (TUSZ's classification clips shorter than a clip) come out as the
constant :data:`PAD_LOG` = ``log(1e-8)`` in every bin, which is how
:func:`padded_steps` finds them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from biosig_lightning.data.spec import CorpusReader, CorpusSpec, WindowBlock
from biosig_lightning.features.spectral import log_fft_steps

__all__ = ["PAD_LOG", "LogFFTReader", "fft_spec", "padded_steps"]

PAD_LOG = float(np.float32(np.log(1e-8)))


def fft_spec(spec: CorpusSpec, step_seconds: float = 1.0) -> tuple[CorpusSpec, int]:
    """The feature spec of ``spec`` and its bins per step."""
    step = int(round(spec.sfreq * step_seconds))
    if abs(step - spec.sfreq * step_seconds) > 1e-9 or step < 2:
        raise ValueError(f"{spec.name}: a {step_seconds:g} s step is not a whole number (>= 2) of samples at "
                         f"{spec.sfreq:g} Hz")
    n_steps = spec.n_times // step
    if n_steps < 1 or n_steps * step != spec.n_times:
        raise ValueError(f"{spec.name}: windows of {spec.n_times} samples are not whole {step_seconds:g} s "
                         f"steps")
    return replace(spec, n_times=n_steps * (step // 2)), step // 2


def padded_steps(x: np.ndarray, n_bins: int, raw: bool = False) -> np.ndarray:
    """Boolean ``(..., n_steps)``: steps that are zero padding in every channel.

    ``x`` is ``(..., C, n_steps * n_bins)``; a feature step is padding when all its values
    equal :data:`PAD_LOG`, a raw step (``raw=True``, ``n_bins`` = samples per step) when
    all are 0.
    """
    steps = x.reshape(*x.shape[:-1], x.shape[-1] // n_bins, n_bins)
    pad = 0.0 if raw else PAD_LOG
    return (steps == np.float32(pad)).all(axis=(-1, -3))


class LogFFTReader:
    """A reader yielding log-FFT features of ``reader``'s windows (see the module docstring).

    Args:
        reader: any corpus reader (real files or synthetic).
        step_seconds: FFT step length (1 s in the reference).
    """

    def __init__(self, reader: CorpusReader, step_seconds: float = 1.0) -> None:
        self.reader = reader
        self.step_seconds = float(step_seconds)
        self.raw_spec = reader.spec
        self.spec, self.n_bins = fft_spec(reader.spec, step_seconds)
        self.step = 2 * self.n_bins

    def config(self) -> dict[str, Any]:
        return {"features": "log_fft", "step_seconds": self.step_seconds, "reader": self.reader.config()}

    def iter_blocks(self) -> Iterator[WindowBlock]:
        for block in self.reader.iter_blocks():
            out = WindowBlock(subject=block.subject, recording=block.recording,
                              x=log_fft_steps(block.x, self.step),
                              y=block.y, start=block.start)
            out.validate(self.spec, source=block.recording)
            yield out

    def __getattr__(self, name: str) -> Any:
        # reader-specific helpers (patient folders, skipped files) stay reachable
        if name == "reader":
            raise AttributeError(name)
        return getattr(self.reader, name)
