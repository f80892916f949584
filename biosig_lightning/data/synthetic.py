"""Synthetic corpora with cross-subject spectral drift: the embedded default and every stand-in.

:class:`SyntheticReader` is a :class:`~biosig_lightning.data.spec.CorpusReader` that
needs no files. Given any :class:`~biosig_lightning.data.spec.CorpusSpec` it yields
windows with that corpus's channels, sampling rate, window length and classes, so
``synthetic: true`` on a corpus DataModule runs the whole pipeline without the corpus,
and :data:`SYNTHETIC_DEFAULT_SPEC` (APAVA's shape) is what ``make demo`` trains on.

How a window is made (everything is drawn in the rFFT domain, one FFT per window):

1. **Background**: Gaussian aperiodic activity with a ``1/(f + 1)^alpha`` power
   spectrum; the exponent ``alpha`` is per subject (noise colour).
2. **Class signal**, by ``kind``:

   * ``bands``: class ``k`` adds a spectral peak in its own band (alpha, theta, beta,
     delta, gamma in that order, so for two classes "control" is alpha-dominant and
     "patient" theta-dominant, as in EEG slowing; more than five classes use
     log-spaced bands). Bands are scaled down when the Nyquist frequency is below 50 Hz.
   * ``motif``: class ``k``'s waveform (a fixed smooth random shape) is embedded at
     random times.
   * ``spikes``: classes ``>= 1`` carry bursts of repeated spike-and-wave complexes
     (~3 Hz, faster for higher classes); every window may also hold isolated sharp
     transients, so one spike is not a seizure. About 30 % of windows are positive.
   * ``sleep``: per recording, a Markov chain over the stages W, N1, N2, N3, REM
     (N2 most frequent, N1 rare); W carries alpha and beta, N1 theta, N2 spindles
     (12-14 Hz) and K-complexes, N3 large delta, REM low-amplitude sawtooth theta.
     Windows are consecutive in time, so neighbouring windows carry information.
   * ``seizure``: evolving ictal rhythms that start on some channels and spread
     (:meth:`SyntheticReader._seizures`). With two classes (detection) 15 % of
     windows overlap a seizure (durations log-normal around 40 s, as TUSZ's), which may
     begin or end inside the window (at least 3 s of it visible), mostly focal; with more classes every window is a seizure clip that
     starts 2 s before onset, and the classes are seizure types, named or in this order:
     focal (CF: a rhythm at the patient's own focus that slows from ~6 Hz and spreads
     to neighbouring electrodes over seconds), generalised (GN: 4-6 Hz on all channels
     within half a second), absence (AB: 3 Hz spike-and-wave on all channels, abrupt,
     constant rate) and tonic (CT: low-voltage 15-20 Hz, then high-amplitude clonic
     slowing); presentations overlap (a fifth of focal seizures spread bilaterally
     within a second, 30 % of generalised ones start focally), and amplitudes are
     log-normal, so some seizures barely exceed the background. Class priors fall off
     as 1, 1/2, 1/4, 1/4 (TUSZ's are far steeper, see the corpus DataModules). Every
     window may hold isolated sharp transients and, 40 % of them, an artifact (eye
     movement on anterior channels or a muscle burst on lateral ones) that is not a seizure.

3. **Subject variability** (scaled by ``subject_drift``), after BioFormer's *spectral
   drift* (BioFormer paper, Sec. 1 and Fig. 1): subjects share a label's spectral
   structure but differ by band-wise magnitude and phase shifts. Each subject gets a
   smooth random gain and phase response over log-frequency (shared across channels
   plus a per-channel part) applied to the rFFT of every window, a shift of all
   physiological peak frequencies (as the individual alpha frequency does), a channel
   mixing matrix near the identity, per-channel baseline offsets, an amplitude scale,
   its own background exponent and sensor-noise level, and a *fingerprint*: a narrowband
   oscillation at a subject-specific frequency and spatial pattern. The fingerprint
   carries no label, but lets a model recognise subjects, so, as in real data, random
   window splits (subject-dependent) score higher than subject-disjoint ones.
   Each recording adds a smaller session drift of its own.

Determinism: the random streams are keyed by ``(seed, purpose, subject, recording)``,
so the same arguments give bit-identical windows and a subject's windows do not depend
on how many other subjects are generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from biosig_lightning.data.spec import CorpusSpec, WindowBlock
from biosig_lightning.data.synthetic_coupling import apply_coupling, plant_coupling

GENERATOR_VERSION = "synthetic-1"
"""Part of :meth:`SyntheticReader.config`: bump it whenever the generated windows change."""
SEIZURE_VERSION = 2
"""Part of the config of ``kind="seizure"`` stand-ins only: bump it whenever their windows change."""

Kind = Literal["bands", "motif", "spikes", "sleep", "seizure"]
KINDS: tuple[str, ...] = ("bands", "motif", "spikes", "sleep", "seizure")

SYNTHETIC_DEFAULT_SPEC = CorpusSpec(
    name="synthetic",
    ch_names=("Fp1", "Fp2", "F7", "F3", "F4", "F8", "T3", "C3", "C4", "T4", "T5", "P3", "P4", "T6", "O1", "O2"),
    sfreq=256.0,
    n_times=256,
    classes=("control", "patient"),
    label_level="subject",
    modality="eeg",
)
"""The demo corpus: APAVA's shape (16 EEG channels, 256 Hz, 1 s windows, 2 subject-level classes)."""

