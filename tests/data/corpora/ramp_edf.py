"""A small EDF writer for reader tests: channel ``k`` holds ``step * k + t`` (t in seconds), so a test can
tell every channel and sample apart after reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pyedflib import highlevel


def write_ramp_edf(path: Path, labels: list[str], seconds: float, fs: float, step: float = 10.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * fs)) / fs
    signals = [step * k + t for k in range(len(labels))]
    headers = [highlevel.make_signal_header(lbl, sample_frequency=fs, physical_min=-1000, physical_max=5000)
               for lbl in labels]
    assert highlevel.write_edf(str(path), signals, headers)
