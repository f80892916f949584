"""Synthetic corpora with cross-subject spectral drift: the embedded default and every stand-in.

``SyntheticReader(spec, kind=...)`` is a :class:`~biosig_lightning.data.spec.CorpusReader` that
needs no files. Given any :class:`~biosig_lightning.data.spec.CorpusSpec` it yields windows with
that corpus's channels, sampling rate, window length and classes, so ``synthetic: true`` on a
corpus DataModule runs the whole pipeline without the corpus, and :data:`SYNTHETIC_DEFAULT_SPEC`
(APAVA's shape) is what ``make demo`` trains on.

The background, the subject drift and the window assembly are shared
(:mod:`~biosig_lightning.data.synthetic_base`); each kind says how its classes show:

* ``bands`` (:mod:`~biosig_lightning.data.synthetic_bands`): a spectral peak per class band;
* ``motif`` (:mod:`~biosig_lightning.data.synthetic_motif`): a waveform per class;
* ``spikes`` (:mod:`~biosig_lightning.data.synthetic_spikes`): spike-and-wave bursts;
* ``sleep`` (:mod:`~biosig_lightning.data.synthetic_sleep`): a hypnogram and stage spectra;
* ``seizure`` (:mod:`~biosig_lightning.data.synthetic_seizure`): evolving, spreading ictal
  rhythms among artifacts.

:func:`infer_kind` suggests the kind for a corpus; each corpus module's ``SYNTHETIC_DEFAULTS``
fixes it and the stand-in's size.
"""

from __future__ import annotations

from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.synthetic_bands import BandsStandIn
from biosig_lightning.data.synthetic_base import GENERATOR_VERSION, KINDS, Kind, SyntheticReader
from biosig_lightning.data.synthetic_motif import MotifStandIn
from biosig_lightning.data.synthetic_seizure import SEIZURE_VERSION, SeizureStandIn
from biosig_lightning.data.synthetic_sleep import SLEEP_STAGES, STAGE_ALIASES, SleepStandIn, stage_key
from biosig_lightning.data.synthetic_spikes import SpikesStandIn

__all__ = ["GENERATOR_VERSION", "KINDS", "SEIZURE_VERSION", "SLEEP_STAGES", "SYNTHETIC_DEFAULT_SPEC",
           "BandsStandIn",
           "Kind", "MotifStandIn", "SeizureStandIn", "SleepStandIn", "SpikesStandIn",
           "SyntheticReader", "infer_kind"]

SYNTHETIC_DEFAULT_SPEC = CorpusSpec(
    name="synthetic",
    ch_names=("Fp1", "Fp2", "F7", "F3", "F4", "F8", "T3", "C3", "C4", "T4", "T5",
              "P3", "P4", "T6", "O1", "O2"),
    sfreq=256.0,
    n_times=256,
    classes=("control", "patient"),
    label_level="subject",
    modality="eeg",
)
"""The demo corpus: APAVA's shape (16 EEG channels, 256 Hz, 1 s windows, 2 subject-level classes)."""


def infer_kind(spec: CorpusSpec) -> Kind:
    """The generator kind that suits a corpus: sleep stages, seizures, or band powers.

    A suggestion for corpus DataModules' ``synthetic: true`` defaults: ``sleep`` when the
    classes read as sleep stages, ``spikes`` for window-level binary tasks whose positive
    class names a seizure or spike, ``bands`` otherwise.
    """
    names = [c.strip().lower() for c in spec.classes]
    staged = sum(stage_key(n) in STAGE_ALIASES for n in names)
    if spec.label_level == "window" and len(names) >= 3 and staged >= len(names) - 1:
        return "sleep"
    if spec.label_level == "window" and len(names) == 2 and any(
            w in names[1] for w in ("seiz", "ictal", "spike", "event")):
        return "spikes"
    return "bands"
