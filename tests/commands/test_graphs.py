"""``biosig graphs``: per-class learned SD-Former graphs of tiny runs and their stability over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from biosig_lightning.analysis.graphs import (
    ClassGraphs,
    GraphError,
    edge_recovery,
    graph_node_names,
    jaccard,
    pearson,
    stability,
)
from biosig_lightning.cli import main
from biosig_lightning.commands.graphs import run
from biosig_lightning.data.corpora.chb_mit import CHANNELS_23
from biosig_lightning.models.sdformer import SDFormer

# edge_bias_init 0 starts the edge MLP at a coin flip, so even a one-epoch model has non-trivial graphs
TINY = {"d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 16, "stft_frames": 4, "token_hidden": 4,
        "encoder_ff": 8, "edge_hidden": 8, "recon_hidden": 8, "dropout": 0.0, "band_pooling": True,
        "edge_bias_init": 0.0}


def _fit(tmp: Path, name: str, seed: int, **backbone: object) -> Path:
    config = {
        "seed_everything": seed,
        "model": {"class_path": "ClassificationTask",
                  "init_args": {"backbone": {"class_path": "biosig_lightning.models.sdformer.SDFormer",
                                             "init_args": {**TINY, **backbone}},
                                "scheduler": "none", "early_stopping_patience": None}},
        "data": {"class_path": "CHBMITDataModule",
                 "init_args": {"synthetic": True, "synthetic_options": {"windows_per_subject": 8},
                               "batch_size": 16}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                    "limit_test_batches": 1,
                    "enable_progress_bar": False, "enable_model_summary": False, "log_every_n_steps": 1,
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(tmp / "runs"), "name": name}}},
    }
    path = tmp / f"{name}_{seed}.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    run_dir = next(p for p in sorted((tmp / "runs" / name).glob("version_*"))
                   if json.loads((p / "results.json").read_text())["seed"] == seed)
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, _cache_dir: None) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("graphs")
    return {"seed1": _fit(tmp, "sd", 1), "seed2": _fit(tmp, "sd", 2),
            "full": _fit(tmp, "full", 1, graph="full"),
            "tmp": tmp}


def test_two_seeds_per_class_graphs_and_stability(runs: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = runs["tmp"] / "two_seeds"
    run([str(runs["seed1"]), str(runs["seed2"]), "--out", str(out)])
    printed = capsys.readouterr().out
    assert f"stability: {out / 'stability.json'}" in printed and "jaccard" in printed
    results = json.loads((runs["seed1"] / "results.json").read_text())
    labels = ["version_0", "version_1"]
    for label in labels:
        with np.load(out / label / "graphs.npz", allow_pickle=False) as z:
            freq, density, n = z["edge_frequency"], z["edge_density"], z["n_windows"]
            assert z["node_names"].tolist() == list(CHANNELS_23)  # band pooling: channel nodes
            assert z["classes"].tolist() == ["background", "seizure"]
            assert freq.shape == (2, 23, 23) and z["edge_probability"].shape == (2, 23, 23)
            assert n.sum() == results["windows"]["test"] and (n > 0).all()
            assert ((freq >= 0) & (freq <= 1)).all() and (np.diagonal(freq, axis1=1, axis2=2) == 0).all()
            assert ((density >= 0) & (density <= 1)).all()
            off = ~np.eye(23, dtype=bool)
            np.testing.assert_allclose(density, freq[:, off].mean(axis=1))
            # the all-windows graph is the window-weighted mean of the class graphs
            np.testing.assert_allclose(z["all_edge_frequency"], (freq * n[:, None, None]).sum(0) / n.sum())
        summary = json.loads((out / label / "graphs.json").read_text())
        assert summary["nodes"] == "channel" and summary["split"] == "test"
        assert len(summary["figures"]) == 2 and all(Path(f).stat().st_size > 1000 for f in summary["figures"])
        # the listed edges are the class's most frequent ones (--top-edges 20), each with its counted
        # frequency
        names = list(CHANNELS_23)
        for c, cls in enumerate(["background", "seizure"]):
            edges = summary["classes"][cls]["top_edges"]
            listed = [(names.index(e["child"]), names.index(e["parent"])) for e in edges]
            assert [e["frequency"] for e in edges] == [round(float(freq[c, i, j]), 4) for i, j in listed]
            assert len(set(listed)) == len(listed) and all(i != j for i, j in listed)
            assert len(edges) == min(20, int((freq[c][off] > 0).sum()))
            rest = np.where(off, freq[c], -1.0)
            for i, j in listed:
                rest[i, j] = -1.0  # no edge left out is more frequent than the least frequent one listed
            if edges:
                assert rest.max() <= min(float(freq[c, i, j]) for i, j in listed)
    report = json.loads((out / "stability.json").read_text())
    assert report["runs"] == labels and report["pairs"] == [labels]
    assert set(report["classes"]) == {"background", "seizure", "all"}
    # recomputed from the two runs' saved class graphs: Jaccard of the edge sets above the threshold,
    # Pearson of the off-diagonal edge frequencies (undefined for a constant graph)
    saved = []
    for label in labels:
        with np.load(out / label / "graphs.npz", allow_pickle=False) as z:
            saved.append({**dict(zip(z["classes"].tolist(), z["edge_frequency"], strict=True)),
                          "all": z["all_edge_frequency"]})
    off = ~np.eye(23, dtype=bool)
    for name, row in report["classes"].items():
        a, b = saved[0][name], saved[1][name]
        edges = [{(i, j) for i,
                  j in zip(*np.nonzero((g > report["threshold"]) & off), strict=True)} for g in (a, b)]
        union = edges[0] | edges[1]
        want_jaccard = len(edges[0] & edges[1]) / len(union) if union else 1.0
        assert row["n_pairs"] == 1 and row["jaccard"]["mean"] == pytest.approx(want_jaccard, abs=1e-12), name
        fa, fb = a[off], b[off]
        if fa.std() < 1e-9 or fb.std() < 1e-9:
            assert row["pearson"]["mean"] is None, name
        else:
            assert row["pearson"]["mean"] == pytest.approx(float(np.corrcoef(fa, fb)[0, 1]), abs=1e-9), name


def test_class_graph_is_the_mean_of_per_sample_adjacency(runs: dict[str, Path]) -> None:
    from biosig_lightning.runs import load_run

    out = runs["tmp"] / "one"
    run([str(runs["seed1"]), "--out", str(out), "--no-figures", "--batch-size", "5"])
    loaded = load_run(runs["seed1"])
    dm = loaded.datamodule
    dm.setup("test")
    xs, ys = zip(*((b["x"], b["y"]) for b in dm.test_dataloader()), strict=True)
    with torch.no_grad():
        adjacency = loaded.task.backbone.forward_with_aux(torch.cat(xs)).adjacency.numpy()
    y = torch.cat(ys).numpy()
    with np.load(out / "graphs.npz", allow_pickle=False) as z:
        for c in range(2):
            np.testing.assert_allclose(z["edge_frequency"][c], adjacency[y == c].mean(0), atol=1e-12)
    assert not list(out.glob("*.png"))


def test_planted_graph_recovery_is_reported_beside_a_random_graph(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The CHB-MIT stand-in plants 11 couplings (SYNTHETIC_DEFAULTS); biosig graphs scores the learned graph
    on them."""
    from biosig_lightning.data.synthetic_coupling import plant_coupling, truth_adjacency
    from biosig_lightning.runs import load_run

    out = runs["tmp"] / "recovery"
    run([str(runs["seed1"]), "--out", str(out), "--no-figures"])
    assert "planted-edge recovery" in capsys.readouterr().out
    dm = load_run(runs["seed1"]).datamodule
    recorded = dm.reader().config()["coupling"]
    # the truth recorded in the stand-in's config is the one planted from its seed (the same for every
    # subject)
    assert recorded == [e.to_dict() for e in plant_coupling(23, 11, seed=0, nyquist=128.0)]
    truth = truth_adjacency(recorded, list(CHANNELS_23), list(CHANNELS_23))
    assert truth.sum() == len({(e["parent"], e["child"]) for e in recorded}) == 11
    summary = json.loads((out / "graphs.json").read_text())
    with np.load(out / "graphs.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["planted"], truth)
        want = edge_recovery(z["all_edge_frequency"], z["all_edge_probability"], truth)
    assert summary["recovery"] == json.loads(json.dumps(want))
    directed = summary["recovery"]["directed"]
    assert (directed["pairs"], directed["planted"]) == (23 * 22, 11)
    assert directed["random_expected"]["top_k_precision"] == pytest.approx(11 / 506)
    assert {(e["parent"], e["child"]) for e in summary["planted_edges"]} == {
        (CHANNELS_23[e["parent"]], CHANNELS_23[e["child"]]) for e in recorded}


def test_same_run_twice_is_perfectly_stable(runs: dict[str, Path]) -> None:
    out = runs["tmp"] / "twice"
    run([str(runs["seed1"]), str(runs["seed1"]), "--out", str(out), "--no-figures"])
    report = json.loads((out / "stability.json").read_text())
    assert report["runs"] == ["version_0", "version_0-1"]
    for row in report["classes"].values():
        assert row["jaccard"]["mean"] == 1.0
        assert row["pearson"]["mean"] is None or row["pearson"]["mean"] == pytest.approx(1.0)


def test_no_learned_graph_and_bad_dir_are_clear_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"fixed graph \(graph='full'\)"):
        run([str(runs["full"]), "--out", str(tmp_path / "x")])
    with pytest.raises(GraphError, match=r"nowhere.*results\.json"):
        run([str(tmp_path / "nowhere")])


