"""The base of every synthetic stand-in: background, subject drift and window assembly.

:class:`SyntheticReader` is a :class:`~biosig_lightning.data.spec.CorpusReader` that needs no
files. Each stand-in *kind* is a small subclass in its own module (``synthetic_bands.py``,
``synthetic_motif.py``, ``synthetic_spikes.py``, ``synthetic_sleep.py``, ``synthetic_seizure.py``)
that says how its classes show in the signal; ``SyntheticReader(spec, kind=...)`` builds the
subclass of that kind. Everything else lives here, drawn in the rFFT domain, one FFT per window:

1. **Background**: Gaussian aperiodic activity with a ``1/(f + 1)^alpha`` power spectrum, the
   exponent ``alpha`` per subject (noise colour), and a per-window state fluctuation.
2. **Class signal**: the kind's hooks (:meth:`SyntheticReader._class_power` on the power
   spectrum, :meth:`~SyntheticReader._events` for transients, :meth:`~SyntheticReader._ictal` for
   time-domain activity).
3. **Subject variability** (scaled by ``subject_drift``), after BioFormer's *spectral drift*
   (BioFormer paper, Sec. 1 and Fig. 1): subjects share a label's spectral structure but differ
   by band-wise magnitude and phase shifts. Each subject gets a smooth random gain and phase
   response over log-frequency (shared across channels plus a per-channel part) applied to the
   rFFT of every window, a shift of all physiological peak frequencies (as the individual alpha
   frequency does), a channel mixing matrix near the identity, per-channel baseline offsets, an
   amplitude scale, its own background exponent and sensor-noise level, and a *fingerprint*: a
   narrowband oscillation at a subject-specific frequency and spatial pattern. The fingerprint
   carries no label, but lets a model recognise subjects, so, as in real data, random window
   splits (subject-dependent) score higher than subject-disjoint ones. Each recording adds a
   smaller session drift of its own.
4. **Volume conduction** (``volume_conduction``, off by default): every scalp channel records a
   distance-weighted mixture of the sources under the neighbouring electrodes, so nearby channels
   correlate, as on a real scalp (Nunez & Srinivasan, *Electric Fields of the Brain*, 2nd ed., ch. 8);
   a Gaussian head kernel over the channels' standard 10-20 positions, shared by all subjects.

Determinism: the random streams are keyed by ``(seed, purpose, subject, recording)``, so the
same arguments give bit-identical windows and a subject's windows do not depend on how many
other subjects are generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from biosig_lightning.data.spec import CorpusSpec, WindowBlock
from biosig_lightning.data.synthetic_coupling import apply_coupling, plant_coupling

__all__ = ["GENERATOR_VERSION", "KINDS", "Kind", "SubjectParams", "SyntheticReader"]

GENERATOR_VERSION = "synthetic-1"
"""Part of :meth:`SyntheticReader.config`: bump it whenever the generated windows change."""

Kind = Literal["bands", "motif", "spikes", "sleep", "seizure"]
KINDS: tuple[str, ...] = ("bands", "motif", "spikes", "sleep", "seizure")

# Purposes of the random streams; keeping them apart is what makes subjects independent.
GLOBAL, SUBJECT, RECORDING, CLASSES, ICTAL = 0, 1, 2, 3, 4

# Log-amplitude gain drift per subject: standard deviation shared by all channels, per channel.
_GAIN_SD = (0.3, 0.15)
_PEAK_SHIFT_SD = 0.08  # log-frequency shift of the subject's peaks (individual alpha frequency)


def head_kernel(spec: CorpusSpec, width: float) -> np.ndarray:
    """The ``(C, C)`` volume-conduction mixing of ``spec``'s channels: ``exp(-d_ij^2 / (width * m)^2)`` over
    their standard 10-20 positions (``m`` the median distance between two channels), each row scaled to
    unit norm so that independent unit-variance sources give unit-variance channels."""
    from biosig_lightning.features.montage import electrode_positions

    try:
        pos = electrode_positions(spec.ch_names)
    except ValueError as exc:
        raise ValueError(f"synthetic volume_conduction on {spec.name!r}: {exc}") from None
    dist = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
    off = ~np.eye(len(pos), dtype=bool)
    scale = width * float(np.median(dist[off])) if off.any() else 1.0
    kernel = np.exp(-(dist**2) / max(scale, 1e-12) ** 2)
    return kernel / np.linalg.norm(kernel, axis=1, keepdims=True)


def rng_for(seed: int, *keys: int) -> np.random.Generator:
    """The random stream of ``(seed, *keys)`` (keys: a purpose above, then subject, recording...)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def cnormal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Circular complex Gaussian with unit mean power (random-phase spectral coefficients)."""
    z = rng.standard_normal((*shape, 2))
    return (z[..., 0] + 1j * z[..., 1]) * np.sqrt(0.5)


def gauss(x: np.ndarray, centre: float, width: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - centre) / width) ** 2)


@dataclass
class SubjectParams:
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

    ``SyntheticReader(spec, kind=...)`` returns the subclass registered for ``kind`` (each kind
    module's class names its ``kind``), so callers never pick the class themselves.

    Args:
        spec: the corpus shape to imitate (channels, rate, window length, classes, label level).
        n_subjects: subjects ``1..n_subjects``.
        windows_per_subject: windows per subject, split as evenly as possible over its recordings.
        kind: how classes show in the signal (``bands``, ``motif``, ``spikes``, ``sleep``,
            ``seizure``; see each kind's module).
        seed: non-negative integer; the same arguments give bit-identical windows.
        recordings_per_subject: recordings (sessions, nights) per subject, ``s03_r1``...
        subject_drift: scale of all between-subject differences; 0 makes subjects draws from one
            distribution (random and subject-disjoint splits then agree).
        noise: scale of the sensor noise.
        class_separation: scale of the class signal (peak amplitudes, motif and spike amplitudes,
            stage contrasts); 0 makes classes indistinguishable.
        sleep_start: ``wake`` (recordings start awake, as a night does) or ``stationary`` (a
            stretch from anywhere in the night); ``sleep`` only.
        coupling_edges: planted directed couplings shared by all subjects (lagged, band-pass
            filtered copies of a parent channel added to a child,
            :mod:`biosig_lightning.data.synthetic_coupling`); 0 plants none. The edges are
            ``self.coupling`` and part of :meth:`config`.
        band_gain_drift: scale of the subject's smooth gain response over frequency (the
            band-wise magnitude drift), on top of ``subject_drift``; the other drifts keep
            ``subject_drift``. Below 1 for stand-ins whose class lives in band power (see the
            corpora's ``SYNTHETIC_DEFAULTS``): at 1 a subject's theta/alpha gain ratio varies as
            much as a class changes it.

    With ``spec.label_level == "subject"`` every window of a subject has the subject's class;
    classes are dealt in blocks of ``K`` consecutive subjects, each block a seeded permutation of
    the classes, so they are balanced, all present once ``n_subjects >= K``, and independent of
    ``n_subjects``. Window-level labels are the kind's (balanced per recording by default).
    """

    kind: ClassVar[str] = ""
    _registry: ClassVar[dict[str, type[SyntheticReader]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            SyntheticReader._registry[cls.kind] = cls

    def __new__(cls, spec: CorpusSpec, *args: Any, kind: str = "bands", **kwargs: Any) -> SyntheticReader:
        if cls is not SyntheticReader:
            return super().__new__(cls)
        if kind not in KINDS:
            raise ValueError(f"synthetic kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind not in cls._registry:  # each kind registers when its module is imported
            raise ValueError(f"synthetic kind {kind!r} is not loaded: build stand-ins through "
                             "biosig_lightning.data.synthetic, which imports every kind")
        return super().__new__(cls._registry[kind])

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
        volume_conduction: float = 0.0,
    ) -> None:
        if kind != self.kind:
            raise ValueError(f"{type(self).__name__} makes kind={self.kind!r} windows, got kind={kind!r}")
        for name, count in (("n_subjects", n_subjects), ("windows_per_subject", windows_per_subject),
                            ("recordings_per_subject", recordings_per_subject)):
            if int(count) != count or count < 1:
                raise ValueError(f"synthetic {name} must be a positive integer, got {count!r}")
        if windows_per_subject < recordings_per_subject:
            raise ValueError(f"synthetic windows_per_subject ({windows_per_subject}) is below "
                             f"recordings_per_subject ({recordings_per_subject}): a recording would be empty")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"synthetic seed must be a non-negative integer, got {seed!r}")
        for name, value in (("subject_drift", subject_drift), ("noise", noise),
                            ("class_separation", class_separation), ("band_gain_drift", band_gain_drift),
                            ("volume_conduction", volume_conduction)):
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"synthetic {name} must be a finite number >= 0, got {value!r}")
        if spec.n_outputs < 2 or spec.n_chans < 1 or spec.n_times < 16 or spec.sfreq <= 0:
            raise ValueError(f"synthetic corpus {spec.name!r}: need >= 2 classes, >= 1 channel, >= 16 "
                             f"samples "
                             f"and sfreq > 0, got {spec.n_outputs} classes, {spec.n_chans} channels, "
                             f"{spec.n_times} samples at {spec.sfreq:g} Hz")
        if sleep_start not in ("wake", "stationary"):
            raise ValueError(f"synthetic sleep_start must be 'wake' or 'stationary', got {sleep_start!r}")
        self.spec = spec
        self.n_subjects = int(n_subjects)
        self.windows_per_subject = int(windows_per_subject)
        self.seed = int(seed)
        self.recordings_per_subject = int(recordings_per_subject)
        self.subject_drift = float(subject_drift)
        self.noise = float(noise)
        self.class_separation = float(class_separation)
        self.band_gain_drift = float(band_gain_drift)
        self.sleep_start = sleep_start
        self.volume_conduction = float(volume_conduction)
        self._head = head_kernel(spec, self.volume_conduction) if self.volume_conduction else None

        self._freqs = np.fft.rfftfreq(spec.n_times, d=1.0 / spec.sfreq)
        self._nyq = spec.sfreq / 2.0
        # Physiological frequencies shrink with a low Nyquist so every class stays visible.
        self._hz = min(1.0, self._nyq / 50.0)
        self._setup()
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
            **({"volume_conduction": self.volume_conduction} if self.volume_conduction else {}),
            **self._config_extra(),
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
        return int(rng_for(self.seed, CLASSES, block).permutation(k)[slot])

    def subject_blocks(self, subject: int) -> list[WindowBlock]:
        """The recordings of one subject (depends only on the arguments and ``subject``)."""
        if not 1 <= subject <= self.n_subjects:
            raise ValueError(f"synthetic corpus {self.spec.name!r}: subject {subject} outside "
                             f"1..{self.n_subjects}")
        params = self._subject_params(subject)
        r_count = self.recordings_per_subject
        sizes = [self.windows_per_subject // r_count + (r < self.windows_per_subject % r_count)
                 for r in range(r_count)]
        blocks = []
        for r, n in enumerate(sizes, start=1):
            rng = rng_for(self.seed, RECORDING, subject, r)
            y = np.full(n, params.label, dtype=np.int64) if params.label >= 0 else self._window_labels(rng, n)
            x = self._windows(rng, y, params)
            block = WindowBlock(subject=subject, recording=f"s{subject:02d}_r{r}", x=x, y=y,
                                start=np.arange(n, dtype=np.float64) * self.spec.window_seconds)
            block.validate(self.spec, source=f"synthetic:{self.spec.name}:{block.recording}")
            blocks.append(block)
        return blocks

    # -- hooks of the kinds ---------------------------------------------------------
    def _setup(self) -> None:
        """Check the spec for this kind and derive what it needs (before the global parameters)."""

    def _config_extra(self) -> dict[str, Any]:
        """Keys this kind adds to :meth:`config` (a kind's own version, so its caches change alone)."""
        return {}

    def _kind_globals(self, rng: np.random.Generator, out: dict[str, Any]) -> None:
        """Add this kind's class patterns to ``out``, drawing from the global stream after the base."""

    def _subject_extra(self, subject: int) -> dict[str, Any]:
        """This kind's own subject parameters (from a stream of its own: other kinds stay unchanged)."""
        return {}

    def _window_labels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Window-level labels of one recording: balanced over the classes by default."""
        return rng.permutation(np.arange(n) % self.spec.n_outputs).astype(np.int64)

    def _class_power(self, rng: np.random.Generator, power: np.ndarray, bg2: np.ndarray, y: np.ndarray,
                     params: SubjectParams) -> np.ndarray:
        """The ``(n, C, F)`` power spectrum with the class's spectral signal added (none by default)."""
        return power

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        """(n, 1, F) ortho rFFT of the transients of each window (none by default)."""
        return np.zeros((len(y), 1, len(self._freqs)), dtype=np.complex128)

    def _ictal(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray | None:
        """(n, C, T) time-domain activity added before the drift, or ``None`` (the default)."""
        return None

    # -- parameters -----------------------------------------------------------------
    def _global_params(self) -> dict[str, Any]:
        """Class patterns shared by all subjects (they depend on the seed only)."""
        rng = rng_for(self.seed, GLOBAL)
        k, c = self.spec.n_outputs, self.spec.n_chans
        out: dict[str, Any] = {"class_pattern": rng.uniform(0.5, 1.0, (k, c))}
        self._kind_globals(rng, out)
        return out

    def _subject_params(self, subject: int) -> SubjectParams:
        rng = rng_for(self.seed, SUBJECT, subject)
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
        return SubjectParams(
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
            **self._subject_extra(subject),
        )

    # -- signals --------------------------------------------------------------------
    def _windows(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        spec, f = self.spec, self._freqs
        n, c, t = len(y), spec.n_chans, spec.n_times
        # Background power spectrum, normalised to unit variance for the ortho irFFT.
        bg2 = (f + self._hz) ** (-params.exponent)
        bg2[0] = 0.0
        bg2 /= 2.0 * bg2.sum() / t
        power = np.broadcast_to(bg2, (n, c, len(f))).copy()
        power *= np.exp(0.3 * rng.standard_normal((n, 1, 1)))  # state fluctuation between windows
        power = self._class_power(rng, power, bg2, y, params)
        spectrum = np.sqrt(power) * cnormal(rng, (n, c, len(f)))
        spectrum += self._events(rng, y, params) * params.event_weights[None, :, None]
        ictal = self._ictal(rng, y, params)
        if ictal is not None:
            spectrum += np.fft.rfft(ictal, axis=-1, norm="ortho")
        apply_coupling(spectrum, f, self.coupling)  # planted directed couplings (before subject drift)

        # Session drift (small), then the subject's spectral drift.
        session = np.exp(0.1 * self.subject_drift * rng.standard_normal((c, 1)))
        spectrum *= params.response * session
        spectrum[..., 0] = 0.0
        x = np.fft.irfft(spectrum, n=t, axis=-1, norm="ortho")

        time = np.arange(t) / spec.sfreq
        phase0 = rng.uniform(0.0, 2.0 * np.pi, (n, 1, 1))
        x += params.fp_amp[None, :, None] * np.sin(2.0 * np.pi * params.fp_freq * time + phase0)
        if self._head is not None:  # the scalp sees each source through the head (volume conduction)
            x = np.einsum("ij,njt->nit", self._head, x)
        x = np.einsum("ij,njt->nit", params.mixing, x)
        x += self.noise * params.sensor_noise * rng.standard_normal(x.shape)
        x = params.scale * x + params.offset[None, :, None]
        return x.astype(np.float32)

    # -- transients, shared by the kinds that place them --------------------------
    def _kernel_len(self, seconds: float) -> int:
        return int(np.clip(round(seconds * self.spec.sfreq), 4, self.spec.n_times // 2))

    def _spike_wave(self, seconds: float) -> np.ndarray:
        """One spike-and-wave complex: a sharp spike (~70 ms) then an opposite slow wave."""
        tt = np.arange(self._kernel_len(seconds)) / self.spec.sfreq
        return gauss(tt, 0.04, 0.012) - 0.6 * gauss(tt, 0.18, 0.05)

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

    def _place(self, pos: np.ndarray, amp: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        t = self.spec.n_times
        n = pos.shape[0]
        impulses = np.zeros((n, t))
        np.add.at(impulses, (np.repeat(np.arange(n), pos.shape[1]), pos.ravel()), amp.ravel())
        padded = np.zeros(t)
        padded[: len(kernel)] = kernel
        # rfft(impulses) * ortho-rfft(kernel) is the ortho rFFT of their (non-wrapping) convolution.
        return np.fft.rfft(impulses, axis=-1) * np.fft.rfft(padded, norm="ortho")
