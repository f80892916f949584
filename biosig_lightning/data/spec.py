"""The contract between corpus readers and the rest of the data layer.

A corpus reader turns one public on-disk layout into :class:`WindowBlock` objects,
one per recording (or per subject, when the corpus is published pre-windowed).
Everything downstream (the window cache, the subject splits, the DataModule) only
ever sees blocks, so a reader can be written, tested and used alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

LabelLevel = Literal["window", "subject"]


class DataError(ValueError):
    """Raised for bad input data: the message names the file, channel, subject or key."""


@dataclass(frozen=True)
class CorpusSpec:
    """The shape of a corpus as the model sees it, known before any file is read.

    Attributes:
        name: short corpus name (``"apava"``, ``"sleep_edf"``...).
        ch_names: channel names in model order; ``n_chans = len(ch_names)``.
        sfreq: sampling rate of the windows handed to the model, in Hz.
        n_times: samples per window.
        classes: class names; ``n_outputs = len(classes)``.
        label_level: ``"subject"`` when every window of a subject carries the subject's
            diagnosis (APAVA, ADFTD, PTB), ``"window"`` when labels vary within a subject
            (sleep stages, seizures, motor imagery).
        modality: ``"eeg"`` or ``"ecg"`` (informational; used by montage-aware models).
    """

    name: str
    ch_names: tuple[str, ...]
    sfreq: float
    n_times: int
    classes: tuple[str, ...]
    label_level: LabelLevel = "window"
    modality: str = "eeg"

    @property
    def n_chans(self) -> int:
        return len(self.ch_names)

    @property
    def n_outputs(self) -> int:
        return len(self.classes)

    @property
    def window_seconds(self) -> float:
        return self.n_times / self.sfreq

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ch_names"] = list(self.ch_names)
        d["classes"] = list(self.classes)
        return d


@dataclass
class WindowBlock:
    """Windows cut from one recording (or one pre-windowed subject file).

    Attributes:
        subject: integer subject id, as the corpus numbers its subjects.
        recording: recording id, unique within the corpus (file stem, night, session...).
        x: ``(n, n_chans, n_times)`` float32 signals.
        y: ``(n,)`` int64 class indices into ``CorpusSpec.classes``.
        start: ``(n,)`` float64 window start, in seconds from the recording start; it
            orders the windows of a recording (sequence context relies on it).
    """

    subject: int
    recording: str
    x: np.ndarray
    y: np.ndarray
    start: np.ndarray = field(default=None)  # type: ignore[arg-type]  # None: __post_init__ numbers them

    def __post_init__(self) -> None:
        self.x = np.asarray(self.x, dtype=np.float32)
        self.y = np.asarray(self.y, dtype=np.int64).reshape(-1)
        if self.start is None:
            self.start = np.arange(len(self.y), dtype=np.float64)
        self.start = np.asarray(self.start, dtype=np.float64).reshape(-1)

    def validate(self, spec: CorpusSpec, source: str = "") -> None:
        """Check this block against ``spec``; raise :class:`DataError` naming ``source``."""
        where = f"{source or self.recording} (subject {self.subject})"
        if self.x.ndim != 3:
            raise DataError(f"{where}: expected windows of shape (n, channels, times), got {self.x.shape}")
        n, c, t = self.x.shape
        if c != spec.n_chans:
            raise DataError(f"{where}: {c} channels, but {spec.name} is configured for {spec.n_chans} "
                            f"({', '.join(spec.ch_names)})")
        if t != spec.n_times:
            raise DataError(f"{where}: windows of {t} samples, but {spec.name} is configured for "
                            f"{spec.n_times} ({spec.window_seconds:g} s at {spec.sfreq:g} Hz)")
        if len(self.y) != n or len(self.start) != n:
            raise DataError(
                f"{where}: {n} windows but {len(self.y)} labels and {len(self.start)} start times"
            )
        if n and (self.y.min() < 0 or self.y.max() >= spec.n_outputs):
            raise DataError(f"{where}: label "
                            f"{int(self.y.max() if self.y.max() >= spec.n_outputs else self.y.min())} "
                            f"outside 0..{spec.n_outputs - 1} ({', '.join(spec.classes)})")
        if not np.isfinite(self.x).all():
            found = []
            for kind, mask in (("NaN", np.isnan(self.x)), ("Inf", np.isinf(self.x))):
                if mask.any():  # the first bad value of each kind, with its own window and channel
                    win, ch, _ = (int(i) for i in np.argwhere(mask)[0])
                    found.append(f"{kind} in channel {spec.ch_names[ch]!r} (window {win}, "
                                 f"t={self.start[win]:g} s)")
            raise DataError(f"{where}: {'; '.join(found)}")


@runtime_checkable
class CorpusReader(Protocol):
    """What the window cache needs from a reader.

    ``config()`` returns everything that changes the windows the reader yields (root,
    channel list, resampling, window length, label rules...) as JSON-able values: the
    cache key is a hash of it. ``iter_blocks()`` yields validated blocks.
    """

    spec: CorpusSpec

    def config(self) -> dict[str, Any]: ...

    def iter_blocks(self) -> Iterator[WindowBlock]: ...
