"""``biosig stdro-weights RUN_DIR``: Fig. 2 of the STDRO paper from a finished run.

Reads ``stdro_weights.npz`` (written by :class:`~biosig_lightning.robust.stdro.STDROTask` at the
end of fit: ``W``, ``M`` and ``A_t = W_t M_t`` after every M step) and draws two rows:

* (A-D): the covariate weight of the first period ``W_1 M_1`` and, for ``t = 2..N``, the
  difference ``W_t M_t - W_1 M_1`` (the paper: "the weight matrix for the first period and the
  difference from it for the remaining periods");
* (E-H): each period's change over training, ``A_t(end) - A_t(start)`` (the paper: "the
  difference in the covariate weight of each time period before and after training").

Reading: the top row shows the weights at the end of training (the learned uncertainty set,
which Sec. 4.5 discusses); ``--at start`` draws the initial ones (``W_t``, as ``M_t = I``).
The figure goes to ``RUN_DIR/stdro_weights.png`` unless ``--out`` says otherwise; the
panel arrays go beside it as ``stdro_weights_panels.npz``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["figure_panels", "run"]


def figure_panels(history: np.ndarray, at: str = "end") -> dict[str, np.ndarray]:
    """``top`` (N, C, C): ``A_1`` then ``A_t - A_1``; ``change`` (N, C, C): ``A_t(end) - A_t(start)``."""
    if history.ndim != 4 or history.shape[-1] != history.shape[-2]:
        raise ValueError(f"stdro-weights: history must be (steps, N, C, C), got {history.shape}")
    a = history[-1] if at == "end" else history[0]
    top = np.concatenate([a[:1], a[1:] - a[:1]])
    return {"top": top, "change": history[-1] - history[0]}


def _load(run_dir: Path) -> dict[str, np.ndarray]:
    path = run_dir / "stdro_weights.npz" if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise FileNotFoundError(f"stdro-weights: no stdro_weights.npz in {run_dir} (is it an STDROTask run "
                                "that finished fit?)")
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def run(argv: list[str]) -> None:
    """Parse ``argv`` and write the figure (and its panel arrays)."""
    parser = argparse.ArgumentParser(prog="biosig stdro-weights", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="run directory with stdro_weights.npz (or the npz itself)")
    parser.add_argument("--out", type=Path, default=None,
                        help="figure path (default RUN_DIR/stdro_weights.png)")
    parser.add_argument("--at", choices=("end", "start"), default="end",
                        help="top row at the end of training (default) or at its start")
    parser.add_argument("--channels", default=None, help="comma-separated channel names for the axes")
    args = parser.parse_args(argv)
    data = _load(args.run_dir)
    # Any: numpy's savez stub would read a dict[str, ndarray] as its allow_pickle flag
    panels: dict[str, Any] = figure_panels(np.asarray(data["history"], dtype=np.float64), args.at)
    out = args.out or ((args.run_dir if args.run_dir.is_dir() else args.run_dir.parent) / "stdro_weights.png")
    names = args.channels.split(",") if args.channels else None

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = panels["top"].shape[0]
    fig, axes = plt.subplots(2, n, figsize=(3.2 * n, 6.4), squeeze=False)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for row, key in enumerate(("top", "change")):
        for t in range(n):
            ax = axes[row, t]
            mat = panels[key][t]
            if row == 0 and t == 0:
                im = ax.imshow(mat, cmap="viridis")
                title = "$W_1 M_1$"
            else:
                lim = float(np.abs(mat).max()) or 1.0
                im = ax.imshow(mat, cmap="RdBu_r", vmin=-lim, vmax=lim)
                title = (f"$W_{t + 1} M_{t + 1} - W_1 M_1$" if row == 0
                         else f"$\\Delta(W_{t + 1} M_{t + 1})$ over training")
            ax.set_title(f"({letters[row * n + t]}) {title}", fontsize=9)
            if names and len(names) == mat.shape[0]:
                ax.set_xticks(range(len(names)), names, rotation=90, fontsize=5)
                ax.set_yticks(range(len(names)), names, fontsize=5)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    variant = str(data.get("variant", "")) or "stdro"
    fig.suptitle(f"STDRO covariate weights ({variant}, {len(data['history']) - 1} M steps)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    np.savez(out.with_name(out.stem + "_panels.npz"), **panels)
    print(f"stdro-weights: {out}")
