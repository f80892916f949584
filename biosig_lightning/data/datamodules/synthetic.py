"""The built-in synthetic corpus: the embedded default the demo trains on."""

from __future__ import annotations

from typing import Any, Literal

from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusSpec, LabelLevel

_EEG_1020 = ("Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T3", "C3", "Cz", "C4", "T4", "T5", "P3", "Pz", "P4",
             "T6", "O1", "O2")


class SyntheticDataModule(BiosignalDataModule):
    """A synthetic EEG corpus with subject drift, shaped by its own arguments.

    The defaults mirror APAVA (16 channels, 256 Hz, 1 s windows, two subject-level
    classes). Every other argument is :class:`BiosignalDataModule`'s.

    Args:
        n_chans: channels (named after the 10-20 system while there are enough names).
        sfreq: sampling rate in Hz.
        n_times: samples per window.
        n_classes: number of classes.
        label_level: ``subject`` (one diagnosis per subject) or ``window``.
        kind: class signal: ``bands``, ``motif``, ``spikes`` or ``sleep``.
        n_subjects, windows_per_subject, recordings_per_subject: corpus size.
    """

    def __init__(
        self,
        n_chans: int = 16,
        sfreq: float = 256.0,
        n_times: int = 256,
        n_classes: int = 2,
        label_level: LabelLevel = "subject",
        kind: Literal["bands", "motif", "spikes", "sleep"] = "bands",
        n_subjects: int = 16,
        windows_per_subject: int = 60,
        recordings_per_subject: int = 1,
        **kwargs: Any,
    ) -> None:
        self._shape: dict[str, Any] = dict(n_chans=n_chans, sfreq=sfreq, n_times=n_times, n_classes=n_classes,
                           label_level=label_level)
        self._size = dict(kind=kind, n_subjects=n_subjects, windows_per_subject=windows_per_subject,
                          recordings_per_subject=recordings_per_subject)
        kwargs["synthetic"] = True  # this corpus has no files: it is always generated
        super().__init__(**kwargs)

    def corpus_spec(self) -> CorpusSpec:
        n = self._shape["n_chans"]
        names = _EEG_1020[:n] if n <= len(_EEG_1020) else tuple(f"EEG{i:03d}" for i in range(n))
        k = self._shape["n_classes"]
        classes = ("control", "patient") if k == 2 else tuple(f"class{i}" for i in range(k))
        return CorpusSpec(name="synthetic", ch_names=tuple(names), sfreq=float(self._shape["sfreq"]),
                          n_times=int(self._shape["n_times"]), classes=classes,
                          label_level=self._shape["label_level"])

    def synthetic_defaults(self) -> dict[str, Any]:
        return dict(self._size)