def test_node_names_channels_or_channel_bands() -> None:
    kwargs = dict(n_chans=2, n_outputs=5, n_times=3000, sfreq=100.0, d_model=8, n_layers=1, n_heads=2, d_ff=8,
                  stft_frames=4, token_hidden=4, encoder_ff=8, edge_hidden=8, recon_hidden=8)
    names = graph_node_names(SDFormer(**kwargs), ["EEG Fpz-Cz", "EEG Pz-Oz"])
    assert names[:2] == ["EEG Fpz-Cz/delta", "EEG Fpz-Cz/theta"] and names[5] == "EEG Pz-Oz/delta"
    assert len(names) == 10
    pooled = SDFormer(**kwargs, band_pooling=True)
    assert graph_node_names(pooled, ["EEG Fpz-Cz", "EEG Pz-Oz"]) == ["EEG Fpz-Cz", "EEG Pz-Oz"]


def test_jaccard_pearson_and_incompatible_runs() -> None:
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert jaccard(a, b) == pytest.approx(1 / 3) and jaccard(a, a) == 1.0
    assert jaccard(np.zeros(4, bool), np.zeros(4, bool)) == 1.0
    assert pearson([0.1, 0.5, 0.9], [0.2, 0.6, 1.0]) == pytest.approx(1.0)
    assert pearson([0.1, 0.5, 0.9], [0.9, 0.5, 0.1]) == pytest.approx(-1.0)
    assert pearson([0.0, 0.0, 0.0], [0.1, 0.2, 0.3]) is None

    def graphs(names: list[str]) -> ClassGraphs:
        m = len(names)
        freq = np.zeros((1, m, m))
        return ClassGraphs(["a"], names, np.array([3]), freq, freq, np.zeros(1), np.zeros(1), freq[0])

    with pytest.raises(GraphError, match="other graph nodes"):
        stability([graphs(["x", "y"]), graphs(["x", "z"])], ["r0", "r1"])
    empty = stability([graphs(["x", "y"]), graphs(["x", "y"])], ["r0", "r1"])
    assert (
        empty["classes"]["a"]["jaccard"]["mean"] == 1.0 and empty["classes"]["a"]["pearson"]["mean"] is None
    )


