"""``biosig graphs``: the learned SD-Former graphs of finished runs, per class, and their stability over
seeds.

SD-Former (Sharma, Sec. 4) infers a sparse directed graph per window and uses it as an
attention mask; its Limitations section (Sec. 8) lists as missing: "We do not visualize the
learned graphs, analyze their stability across seeds, or compare them against random graphs
with matched sparsity". This command provides the first two (the matched-sparsity control is
``graph: random`` in :class:`~biosig_lightning.models.sdformer.SDFormer`).

Per run (:func:`class_graphs`): per class the edge frequency, edge probability, density and acyclic
fraction of the hard per-window graphs, written to ``graphs.npz``, ``graphs.json`` and one PNG per class.

Stability over runs (several ``RUN_DIR``, e.g. seeds of one configuration; :func:`stability`): Jaccard
index and Pearson correlation of the class graphs over every pair of runs, with near-empty graphs flagged,
written to ``stability.json`` and printed. As the paper stresses, these graphs are routing priors of a
model, not physiological or causal networks.

Recovery of a planted graph on a synthetic stand-in with ``coupling_edges`` (:func:`edge_recovery`): the
learned graph against the planted one, directed and as a skeleton, beside a random graph of equal density.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from biosig_lightning.atomic_io import atomic_write_bytes, atomic_write_json

__all__ = [
    "ClassGraphs",
    "GraphError",
    "class_graphs",
    "edge_recovery",
    "planted_truth",
    "graph_node_names",
    "jaccard",
    "pearson",
    "stability",
]

THRESHOLD = 0.5
#: below this edge density a graph is reported as near-empty (its stability indices mean little)
NEAR_EMPTY_DENSITY = 0.01
SPLITS = ("train", "val", "test")


class GraphError(ValueError):
    """A run without a learned graph, incompatible runs or bad ``biosig graphs`` arguments."""


@dataclass
class ClassGraphs:
    """Per-class mean graphs of one run on one split (each array: :func:`class_graphs`)."""

    classes: list[str]
    node_names: list[str]
    n_windows: np.ndarray  # (K,)
    edge_frequency: np.ndarray  # (K, M, M), nan for a class without windows
    edge_probability: np.ndarray  # (K, M, M)
    edge_density: np.ndarray  # (K,)
    acyclic_fraction: np.ndarray  # (K,)
    all_edge_frequency: np.ndarray  # (M, M)
    all_edge_probability: np.ndarray | None = None  # (M, M), mean sigmoid(s_ij) over all windows

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything as plain numpy arrays (strings as unicode, so no pickling is needed)."""
        return {
            "classes": np.asarray(self.classes, dtype=str),
            "node_names": np.asarray(self.node_names, dtype=str),
            "n_windows": self.n_windows,
            "edge_frequency": self.edge_frequency,
            "edge_probability": self.edge_probability,
            "edge_density": self.edge_density,
            "acyclic_fraction": self.acyclic_fraction,
            "all_edge_frequency": self.all_edge_frequency,
            **({"all_edge_probability": self.all_edge_probability}
               if self.all_edge_probability is not None else {}),
        }


# --------------------------------------------------------------------------- collection


def _require_learned_graph(backbone: Any, where: str) -> None:
    name = type(backbone).__name__
    if not callable(getattr(backbone, "forward_with_aux", None)) or not hasattr(backbone, "graph"):
        raise GraphError(f"{where}: backbone {name} has no learned graph (biosig graphs needs an SD-Former "
                         f"run)")
    if backbone.graph != "learned":
        raise GraphError(f"{where}: backbone {name} uses a fixed graph (graph={backbone.graph!r}), not a "
                         f"learned "
                         "one; biosig graphs needs graph: learned")


def graph_node_names(backbone: nn.Module, ch_names: list[str]) -> list[str]:
    """Names of an SD-Former's graph nodes: channels with band pooling, else ``"<channel>/<band>"``."""
    if getattr(backbone, "band_pooling", False):
        return list(ch_names)
    sdformer: Any = backbone  # an SD-Former (_require_learned_graph): its tokenizer names the bands
    bands = [band[0] for band in sdformer.tokenizer.band_power.bands]
    return [f"{ch}/{band}" for ch in ch_names for band in bands]  # token 5 c + b: channel-major


