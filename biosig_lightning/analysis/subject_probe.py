"""``biosig probe``: how much subject identity a trained backbone's features carry (BioFormer Sec. 5.5).

``biosig probe RUN_DIR [--split test] [--out DIR] [--epochs 100] [--hidden 256] [--lr 1e-3]
[--test-fraction 0.3] [--seed 0] [--max-windows 3000] [--checkpoint best] [--batch-size 256]
[--probe-batch-size 64] [--device auto]`` reopens the run with :func:`biosig_lightning.runs.load_run`,
extracts frozen
features ``task.backbone.forward_features(x)`` (eval mode: no dropout, no in-model augmentation)
for every window of one split and writes ``probe.json`` and ``probe.png`` to ``--out`` (default
``RUN_DIR/analysis``). Lower subject scores mean less subject-specific information.

What is measured:

* Subject probe (Table 4, "Subject F1"): a lightweight MLP trained on the frozen features to
  predict subject identity; macro-F1 and accuracy on held-out windows, as fractions in [0, 1]
  (the paper prints percent); ``majority_acc`` (always the most frequent subject) is the chance
  reference.
* Subject clustering (Table 4, NMI / AMI): k-means with ``k`` = number of subjects in the split,
  scored against the subject ids with normalised and adjusted mutual information.
* Silhouette scores (Appendix G.6, Table 12) of the features with respect to the subject ids
  ("Subject", lower is better) and to the class labels ("Label", higher is better).

The protocol details the paper leaves open (the split, the within-subject probe split, the probe, the
clustering and the silhouettes) are read as :func:`compute_probe` lists.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.special import gammaln
from torch import nn

from biosig_lightning.analysis.fbd import AnalysisError, split_batches
from biosig_lightning.runs import LoadedRun

__all__ = [
    "adjusted_mutual_info",
    "collect_features",
    "kmeans",
    "macro_f1",
    "normalized_mutual_info",
    "pca_2d",
    "principal_coordinates",
    "probe_split",
    "silhouette_score",
    "train_probe",
]


# --------------------------------------------------------------------------- clustering scores


def _contingency(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a).ravel()
    b = np.asarray(b).ravel()
    if a.shape != b.shape:
        raise AnalysisError(f"labelings differ in length: {a.shape[0]} vs {b.shape[0]}")
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max(initial=-1) + 1, ib.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (ia, ib), 1)
    return table


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def _mutual_info(table: np.ndarray) -> float:
    n = table.sum()
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    i, j = np.nonzero(table)
    nij = table[i, j].astype(np.float64)
    return float(max(0.0, (nij / n * (np.log(nij * n) - np.log(rows[i] * cols[j].astype(np.float64)))).sum()))


def normalized_mutual_info(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """NMI with the arithmetic mean of the entropies, ``MI / ((H(U) + H(V)) / 2)``.

    Two labelings that are each a single group are identical partitions: 1.0.
    """
    table = _contingency(labels_true, labels_pred)
    if table.shape[0] == table.shape[1] == 1 or table.size == 0:
        return 1.0
    mi = _mutual_info(table)
    norm = (_entropy(table.sum(axis=1)) + _entropy(table.sum(axis=0))) / 2.0
    return float(mi / max(norm, np.finfo(np.float64).eps))


def _expected_mutual_info(table: np.ndarray) -> float:
    """``E[MI]`` of two labelings with these marginals under random permutation (hypergeometric)."""
    n = int(table.sum())
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    total = 0.0
    lg_n = gammaln(n + 1)
    for a in rows:
        for b in cols:
            lo, hi = max(1, a + b - n), min(a, b)
            if lo > hi:
                continue
            nij = np.arange(lo, hi + 1, dtype=np.float64)
            log_p = (
                gammaln(a + 1)
                + gammaln(b + 1)
                + gammaln(n - a + 1)
                + gammaln(n - b + 1)
                - lg_n
                - gammaln(nij + 1)
                - gammaln(a - nij + 1)
                - gammaln(b - nij + 1)
                - gammaln(n - a - b + nij + 1)
            )
            total += float((nij / n * (np.log(n * nij) - math.log(a * b)) * np.exp(log_p)).sum())
    return total


def adjusted_mutual_info(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """AMI, arithmetic normalisation: ``(MI - E[MI]) / ((H(U) + H(V)) / 2 - E[MI])`` (Vinh et al., 2010)."""
    table = _contingency(labels_true, labels_pred)
    if table.shape[0] == table.shape[1] == 1 or table.size == 0:
        return 1.0
    mi = _mutual_info(table)
    emi = _expected_mutual_info(table)
    denom = (_entropy(table.sum(axis=1)) + _entropy(table.sum(axis=0))) / 2.0 - emi
    tiny = np.finfo(np.float64).eps
    denom = min(denom, -tiny) if denom < 0 else max(denom, tiny)
    return float((mi - emi) / denom)


def _sq_distances(x: np.ndarray, x_sq: np.ndarray, centres: np.ndarray) -> np.ndarray:
    d = x_sq[:, None] + (centres * centres).sum(axis=1)[None, :] - 2.0 * x @ centres.T
    return np.maximum(d, 0.0)


def kmeans(x: np.ndarray, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 300) -> np.ndarray:
    """Cluster labels of k-means (k-means++ starts, Lloyd iterations), best of ``n_init`` by inertia."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if not 1 <= k <= n:
        raise AnalysisError(f"k-means needs 1 <= k <= n_samples, got k={k}, n={n}")
    rng = np.random.default_rng(seed)
    x_sq = (x * x).sum(axis=1)
    rows = np.arange(n)
    best_labels, best_inertia = np.zeros(n, dtype=np.int64), math.inf
    for _ in range(n_init):
        picks = [int(rng.integers(n))]
        closest = _sq_distances(x, x_sq, x[picks])[:, 0]
        for _ in range(1, k):
            total = closest.sum()
            picks.append(int(rng.choice(n, p=closest / total)) if total > 0 else int(rng.integers(n)))
            closest = np.minimum(closest, _sq_distances(x, x_sq, x[picks[-1:]])[:, 0])
        c = x[picks].copy()
        labels = np.full(n, -1, dtype=np.int64)
        for _ in range(max_iter):
            d = _sq_distances(x, x_sq, c)
            new = d.argmin(axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
            counts = np.bincount(labels, minlength=k)
            for j in np.flatnonzero(counts == 0):  # an emptied cluster restarts at the worst-served point
                far = int(d[rows, labels].argmax())
                labels[far] = j
                d[far] = 0.0
            counts = np.bincount(labels, minlength=k)
            onehot = np.zeros((n, k))
            onehot[rows, labels] = 1.0
            c = (onehot.T @ x) / counts[:, None]
        inertia = float(_sq_distances(x, x_sq, c)[rows, labels].sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels.copy(), inertia
    return best_labels


def silhouette_score(x: np.ndarray, labels: np.ndarray, chunk: int = 1024) -> float:
    """Mean silhouette ``(b - a) / max(a, b)`` with Euclidean distances; singletons score 0.

    Raises:
        AnalysisError: unless ``2 <= n_groups <= n_samples - 1`` (the silhouette is undefined).
    """
    x = np.asarray(x, dtype=np.float64)
    _, ids = np.unique(np.asarray(labels).ravel(), return_inverse=True)
    n, k = x.shape[0], int(ids.max(initial=-1)) + 1
    if not 2 <= k <= n - 1:
        raise AnalysisError(f"silhouette needs 2 <= number of groups <= n_samples - 1, got {k} groups, {n} "
                            f"samples")
    onehot = np.zeros((n, k))
    onehot[np.arange(n), ids] = 1.0
    sizes = onehot.sum(axis=0)
    norms = (x * x).sum(axis=1)
    scores = np.empty(n)
    for start in range(0, n, chunk):
        rows = slice(start, min(n, start + chunk))
        d = np.sqrt(np.maximum(norms[rows, None] + norms[None, :] - 2.0 * x[rows] @ x.T, 0.0))
        d[np.arange(d.shape[0]), np.arange(rows.start, rows.stop)] = 0.0
        sums = d @ onehot
        own = ids[rows]
        own_size = sizes[own]
        a = sums[np.arange(len(own)), own] / np.maximum(own_size - 1, 1)
        other = sums / sizes[None, :]
        other[np.arange(len(own)), own] = np.inf
        b = other.min(axis=1)
        s = (b - a) / np.maximum(np.maximum(a, b), np.finfo(np.float64).tiny)
        scores[rows] = np.where(own_size > 1, s, 0.0)
    return float(scores.mean())


def principal_coordinates(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All principal-component scores ``(n, r)`` of ``x`` and their explained-variance ratios (exact PCA).

    The scores are ``x`` centred and rotated onto its principal axes, keeping the ``r`` axes with
    non-zero variance, so every Euclidean distance between samples (and to any mean of samples)
    is preserved. k-means and silhouettes on them equal those on ``x``, at ``r <= n - 1``
    dimensions instead of ``F`` (BioFormer's APAVA features have 28,672). When ``n <= F`` the
    ``n x n`` Gram matrix is decomposed, else the ``F x F`` covariance. Each axis's sign makes
    its largest-magnitude score positive.
    """
    x = np.asarray(x, dtype=np.float64)
    xc = x - x.mean(axis=0)
    if xc.shape[0] <= xc.shape[1]:
        vals, vecs = np.linalg.eigh(xc @ xc.T)
        order = np.argsort(vals)[::-1]
        vals = np.maximum(vals[order], 0.0)
        scores = vecs[:, order] * np.sqrt(vals)
    else:
        vals, vecs = np.linalg.eigh(xc.T @ xc)
        order = np.argsort(vals)[::-1]
        vals = np.maximum(vals[order], 0.0)
        scores = xc @ vecs[:, order]
    keep = vals > vals.max(initial=0.0) * 1e-12 if vals.size else np.zeros(0, dtype=bool)
    scores, vals = scores[:, keep], vals[keep]
    peak = scores[np.abs(scores).argmax(axis=0), np.arange(scores.shape[1])]
    scores = scores * np.where(peak < 0, -1.0, 1.0)
    total = vals.sum()
    return scores, (vals / total if total > 0 else vals)


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """First two principal-component scores ``(n, 2)`` (zero-padded) and their explained-variance ratios."""
    scores, ratio = principal_coordinates(x)
    scores = np.pad(scores[:, :2], ((0, 0), (0, max(0, 2 - scores.shape[1]))))
    return scores, [float(r) for r in ratio[:2]]


# --------------------------------------------------------------------------- subject probe


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Macro-F1 over the labels in ``y_true`` or ``y_pred`` (a label never true nor predicted is absent)."""
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    scores = []
    for c in np.union1d(y_true, y_pred):
        tp = float(np.sum((y_true == c) & (y_pred == c)))
        fp = float(np.sum((y_true != c) & (y_pred == c)))
        fn = float(np.sum((y_true == c) & (y_pred != c)))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else 0.0)
    return float(np.mean(scores)) if scores else 0.0


def probe_split(subjects: np.ndarray, labels: np.ndarray, test_fraction: float = 0.3,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Probe train/test window positions, split within every (subject, class) cell (protocol 2)."""
    if not 0 < test_fraction < 1:
        raise AnalysisError(f"--test-fraction must lie in (0, 1), got {test_fraction}")
    subjects, labels = np.asarray(subjects), np.asarray(labels)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for s in np.unique(subjects):
        for c in np.unique(labels[subjects == s]):
            cell = np.flatnonzero((subjects == s) & (labels == c))
            cell = cell[rng.permutation(len(cell))]
            n_test = min(len(cell) - 1, max(1, round(test_fraction * len(cell)))) if len(cell) >= 2 else 0
            test.append(cell[:n_test])
            train.append(cell[n_test:])
    train_idx, test_idx = np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
    for s in np.unique(subjects):
        if not np.any(subjects[train_idx] == s) or not np.any(subjects[test_idx] == s):
            raise AnalysisError(
                f"subject {int(s)} has {int(np.sum(subjects == s))} window(s): the probe needs at least 2 "
                f"per subject "
                "(one to train on, one to test on)"
            )
    return train_idx, test_idx


def train_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, *, epochs: int = 100,
                hidden: int = 256, lr: float = 1e-3, batch_size: int = 64, seed: int = 0,
                device: torch.device | None = None) -> np.ndarray:
    """Train the MLP subject probe (protocol 3) and return its predictions on ``x_test``.

    ``y_train`` holds any integer ids; the predictions use the same ids.
    """
    if epochs < 1 or hidden < 1 or batch_size < 1:
        raise AnalysisError(f"probe needs epochs, hidden and batch size >= 1, got {epochs}, {hidden}, "
                            f"{batch_size}")
    device = device or torch.device("cpu")
    ids, targets = np.unique(np.asarray(y_train), return_inverse=True)
    mean = x_train.mean(axis=0)
    std = np.maximum(x_train.std(axis=0), 1e-6)
    xt = torch.as_tensor((x_train - mean) / std, dtype=torch.float32, device=device)
    xe = torch.as_tensor((x_test - mean) / std, dtype=torch.float32, device=device)
    yt = torch.as_tensor(targets, dtype=torch.long, device=device)
    gen = torch.Generator().manual_seed(seed)
    # a private RNG stream: the probe is reproducible and leaves the caller's global state alone
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(xt.shape[1], hidden), nn.ReLU(), nn.Dropout(0.1),
                              nn.Linear(hidden, len(ids))).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        model.train()
        for _ in range(epochs):
            for batch in torch.randperm(len(yt), generator=gen).split(batch_size):
                batch = batch.to(device)
                loss = nn.functional.cross_entropy(model(xt[batch]), yt[batch])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            pred = torch.cat([model(xe[i:i + 4096]).argmax(dim=1) for i in range(0, len(xe), 4096)])
    return ids[pred.cpu().numpy()]


# --------------------------------------------------------------------------- the command


def collect_features(loaded: LoadedRun, split: str, batch_size: int = 256,
                     device: torch.device | None = None) -> dict[str, np.ndarray]:
    """Frozen ``backbone.forward_features`` of every window of ``split`` with its class and subject."""
    backbone = loaded.task.backbone.to(device or torch.device("cpu")).eval()
    if not hasattr(backbone, "forward_features"):
        raise AnalysisError(
            f"backbone {type(backbone).__name__} of run {loaded.run_dir} has no forward_features(x) -> (B, "
            f"F); "
            "the subject probe needs the representation before the classifier head"
        )
    feats, ys, subs = [], [], []
    with torch.inference_mode():
        for batch in split_batches(loaded, split, batch_size):
            f = backbone.forward_features(batch["x"].float().to(device or torch.device("cpu")))
            feats.append(f.float().flatten(1).cpu().numpy())
            ys.append(batch["y"].numpy())
            subs.append(batch["subject"].numpy())
    if not feats:
        raise AnalysisError(f"run {loaded.run_dir}: split {split!r} has no windows")
    return {"features": np.concatenate(feats), "y": np.concatenate(ys), "subject": np.concatenate(subs)}


def _silhouette_or_reason(x: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    try:
        return {"score": silhouette_score(x, labels), "n_groups": int(len(np.unique(labels)))}
    except AnalysisError as err:
        return {"score": None, "reason": str(err)}


def compute_probe(loaded: LoadedRun, split: str = "test", *, epochs: int = 100, hidden: int = 256,
                  lr: float = 1e-3, test_fraction: float = 0.3, seed: int = 0, max_windows: int = 3000,
                  batch_size: int = 256, probe_batch_size: int = 64,
                  device: torch.device | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``probe.json`` report and the 2-D projection to plot (what is measured: the module docstring).

    Protocol (the paper names the measurements but not these details; our readings):

    1. Default split ``test``: the paper's representations come "from unseen test subjects"
       (Sec. 5.5, G.6), subjects the backbone never trained on. ``--split`` takes any split or
       ``all``.
    2. The probe has to recognise the *same* subjects it was trained on, so the chosen split's
       windows are divided within every subject: each (subject, class) cell sends
       ``round(test_fraction * n)`` of its windows (at least 1 when it has 2 or more) to the probe's
       test set and the rest to its training set, seeded (``--seed``). A subject left with no probe
       test or probe train window is an error naming it. Neighbouring windows of one recording are
       correlated, so probe scores are an upper bound on subject recoverability, as in the paper.
    3. Probe: features standardised with the probe-train mean/std, then
       ``Linear(F, hidden) -> ReLU -> Dropout(0.1) -> Linear(hidden, n_subjects)``, trained with
       AdamW (``lr``, weight decay 1e-4, mini-batches of ``--probe-batch-size`` = 64) and cross-entropy for a
       fixed number of epochs;
       the final weights are scored (no early stopping: there is no third set to stop on without
       touching the probe test windows). Macro-F1 averages over the subjects present in the probe's
       true or predicted labels (``zero_division = 0``).
    4. Clustering and silhouettes use the raw features (no standardisation: the geometry the head
       sees), on at most ``--max-windows`` windows drawn at random (seeded) when the split is larger,
       because silhouettes need all pairwise distances. Both run on the exact principal coordinates
       of the features (:func:`principal_coordinates`: a rotation that keeps every distance, at most
       ``n - 1`` dimensions), which makes them fast on wide features without changing any score.
       k-means is k-means++ seeded Lloyd, best of 10 starts by inertia. NMI uses the arithmetic mean of the
       two entropies (sklearn's default);
       AMI corrects MI by its expectation under the hypergeometric model (Vinh et al., 2010). Both
       are implemented here with numpy/scipy (no scikit-learn at run time) and tested against
       scikit-learn.
    5. Silhouette: Euclidean distance; a sample alone in its cluster scores 0. A labelling with a
       single group (e.g. a test split holding one class) has no silhouette: reported as ``null``
       with the reason.

    """
    data = collect_features(loaded, split, batch_size, device)
    x, y, subjects = data["features"], data["y"], data["subject"]
    n_subjects = len(np.unique(subjects))
    if n_subjects < 2:
        raise AnalysisError(f"run {loaded.run_dir}: split {split!r} holds {n_subjects} subject; the probe "
                            f"needs >= 2")
    train_idx, test_idx = probe_split(subjects, y, test_fraction, seed)
    pred = train_probe(x[train_idx], subjects[train_idx], x[test_idx], epochs=epochs, hidden=hidden, lr=lr,
                       batch_size=probe_batch_size, seed=seed, device=device)
    truth = subjects[test_idx]
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(y),
                              size=max_windows, replace=False)) if len(y) > max_windows else np.arange(len(y))
    # exact principal coordinates: same distances as the features, at most n - 1 dimensions
    xs, explained = principal_coordinates(x[keep])
    ys, ss = y[keep], subjects[keep]
    clusters = kmeans(xs, n_subjects, seed=seed)
    coords = np.pad(xs[:, :2], ((0, 0), (0, max(0, 2 - xs.shape[1]))))
    report = {
        "run_dir": str(loaded.run_dir), "checkpoint": str(loaded.checkpoint),
        "model": loaded.results.get("model"),
        "split": split, "features": "backbone.forward_features (eval mode)", "feature_dim": int(x.shape[1]),
        "n_windows": int(len(y)), "subjects": sorted(int(s) for s in np.unique(subjects)),
        "classes": sorted(int(c) for c in np.unique(y)), "seed": seed,
        "probe": {
            "subject_f1": macro_f1(truth, pred), "subject_acc": float(np.mean(truth == pred)),
            "majority_acc": float(np.bincount(np.unique(truth, return_inverse=True)[1]).max() / len(truth)),
            "n_train": int(len(train_idx)), "n_test": int(len(test_idx)), "test_fraction": test_fraction,
            "epochs": epochs, "hidden": hidden, "lr": lr, "batch_size": probe_batch_size,
        },
        "clustering": {"k": n_subjects, "n_windows": int(len(keep)),
                       "nmi": normalized_mutual_info(ss, clusters),
                       "ami": adjusted_mutual_info(ss, clusters)},
        "silhouette": {"subject": _silhouette_or_reason(xs, ss), "label": _silhouette_or_reason(xs, ys),
                       "n_windows": int(len(keep))},
        "pca_explained_variance": [float(r) for r in explained[:2]],
    }
    return report, {"coords": coords, "subject": ss, "y": ys}


def plot(path: Path, report: dict[str, Any], view: dict[str, Any]) -> None:
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    axes = fig.subplots(1, 2)
    ev = report["pca_explained_variance"]
    for ax, key, title in ((axes[0], "subject", "subject"), (axes[1], "y", "class")):
        groups = np.unique(view[key])
        cmap = colormaps["tab10" if len(groups) <= 10 else "tab20"]
        for i, g in enumerate(groups):
            sel = view[key] == g
            ax.scatter(view["coords"][sel, 0], view["coords"][sel, 1], s=6, alpha=0.7, color=cmap(i % cmap.N),
                       label=str(int(g)))
        ax.set(xlabel=f"PC1 ({ev[0]:.1%})", ylabel=f"PC2 ({ev[1]:.1%})" if len(ev) > 1 else "PC2",
               title=f"coloured by {title}")
        if len(groups) <= 20:
            ax.legend(fontsize=7, markerscale=2, ncol=2)
    p, c, s = report["probe"], report["clustering"], report["silhouette"]

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    fig.suptitle(f"{report.get('model')} {report['split']} split: subject F1 {p['subject_f1']:.3f}, "
                 f"acc {p['subject_acc']:.3f} | NMI {c['nmi']:.3f}, AMI {c['ami']:.3f} | silhouette subject "
                 f"{fmt(s['subject']['score'])}, label {fmt(s['label']['score'])}", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
