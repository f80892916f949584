"""The leaderboard of a ``biosig benchmark`` folder: per-corpus scores, ranks across corpora, Friedman
test, Nemenyi post-hoc test and critical-difference diagram.

Reads ``DIR/<corpus>/<method>/seed_<s>[/fold_<k>]/results.json`` and, when present, ``DIR/grid.json``
(written by ``biosig benchmark``: each corpus's metrics, the methods' order and the n/a pairs with
their reasons). Writes ``DIR/leaderboard.md`` (all tables and tests), ``leaderboard.csv`` and
``leaderboard.tex`` (the main table), ``leaderboard.json`` (every number) and the diagram
``cd_diagram.png`` / ``.pdf``.

* Per corpus: mean ± std (ddof 1) over every run of the method (seeds, and folds) of each of the
  corpus's metrics, trainable parameters and training seconds.
* Main table: one row per method, one column per corpus (its first metric), the average rank over
  the corpora the method was run on, and wins (corpora where it ranks first, ties included).
  A method that does not apply to a corpus shows ``n/a`` there (the reason is listed below the
  table); one that applies but has no finished run shows ``-``.
* Across corpora (Demšar, JMLR 7, 2006, Sec. 3.2): the Friedman test on the corpus x method matrix
  of per-corpus means (``scipy.stats.friedmanchisquare``; corpora are the blocks), the Nemenyi
  post-hoc test (``scikit_posthocs.posthoc_nemenyi_friedman``) and the critical-difference diagram
  (``scikit_posthocs.critical_difference_diagram``). Both need a complete matrix: they use the
  largest complete one, the most corpus x method cells with at least two corpora and three methods,
  and on a tie the one with more corpora, which are the test's blocks (what was left out is said).
* Pairwise, on request (``pairs``): per corpus Welch's t-test over the runs, and across corpora the
  Wilcoxon signed-rank test of the per-corpus means (``scipy.stats.wilcoxon``).

Reading: ranks use each corpus's first metric; ``ece`` and ``loss`` rank lower-is-better.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats as sps

from biosig_lightning.analysis.tables import welch_t_test
from biosig_lightning.atomic_io import atomic_write_bytes, atomic_write_json

__all__ = ["Leaderboard", "build", "corpus_rows", "main_rows", "mean_std", "write", "write_leaderboard"]

LOWER_IS_BETTER = {"ece", "loss"}
DEFAULT_METRICS = ("f1", "acc", "auroc")
GRID_FILE = "grid.json"


class LeaderboardError(ValueError):
    """A folder that holds no benchmark runs (one line, names it)."""


@dataclass
class Leaderboard:
    """Every number the leaderboard files show."""

    corpora: list[str]
    methods: list[str]
    metrics: dict[str, list[str]]
    #: corpus -> method -> metric -> the values of its runs ("params", "fit_seconds" too)
    runs: dict[str, dict[str, dict[str, list[float]]]]
    not_applicable: dict[tuple[str, str], str]
    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    friedman: dict[str, Any] = field(default_factory=dict)
    pairs: list[dict[str, Any]] = field(default_factory=list)

    def mean(self, corpus: str, method: str, metric: str) -> float | None:
        vals = self.runs.get(corpus, {}).get(method, {}).get(metric, [])
        return float(np.mean(vals)) if vals else None

    def primary(self, corpus: str) -> str:
        return self.metrics[corpus][0]

    def avg_rank(self, method: str) -> float | None:
        got = [r[method] for r in self.ranks.values() if method in r]
        return float(np.mean(got)) if got else None

    def wins(self, method: str) -> int:
        return sum(1 for r in self.ranks.values() if method in r and r[method] == min(r.values()))


def _read_grid(out: Path) -> dict[str, Any]:
    path = out / GRID_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def build(out: str | Path, pairs: Sequence[tuple[str, str]] = ()) -> Leaderboard:
    """Collect the runs under ``out`` and compute ranks and tests (module docstring)."""
    out = Path(out)
    grid = _read_grid(out)
    runs: dict[str, dict[str, dict[str, list[float]]]] = {}
    found = sorted(out.glob("*/*/seed_*/results.json")) + sorted(out.glob("*/*/seed_*/fold_*/results.json"))
    for path in found:
        rel = path.relative_to(out).parts
        corpus, method = rel[0], rel[1]
        res = json.loads(path.read_text())
        slot = runs.setdefault(corpus, {}).setdefault(method, {})
        for k, v in (res.get("metrics") or {}).items():
            if isinstance(v, int | float) and math.isfinite(v):
                slot.setdefault(k.removeprefix("test/"), []).append(float(v))
        slot.setdefault("params", []).append(float(res.get("num_params") or 0))
        slot.setdefault("fit_seconds", []).append(float(res.get("fit_seconds") or 0.0))
    if not runs and not grid:
        raise LeaderboardError(f"{out} holds no benchmark runs (<corpus>/<method>/seed_<s>/results.json)")
    corpora = list(grid.get("corpora") or sorted(runs))
    corpora += [c for c in sorted(runs) if c not in corpora]
    methods = list(grid.get("methods") or sorted({m for c in runs.values() for m in c}))
    methods += [m for m in sorted({m for c in runs.values() for m in c}) if m not in methods]
    metrics = {c: list((grid.get("metrics") or {}).get(c) or DEFAULT_METRICS) for c in corpora}
    na = {(d["corpus"], d["method"]): d["reason"] for d in grid.get("not_applicable", [])}
    board = Leaderboard(corpora, methods, metrics, runs, na)
    for c in corpora:
        metric = board.primary(c)
        means = {m: v for m in methods if (v := board.mean(c, m, metric)) is not None}
        if means:
            sign = 1.0 if metric in LOWER_IS_BETTER else -1.0
            ranked = sps.rankdata([sign * v for v in means.values()], method="average")
            board.ranks[c] = {m: float(r) for m, r in zip(means, ranked, strict=True)}
    board.friedman = friedman(board)
    board.pairs = [pairwise(board, a, b) for a, b in pairs]
    return board


def score_matrix(board: Leaderboard) -> tuple[list[str], list[str], np.ndarray, list[str]]:
    """The complete corpus x method matrix of first-metric means the Friedman test uses, and notes
    on what was dropped to make it complete."""
    def have(c: str, m: str) -> bool:
        return board.mean(c, m, board.primary(c)) is not None

    # methods and corpora without any score (n/a everywhere, nothing finished) are not candidates at all
    methods = [m for m in board.methods if any(have(c, m) for c in board.corpora)]
    corpora = [c for c in board.corpora if any(have(c, m) for m in methods)]
    notes: list[str] = [f"corpus {c} left out (no finished run)" for c in board.corpora if c not in corpora]

    kept_c, kept_m = _largest_complete(corpora, methods, have)
    notes += [f"corpus {c} left out ({sum(not have(c, m) for m in kept_m)} methods without a score)"
              for c in corpora if c not in kept_c]
    notes += [f"method {m} left out (no score on {sum(not have(c, m) for c in kept_c)} of the corpora kept)"
              for m in methods if m not in kept_m]
    corpora, methods = kept_c, kept_m
    sign = {c: (-1.0 if board.primary(c) in LOWER_IS_BETTER else 1.0) for c in corpora}
    def score(c: str, m: str) -> float:
        value = board.mean(c, m, board.primary(c))
        if value is None:  # _largest_complete keeps only cells that have a score
            raise ValueError(f"no score for corpus {c}, method {m} in the complete matrix")
        return float(value)

    matrix = np.array([[sign[c] * score(c, m) for m in methods] for c in corpora])
    return corpora, methods, matrix.reshape(len(corpora), len(methods)), notes


def _largest_complete(corpora: list[str], methods: list[str], have: Any) -> tuple[list[str], list[str]]:
    """The corpora and methods of the largest complete sub-matrix: the most corpus x method cells with at
    least two corpora and three methods (on a tie, more corpora: they are the test's blocks). Every subset
    of corpora is tried (each keeps the methods scored on all of it); past 12 corpora, corpora are
    dropped one at a time, the one with the most gaps first."""
    if len(corpora) > 12:
        kept = list(corpora)
        while len(kept) > 2 and not all(have(c, m) for c in kept for m in methods):
            kept.remove(max(kept, key=lambda c: sum(not have(c, m) for m in methods)))
        return kept, [m for m in methods if all(have(c, m) for c in kept)]
    best: tuple[tuple[int, int, int], list[str], list[str]] = ((-1, -1, -1), list(corpora), [])
    for mask in range(1, 2 ** len(corpora)):
        sub = [c for i, c in enumerate(corpora) if mask >> i & 1]
        ms = [m for m in methods if all(have(c, m) for c in sub)]
        key = (int(len(sub) >= 2 and len(ms) >= 3), len(sub) * len(ms), len(sub))
        if key > best[0]:
            best = (key, sub, ms)
    return best[1], best[2]


def friedman(board: Leaderboard, alpha: float = 0.05) -> dict[str, Any]:
    """Friedman test, Nemenyi post-hoc p-values and the ranks of the CD diagram (module docstring)."""
    corpora, methods, matrix, notes = score_matrix(board)
    result: dict[str, Any] = {"corpora": corpora, "methods": methods, "notes": notes, "alpha": alpha}
    if len(corpora) < 2 or len(methods) < 3:
        result["skipped"] = (f"needs at least 2 corpora and 3 methods with a score on each; "
                             f"has {len(corpora)} x {len(methods)}")
        return result
    if np.all(matrix == matrix[:, :1]):
        # every corpus ties all methods: scipy's tie-corrected statistic is 0 / 0 (NaN and a RuntimeWarning);
        # the rank sums are all equal, so the uncorrected statistic is 0 and p = 1
        stat, p = 0.0, 1.0
        notes.append("every corpus scores all methods the same: no ranking (chi² = 0, p = 1)")
    else:
        stat, p = sps.friedmanchisquare(*matrix.T)
    import pandas as pd
    import scikit_posthocs as sp

    nemenyi = sp.posthoc_nemenyi_friedman(pd.DataFrame(matrix, index=corpora, columns=methods))
    ranks = np.mean([sps.rankdata(-row, method="average") for row in matrix], axis=0)
    k, n = len(methods), len(corpora)
    result.update({
        "statistic": float(stat), "p_value": float(p),
        "avg_ranks": {m: float(r) for m, r in zip(methods, ranks, strict=True)},
        "nemenyi_p": {a: {b: float(nemenyi.loc[a, b]) for b in methods} for a in methods},
        # Demšar Sec. 3.2.2: CD = q_alpha sqrt(k (k + 1) / (6 N)), q_alpha the studentized range / sqrt(2)
        "critical_difference": float(sps.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
                                     * math.sqrt(k * (k + 1) / (6 * n))),
    })
    return result


def pairwise(board: Leaderboard, a: str, b: str) -> dict[str, Any]:
    """Welch's t-test per corpus over the runs, and Wilcoxon's signed-rank test across corpora."""
    for m in (a, b):
        if m not in board.methods:
            raise LeaderboardError(f"--pair: no method {m!r} in the leaderboard (methods: "
                                   f"{', '.join(board.methods)})")
    out: dict[str, Any] = {"a": a, "b": b, "per_corpus": {}}
    diffs = []
    for c in board.corpora:
        metric = board.primary(c)
        va = board.runs.get(c, {}).get(a, {}).get(metric, [])
        vb = board.runs.get(c, {}).get(b, {}).get(metric, [])
        if not va or not vb:
            continue
        entry: dict[str, Any] = {"metric": metric, "mean_a": float(np.mean(va)), "mean_b": float(np.mean(vb))}
        try:
            w = welch_t_test(va, vb)
            entry.update({"welch_t": w.t, "welch_df": w.df, "welch_p": w.p})
        except ValueError as err:
            entry["welch"] = str(err)
        out["per_corpus"][c] = entry
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        diffs.append(sign * (entry["mean_a"] - entry["mean_b"]))
    if len(diffs) >= 2 and any(d != 0 for d in diffs):
        w = sps.wilcoxon(diffs)
        out["wilcoxon"] = {"statistic": float(w.statistic),
                           "p_value": float(w.pvalue), "n_corpora": len(diffs)}
    else:
        out["wilcoxon"] = {"skipped": f"needs two corpora with a nonzero difference; has {len(diffs)}"}
    return out


# ---- rendering ------------------------------------------------------------------------------------------
def mean_std(vals: list[float], digits: int = 3) -> str:
    """``mean ± std`` (ddof 1) of a method's runs, ``(1 run)`` for one, ``-`` for none."""
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f} (1 run)"
    std = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
    return f"{np.mean(vals):.{digits}f} ± {std:.{digits}f}"


