"""STDRO's environments: which patient group each training patient belongs to (paper Sec. 3.2.2).

The paper forms its environments by clustering patients: "we average the EEG signals of each single
patient, and conduct clustering algorithms on these averaged EEG signals". :func:`patient_environments`
does this for the training windows of any DataModule (``datasets['train']`` and ``subjects['train']``
after ``setup``); ``kind="subject"`` instead makes every training patient its own environment (the
finest grouping, for corpora with few patients).

Reading: each training patient is summarised by the mean of :func:`environment_descriptor` over its
training windows as the model sees them (normalised), the summaries are z-scored per dimension across
patients, and ``sklearn.cluster.KMeans(k, n_init=10, random_state=seed)`` groups them. Validation and
test patients are never clustered. Environments are numbered by their smallest patient id, so the
mapping depends on the seed only through the clustering.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = ["EnvironmentKind", "environment_descriptor", "patient_environments"]

EnvironmentKind = Literal["kmeans", "subject"]


def environment_descriptor(x: np.ndarray, step_bins: int = 0) -> np.ndarray:
    """Per-window descriptor ``(n, d)`` whose per-patient mean is clustered into environments.

    For step-major spectra (``step_bins > 0``: ``x`` holds ``T // step_bins`` steps of ``step_bins``
    log-amplitude bins) the mean spectrum over the steps per channel (``C * step_bins``); for raw
    signals the log-amplitude spectrum of each channel (``C * (T // 2 + 1)``), since a mean of raw
    waveforms cancels out. A window with sequence context ``(n, L, C, T)`` is described by its centre.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 4:
        x = x[:, x.shape[1] // 2]
    n, c, t = x.shape
    if step_bins > 0:
        return x.reshape(n, c, t // step_bins, step_bins).mean(axis=2).reshape(n, -1)
    return np.log(np.abs(np.fft.rfft(x, axis=-1)) + 1e-8).reshape(n, -1)


def _patient_means(dataset: Any, step_bins: int, chunk: int = 512) -> dict[int, np.ndarray]:
    """Mean descriptor of each patient over ``dataset`` (a window dataset with ``__getitems__``)."""
    sums: dict[int, np.ndarray] = {}
    counts: dict[int, int] = {}
    for lo in range(0, len(dataset), chunk):
        batch = dataset.__getitems__(list(range(lo, min(lo + chunk, len(dataset)))))
        desc = environment_descriptor(np.asarray(batch["x"]), step_bins)
        subjects = np.asarray(batch["subject"])
        for sid in np.unique(subjects):
            rows = subjects == sid
            sums[int(sid)] = sums.get(int(sid), 0.0) + desc[rows].sum(axis=0)
            counts[int(sid)] = counts.get(int(sid), 0) + int(rows.sum())
    return {s: sums[s] / counts[s] for s in sums}


def patient_environments(datamodule: Any, k: int, seed: int = 0, kind: EnvironmentKind = "kmeans",
                         step_bins: int | None = None) -> dict[int, int]:
    """Environment of each TRAINING patient of ``datamodule`` (set up on demand).

    Args:
        datamodule: a DataModule exposing ``datasets['train']`` and ``subjects['train']``.
        k: number of environments for ``kind="kmeans"`` (Table 7: 4 or 6); ignored for ``subject``.
        seed: the k-means seed.
        kind: ``kmeans`` (the paper's patient groups) or ``subject`` (one environment per patient).
        step_bins: bins per step of step-major spectra; ``None`` reads ``datamodule.step_bins``.

    Returns:
        ``{subject_id: environment index}``, indices ``0..K-1`` numbered by their smallest patient.
    """
    if kind not in ("kmeans", "subject"):
        raise ValueError(f"model.init_args.environments must be 'kmeans' or 'subject', got {kind!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"environments: k must be a positive int, got {k!r}")
    if not getattr(datamodule, "datasets", None):
        datamodule.setup("fit")
    train = sorted(int(s) for s in datamodule.subjects["train"])
    name = getattr(datamodule, "dataset_name", type(datamodule).__name__)
    if kind == "subject":
        return {s: i for i, s in enumerate(train)}
    if k > len(train):
        raise ValueError(f"environments: k={k} exceeds the {len(train)} training patients of {name} "
                         "(model.init_args.n_environments)")
    bins = int(getattr(datamodule, "step_bins", 0) or 0) if step_bins is None else int(step_bins)
    means = _patient_means(datamodule.datasets["train"], bins)
    ids = [s for s in train if s in means]
    feats = np.stack([means[s] for s in ids])
    feats = (feats - feats.mean(axis=0)) / (feats.std(axis=0) + 1e-8)
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # one row per patient: a threaded BLAS only spins on products this small
    with threadpool_limits(limits=1, user_api="blas"):
        labels = KMeans(n_clusters=k, n_init=10, random_state=int(seed)).fit_predict(feats)
    order: dict[int, int] = {}
    for lab in labels:  # ids are sorted, so environments are numbered by their smallest patient
        order.setdefault(int(lab), len(order))
    return {sid: order[int(lab)] for sid, lab in zip(ids, labels, strict=True)}
