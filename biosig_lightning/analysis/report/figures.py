"""The report's figures (PNG, matplotlib Agg), one file per row x dataset and kind, plus a spread plot per
dataset.

* ``confusion_<row>_<dataset>``: the test confusion matrix summed over the cell's runs.
* ``reliability_<row>_<dataset>``: the reliability diagram pooled over runs (bin counts added, bin
  means count-weighted); its title gives the ECE of the pooled bins, which can differ from the
  table's mean of per-run ECEs.
* ``curves_<row>_<dataset>``: ``train/loss_epoch`` and ``val/f1`` per epoch from each run's
  ``metrics.csv``, one line per seed.
* ``spread_<dataset>_<metric>``: a strip + box plot of the per-seed values of one metric, one box per row.

No figure is larger than :data:`MAX_INCHES` a side (a confusion matrix of many classes keeps its colours
and drops its per-cell counts and class names), and each is written atomically.
"""

from __future__ import annotations

import csv
import io
import re
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from biosig_lightning.analysis.report.collect import Groups, Row, metric_key, short_name
from biosig_lightning.atomic_io import atomic_write_bytes

Runs = list[tuple[Path, dict[str, Any]]]
#: the largest side of a figure, in inches (at the report's 110 dpi: 1320 pixels)
MAX_INCHES = 12.0
#: the most classes whose confusion matrix shows each cell's count and each class's name
MAX_LABELLED_CLASSES = 30


def _slug(*parts: str) -> str:
    """A file name stem from a figure's kind, row label and dataset."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p).strip("-") for p in parts)


def _wrap(title: str, width_in: float) -> str:
    """Wrap a title to the figure's width (about 12 characters per inch at font size 9)."""
    return "\n".join(textwrap.fill(line, width=max(16, int(width_in * 12))) for line in title.splitlines())


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _read_curves(path: Path) -> dict[str, dict[int, float]]:
    """``metric -> {epoch: value}`` from a CSVLogger metrics.csv (last non-empty value per epoch)."""
    curves: dict[str, dict[int, float]] = defaultdict(dict)
    if not path.exists():
        return curves
    with path.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            try:
                epoch = int(float(rec.get("epoch") or "nan"))
            except ValueError:
                continue
            for key in ("train/loss_epoch", "val/f1", "val/loss"):
                val = rec.get(key)
                if val not in (None, ""):
                    curves[key][epoch] = float(val)
    return curves


class _Canvas:
    """Makes figures and saves them into ``fig_dir``, remembering every file written."""

    def __init__(self, fig_dir: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.fig_dir = plt, fig_dir
        self.written: list[Path] = []
        fig_dir.mkdir(parents=True, exist_ok=True)

    def figure(self, width: float, height: float, ncols: int = 1) -> tuple[Any, Any]:
        # constrained layout makes room for wrapped titles and rotated labels instead of clipping them;
        # a figure never grows past MAX_INCHES a side, whatever the number of classes or rows
        size = (min(width, MAX_INCHES), min(height, MAX_INCHES))
        return self.plt.subplots(1, ncols, figsize=size, layout="constrained")

    def save(self, fig: Any, name: str) -> None:
        """Render ``fig`` in memory and write it atomically: a killed report leaves the old PNG or none."""
        path = self.fig_dir / f"{name}.png"
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        self.plt.close(fig)
        atomic_write_bytes(path, buffer.getbuffer())
        self.written.append(path)


def _confusion(canvas: _Canvas, row: Row, ds: str, runs: Runs) -> None:
    """The test confusion matrix summed over runs."""
    cms = [np.asarray(r["confusion_matrix"]) for _, r in runs if r.get("confusion_matrix")]
    cms = [c for c in cms if cms and c.shape == cms[0].shape]
    if not cms:
        return
    cm = np.sum(cms, axis=0)
    classes = next((r.get("classes") for _, r in runs if r.get("classes")), None) or list(range(len(cm)))
    width = min(MAX_INCHES, max(3.4, 1.4 + 0.6 * len(cm)))
    fig, ax = canvas.figure(width, max(3.2, 1.4 + 0.6 * len(cm)))
    ax.imshow(cm, cmap="Blues")
    if len(cm) <= MAX_LABELLED_CLASSES:  # past that the counts and names would overlap: the colours remain
        for i in range(len(cm)):
            for j in range(len(cm)):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                        color="white" if cm[i, j] > cm.max() / 2 else "black", fontsize=8)
        ax.set_xticks(range(len(cm)), [str(c) for c in classes], rotation=45, ha="right")
        ax.set_yticks(range(len(cm)), [str(c) for c in classes])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(_wrap(f"{row.label} / {ds}\n(test, summed over {_runs(len(cms))})", width), fontsize=9)
    canvas.save(fig, _slug("confusion", row.label, ds))