# Purposes of the random streams; keeping them apart is what makes subjects independent.
_GLOBAL, _SUBJECT, _RECORDING, _CLASSES, _ICTAL = 0, 1, 2, 3, 4

# Class bands for ``bands`` in class order: class 0 alpha, class 1 theta, ...
_EEG_BANDS = ((8.0, 13.0), (4.0, 8.0), (13.0, 30.0), (1.0, 4.0), (30.0, 45.0))

SLEEP_STAGES = ("W", "N1", "N2", "N3", "REM")
_STAGE_ALIASES = {
    "w": "W", "wake": "W", "awake": "W", "0": "W",
    "n1": "N1", "s1": "N1", "1": "N1",
    "n2": "N2", "s2": "N2", "2": "N2",
    "n3": "N3", "s3": "N3", "s4": "N3", "n4": "N3", "3": "N3", "4": "N3", "sws": "N3", "deep": "N3",
    "rem": "REM", "r": "REM", "5": "REM",
}
# Stage transitions per 30 s epoch (rows: from, columns: to, in SLEEP_STAGES order). The
# stationary distribution is about W 0.13, N1 0.06, N2 0.50, N3 0.15, REM 0.17, close to
# adult hypnogram statistics; recordings start awake.
_SLEEP_TRANSITIONS = np.array([
    [0.86, 0.11, 0.02, 0.00, 0.01],
    [0.07, 0.50, 0.38, 0.00, 0.05],
    [0.015, 0.02, 0.895, 0.045, 0.025],
    [0.01, 0.00, 0.14, 0.85, 0.00],
    [0.035, 0.02, 0.045, 0.00, 0.90],
])
# Spectral peaks per stage: (centre Hz, width Hz, peak power / background power at centre).
_STAGE_PEAKS = {
    "W": ((10.0, 1.2, 12.0), (20.0, 4.0, 2.0), (38.0, 8.0, 2.0)),
    "N1": ((6.0, 1.5, 8.0), (10.0, 1.2, 1.6)),
    "N2": ((5.0, 2.0, 3.0),),
    "N3": ((1.2, 0.7, 24.0),),
    "REM": ((3.0, 1.0, 6.0), (6.0, 1.5, 3.0), (20.0, 5.0, 1.2)),
}
_STAGE_GAIN = {"W": 1.0, "N1": 0.9, "N2": 1.0, "N3": 1.5, "REM": 0.75}
# Transient events per stage: rate per second of spindles and of K-complexes.
_STAGE_EVENTS = {"W": (0.0, 0.0), "N1": (0.0, 0.0), "N2": (0.12, 0.05), "N3": (0.03, 0.02), "REM": (0.0, 0.0)}

# Log-amplitude gain drift per subject: standard deviation shared by all channels, per channel.
_GAIN_SD = (0.3, 0.15)
_PEAK_SHIFT_SD = 0.08  # log-frequency shift of the subject's peaks (individual alpha frequency)
_BAND_PEAK = 6.0  # class peak power over the background at the peak centre, for ``bands``
_SPIKE_AMP = 5.0  # burst spike height over the background standard deviation
_SPIKE_FRACTION = 0.3  # window-level positives for ``spikes``
_SUBJECT_SPIKE_FRACTION = 0.5  # windows with bursts in a patient subject, subject-level labels
_SEIZURE_FRACTION = 0.15  # windows overlapping a seizure for ``seizure`` detection (two classes)
_SEIZURE_AMP = 3.0  # ictal rhythm amplitude over the background standard deviation
_SEIZURE_TYPES = ("focal", "generalized", "absence", "tonic")
_SEIZURE_TYPE_NAMES = {"cf": "focal", "focal": "focal", "fnsz": "focal", "gn": "generalized",
                       "generalized": "generalized", "gnsz": "generalized", "ab": "absence", "absence": "absence",
                       "absz": "absence", "ct": "tonic", "tonic": "tonic", "tnsz": "tonic"}


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def _cnormal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Circular complex Gaussian with unit mean power (random-phase spectral coefficients)."""
    z = rng.standard_normal((*shape, 2))
    return (z[..., 0] + 1j * z[..., 1]) * np.sqrt(0.5)


def _gauss(x: np.ndarray, centre: float, width: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - centre) / width) ** 2)


def _stage_of(classes: tuple[str, ...]) -> list[str]:
    """Map class names to sleep stages; unrecognised names take the unused stages in order."""
    if len(classes) > len(SLEEP_STAGES):
        raise ValueError(f"kind='sleep' supports at most {len(SLEEP_STAGES)} classes "
                         f"({', '.join(SLEEP_STAGES)}), got {len(classes)}: {', '.join(classes)}")
    stages: list[str | None] = []
    for name in classes:
        key = name.strip().lower().replace("sleep stage", "").replace("stage", "").strip()
        stage = _STAGE_ALIASES.get(key)
        stages.append(stage if stage not in stages else None)
    free = iter(s for s in SLEEP_STAGES if s not in stages)
    return [s if s is not None else next(free) for s in stages]


def infer_kind(spec: CorpusSpec) -> Kind:
    """The generator kind that suits a corpus: sleep stages, seizures, or band powers.

    A suggestion for corpus DataModules' ``synthetic: true`` defaults: ``sleep`` when the
    classes read as sleep stages, ``spikes`` for window-level binary tasks whose positive
    class names a seizure or spike, ``bands`` otherwise.
    """
    names = [c.strip().lower() for c in spec.classes]
    staged = sum(n.replace("sleep stage", "").replace("stage", "").strip() in _STAGE_ALIASES for n in names)
    if spec.label_level == "window" and len(names) >= 3 and staged >= len(names) - 1:
        return "sleep"
    if spec.label_level == "window" and len(names) == 2 and any(
            w in names[1] for w in ("seiz", "ictal", "spike", "event")):
        return "spikes"
    return "bands"


@dataclass
class _Subject:
    """One subject's nuisance parameters (all scaled by ``subject_drift``)."""

    label: int  # class of the subject (subject-level labels only, else -1)
    exponent: float  # aperiodic exponent of the background
    response: np.ndarray  # (C, F) complex smooth gain/phase response: the spectral drift
    peak_shift: float  # multiplies every physiological peak frequency
    mixing: np.ndarray  # (C, C)
    offset: np.ndarray  # (C,)
    scale: float
    sensor_noise: float
    fp_freq: float  # fingerprint frequency, Hz
    fp_amp: np.ndarray  # (C,) fingerprint amplitude per channel
    event_weights: np.ndarray  # (C,) spatial weights of transients (e.g. seizure focus)
    spike_freq: float  # spike-and-wave repetition rate, Hz
    focus: int = 0  # channel where this subject's focal seizures start
    ictal_freq: float = 6.0  # onset frequency of this subject's ictal rhythm, Hz
    spread_speed: float = 0.03  # spread of focal seizures, metres (scalp) per second


