"""The leaderboard's numbers from a known results tree: means, ranks, wins, Friedman (checked against
scipy.stats.friedmanchisquare on the per-corpus means), Nemenyi, the CD diagram, n/a and pairwise tests."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps

from biosig_lightning.analysis.leaderboard import build, score_matrix, write

#: corpus -> method -> per-seed test/f1 (corpus "d" scores ece: lower is better)
SCORES = {
    "a": {"m1": [0.9, 0.8], "m2": [0.7, 0.6], "m3": [0.5, 0.55], "m4": [0.6, 0.62]},
    "b": {"m1": [0.6, 0.7], "m2": [0.8, 0.9], "m3": [0.4, 0.3], "m4": [0.5, 0.5]},
    "c": {"m1": [0.66, 0.68], "m2": [0.61, 0.6], "m3": [0.2, 0.25], "m4": [0.7, 0.72]},
    "d": {"m1": [0.1, 0.12], "m2": [0.2, 0.18], "m3": [0.3, 0.35], "m4": [0.05, 0.07]},
}


def _tree(root: Path, scores: dict = SCORES, grid: dict | None = None) -> Path:
    for corpus, methods in scores.items():
        metric = "ece" if corpus == "d" else "f1"
        for method, vals in methods.items():
            for seed, v in enumerate(vals):
                run = root / corpus / method / f"seed_{seed}"
                run.mkdir(parents=True)
                (run / "results.json").write_text(json.dumps({
                    "metrics": {f"test/{metric}": v, "test/acc": 0.5},
                    "num_params": 100, "fit_seconds": 2.0}))
    metrics = {c: ["ece", "acc"] if c == "d" else ["f1", "acc"] for c in scores}
    (root / "grid.json").write_text(json.dumps(grid or {"corpora": list(scores),
                                                        "methods": ["m1", "m2", "m3", "m4"],
                                                        "metrics": metrics, "not_applicable": []}))
    return root


def test_friedman_matches_scipy_and_ranks_are_per_corpus(tmp_path: Path) -> None:
    board = build(_tree(tmp_path))
    means = {c: {m: float(np.mean(v)) for m, v in ms.items()} for c, ms in SCORES.items()}
    columns = [[(-1 if c == "d" else 1) * means[c][m] for c in SCORES] for m in ("m1", "m2", "m3", "m4")]
    stat, p = sps.friedmanchisquare(*columns)
    assert board.friedman["statistic"] == pytest.approx(stat, rel=1e-12)
    assert board.friedman["p_value"] == pytest.approx(p, rel=1e-12)
    # ranks by hand: a m1>m2>m4>m3; b m2>m1>m4>m3; c m4>m1>m2>m3; d (ece, lower better) m4<m1<m2<m3
    assert board.ranks == {"a": {"m1": 1, "m2": 2, "m3": 4, "m4": 3},
                           "b": {"m1": 2, "m2": 1, "m3": 4, "m4": 3},
                           "c": {"m1": 2, "m2": 3, "m3": 4, "m4": 1},
                           "d": {"m1": 2, "m2": 3, "m3": 4, "m4": 1}}
    assert board.avg_rank("m1") == pytest.approx(1.75) and board.wins("m4") == 2 and board.wins("m3") == 0
    assert board.friedman["avg_ranks"] == pytest.approx({"m1": 1.75, "m2": 2.25, "m3": 4.0, "m4": 2.0})
    nem = board.friedman["nemenyi_p"]
    assert nem["m1"]["m3"] < nem["m1"]["m2"] and nem["m1"]["m2"] == nem["m2"]["m1"]
    # Demšar's CD for k = 4, N = 4 at alpha 0.05: q = 2.569
    assert board.friedman["critical_difference"] == pytest.approx(2.569 * np.sqrt(4 * 5 / 24), rel=1e-3)


def test_all_ties_give_no_ranking_without_a_warning(tmp_path: Path) -> None:
    # every method scores the same on each corpus (a smoke grid where all reach the same score): scipy's
    # tie-corrected Friedman statistic is 0 / 0; the rank sums are equal, so chi² = 0 and p = 1, said so
    tied = {c: {m: [0.8 - 0.1 * i] * 2 for m in ("m1", "m2", "m3", "m4")} for i,
            c in enumerate(("a", "b", "c"))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        board = build(_tree(tmp_path, tied))
    assert (board.friedman["statistic"], board.friedman["p_value"]) == (0.0, 1.0)
    assert board.friedman["avg_ranks"] == {m: 2.5 for m in ("m1", "m2", "m3", "m4")}
    assert "every corpus scores all methods the same: no ranking (chi² = 0, p = 1)" in board.friedman["notes"]


def test_the_friedman_test_keeps_the_largest_complete_matrix(tmp_path: Path) -> None:
    # the stand-in grid's shape: seven methods, three corpora, one method n/a on one corpus. Dropping that
    # method keeps 3 x 6 cells, dropping the corpus 2 x 7; a fourth corpus with two gaps goes (4 x 4 < 3 x 6)
    methods = [f"m{i}" for i in range(7)]
    scores = {c: {m: [0.5 + 0.05 * i + 0.01 * j, 0.5 + 0.05 * i] for i, m in enumerate(methods)}
              for j, c in enumerate(("a", "b", "c"))}
    del scores["c"]["m6"]
    grid = {"corpora": ["a", "b", "c", "e"], "methods": methods, "metrics": {c: ["f1"] for c in "abce"}}
    board = build(_tree(tmp_path / "one", scores, {**grid, "corpora": ["a", "b", "c"]}))
    assert board.friedman["corpora"] == ["a", "b", "c"] and board.friedman["methods"] == methods[:6]
    assert board.friedman["notes"] == ["method m6 left out (no score on 1 of the corpora kept)"]
    scores["e"] = {m: [0.6, 0.7] for m in methods[2:]}
    board = build(_tree(tmp_path / "two", scores, grid))
    assert board.friedman["corpora"] == ["a", "b", "c"] and board.friedman["methods"] == methods[:6]
    assert board.friedman["notes"] == ["corpus e left out (2 methods without a score)",
                                       "method m6 left out (no score on 1 of the corpora kept)"]


def test_files_and_na_and_pairs(tmp_path: Path) -> None:
    scores = {c: dict(ms) for c, ms in SCORES.items()}
    del scores["b"]["m3"]
    grid = {"corpora": list(scores), "methods": ["m1", "m2", "m3", "m4"],
            "metrics": {c: ["ece"] if c == "d" else ["f1"] for c in scores},
            "not_applicable": [{"corpus": "b", "method": "m3", "reason": "m3 needs context epochs"}]}
    root = _tree(tmp_path, scores, grid)
    board = build(root, pairs=[("m1", "m2")])
    corpora, methods, matrix, notes = score_matrix(board)
    # the gap is closed by dropping m3 or corpus b (12 cells either way): on the tie the corpora, the test's
    # blocks, are kept
    assert corpora == ["a", "b", "c", "d"] and methods == ["m1", "m2", "m4"] and matrix.shape == (4, 3)
    assert notes == ["method m3 left out (no score on 1 of the corpora kept)"]
    written = write(board, root)
    assert {p.name for p in written} >= {"leaderboard.md", "leaderboard.csv", "leaderboard.tex",
                                         "cd_diagram.png",
                                         "cd_diagram.pdf"}
    csv = (root / "leaderboard.csv").read_text().splitlines()
    assert csv[0] == "method,a (f1),b (f1),c (f1),d (ece),avg. rank,wins"
    m3 = next(r for r in csv if r.startswith("m3,")).split(",")
    assert m3[2] == "n/a" and m3[5] == "4.00"
    md = (root / "leaderboard.md").read_text()
    assert "- m3 on b: m3 needs context epochs" in md
    welch = sps.ttest_ind(SCORES["a"]["m1"], SCORES["a"]["m2"], equal_var=False)
    assert board.pairs[0]["per_corpus"]["a"]["welch_p"] == pytest.approx(welch.pvalue, rel=1e-9)
    diffs = [np.mean(scores[c]["m1"]) - np.mean(scores[c]["m2"]) for c in ("a", "b", "c")]
    diffs.append(-(np.mean(scores["d"]["m1"]) - np.mean(scores["d"]["m2"])))
    assert board.pairs[0]["wilcoxon"]["p_value"] == pytest.approx(sps.wilcoxon(diffs).pvalue)