@torch.no_grad()
def class_graphs(backbone: nn.Module, loader: Any, classes: list[str], node_names: list[str],
                 device: torch.device) -> ClassGraphs:
    """Average the per-sample hard graphs of every window a loader yields, per class.

    Per run (reopened with :func:`biosig_lightning.runs.load_run`, eval mode, chosen split):

    * ``edge_frequency[k, i, j]``: the fraction of the split's class-``k`` windows whose hard
      graph has ``a_ij = 1`` (``SDFormer.forward_with_aux(x).adjacency``), i.e. the class mean of
      the per-sample 0/1 adjacency. Orientation as in the model: ``a_ij = 1`` means node ``j``
      may influence node ``i`` (``j -> i``; row ``i`` lists ``i``'s parents). The diagonal is 0
      (self-attention is always allowed and is not an edge).
    * ``edge_probability[k]``: the class mean of ``sigmoid(s_ij)``, the soft scores behind it.
    * ``edge_density[k]``: the mean edge count over the ``M (M - 1)`` ordered pairs, which is the
      mean over the class's windows of each window's density, in ``[0, 1]``.
    * ``acyclic_fraction[k]``: the fraction of those windows whose graph is a DAG (NOTEARS
      ``h(A) = 0``, :func:`~biosig_lightning.models.modules.learned_graphs.notears_acyclicity`).
    * Nodes are the graph nodes of the model: channels (``band_pooling: true``) or channel-band
      tokens named ``"<channel>/<band>"`` in the model's channel-major order.

    Written: ``graphs.npz`` (the arrays above plus ``classes``, ``node_names``, ``n_windows`` and
    the all-windows graph ``all_edge_frequency``), ``graphs.json`` (summary, top edges) and one
    PNG per class: a heat map of ``edge_frequency`` and a circular drawing of the strongest
    edges as arrows ``parent -> child``.

    """
    from biosig_lightning.models.modules.learned_graphs import notears_acyclicity

    k, m = len(classes), len(node_names)
    counts = np.zeros(k, dtype=np.int64)
    edges = np.zeros((k, m, m))
    probs = np.zeros((k, m, m))
    acyclic = np.zeros(k)
    sdformer: Any = backbone  # an SD-Former (_require_learned_graph): forward_with_aux gives its graphs
    for batch in loader:
        out = sdformer.forward_with_aux(batch["x"].to(device))
        adjacency = (out.adjacency.detach() > 0.5).double()
        if adjacency.shape[1:] != (m, m):
            raise GraphError(f"graph of shape {tuple(adjacency.shape[1:])}, expected {m} nodes "
                             f"({node_names[:3]}...)")
        is_dag = notears_acyclicity(adjacency) < 1e-6
        y = batch["y"].to(device)
        for c in y.unique().tolist():
            sel = y == c
            counts[c] += int(sel.sum())
            edges[c] += adjacency[sel].sum(0).cpu().numpy()
            probs[c] += out.edge_probs.detach()[sel].double().sum(0).cpu().numpy()
            acyclic[c] += float(is_dag[sel].sum())
    total = counts.sum()
    if total == 0:
        raise GraphError("the split has no windows")
    with np.errstate(invalid="ignore", divide="ignore"):
        frequency = edges / counts[:, None, None]
        probability = probs / counts[:, None, None]
        acyclic_fraction = acyclic / counts
    off = ~np.eye(m, dtype=bool)
    density = frequency[:, off].mean(axis=1) if m > 1 else np.zeros(k)
    return ClassGraphs(classes=list(classes), node_names=list(node_names), n_windows=counts,
                       edge_frequency=frequency, edge_probability=probability, edge_density=density,
                       acyclic_fraction=acyclic_fraction, all_edge_frequency=edges.sum(0) / total,
                       all_edge_probability=probs.sum(0) / total)


def _split_loader(dm: Any, split: str, batch_size: int) -> torch.utils.data.DataLoader:
    """An unshuffled, unsampled loader over one split of a set-up BiosignalDataModule."""
    from biosig_lightning.data.module import collate_batch

    return torch.utils.data.DataLoader(dm.datasets[split], batch_size=batch_size, shuffle=False,
                                       collate_fn=collate_batch, num_workers=dm.num_workers)