def main_rows(board: Leaderboard) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the main table: method, one column per corpus, avg. rank, wins."""
    header = ["method", *[f"{c} ({board.primary(c)})" for c in board.corpora], "avg. rank", "wins"]
    rows = []
    order = sorted(board.methods, key=lambda m: (board.avg_rank(m) is None, board.avg_rank(m) or 0.0))
    for m in order:
        row = [m]
        for c in board.corpora:
            if (c, m) in board.not_applicable:
                row.append("n/a")
            else:
                row.append(mean_std(board.runs.get(c, {}).get(m, {}).get(board.primary(c), [])))
        r = board.avg_rank(m)
        row += [f"{r:.2f}" if r is not None else "-", str(board.wins(m))]
        rows.append(row)
    return header, rows


def corpus_rows(board: Leaderboard, corpus: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one corpus's table: every metric, parameters, training seconds, runs."""
    rows = []
    for m in board.methods:
        got = board.runs.get(corpus, {}).get(m)
        if got:
            rows.append([m, *[mean_std(got.get(k, [])) for k in board.metrics[corpus]],
                         f"{int(np.mean(got['params'])):,}",
                         mean_std(got["fit_seconds"], 1), str(len(got["params"]))])
    return ["method", *board.metrics[corpus], "params", "fit_seconds", "runs"], rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def render_markdown(board: Leaderboard, figure: str | None = None) -> str:
    header, rows = main_rows(board)
    parts = ["# Leaderboard", "", "Mean ± std over seeds (and folds) of each corpus's first metric; "
             "average rank over the corpora a method ran on (1 = best); wins = corpora ranked first.", "",
             _md_table(header, rows)]
    if board.not_applicable:
        parts += ["", "n/a:", *[f"- {m} on {c}: {r}" for (c, m), r in sorted(board.not_applicable.items())]]
    fr = board.friedman
    parts += ["", "## Across corpora", ""]
    if "skipped" in fr:
        parts.append(f"Friedman test skipped: {fr['skipped']}.")
    else:
        parts.append(f"Friedman test over {len(fr['corpora'])} corpora x {len(fr['methods'])} methods: "
                     f"chi² = {fr['statistic']:.3f}, p = {fr['p_value']:.4g}. Nemenyi critical difference "
                     f"(alpha {fr['alpha']}): {fr['critical_difference']:.3f} ranks.")
        ms = fr["methods"]
        parts += ["", "Nemenyi post-hoc p-values:", "",
                  _md_table(["", *ms], [[a, *[f"{fr['nemenyi_p'][a][b]:.3g}" for b in ms]] for a in ms])]
        if figure:
            parts += ["", f"![critical-difference diagram]({figure})"]
    for note in fr.get("notes", []):
        parts.append(f"- {note}")
    for c in board.corpora:
        header_c, rows_c = corpus_rows(board, c)
        if rows_c:
            parts += ["", f"## {c}", "", _md_table(header_c, rows_c)]
    for pair in board.pairs:
        parts += ["", f"## {pair['a']} vs {pair['b']}", ""]
        for c, e in pair["per_corpus"].items():
            test = (f"Welch t = {e['welch_t']:.3f}, df = {e['welch_df']:.1f}, p = {e['welch_p']:.4g}"
                    if "welch_p" in e else e.get("welch", ""))
            parts.append(f"- {c} ({e['metric']}): {e['mean_a']:.4f} vs {e['mean_b']:.4f}; {test}")
        w = pair["wilcoxon"]
        parts.append(f"- across corpora: Wilcoxon W = {w['statistic']:.3f}, p = {w['p_value']:.4g} "
                     f"({w['n_corpora']} corpora)" if "p_value" in w else f"- across corpora: {w['skipped']}")
    return "\n".join(parts) + "\n"


