"""The leaderboard on a table whose answer is worked out by hand: tied means share the average of their
ranks (1.5 and 1.5), both tied leaders win, and every cell is the full ``mean ± std`` string with the
sample standard deviation (ddof 1). The values are exact in binary, so the ties are exact."""

from __future__ import annotations

import json
from pathlib import Path

from biosig_lightning.analysis.leaderboard import build, write

#: corpus -> method -> the two seeds' test/f1
SCORES = {
    "a": {"m1": [0.75, 0.875], "m2": [0.6875, 0.9375], "m3": [0.5, 0.75]},  # means .8125, .8125, .625
    "b": {"m1": [0.75, 0.75], "m2": [0.5, 0.625], "m3": [0.625, 0.5]},  # means .75, .5625, .5625
}


def _tree(root: Path) -> Path:
    for corpus, methods in SCORES.items():
        for method, vals in methods.items():
            for seed, v in enumerate(vals):
                run = root / corpus / method / f"seed_{seed}"
                run.mkdir(parents=True)
                (run / "results.json").write_text(json.dumps({"metrics": {"test/f1": v}, "num_params": 10}))
    (root / "grid.json").write_text(json.dumps({"corpora": ["a", "b"], "methods": ["m1", "m2", "m3"],
                                                "metrics": {"a": ["f1"], "b": ["f1"]}, "not_applicable": []}))
    return root


def test_tied_means_share_their_ranks_and_both_win(tmp_path: Path) -> None:
    board = build(_tree(tmp_path))
    # a: m1 and m2 tie for places 1-2, m3 third; b: m1 first, m2 and m3 tie for places 2-3
    assert board.ranks == {"a": {"m1": 1.5, "m2": 1.5, "m3": 3.0}, "b": {"m1": 1.0, "m2": 2.5, "m3": 2.5}}
    assert [board.avg_rank(m) for m in ("m1", "m2", "m3")] == [1.25, 2.0, 2.75]
    assert [board.wins(m) for m in ("m1", "m2", "m3")] == [2, 1, 0]


def test_each_cell_is_mean_plus_minus_sample_std(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    write(build(root), root)
    rows = (root / "leaderboard.csv").read_text().splitlines()
    # std (ddof 1) of two values is |x1 - x2| / sqrt 2: 0.125 -> 0.088, 0.25 -> 0.177 (ddof 0 would give
    # 0.062, 0.125)
    assert rows == ["method,a (f1),b (f1),avg. rank,wins",
                    "m1,0.812 ± 0.088,0.750 ± 0.000,1.25,2",
                    "m2,0.812 ± 0.177,0.562 ± 0.088,2.00,1",
                    "m3,0.625 ± 0.177,0.562 ± 0.088,2.75,0"]