class SyntheticReader:
    """A file-free corpus reader: windows shaped like ``spec`` with subject drift.

    Args:
        spec: the corpus shape to imitate (channels, rate, window length, classes,
            label level).
        n_subjects: subjects ``1..n_subjects``.
        windows_per_subject: windows per subject, split as evenly as possible over its
            recordings.
        kind: how classes show in the signal (see the module docstring).
        seed: non-negative integer; the same arguments give bit-identical windows.
        recordings_per_subject: recordings (sessions, nights) per subject, ``s03_r1``...
        subject_drift: scale of all between-subject differences; 0 makes subjects draws
            from one distribution (random and subject-disjoint splits then agree).
        noise: scale of the sensor noise.
        sleep_start: ``wake`` (recordings start awake, as a night does) or ``stationary``
            (a stretch from anywhere in the night: the first stage is drawn from the
            chain's stationary distribution; for stand-ins with few epochs per record).
        class_separation: scale of the class signal (peak amplitudes, motif and spike
            amplitudes, stage contrasts); 0 makes classes indistinguishable.
        coupling_edges: planted directed couplings shared by all subjects (lagged, band-pass
            filtered copies of a parent channel added to a child,
            :mod:`biosig_lightning.data.synthetic_coupling`); 0 plants none. The edges are
            ``self.coupling`` and part of :meth:`config`.
        band_gain_drift: scale of the subject's smooth gain response over frequency (the
            band-wise magnitude drift), on top of ``subject_drift``; the other drifts keep
            ``subject_drift``. Below 1 for the disease stand-ins whose class lives in band power
            (see ``SYNTHETIC_DEFAULTS`` in :mod:`biosig_lightning.data.corpora.medformer`): at 1
            a subject's theta/alpha gain ratio varies as much as the class changes it.

    With ``spec.label_level == "subject"`` every window of a subject has the subject's
    class; classes are dealt in blocks of ``K`` consecutive subjects, each block a seeded
    permutation of the classes, so they are balanced, all present once
    ``n_subjects >= K``, and independent of ``n_subjects``. Window-level labels are
    balanced per recording for ``bands`` and ``motif``, 30 % positive for ``spikes`` and a
    Markov chain for ``sleep`` (which has no subject-level form).
    """

    def __init__(
        self,
        spec: CorpusSpec,
        n_subjects: int = 12,
        windows_per_subject: int = 60,
        kind: Kind = "bands",
        seed: int = 0,
        recordings_per_subject: int = 1,
        subject_drift: float = 1.0,
        noise: float = 1.0,
        class_separation: float = 1.0,
        sleep_start: Literal["wake", "stationary"] = "wake",
        coupling_edges: int = 0,
        band_gain_drift: float = 1.0,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"synthetic kind must be one of {', '.join(KINDS)}, got {kind!r}")
        for name, value in (("n_subjects", n_subjects), ("windows_per_subject", windows_per_subject),
                            ("recordings_per_subject", recordings_per_subject)):
            if int(value) != value or value < 1:
                raise ValueError(f"synthetic {name} must be a positive integer, got {value!r}")
        if windows_per_subject < recordings_per_subject:
            raise ValueError(f"synthetic windows_per_subject ({windows_per_subject}) is below "
                             f"recordings_per_subject ({recordings_per_subject}): a recording would be empty")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"synthetic seed must be a non-negative integer, got {seed!r}")
        for name, value in (("subject_drift", subject_drift), ("noise", noise),
                            ("class_separation", class_separation), ("band_gain_drift", band_gain_drift)):
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"synthetic {name} must be a finite number >= 0, got {value!r}")
        if spec.n_outputs < 2 or spec.n_chans < 1 or spec.n_times < 16 or spec.sfreq <= 0:
            raise ValueError(f"synthetic corpus {spec.name!r}: need >= 2 classes, >= 1 channel, >= 16 samples "
                             f"and sfreq > 0, got {spec.n_outputs} classes, {spec.n_chans} channels, "
                             f"{spec.n_times} samples at {spec.sfreq:g} Hz")
        if kind == "sleep" and spec.label_level == "subject":
            raise ValueError(f"synthetic corpus {spec.name!r}: kind='sleep' makes window-level stage labels, "
                             "but the spec has label_level='subject'")
        self.spec = spec
        self.n_subjects = int(n_subjects)
        self.windows_per_subject = int(windows_per_subject)
        self.kind: Kind = kind
        self.seed = int(seed)
        self.recordings_per_subject = int(recordings_per_subject)
        self.subject_drift = float(subject_drift)
        self.noise = float(noise)
        self.class_separation = float(class_separation)
        self.band_gain_drift = float(band_gain_drift)
        if sleep_start not in ("wake", "stationary"):
            raise ValueError(f"synthetic sleep_start must be 'wake' or 'stationary', got {sleep_start!r}")
        self.sleep_start = sleep_start

        self._freqs = np.fft.rfftfreq(spec.n_times, d=1.0 / spec.sfreq)
        self._nyq = spec.sfreq / 2.0
        # Physiological frequencies shrink with a low Nyquist so every class stays visible.
        self._hz = min(1.0, self._nyq / 50.0)
        self._stages = _stage_of(spec.classes) if kind == "sleep" else []
        self._global = self._global_params()
        # planted directed couplings shared by all subjects (synthetic_coupling.py); none by default
        self.coupling = plant_coupling(spec.n_chans, coupling_edges, self.seed, self._nyq)

    # -- CorpusReader ---------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything that changes the windows, as JSON-able values (the cache key)."""
        return {
            "generator": GENERATOR_VERSION,
            "spec": self.spec.to_dict(),
            "n_subjects": self.n_subjects,
            "windows_per_subject": self.windows_per_subject,
            "kind": self.kind,
            "seed": self.seed,
            "recordings_per_subject": self.recordings_per_subject,
            "subject_drift": self.subject_drift,
            "noise": self.noise,
            "class_separation": self.class_separation,
            # only when set, so the cache keys of every earlier stand-in stay valid
            **({"sleep_start": self.sleep_start} if self.sleep_start != "wake" else {}),
            **({"band_gain_drift": self.band_gain_drift} if self.band_gain_drift != 1.0 else {}),
            # the seizure kind versions itself, so changing it leaves other kinds' caches valid
            **({"seizure_version": SEIZURE_VERSION} if self.kind == "seizure" else {}),
            # the planted graph itself (the truth `biosig graphs` scores against); only when planted
            **({"coupling": [e.to_dict() for e in self.coupling]} if self.coupling else {}),
        }

    def iter_blocks(self) -> Iterator[WindowBlock]:
        """One validated block per recording, subjects ``1..n_subjects`` in order."""
        for subject in range(1, self.n_subjects + 1):
            yield from self.subject_blocks(subject)

    # -- public helpers -------------------------------------------------------------
    def subject_class(self, subject: int) -> int:
        """The class of ``subject`` under subject-level labels (blocks of seeded permutations)."""
        k = self.spec.n_outputs
        block, slot = divmod(subject - 1, k)
        return int(_rng(self.seed, _CLASSES, block).permutation(k)[slot])

    def subject_blocks(self, subject: int) -> list[WindowBlock]:
        """The recordings of one subject (depends only on the arguments and ``subject``)."""
        if not 1 <= subject <= self.n_subjects:
            raise ValueError(f"synthetic corpus {self.spec.name!r}: subject {subject} outside 1..{self.n_subjects}")
        params = self._subject_params(subject)
        r_count = self.recordings_per_subject
        sizes = [self.windows_per_subject // r_count + (r < self.windows_per_subject % r_count)
                 for r in range(r_count)]
        blocks = []
        for r, n in enumerate(sizes, start=1):
            rng = _rng(self.seed, _RECORDING, subject, r)
            y = self._labels(rng, n, params)
            x = self._windows(rng, y, params)
            block = WindowBlock(subject=subject, recording=f"s{subject:02d}_r{r}", x=x, y=y,
                                start=np.arange(n, dtype=np.float64) * self.spec.window_seconds)
            block.validate(self.spec, source=f"synthetic:{self.spec.name}:{block.recording}")
            blocks.append(block)
        return blocks

    # -- parameters -----------------------------------------------------------------
    def _global_params(self) -> dict[str, Any]:
        """Class patterns shared by all subjects (they depend on the seed only)."""
        rng = _rng(self.seed, _GLOBAL)
        spec, k, c = self.spec, self.spec.n_outputs, self.spec.n_chans
        out: dict[str, Any] = {"class_pattern": rng.uniform(0.5, 1.0, (k, c))}
        if k <= len(_EEG_BANDS):
            bands = [(lo * self._hz, hi * self._hz) for lo, hi in _EEG_BANDS[:k]]
        else:
            edges = np.geomspace(1.0 * self._hz, min(45.0 * self._hz, 0.9 * self._nyq), k + 1)
            bands = list(zip(edges[:-1], edges[1:], strict=True))
        out["bands"] = bands
        length = int(np.clip(round(0.3 * spec.sfreq), 8, spec.n_times // 3))
        t = np.linspace(0.0, 1.0, length)
        motifs = []
        for _ in range(k):
            shape = sum(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0)
                        * _gauss(t, rng.uniform(0.15, 0.85), rng.uniform(0.04, 0.12)) for _ in range(4))
            shape = shape * np.hanning(length)
            motifs.append(shape / np.abs(shape).max())
        out["motifs"] = motifs
        return out

    def _subject_params(self, subject: int) -> _Subject:
        rng = _rng(self.seed, _SUBJECT, subject)
        d, c = self.subject_drift, self.spec.n_chans
        f = self._freqs
        # Smooth response over log-frequency: random values at 7 nodes, linearly interpolated.
        logf = np.log(f + 1.0)
        nodes = np.linspace(logf[0], logf[-1], 7)
        interp = np.stack([np.interp(logf, nodes, np.eye(len(nodes))[j]) for j in range(len(nodes))], axis=1)
        log_gain = (_GAIN_SD[0] * rng.standard_normal(len(nodes))[None]
                    + _GAIN_SD[1] * rng.standard_normal((c, len(nodes))))
        phase = (0.8 * rng.standard_normal(len(nodes))[None] + 0.4 * rng.standard_normal((c, len(nodes))))
        response = np.exp(d * self.band_gain_drift * (log_gain @ interp.T) + 1j * d * (phase @ interp.T))
        label = self.subject_class(subject) if self.spec.label_level == "subject" else -1
        fp_lo, fp_hi = 2.0 * self._hz, min(40.0 * self._hz, 0.8 * self._nyq)
        return _Subject(
            label=label,
            exponent=float(np.clip(1.2 + 0.3 * d * rng.standard_normal(), 0.2, 2.5)),
            response=response,
            peak_shift=float(np.exp(_PEAK_SHIFT_SD * d * rng.standard_normal())),
            mixing=np.eye(c) + 0.25 * d * rng.standard_normal((c, c)) / np.sqrt(c),
            offset=0.3 * d * rng.standard_normal(c),
            scale=float(np.exp(0.3 * d * rng.standard_normal())),
            sensor_noise=float(0.3 * np.exp(0.3 * d * rng.standard_normal())),
            fp_freq=float(np.exp(rng.uniform(np.log(fp_lo), np.log(fp_hi)))),
            fp_amp=d * rng.uniform(0.3, 0.9) * rng.uniform(0.0, 1.0, c) ** 2,
            event_weights=np.clip(1.0 + 0.5 * d * rng.standard_normal(c), 0.1, None),
            spike_freq=float(3.0 * np.exp(0.1 * d * rng.standard_normal())),
            **self._ictal_params(subject),
        )

    def _ictal_params(self, subject: int) -> dict[str, Any]:
        """The subject's seizure signature (its own stream: other kinds' windows are unchanged)."""
        if self.kind != "seizure":
            return {}
        rng = _rng(self.seed, _ICTAL, subject)
        d = self.subject_drift
        return {"focus": int(rng.integers(self.spec.n_chans)),
                "ictal_freq": float(6.0 * self._hz * np.exp(0.2 * d * rng.standard_normal())),
                "spread_speed": float(0.03 * np.exp(0.4 * d * rng.standard_normal()))}

    # -- labels ---------------------------------------------------------------------
    def _labels(self, rng: np.random.Generator, n: int, params: _Subject) -> np.ndarray:
        k = self.spec.n_outputs
        if params.label >= 0:
            return np.full(n, params.label, dtype=np.int64)
        if self.kind == "sleep":
            return self._hypnogram(rng, n)
        if self.kind == "seizure":
            if k == 2:
                y = np.zeros(n, dtype=np.int64)
                y[rng.permutation(n)[: int(round(_SEIZURE_FRACTION * n))]] = 1
                return y
            prior = np.array([1.0, 0.5] + [0.25] * (k - 2))
            return rng.choice(k, size=n, p=prior / prior.sum()).astype(np.int64)
        if self.kind == "spikes":
            y = np.zeros(n, dtype=np.int64)
            positive = rng.permutation(n)[: int(round(_SPIKE_FRACTION * n))]
            y[positive] = rng.integers(1, k, len(positive))
            return y
        return rng.permutation(np.arange(n) % k).astype(np.int64)

    def _hypnogram(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """A stage sequence from the transition matrix restricted to the spec's stages."""
        order = [SLEEP_STAGES.index(s) for s in self._stages]
        trans = _SLEEP_TRANSITIONS[np.ix_(order, order)]
        trans = trans / trans.sum(axis=1, keepdims=True)
        cum = np.cumsum(trans, axis=1)
        if self.sleep_start == "stationary":
            # a stretch from anywhere in the night: start from the chain's stationary distribution
            evals, evecs = np.linalg.eig(trans.T)
            pi = np.abs(np.real(evecs[:, np.argmin(np.abs(evals - 1.0))]))
            cum_pi = np.cumsum(pi / pi.sum())
            state = min(int(np.searchsorted(cum_pi, rng.random(), side="right")), len(order) - 1)
        else:
            state = self._stages.index("W") if "W" in self._stages else int(rng.integers(len(order)))
        u = rng.random(n)
        y = np.empty(n, dtype=np.int64)
        for i in range(n):
            y[i] = state
            state = min(int(np.searchsorted(cum[state], u[i], side="right")), len(order) - 1)
        return y

    # -- signals --------------------------------------------------------------------
    def _windows(self, rng: np.random.Generator, y: np.ndarray, params: _Subject) -> np.ndarray:
        spec, f = self.spec, self._freqs
        n, c, t = len(y), spec.n_chans, spec.n_times
        sep = self.class_separation
        # Background power spectrum, normalised to unit variance for the ortho irFFT.
        bg2 = (f + self._hz) ** (-params.exponent)
        bg2[0] = 0.0
        bg2 /= 2.0 * bg2.sum() / t
        power = np.broadcast_to(bg2, (n, c, len(f))).copy()
        power *= np.exp(0.3 * rng.standard_normal((n, 1, 1)))  # state fluctuation between windows
        if self.kind == "bands":
            strength = sep**2 * np.exp(0.5 * rng.standard_normal((n, 1, 1)))
            power += strength * self._band_peaks(bg2, params)[y]
        elif self.kind == "sleep":
            gain, peaks = self._stage_spectra(bg2, params)
            power = power * gain[y][:, None, None] ** (2.0 * min(sep, 1.0)) + sep**2 * peaks[y][:, None, :]
        spectrum = np.sqrt(power) * _cnormal(rng, (n, c, len(f)))
        spectrum += self._events(rng, y, params) * params.event_weights[None, :, None]
        if self.kind == "seizure":
            spectrum += np.fft.rfft(self._seizures(rng, y, params), axis=-1, norm="ortho")
        apply_coupling(spectrum, f, self.coupling)  # planted directed couplings (before subject drift)

        # Session drift (small), then the subject's spectral drift.
        session = np.exp(0.1 * self.subject_drift * rng.standard_normal((c, 1)))
        spectrum *= params.response * session
        spectrum[..., 0] = 0.0
        x = np.fft.irfft(spectrum, n=t, axis=-1, norm="ortho")

        time = np.arange(t) / spec.sfreq
        phase0 = rng.uniform(0.0, 2.0 * np.pi, (n, 1, 1))
        x += params.fp_amp[None, :, None] * np.sin(2.0 * np.pi * params.fp_freq * time + phase0)
        x = np.einsum("ij,njt->nit", params.mixing, x)
        x += self.noise * params.sensor_noise * rng.standard_normal(x.shape)
        x = params.scale * x + params.offset[None, :, None]
        return x.astype(np.float32)

    def _band_peaks(self, bg2: np.ndarray, params: _Subject) -> np.ndarray:
        """(K, C, F) peak power of each class in its band, as a multiple of the background."""
        f = self._freqs
        peaks = []
        for lo, hi in self._global["bands"]:
            centre = np.sqrt(lo * hi) * params.peak_shift
            width = max((hi - lo) / 4.0, f[1])
            level = np.interp(centre, f, bg2)
            peaks.append(_BAND_PEAK * level * _gauss(f, centre, width) ** 2)
        return np.stack(peaks)[:, None, :] * self._global["class_pattern"][:, :, None] ** 2

    def _stage_spectra(self, bg2: np.ndarray, params: _Subject) -> tuple[np.ndarray, np.ndarray]:
        """Per class: background gain and (F,) peak power of its sleep stage."""
        f = self._freqs
        gains, peaks = [], []
        for stage in self._stages:
            p = np.zeros_like(f)
            for centre, width, ratio in _STAGE_PEAKS[stage]:
                centre = centre * self._hz * params.peak_shift
                level = np.interp(centre, f, bg2)
                p += ratio * level * _gauss(f, centre, max(width * self._hz, f[1])) ** 2
            gains.append(_STAGE_GAIN[stage])
            peaks.append(p)
        return np.array(gains), np.stack(peaks)

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: _Subject) -> np.ndarray:
        """(n, 1, F) ortho rFFT of the transients of each window (motifs, spikes, spindles...)."""
        spec = self.spec
        n = len(y)
        out = np.zeros((n, 1, len(self._freqs)), dtype=np.complex128)
        sep = self.class_separation
        seconds = spec.window_seconds
        if self.kind == "motif":
            for k, shape in enumerate(self._global["motifs"]):
                rows = np.flatnonzero(y == k)
                counts = 1 + rng.poisson(0.5 * seconds, len(rows))
                out[rows, 0] += self._train(rng, counts, shape, 2.0 * sep)
        elif self.kind == "spikes":
            kernel = self._spike_wave(0.33)
            isolated = rng.poisson(0.3 * seconds, n)
            out[:, 0] += self._train(rng, isolated, kernel[: max(len(kernel) // 3, 4)], 2.5)
            burst = y > 0
            if params.label >= 0:
                burst &= rng.random(n) < _SUBJECT_SPIKE_FRACTION
            rows = np.flatnonzero(burst)
            out[rows, 0] += self._bursts(rng, y[rows], kernel, params, _SPIKE_AMP * sep)
        elif self.kind == "seizure":
            kernel = self._spike_wave(0.33)
            isolated = rng.poisson(0.2 * seconds, n)
            out[:, 0] += self._train(rng, isolated, kernel[: max(len(kernel) // 3, 4)], 2.5)
        elif self.kind == "sleep":
            spindle, kcomplex = self._sleep_kernels(params)
            spindle_rate = np.array([_STAGE_EVENTS[s][0] for s in self._stages])[y]
            kc_rate = np.array([_STAGE_EVENTS[s][1] for s in self._stages])[y]
            out[:, 0] += self._train(rng, rng.poisson(spindle_rate * seconds), spindle, 1.5 * sep)
            out[:, 0] += self._train(rng, rng.poisson(kc_rate * seconds), kcomplex, 4.0 * sep)
        return out

    def _seizures(self, rng: np.random.Generator, y: np.ndarray, params: _Subject) -> np.ndarray:
        """(n, C, T) ictal activity of the windows whose class is a seizure (zeros elsewhere).

        Each seizure has an onset (channel-dependent for focal ones: the delay grows with
        the scalp distance from the focus over the subject's spread speed), a rhythm whose
        frequency evolves from its onset value (phase = 2 pi times the running integral of
        the frequency), an amplitude ramp over the first 2 s, and a waveform from smooth
        (focal, generalised) to spike-and-wave (absence, clonic phase).
        """
        spec = self.spec
        n, c, t = len(y), spec.n_chans, spec.n_times
        out = np.zeros((n, c, t))
        types = self._global.setdefault("seizure_types", _seizure_types(spec.classes))
        if "positions" not in self._global:
            self._global["positions"] = _channel_positions(spec.ch_names)
        pos = self._global["positions"]
        tt = np.arange(t) / spec.sfreq
        seconds = spec.window_seconds
        amp0 = _SEIZURE_AMP * self.class_separation
        for i in np.flatnonzero(np.array([types[k] is not None for k in y], dtype=bool)):
            kind = types[y[i]]
            if kind == "mixed":
                kind = "focal" if rng.random() < 0.7 else "generalized"
            if len(types) == 2:
                duration = float(np.clip(40.0 * np.exp(0.6 * rng.standard_normal()), 10.0, 200.0))
                onset = rng.uniform(-(duration - 3.0), max(seconds - 3.0, 0.0))
            else:
                duration = rng.uniform(0.6, 1.0) * max(seconds - 2.0, 1.0)
                onset = min(2.0, 0.2 * seconds)
            if kind == "absence":
                duration = min(duration, rng.uniform(5.0, 15.0))
            focus = params.focus if rng.random() < 0.7 else int(rng.integers(c))
            dist = np.linalg.norm(pos - pos[focus], axis=1)
            # presentations overlap, as they do in TUSZ (focal seizures relabelled as generalised):
            # some focal seizures spread bilaterally within a second, some generalised ones start focally
            if kind == "focal":
                speed = params.spread_speed * (8.0 if rng.random() < 0.2 else 1.0)
                delay = dist / speed
                gain = np.exp(-dist / 0.08)
                gain = np.maximum(gain, 0.6) if speed > params.spread_speed else gain
            elif kind == "generalized" and rng.random() < 0.3:
                delay = np.minimum(dist / params.spread_speed, rng.uniform(1.0, 3.0))
                gain = np.full(c, 1.0)
            else:
                delay = rng.uniform(0.0, 0.5, c)
                gain = np.full(c, 1.0)
            since = tt - onset  # seconds into the seizure
            active = (since[None, :] >= delay[:, None]) & (since[None, :] <= duration)
            ramp = np.clip((since[None, :] - delay[:, None]) / 2.0, 0.0, 1.0) * active
            progress = np.clip(since / max(duration, 1e-6), 0.0, 1.0)
            if kind == "focal":
                freq = params.ictal_freq * (1.0 - 0.45 * progress)
            elif kind == "generalized":
                freq = params.ictal_freq * 0.8 * (1.0 - 0.3 * progress)
            elif kind == "absence":
                freq = np.full(t, 3.0 * self._hz)
            else:  # tonic: fast low-voltage onset, then clonic slowing
                freq = np.where(since < 3.0, 17.0 * self._hz, params.ictal_freq * (1.0 - 0.5 * progress))
            freq = np.broadcast_to(freq, (t,))
            phase = 2.0 * np.pi * np.cumsum(freq) / spec.sfreq + rng.uniform(0.0, 2.0 * np.pi)
            if kind in ("absence", "tonic"):
                wave = np.exp(3.0 * (np.cos(phase) - 1.0))
                wave = (wave - wave.mean()) / (wave.std() + 1e-12)
                if kind == "tonic":
                    smooth = np.sin(phase)
                    wave = np.where(since < 3.0, 0.5 * smooth, wave)
            else:
                wave = np.sin(phase) + 0.3 * np.sin(2.0 * phase + 0.5)
            # amplitudes spread over a log-normal: some seizures are barely above the background
            amp = amp0 * float(np.exp(0.5 * rng.standard_normal())) * (1.5 if kind == "absence" else 1.0)
            out[i] = amp * gain[:, None] * ramp * wave[None, :]
        out += self._artifacts(rng, n, pos)
        return out

    def _artifacts(self, rng: np.random.Generator, n: int, pos: np.ndarray) -> np.ndarray:
        """(n, C, T) non-ictal high-amplitude events in any window (the false alarms of real EEG).

        About 40 % of windows hold one: an eye movement or blink (a 0.5-2 Hz deflection of
        3-8x the background on the most anterior channels) or a muscle burst (20-45 Hz
        broadband, 1-4 s, on the most lateral channels).
        """
        spec = self.spec
        c, t = spec.n_chans, spec.n_times
        out = np.zeros((n, c, t))
        tt = np.arange(t) / spec.sfreq
        front = np.exp((pos[:, 1] - pos[:, 1].max()) / 0.03)  # y: anterior
        side = np.exp((np.abs(pos[:, 0]) - np.abs(pos[:, 0]).max()) / 0.03)  # |x|: lateral
        for i in np.flatnonzero(rng.random(n) < 0.4 * self.class_separation):
            start = rng.uniform(0.0, max(spec.window_seconds - 1.0, 0.0))
            if rng.random() < 0.5:
                f0 = rng.uniform(0.5, 2.0) * self._hz
                length = 1.0 / f0
                env = np.where((tt >= start) & (tt < start + length), np.sin(np.pi * (tt - start) / length), 0.0)
                out[i] = rng.uniform(3.0, 8.0) * front[:, None] * env[None, :]
            else:
                length = rng.uniform(1.0, 4.0)
                env = ((tt >= start) & (tt < start + length)).astype(float)
                noise = rng.standard_normal(t)
                spectrum = np.fft.rfft(noise)
                freqs = np.fft.rfftfreq(t, 1.0 / spec.sfreq)
                spectrum[(freqs < 20.0 * self._hz) | (freqs > 45.0 * self._hz)] = 0.0
                burst = np.fft.irfft(spectrum, n=t)
                burst /= burst.std() + 1e-12
                out[i] = rng.uniform(1.5, 3.0) * side[:, None] * (env * burst)[None, :]
        return out

    def _kernel_len(self, seconds: float) -> int:
        return int(np.clip(round(seconds * self.spec.sfreq), 4, self.spec.n_times // 2))

    def _spike_wave(self, seconds: float) -> np.ndarray:
        """One spike-and-wave complex: a sharp spike (~70 ms) then an opposite slow wave."""
        tt = np.arange(self._kernel_len(seconds)) / self.spec.sfreq
        return _gauss(tt, 0.04, 0.012) - 0.6 * _gauss(tt, 0.18, 0.05)

    def _sleep_kernels(self, params: _Subject) -> tuple[np.ndarray, np.ndarray]:
        sfreq = self.spec.sfreq
        length = self._kernel_len(1.5)
        tt = np.arange(length) / sfreq
        mid = tt[-1] / 2.0
        spindle = np.sin(2.0 * np.pi * 13.0 * self._hz * params.peak_shift * tt) * _gauss(tt, mid, mid / 3.0)
        length = self._kernel_len(1.0)
        tt = np.arange(length) / sfreq
        scale = tt[-1] if tt[-1] > 0 else 1.0
        kcomplex = -_gauss(tt, 0.3 * scale, 0.08 * scale) + 0.6 * _gauss(tt, 0.6 * scale, 0.15 * scale)
        return spindle, kcomplex

    def _train(self, rng: np.random.Generator, counts: np.ndarray, kernel: np.ndarray,
               amplitude: float) -> np.ndarray:
        """(n, F) ortho rFFT of ``counts[i]`` copies of ``kernel`` at random times in window ``i``."""
        t = self.spec.n_times
        n = len(counts)
        m = int(counts.max()) if n else 0
        if m == 0 or amplitude == 0.0:
            return np.zeros((n, len(self._freqs)), dtype=np.complex128)
        pos = rng.integers(0, t - len(kernel) + 1, (n, m))
        amp = amplitude * rng.uniform(0.7, 1.3, (n, m)) * (np.arange(m)[None] < counts[:, None])
        return self._place(pos, amp, kernel)

    def _bursts(self, rng: np.random.Generator, y: np.ndarray, kernel: np.ndarray, params: _Subject,
                amplitude: float) -> np.ndarray:
        """(n, F) ortho rFFT of spike-and-wave bursts; class ``k`` repeats at ``(1 + (k-1)/2) * 3 Hz``."""
        t, sfreq = self.spec.n_times, self.spec.sfreq
        n = len(y)
        if n == 0 or amplitude == 0.0:
            return np.zeros((n, len(self._freqs)), dtype=np.complex128)
        period = sfreq / (params.spike_freq * self._hz * (1.0 + 0.5 * (y - 1)))
        span = t - len(kernel)
        duration = np.minimum(rng.uniform(0.5, 1.0, n) * span, span)
        duration = np.minimum(np.maximum(duration, 2.0 * period), span)
        start = rng.uniform(0.0, 1.0, n) * (span - duration)
        m = int(np.ceil((duration / period).max())) + 1
        offsets = np.arange(m)[None] * period[:, None]
        pos = np.round(start[:, None] + offsets).astype(np.int64)
        live = (offsets <= duration[:, None]) & (pos <= span)
        amp = amplitude * rng.uniform(0.8, 1.2, (n, 1)) * live
        return self._place(np.minimum(pos, span), amp, kernel)

    def _place(self, pos: np.ndarray, amp: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        t = self.spec.n_times
        n = pos.shape[0]
        impulses = np.zeros((n, t))
        np.add.at(impulses, (np.repeat(np.arange(n), pos.shape[1]), pos.ravel()), amp.ravel())
        padded = np.zeros(t)
        padded[: len(kernel)] = kernel
        # rfft(impulses) * ortho-rfft(kernel) is the ortho rFFT of their (non-wrapping) convolution.
        return np.fft.rfft(impulses, axis=-1) * np.fft.rfft(padded, norm="ortho")


def _channel_positions(ch_names: tuple[str, ...]) -> np.ndarray:
    """Scalp positions (metres) of the channels; unknown names sit on a 9 cm circle in order."""
    from biosig_lightning.features.montage import electrode_positions

    try:
        return electrode_positions(ch_names)
    except ValueError:
        angle = 2.0 * np.pi * np.arange(len(ch_names)) / max(len(ch_names), 1)
        return 0.09 * np.stack([np.cos(angle), np.sin(angle), np.zeros_like(angle)], axis=1)


def _seizure_types(classes: tuple[str, ...]) -> list[str | None]:
    """Seizure type of each class: ``None`` for background (two classes), else by name or order."""
    if len(classes) == 2:
        return [None, "mixed"]
    named = [_SEIZURE_TYPE_NAMES.get(c.strip().lower()) for c in classes]
    free = iter(t for t in _SEIZURE_TYPES if t not in named)
    return [t if t is not None else next(free, "focal") for t in named]
