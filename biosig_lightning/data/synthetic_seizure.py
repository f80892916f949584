"""The ``seizure`` stand-in: evolving ictal rhythms that start on some channels and spread.

With two classes (detection) 15 % of windows overlap a seizure (durations log-normal around 40 s,
as TUSZ's), which may begin or end inside the window (at least 3 s of it visible), mostly focal.
With more classes every window is a seizure clip that starts 2 s before onset, and the classes are
seizure types, named or in this order: focal (CF: a rhythm at the patient's own focus that slows
from ~6 Hz and spreads to neighbouring electrodes over seconds), generalised (GN: 4-6 Hz on all
channels within half a second), absence (AB: 3 Hz spike-and-wave on all channels, abrupt, constant
rate) and tonic (CT: low-voltage 15-20 Hz, then high-amplitude clonic slowing). Presentations
overlap (a fifth of focal seizures spread bilaterally within a second, 30 % of generalised ones
start focally), and amplitudes are log-normal, so some seizures barely exceed the background.
Class priors fall off as 1, 1/2, 1/4, 1/4. Every window may hold isolated sharp transients and,
40 % of them, an artifact (eye movement on anterior channels or a muscle burst on lateral ones)
that is not a seizure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from biosig_lightning.data.synthetic_base import ICTAL, SubjectParams, SyntheticReader, rng_for

__all__ = ["SEIZURE_VERSION", "SeizureStandIn"]

SEIZURE_VERSION = 2
"""Part of the config of ``kind="seizure"`` stand-ins only: bump it whenever their windows change."""

_SEIZURE_FRACTION = 0.15  # windows overlapping a seizure in detection (two classes)
_SEIZURE_AMP = 3.0  # ictal rhythm amplitude over the background standard deviation
_SEIZURE_TYPES = ("focal", "generalized", "absence", "tonic")
_SEIZURE_TYPE_NAMES = {"cf": "focal", "focal": "focal", "fnsz": "focal", "gn": "generalized",
                       "generalized": "generalized", "gnsz": "generalized", "ab": "absence",
                       "absence": "absence",
                       "absz": "absence", "ct": "tonic", "tonic": "tonic", "tnsz": "tonic"}


class SeizureStandIn(SyntheticReader):
    """Seizures and their look-alikes (module docstring); arguments are :class:`SyntheticReader`'s."""

    kind = "seizure"

    def _config_extra(self) -> dict[str, Any]:
        return {"seizure_version": SEIZURE_VERSION}

    def _subject_extra(self, subject: int) -> dict[str, Any]:
        """The subject's seizure signature: focus, onset frequency, spread speed."""
        rng = rng_for(self.seed, ICTAL, subject)
        d = self.subject_drift
        return {"focus": int(rng.integers(self.spec.n_chans)),
                "ictal_freq": float(6.0 * self._hz * np.exp(0.2 * d * rng.standard_normal())),
                "spread_speed": float(0.03 * np.exp(0.4 * d * rng.standard_normal()))}

    def _window_labels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        k = self.spec.n_outputs
        if k == 2:
            y = np.zeros(n, dtype=np.int64)
            y[rng.permutation(n)[: int(round(_SEIZURE_FRACTION * n))]] = 1
            return y
        prior = np.array([1.0, 0.5] + [0.25] * (k - 2))
        return rng.choice(k, size=n, p=prior / prior.sum()).astype(np.int64)

    def _events(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        out = super()._events(rng, y, params)
        kernel = self._spike_wave(0.33)
        isolated = rng.poisson(0.2 * self.spec.window_seconds, len(y))
        out[:, 0] += self._train(rng, isolated, kernel[: max(len(kernel) // 3, 4)], 2.5)
        return out

    def _ictal(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
        return self._seizures(rng, y, params)

    def _seizures(self, rng: np.random.Generator, y: np.ndarray, params: SubjectParams) -> np.ndarray:
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
                env = np.where((tt >= start) & (tt < start + length),
                               np.sin(np.pi * (tt - start) / length), 0.0)
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
