"""DataModules for data a user already holds: arrays (in memory or an ``.npz`` file) or an ``mne.Epochs``
(in memory or a ``-epo.fif`` file).

Both go through :class:`~biosig_lightning.data.module.BiosignalDataModule` like every corpus:
the window cache, subject-disjoint splits, normalisation fitted on training subjects, samplers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from biosig_lightning.data.corpora.arrays import (
    ArrayReader,
    arrays_from_braindecode,
    arrays_from_epochs,
    arrays_from_file,
)
from biosig_lightning.data.module import BiosignalDataModule
from biosig_lightning.data.spec import CorpusReader, CorpusSpec, LabelLevel


class _HeldArrays(BiosignalDataModule):
    """A DataModule over windows held in one :class:`ArrayReader` (set as ``_arrays`` before
    ``super().__init__``): its spec is the arrays', its reader the arrays themselves."""

    _arrays: ArrayReader

    def corpus_spec(self) -> CorpusSpec:
        return self._arrays.spec

    def reader(self) -> CorpusReader:
        return self._arrays


class ArrayDataModule(_HeldArrays):
    """Windows from arrays: ``x (n, channels, times)``, ``y (n,)`` class indices, ``subjects (n,)`` ids.

    For Python use (``Trainer.fit(task, datamodule=ArrayDataModule(...))``); from a YAML use
    :class:`ArrayFileDataModule` with an ``.npz`` file or :class:`EpochsDataModule` with a ``-epo.fif`` file.
    :meth:`from_epochs` takes an ``mne.Epochs``,
    :meth:`from_braindecode` a braindecode windows dataset.

    Args:
        x, y, subjects, sfreq, ch_names, classes, label_level, name:
            see :class:`~biosig_lightning.data.corpora.arrays.ArrayReader`.
        **kwargs: :class:`~biosig_lightning.data.module.BiosignalDataModule`'s (split, batch size, ...).
    """

    def __init__(self, x: Any, y: Sequence[int], subjects: Sequence[int], sfreq: float,
                 ch_names: Sequence[str] | None = None, classes: Sequence[str] | None = None,
                 label_level: LabelLevel = "window", name: str = "arrays", **kwargs: Any) -> None:
        self._arrays = ArrayReader(np.asarray(x), y, subjects, sfreq, ch_names, classes, label_level, name)
        kwargs.pop("root", None)
        super().__init__(**kwargs)

    @classmethod
    def from_epochs(cls, epochs: Any, subjects: Sequence[int] | None = None, subject_column: str = "subject",
                    **kwargs: Any) -> ArrayDataModule:
        """From an ``mne.Epochs``: labels from its events (named by ``event_id``), subjects given or from
        ``epochs.metadata[subject_column]``."""
        return cls(**arrays_from_epochs(epochs, subjects, subject_column), **kwargs)

    @classmethod
    def from_braindecode(cls, dataset: Any, subject_field: str = "subject", **kwargs: Any) -> ArrayDataModule:
        """From a braindecode windows dataset: targets as labels, ``description[subject_field]`` as
        subjects."""
        return cls(**arrays_from_braindecode(dataset, subject_field), **kwargs)


class EpochsDataModule(_HeldArrays):
    """An ``mne.Epochs`` saved as ``-epo.fif`` (``epochs.save(path)``), subjects in a metadata column.

    Args:
        epochs: the ``-epo.fif`` file.
        subject_column: the ``epochs.metadata`` column holding integer subject ids.
        label_level: ``window`` or ``subject``.
        name: corpus name in run names and results.
        **kwargs: :class:`~biosig_lightning.data.module.BiosignalDataModule`'s (split, batch size, ...).
    """

    def __init__(self, epochs: str, subject_column: str = "subject", label_level: LabelLevel = "window",
                 name: str = "epochs", **kwargs: Any) -> None:
        self.epochs_path = epochs
        self._arrays = ArrayReader(**arrays_from_epochs(epochs, None, subject_column),
                                   label_level=label_level,
                                   name=name)
        kwargs.pop("root", None)
        super().__init__(**kwargs)


class ArrayFileDataModule(_HeldArrays):
    """Windows from an ``.npz`` file: arrays ``x``, ``y``, ``subjects`` (and ``sfreq``, ``ch_names``,
    ``classes``).

    Args:
        file: the ``.npz`` (``numpy.savez("mine.npz", x=x, y=y, subjects=subjects, sfreq=250.0)``).
        sfreq: sampling rate in Hz, when the file holds none (wins over the file's).
        label_level: ``window`` or ``subject``.
        name: corpus name in run names and results.
        **kwargs: :class:`~biosig_lightning.data.module.BiosignalDataModule`'s (split, batch size, ...).
    """

    def __init__(self, file: str, sfreq: float | None = None, label_level: LabelLevel = "window",
                 name: str = "arrays", **kwargs: Any) -> None:
        self.file = file
        self._arrays = ArrayReader(**arrays_from_file(file, sfreq), label_level=label_level, name=name)
        kwargs.pop("root", None)
        super().__init__(**kwargs)