def run_graphs(run_dir: Path, split: str, checkpoint: str, batch_size: int,
               device: torch.device) -> tuple[ClassGraphs, dict[str, Any]]:
    """Reopen one run and collect its class graphs on ``split``; returns them and run metadata."""
    from biosig_lightning.runs import RunError, load_run

    try:
        loaded = load_run(run_dir, checkpoint=checkpoint)
    except RunError as err:
        raise GraphError(str(err)) from err
    backbone = getattr(loaded.task, "backbone", loaded.task)
    _require_learned_graph(backbone, str(run_dir))
    backbone.eval().to(device)
    dm = loaded.datamodule
    dm.prepare_data()
    dm.setup("test")
    names = graph_node_names(backbone, list(dm.spec.ch_names))
    graphs = class_graphs(backbone, _split_loader(dm, split, batch_size),
                          list(dm.spec.classes), names, device)
    truth = planted_truth(dm, names)
    meta = {"run_dir": str(run_dir), "checkpoint": str(loaded.checkpoint), "split": split,
            "model": loaded.results.get("model"), "dataset": loaded.results.get("dataset"),
            "seed": loaded.results.get("seed"),
            "nodes": "channel" if getattr(backbone, "band_pooling", False) else "channel-band"}
    if truth is not None:
        meta["planted"] = truth
    return graphs, meta


