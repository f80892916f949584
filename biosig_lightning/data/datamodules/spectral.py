"""A DataModule base for corpora offered as raw signals or as the DCRNN reference's log-FFT steps."""

from __future__ import annotations

from typing import Any, Literal

from biosig_lightning.data.feature_reader import LogFFTReader, fft_spec
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec
from biosig_lightning.data.synthetic import SyntheticReader

Features = Literal["fft", "raw"]

#: options of ``synthetic_defaults`` that describe the corpus layout, not the generator
LAYOUT_OPTIONS = ("dev_subjects",)


class SpectralDataModule(BiosignalDataModule):
    """``features: raw`` windows, or ``features: fft``: log |FFT| of 1-s steps, step-major.

    A subclass gives :meth:`raw_spec` (the signal windows' shape) and :meth:`make_reader`;
    with ``fft`` the reader (real or synthetic) is wrapped in
    :class:`~biosig_lightning.data.feature_reader.LogFFTReader`, ``x`` is
    ``(B, C, n_steps * step_bins)`` and :attr:`step_bins` is ``sfreq // 2``; with ``raw``
    ``step_bins`` is 0. ``n_times`` is always the length of ``x``'s last axis and ``sfreq``
    the signal's rate.
    """

    def __init__(self, features: Features = "raw", **kwargs: Any) -> None:
        if features not in ("fft", "raw"):
            raise ValueError(f"data.init_args.features must be 'fft' or 'raw', got {features!r}")
        self.features = features
        self._reader: CorpusReader | None = None
        super().__init__(**kwargs)

    def raw_spec(self) -> CorpusSpec:
        raise NotImplementedError(f"{type(self).__name__} must define raw_spec()")

    def corpus_spec(self) -> CorpusSpec:
        raw = self.raw_spec()
        return fft_spec(raw)[0] if self.features == "fft" else raw

    @property
    def step_bins(self) -> int:
        return fft_spec(self.raw_spec())[1] if self.features == "fft" else 0

    def reader(self) -> CorpusReader:
        if self._reader is None:
            if self.synthetic:
                options = {**self.synthetic_defaults(), **self.synthetic_options}
                for key in LAYOUT_OPTIONS:
                    options.pop(key, None)
                base: CorpusReader = SyntheticReader(self.raw_spec(), **options)
            else:
                base = super().reader()  # checks root, then make_reader()
            self._reader = LogFFTReader(base) if self.features == "fft" else base
        return self._reader

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(features=self.features, step_bins=self.step_bins)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_reader"] = None
        return state