def _class_graphs(freq: np.ndarray) -> ClassGraphs:
    m = freq.shape[-1]
    density = np.array([freq[~np.eye(m, dtype=bool)].mean()])
    return ClassGraphs(["a"], [f"n{i}" for i in range(m)], np.array([3]), freq[None], freq[None], density,
                       np.ones(1), freq)


def test_stability_reports_density_and_flags_empty_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    from biosig_lightning.analysis.graphs import NEAR_EMPTY_DENSITY
    from biosig_lightning.commands.graphs import _print_stability

    m = 10
    empty = _class_graphs(np.zeros((m, m)))
    report = stability([empty, empty], ["r0", "r1"])
    row = report["classes"]["a"]
    # Jaccard says "perfectly stable" for two empty graphs: the report must say why that means nothing
    assert row["jaccard"]["mean"] == 1.0
    assert row["degenerate"] is True and row["density"]["per_run"] == [0.0, 0.0]
    assert row["edges_above_threshold"] == [0, 0]
    assert report["warnings"] and "near-empty" in report["warnings"][0] and "r0" in report["warnings"][0]
    _print_stability(report)
    captured = capsys.readouterr()
    assert "DEGENERATE" in captured.out and "biosig graphs: warning: class a" in captured.err
    # edges in some windows but none in most of them: density below 1 %, flagged
    faint = np.full((m, m), NEAR_EMPTY_DENSITY / 2) * (1 - np.eye(m))
    assert stability([_class_graphs(faint)] * 2, ["r0", "r1"])["classes"]["a"]["degenerate"] is True
    # a real structure is not flagged, and its density is reported
    rng = np.random.default_rng(0)
    dense = (rng.random((m, m)) < 0.3).astype(float) * (1 - np.eye(m))
    ok = stability([_class_graphs(dense), _class_graphs(dense)], ["r0", "r1"])
    assert ok["classes"]["a"]["degenerate"] is False and ok["warnings"] == []
    assert ok["classes"]["a"]["density"]["mean"] == pytest.approx(dense[~np.eye(m, dtype=bool)].mean())
    mixed = stability([_class_graphs(dense), empty], ["r0", "r1"])
    assert mixed["classes"]["a"]["degenerate"] is True and "r1" in mixed["warnings"][0]
    assert "r0" not in mixed["warnings"][0].split("graph in", 1)[1]