def render_csv(board: Leaderboard) -> str:
    import csv
    import io

    header, rows = main_rows(board)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def render_latex(board: Leaderboard) -> str:
    header, rows = main_rows(board)

    def esc(s: str) -> str:
        return s.replace("_", r"\_").replace("±", r"$\pm$").replace("%", r"\%")

    lines = [r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}", r"\toprule",
             " & ".join(esc(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(c) for c in r) + r" \\" for r in rows]
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"


def write_cd_diagram(board: Leaderboard, out: Path) -> list[Path]:
    """``cd_diagram.png`` and ``.pdf`` (scikit-posthocs), when the Friedman test ran."""
    fr = board.friedman
    if "skipped" in fr:
        return []
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import scikit_posthocs as sp

    ms = fr["methods"]
    sig = pd.DataFrame([[fr["nemenyi_p"][a][b] for b in ms] for a in ms], index=ms, columns=ms)
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(ms)))
    sp.critical_difference_diagram(pd.Series(fr["avg_ranks"]), sig, ax=ax, alpha=fr["alpha"])
    ax.set_title(f"Friedman p = {fr['p_value']:.3g}; bars join methods Nemenyi does not separate", fontsize=9)
    written = []
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, bbox_inches="tight", dpi=150)
        written.append(atomic_write_bytes(out / f"cd_diagram.{ext}", buf.getvalue()))
    plt.close(fig)
    return written