# --------------------------------------------------------------------------- comparison


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard index of two boolean edge sets; 1 when both are empty (they agree completely)."""
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson correlation of two vectors; ``None`` when either is constant (undefined)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    da, db = a - a.mean(), b - b.mean()
    norm = math.sqrt(float((da**2).sum()) * float((db**2).sum()))
    if norm <= 1e-12:
        return None
    return float(np.clip((da * db).sum() / norm, -1.0, 1.0))


def _summary(values: Sequence[float | None]) -> dict[str, Any]:
    defined = [v for v in values if v is not None]
    return {"mean": float(np.mean(defined)) if defined else None,
            "std": float(np.std(defined)) if defined else None,
            "n_defined": len(defined), "pairs": values}


def stability(graphs: list[ClassGraphs], labels: list[str], threshold: float = THRESHOLD) -> dict[str, Any]:
    """Pairwise Jaccard (thresholded graphs) and Pearson (edge frequencies) over runs, per class.

    Stability over runs (several ``RUN_DIR``; meant for one configuration trained with several
    seeds), per class and for all windows, over every pair of runs:

    * Jaccard index of the thresholded class graphs ``edge_frequency > 0.5`` (edges present in
      most of the class's windows) over the off-diagonal pairs. Two empty graphs agree
      completely, so their index is defined as 1.
    * Pearson correlation of the off-diagonal edge frequencies. Undefined (``null``) when either
      graph's frequencies are constant (for example an empty graph); means are taken over the
      defined pairs.
    * Next to them, each run's edge density and edge count above the threshold, and a
      ``degenerate`` flag: a run whose graph is near-empty (density below
      ``NEAR_EMPTY_DENSITY = 0.01``, i.e. fewer than one edge per hundred ordered pairs) or has
      no edge above the threshold makes the indices meaningless (two empty graphs have Jaccard
      1, "perfectly stable", while attention was diagonal-only), so such classes are flagged in
      ``stability.json`` (``degenerate``, ``warnings``) and a warning is printed to stderr.

    All of it is written to ``stability.json`` (mean, std and per-pair values), and printed.
    Runs must share node names and classes. As the paper stresses, these graphs are routing
    priors of a model, not physiological or causal networks.

    Classes without windows in either run of a pair are left out of that pair. Each class also
    gets every run's ``density`` and ``edges_above_threshold`` and a ``degenerate`` flag when a
    run's graph is near-empty (see above); ``warnings`` lists the flagged classes.
    """
    if len(graphs) < 2:
        raise GraphError("stability needs at least two runs")
    first = graphs[0]
    for g, label in zip(graphs[1:], labels[1:], strict=True):
        if g.node_names != first.node_names or g.classes != first.classes:
            raise GraphError(f"run {label} has other graph nodes or classes than run {labels[0]}; "
                             "stability compares runs of one configuration (e.g. seeds)")
    off = ~np.eye(len(first.node_names), dtype=bool)
    pairs = list(itertools.combinations(range(len(graphs)), 2))
    per_class: dict[str, Any] = {}
    View = tuple[int | str, Callable[[ClassGraphs], np.ndarray], Callable[[ClassGraphs], bool]]

    def class_view(c: int) -> View:
        """Class ``c``: its edge frequencies in a run, and whether the run saw that class."""
        return c, lambda g: g.edge_frequency[c], lambda g: bool(g.n_windows[c] > 0)

    views: list[View] = [class_view(c) for c in range(len(first.classes))]
    views.append(("all", lambda g: g.all_edge_frequency, lambda g: True))
    warnings: list[str] = []
    for key, freq, present in views:
        jac, cor = [], []
        for i, j in pairs:
            if not (present(graphs[i]) and present(graphs[j])):
                continue
            fi, fj = freq(graphs[i])[off], freq(graphs[j])[off]
            jac.append(jaccard(fi > threshold, fj > threshold))
            cor.append(pearson(fi, fj))
        name = first.classes[key] if isinstance(key, int) else "all"
        density = [float(freq(g)[off].mean()) if present(g) and off.any() else None for g in graphs]
        edges = [int((freq(g)[off] > threshold).sum()) if present(g) else None for g in graphs]
        empty = [labels[r] for r, (d, e) in enumerate(zip(density, edges, strict=True))
                 if d is not None and (d < NEAR_EMPTY_DENSITY or e == 0)]
        per_class[name] = {"jaccard": _summary(jac), "pearson": _summary(cor), "n_pairs": len(jac),
                           "density": {"mean": float(np.mean([d for d in density if d is not None]))
                                       if any(d is not None for d in density) else None, "per_run": density},
                           "edges_above_threshold": edges, "degenerate": bool(empty)}
        if empty:
            shown = ", ".join(f"{labels[r]} (density {density[r]:.4f}, {edges[r]} edges > {threshold})"
                              for r in range(len(graphs)) if labels[r] in empty)
            warnings.append(f"class {name}: near-empty graph in {shown}; its Jaccard index measures "
                            f"agreement "
                            "on absent edges, not a stable structure")
    return {"runs": labels, "threshold": threshold, "near_empty_density": NEAR_EMPTY_DENSITY,
            "pairs": [[labels[i], labels[j]] for i, j in pairs], "classes": per_class, "warnings": warnings}


# --------------------------------------------------------------------------- planted-graph recovery


def planted_truth(dm: Any, node_names: list[str]) -> np.ndarray | None:
    """The planted graph ``(M, M)`` of a synthetic stand-in on the model's nodes (``a_ij = 1``: ``j -> i``).

    Read from the reader's recorded ``config()["coupling"]``; ``None`` for real corpora and
    stand-ins without planted couplings.
    """
    from biosig_lightning.data.synthetic_coupling import truth_adjacency

    if not getattr(dm, "synthetic", False):
        return None
    edges = dm.reader().config().get("coupling")
    if not edges:
        return None
    return truth_adjacency(edges, list(dm.spec.ch_names), node_names)


def _auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Mann-Whitney AUROC with average ranks for ties; ``None`` without both classes."""
    from scipy.stats import rankdata

    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _scores(predicted: np.ndarray, probability: np.ndarray, truth: np.ndarray, seed: int) -> dict[str, Any]:
    """Threshold, top-k and AUROC scores of flat pair vectors, with a random graph of equal density."""
    pairs, k = len(truth), int(truth.sum())
    n = int(predicted.sum())
    hits = int((predicted & truth).sum())
    order = np.argsort(-probability, kind="stable")[:k]
    top = int(truth[order].sum())
    rng = np.random.default_rng(seed)
    drawn = np.zeros(pairs, dtype=bool)
    drawn[rng.choice(pairs, size=n, replace=False)] = True
    drawn_top = np.zeros(pairs, dtype=bool)
    drawn_top[rng.choice(pairs, size=k, replace=False)] = True
    drawn_hits = int((drawn & truth).sum())
    return {
        "pairs": pairs, "planted": k, "edges": n,
        "learned": {"precision": hits / n if n else None, "recall": hits / k if k else None,
                    "top_k_precision": top / k if k else None, "auroc": _auroc(probability, truth)},
        "random_expected": {"precision": k / pairs if n else None, "recall": n / pairs if k else None,
                            "top_k_precision": k / pairs if k else None, "auroc": 0.5},
        "random_drawn": {"precision": drawn_hits / n if n else None, "recall": drawn_hits / k if k else None,
                         "top_k_precision": int((drawn_top & truth).sum()) / k if k else None,
                         "auroc": _auroc(rng.random(pairs), truth)},
    }


def edge_recovery(frequency: np.ndarray, probability: np.ndarray, truth: np.ndarray,
                  threshold: float = THRESHOLD, seed: int = 0) -> dict[str, Any]:
    """How well a learned graph recovers a planted one.

    Recovery of a planted graph (:func:`edge_recovery`; synthetic stand-ins with ``coupling_edges``,
    :mod:`biosig_lightning.data.synthetic_coupling`, whose edges the reader's ``config()`` records):
    the learned all-windows graph is scored against the planted one on the model's nodes, over the
    ``P = M (M - 1)`` ordered pairs (*directed*) and over the ``M (M - 1) / 2`` unordered ones
    (*skeleton*: an edge either way; the dependency loss fits correlations, which have no direction,
    so the orientation comes only from the acyclicity penalty and the task). For ``k`` planted edges:

    * ``threshold``: the edges present in most windows (``edge_frequency > 0.5``): their count,
      precision and recall;
    * ``top_k``: the ``k`` pairs with the highest mean edge probability (``sigmoid(s_ij)``,
      frequency breaking no ties: it is the score the threshold acts on): precision (= recall);
    * ``auroc``: the mean edge probability as a score for "planted", over all pairs;
    * beside each, a **random graph of equal density**: the expected value for a graph with as many
      edges drawn uniformly (precision ``k / P``, recall ``n / P``, top-k precision ``k / P``,
      AUROC 0.5), and the values of one such graph drawn with ``seed`` (so the spread of chance is
      visible next to its mean).

    Args:
        frequency: ``(M, M)`` fraction of windows with ``a_ij = 1`` (thresholded at ``threshold``).
        probability: ``(M, M)`` mean ``sigmoid(s_ij)``, the ranking score (top-k, AUROC).
        truth: ``(M, M)`` boolean planted graph, same orientation (``j -> i``).
        seed: of the drawn random graphs.

    Returns ``{"directed": ..., "skeleton": ...}``, each with the learned graph's precision,
    recall, top-k precision and AUROC and the same for a random graph of equal density
    (expected and one drawn).
    """
    truth = np.asarray(truth, dtype=bool)
    m = truth.shape[0]
    if frequency.shape != (m, m) or probability.shape != (m, m):
        raise GraphError(f"planted graph has {m} nodes, the learned one {frequency.shape}")
    off = ~np.eye(m, dtype=bool)
    upper = np.triu(off)
    predicted = frequency > threshold
    out = {"directed": _scores(predicted[off], probability[off], truth[off], seed)}
    # an unordered pair {i, j} is an edge if either orientation is; its score the larger of the two
    either = truth | truth.T
    out["skeleton"] = _scores((predicted | predicted.T)[upper], np.maximum(probability, probability.T)[upper],
                              either[upper], seed + 1)
    return out


# --------------------------------------------------------------------------- outputs


def _top_edges(freq: np.ndarray, names: list[str], n: int) -> list[dict[str, Any]]:
    if not np.isfinite(freq).all():
        return []
    flat = np.where(~np.eye(len(names), dtype=bool), freq, -1.0)
    order = np.argsort(flat, axis=None, kind="stable")[::-1][:n]
    out = []
    for idx in order:
        i, j = np.unravel_index(idx, flat.shape)
        if flat[i, j] <= 0:
            break
        out.append({"parent": names[j], "child": names[i], "frequency": round(float(flat[i, j]), 4)})
    return out


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "class"


def plot_class_graph(freq: np.ndarray, names: list[str], title: str, path: Path, top: int = 20) -> Path:
    """Heat map of ``freq`` (rows: children, columns: parents) beside a circular drawing of its top edges."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = len(names)
    fig, (ax_map, ax_net) = plt.subplots(1, 2, figsize=(11, 5.6))
    image = ax_map.imshow(freq, vmin=0.0, vmax=1.0, cmap="viridis")
    step = max(1, math.ceil(m / 40))  # keep tick labels legible for 115 channel-band nodes
    ticks = np.arange(0, m, step)
    fontsize = 7 if m <= 25 else 5
    ax_map.set_xticks(ticks, [names[t] for t in ticks], rotation=90, fontsize=fontsize)
    ax_map.set_yticks(ticks, [names[t] for t in ticks], fontsize=fontsize)
    ax_map.set_xlabel("parent j")
    ax_map.set_ylabel("child i")
    ax_map.set_title("edge frequency a_ij (j -> i)")
    fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04)

    angle = 2 * np.pi * np.arange(m) / max(m, 1)
    xy = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    ax_net.scatter(xy[:, 0], xy[:, 1], s=30 if m <= 40 else 8, color="0.3", zorder=3)
    if m <= 40:
        for (x, y), name in zip(xy, names, strict=True):
            # labels grow outward from their node, so long channel/band names never cover it
            ha = "left" if x > 0.2 else "right" if x < -0.2 else "center"
            ax_net.annotate(name, (x * 1.08, y * 1.08), ha=ha, va="center", fontsize=fontsize)
    edges = _top_edges(freq, names, top)
    index = {n: i for i, n in enumerate(names)}
    for e in edges:
        j, i = index[e["parent"]], index[e["child"]]
        ax_net.annotate("", xy=xy[i], xytext=xy[j],
                        arrowprops={"arrowstyle": "-|>", "color": plt.cm.viridis(e["frequency"]),
                                    "lw": 0.5 + 2.0 * e["frequency"], "shrinkA": 4, "shrinkB": 4,
                                    "connectionstyle": "arc3,rad=0.1"})
    ax_net.set_title(f"top {len(edges)} edges (parent -> child)")
    ax_net.set_xlim(-1.9, 1.9)
    ax_net.set_ylim(-1.3, 1.3)
    ax_net.set_aspect("equal")
    ax_net.axis("off")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # room for the suptitle above the panel titles
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def write_run_outputs(graphs: ClassGraphs, meta: dict[str, Any], out: Path, figures: bool = True,
                      top: int = 20) -> dict[str, Any]:
    """Write ``graphs.npz``, ``graphs.json`` and the per-class figures of one run into ``out``.

    ``meta["planted"]`` (a planted ``(M, M)`` graph, from :func:`planted_truth`) adds the
    ``recovery`` section (:func:`edge_recovery` of the all-windows graph) and the planted edges.
    """
    meta = dict(meta)
    planted = meta.pop("planted", None)
    buf = io.BytesIO()
    arrays: dict[str, Any] = (
        graphs.arrays()
    )  # (numpy's savez stub would read a dict[str, ndarray] as allow_pickle)
    if planted is not None:
        arrays["planted"] = np.asarray(planted, dtype=bool)
    np.savez(buf, **arrays)
    atomic_write_bytes(out / "graphs.npz", buf.getvalue())
    names = graphs.node_names
    per_class: dict[str, Any] = {}
    written: list[str] = []
    for c, cls in enumerate(graphs.classes):
        freq = graphs.edge_frequency[c]
        per_class[cls] = {
            "n_windows": int(graphs.n_windows[c]),
            "edge_density": _finite(graphs.edge_density[c]),
            "mean_edge_probability": _finite(
                graphs.edge_probability[c][~np.eye(len(names), dtype=bool)].mean()
            )
            if len(names) > 1
            else None,
            "acyclic_fraction": _finite(graphs.acyclic_fraction[c]),
            "edges_above_threshold": int((freq > THRESHOLD).sum()) if graphs.n_windows[c] else 0,
            "top_edges": _top_edges(freq, names, top),
        }
        if figures and graphs.n_windows[c]:
            title = f"{meta.get('model')} on {meta.get('dataset')} ({meta['split']}): class {cls}, " \
                    f"{int(graphs.n_windows[c])} windows, density {graphs.edge_density[c]:.3f}"
            written.append(str(plot_class_graph(freq, names, title,
                                                out / f"graph_{c}_{safe_name(cls)}.png", top)))
    summary = {
        **meta,
        "orientation": "edge_frequency[k, i, j] = fraction of class-k windows with a_ij = 1, i.e. j -> i "
                       "(row i lists i's parents); diagonal 0",
        "threshold": THRESHOLD,
        "node_names": names,
        "classes": per_class,
        "all": {"n_windows": int(graphs.n_windows.sum()),
                "edge_density": float(graphs.all_edge_frequency[~np.eye(len(names), dtype=bool)].mean())
                if len(names) > 1 else 0.0},
        "npz": str(out / "graphs.npz"),
        "figures": written,
    }
    if planted is not None:
        probability = graphs.all_edge_probability
        if probability is None:
            raise GraphError("planted-graph recovery needs the all-windows edge probabilities")
        summary["planted_edges"] = [{"parent": names[j], "child": names[i]} for i,
                                    j in zip(*np.nonzero(planted),
                                                                                            strict=True)]
        summary["recovery"] = edge_recovery(graphs.all_edge_frequency, probability, planted)
    atomic_write_json(out / "graphs.json", summary)
    return summary