def _reliability(canvas: _Canvas, row: Row, ds: str, runs: Runs) -> None:
    """The reliability diagram pooled over runs: bin counts added, bin means count-weighted."""
    rels = [r["reliability"] for _, r in runs if r.get("reliability")]
    if not rels:
        return
    edges = np.asarray(rels[0]["edges"], dtype=float)
    count = np.zeros(len(edges) - 1)
    conf_sum = np.zeros_like(count)
    acc_sum = np.zeros_like(count)
    for rel in rels:
        if len(rel["edges"]) != len(edges):
            continue
        c = np.asarray(rel["count"], dtype=float)
        conf = np.nan_to_num(np.asarray(rel["confidence"], dtype=float))  # JSON null = empty bin
        acc = np.nan_to_num(np.asarray(rel["accuracy"], dtype=float))
        count += c
        conf_sum += c * conf
        acc_sum += c * acc
    nz = count > 0
    conf_m = np.where(nz, conf_sum / np.maximum(count, 1), np.nan)
    acc_m = np.where(nz, acc_sum / np.maximum(count, 1), np.nan)
    ece = float(np.sum(count[nz] * np.abs(acc_m[nz] - conf_m[nz])) / max(count.sum(), 1))
    centers = (edges[:-1] + edges[1:]) / 2
    fig, ax = canvas.figure(4.2, 4.4)
    ax.bar(centers[nz], acc_m[nz], width=np.diff(edges)[nz], edgecolor="k", alpha=0.7, label="accuracy")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    ax.plot(conf_m[nz], acc_m[nz], "o", color="C3", ms=3, label="bin mean confidence")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    # pooled over the runs' bins: not the table's mean of per-run ECEs, so say which it is
    ax.set_title(
        _wrap(f"{row.label} / {ds}\npooled ECE {ece:.3f} (test, {_runs(len(rels))})", 4.2), fontsize=9
    )
    ax.legend(fontsize=7, loc="upper left")
    canvas.save(fig, _slug("reliability", row.label, ds))


def _curves(canvas: _Canvas, row: Row, ds: str, runs: Runs) -> None:
    """Learning curves (``train/loss_epoch``, ``val/f1``) from each run's ``metrics.csv``, one line per
    seed."""
    from matplotlib.ticker import MaxNLocator

    seeds = [r.get("seed") for _, r in runs]
    curves = [(seed, _read_curves(path.parent / "metrics.csv")) for seed,
              (path, _) in zip(seeds, runs, strict=True)]
    if not any(c for _, c in curves):
        return
    fig, axes = canvas.figure(8, 3.4, ncols=2)
    epochs = sorted({e for _, c in curves for per_epoch in c.values() for e in per_epoch})
    for ax, key in zip(axes, ("train/loss_epoch", "val/f1"), strict=True):
        for seed, c in curves:
            if c.get(key):
                ep = sorted(c[key])
                ax.plot(ep, [c[key][e] for e in ep], marker=".", label=f"seed {seed}")
        ax.set_xlabel("epoch")
        # epochs are whole numbers, also for a run of one or two epochs (else ticks at -0.045 ...)
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
        if epochs[-1] - epochs[0] < 10:
            ax.set_xticks(range(epochs[0], epochs[-1] + 1))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(key, fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(_wrap(f"{row.label} / {ds}", 8), fontsize=9)
    canvas.save(fig, _slug("curves", row.label, ds))


def _spread(canvas: _Canvas, groups: Groups, ds: str, key: str) -> None:
    """Per-seed values of ``key`` on dataset ``ds``: one box per row, the seeds as points."""
    rows = [(row, [float(r["metrics"][key]) for _, r in runs if key in r.get("metrics", {})])
            for (row, d), runs in groups.items() if d == ds]
    rows = [(row, v) for row, v in rows if v]
    if not rows:
        return
    # one row per model, as in the table: labels stay whole and readable however many rows there are
    fig, ax = canvas.figure(6.5, 1.4 + 0.4 * len(rows))
    ax.boxplot([v for _, v in rows], widths=0.5, orientation="horizontal")
    for i, (_, v) in enumerate(rows, start=1):
        jitter = np.linspace(-0.08, 0.08, len(v)) if len(v) > 1 else np.zeros(1)
        ax.plot(v, i + jitter, "o", color="C1", ms=4)
    ax.set_yticks(range(1, len(rows) + 1), [r.label for r, _ in rows], fontsize=8)
    ax.invert_yaxis()  # first row on top, as in the table
    ax.set_xlabel(key)
    ax.set_title(_wrap(f"{ds}: per-seed {short_name(key)} ({_runs(sum(len(v) for _, v in rows))})", 6.5),
                 fontsize=9)
    canvas.save(fig, _slug("spread", ds, short_name(key)))


def write_figures(groups: Groups, fig_dir: Path, spread_metric: str) -> list[Path]:
    """Confusion, reliability, learning-curve and per-seed spread PNGs; returns the files written."""
    canvas = _Canvas(fig_dir)
    for (row, ds), runs in groups.items():
        _confusion(canvas, row, ds, runs)
        _reliability(canvas, row, ds, runs)
        _curves(canvas, row, ds, runs)
    key = metric_key(spread_metric)
    for ds in dict.fromkeys(d for _, d in groups):
        _spread(canvas, groups, ds, key)
    return canvas.written