def _jsonable(board: Leaderboard) -> dict[str, Any]:
    summary = {c: {m: {k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                           "n": len(v)} for k, v in got.items()} for m, got in ms.items()} for c,
               ms in board.runs.items()}
    return {"corpora": board.corpora, "methods": board.methods, "metrics": board.metrics, "summary": summary,
            "ranks": board.ranks, "avg_rank": {m: board.avg_rank(m) for m in board.methods},
            "wins": {m: board.wins(m) for m in board.methods},
            "not_applicable": [{"corpus": c, "method": m, "reason": r} for (c, m),
                               r in board.not_applicable.items()],
            "friedman": board.friedman, "pairs": board.pairs}


def write(board: Leaderboard, out: Path) -> list[Path]:
    """The leaderboard files under ``out`` (module docstring); returns their paths."""
    out = Path(out)
    figs = write_cd_diagram(board, out)
    written = [
        atomic_write_bytes(out / "leaderboard.md",
                           render_markdown(board, "cd_diagram.png" if figs else None).encode()),
        atomic_write_bytes(out / "leaderboard.csv", render_csv(board).encode()),
        atomic_write_bytes(out / "leaderboard.tex", render_latex(board).encode()),
        atomic_write_json(out / "leaderboard.json", _jsonable(board)),
    ]
    return written + figs


def write_leaderboard(out: str | Path, pairs: Sequence[tuple[str, str]] = ()) -> tuple[str, list[Path]]:
    """Build and write the leaderboard of ``out``; returns the markdown and the files written."""
    board = build(out, pairs)
    written = write(board, Path(out))
    return (Path(out) / "leaderboard.md").read_text(), written
