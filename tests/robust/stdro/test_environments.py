"""STDRO's environments: training patients only, deterministic per seed, clustered by per-patient means."""

from __future__ import annotations

import numpy as np
import pytest

from biosig_lightning.data.datamodules import SyntheticDataModule, TUSZDataModule
from biosig_lightning.robust.stdro import environments as envs_mod
from biosig_lightning.robust.stdro.environments import patient_environments


def test_environments_training_patients_only_deterministic(tmp_path) -> None:
    def make() -> TUSZDataModule:
        return TUSZDataModule(synthetic=True, features="fft", cache_dir=str(tmp_path),
                              synthetic_options={"n_subjects": 14, "dev_subjects": 3,
                                                 "windows_per_subject": 7})

    dm = make()
    dm.setup()
    env = patient_environments(dm, 4, seed=0)
    assert sorted(env) == sorted(dm.subjects["train"])  # never val or test patients
    assert sorted(set(env.values())) == [0, 1, 2, 3]
    assert patient_environments(make(), 4, seed=0) == env  # deterministic per seed, on a fresh module
    assert len(set(patient_environments(dm, 6, seed=0).values())) == 6
    per_subject = patient_environments(dm, 4, kind="subject")
    assert per_subject == {s: i for i, s in enumerate(sorted(dm.subjects["train"]))}
    with pytest.raises(ValueError, match="exceeds the"):
        patient_environments(dm, 50, seed=0)
    with pytest.raises(ValueError, match="'kmeans' or 'subject'"):
        patient_environments(dm, 4, kind="site")  # type: ignore[arg-type]


def test_environments_cluster_per_patient_means(tmp_path, monkeypatch) -> None:
    dm = SyntheticDataModule(n_subjects=12, windows_per_subject=4,
                             label_level="window", cache_dir=str(tmp_path))
    dm.setup()
    # a descriptor that only sees which half of the id range a window's patient is in
    ds = dm.datasets["train"]
    subject_of = dict(zip(ds.indices.tolist(),
                          np.asarray(dm.cache.subjects[ds.indices]).tolist(), strict=True))
    order = iter(ds.indices.tolist())
    monkeypatch.setattr(envs_mod, "environment_descriptor", lambda x, step_bins=0: np.array(
        [[float(subject_of[next(order)] > 6), 0.0] for _ in range(len(x))]))
    env = patient_environments(dm, 2, seed=3)
    groups = {v: sorted(s for s in env if env[s] == v) for v in set(env.values())}
    assert sorted(groups.values()) == [[s for s in sorted(env) if s <= 6], [s for s in sorted(env) if s > 6]]
