"""``biosig benchmark``: the smoke grid's leaderboard, cells equal to plain fits, kill -9 and resume,
two workers on one PostgreSQL queue running every cell once."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from biosig_lightning.benchmarking.grid import load_grid
from biosig_lightning.benchmarking.queue import open_study
from biosig_lightning.benchmarking.runner import study_name
from biosig_lightning.cli import main
from biosig_lightning.data.corpora.medformer import REAL_SCALE, SYNTHETIC_DEFAULTS
from tests.conftest import EXPERIMENTS, REPO

SMOKE = EXPERIMENTS / "benchmarks" / "smoke.yaml"
ENV = dict(os.environ,
           PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke grid, run once for the tests of this module (cells fitted in-process)."""
    out = tmp_path_factory.mktemp("bench") / "smoke"
    cwd = os.getcwd()
    os.chdir(out.parent)
    try:
        main(["benchmark", "--grid", str(SMOKE), "--out", str(out), "--inline", "--pair", "cnn1d", "eegnet"])
    finally:
        os.chdir(cwd)
    return out


def test_smoke_grid_writes_the_leaderboard(smoke_out: Path) -> None:
    grid = load_grid(SMOKE)
    for cell in grid.cells():
        assert (cell.run_dir(smoke_out) / "results.json").is_file(), cell.id
    lines = (smoke_out / "leaderboard.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header == ["method", "synthetic (f1)", "apava (f1)", "avg. rank", "wins"]
    rows = {r.split(",")[0]: r.split(",") for r in lines[1:]}
    assert sorted(rows) == sorted(grid.methods)  # one row per method, n/a ones included
    assert rows["spdtransnet"][1:3] == ["n/a", "n/a"]
    ranked = ("cnn1d", "eegnet", "cnn1d_coral")
    seeds = {
        c: {
            m: [
                json.loads((smoke_out / c / m / f"seed_{s}" / "results.json").read_text())["metrics"][
                    "test/f1"
                ]
                for s in grid.seeds
            ]
            for m in ranked
        }
        for c in ("synthetic", "apava")
    }
    means = {c: {m: statistics.fmean(v) for m, v in ms.items()} for c, ms in seeds.items()}
    for m in ranked:
        # each cell is mean ± sample std (ddof 1) over the seeds' results.json
        assert rows[m][1:3] == [f"{means[c][m]:.3f} ± {statistics.stdev(seeds[c][m]):.3f}" for c in seeds]
        # the average-rank column, from the means by hand: 1 + the methods ahead + half the methods tied
        by_hand = [1 + sum(o > means[c][m] for o in means[c].values())
                   + 0.5 * (sum(o == means[c][m] for o in means[c].values()) - 1) for c in means]
        assert rows[m][3] == f"{statistics.fmean(by_hand):.2f}"
    md = (smoke_out / "leaderboard.md").read_text()
    assert "spdtransnet on apava: spdtransnet applies to sleep_staging_context" in md
    assert "## cnn1d vs eegnet" in md
    for ext in ("png", "pdf"):
        assert (smoke_out / f"cd_diagram.{ext}").stat().st_size > 1000
    assert (smoke_out / "leaderboard.tex").read_text().startswith(r"\begin{tabular}")


def test_a_cell_equals_a_plain_fit(smoke_out: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = load_grid(SMOKE)
    cell = next(c for c in grid.cells() if c.corpus == "apava" and c.method == "eegnet")
    capsys.readouterr()
    main(["benchmark", "--grid", str(SMOKE), "--out", str(smoke_out), "--print-commands"])
    printed = [
        ln
        for ln in capsys.readouterr().out.splitlines()
        if f"--run.name {cell.method} " in ln
        and f"--run.save_dir {smoke_out / cell.corpus} " in ln
        and f"--seed_everything {cell.seed} " in ln
    ]
    assert len(printed) == 1
    args = grid.base_args(cell) + ["--seed_everything", str(cell.seed)]
    main(["fit", *args])
    plain = Path(capsys.readouterr().out.strip().splitlines()[-1].split("results: ", 1)[1])
    ran = json.loads((cell.run_dir(smoke_out) / "results.json").read_text())
    alone = json.loads(plain.read_text())
    assert ran["metrics"] == alone["metrics"] and ran["seed"] == alone["seed"] == cell.seed
    assert ran["split_id"] == alone["split_id"] and ran["num_params"] == alone["num_params"]


def test_report_leaderboard_flag(smoke_out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (smoke_out / "leaderboard.csv").unlink()
    main(["report", "--leaderboard", str(smoke_out)])
    assert "| method | synthetic (f1) | apava (f1) | avg. rank | wins |" in capsys.readouterr().out
    assert (smoke_out / "leaderboard.csv").is_file()


def _tiny_grid(tmp: Path, seeds: list[int], methods: int = 1, epochs: int = 1,
               extra: dict | None = None) -> Path:
    spec = yaml.safe_load(SMOKE.read_text())
    spec["seeds"] = seeds
    spec["corpora"] = {"synthetic": spec["corpora"]["synthetic"]}
    spec["corpora"]["synthetic"]["configs"] = [str(EXPERIMENTS / "overlays" / "demo.yaml")]
    spec["corpora"]["synthetic"]["overlays"] = [str(EXPERIMENTS / "overlays" / "smoke.yaml")]
    spec["corpora"]["synthetic"]["overrides"]["trainer.max_epochs"] = epochs
    spec["methods"] = dict(list(spec["methods"].items())[:methods])
    spec["fit_args"].update(extra or {})
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _bench(grid: Path, out: Path, *extra: str, env: dict[str, str] = ENV) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "biosig_lightning.cli", "benchmark", "--grid", str(grid),
                             "--out", str(out), "--inline", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=out.parent)


def test_kill_9_mid_cell_then_rerun_finishes_without_redoing(tmp_path: Path) -> None:
    # seed 2 is killed in its third epoch (k = 2 checkpointed) of max_epochs = 3
    grid = _tiny_grid(tmp_path, [1, 2], epochs=3, extra={
        "trainer.callbacks+": "tests.benchmarking.callbacks.PauseForKillThenRecordEpochs",
        "trainer.callbacks.init_args.seed": 2, "trainer.callbacks.init_args.epoch": 2})
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "paused"
    proc = _bench(grid, out, env={**ENV, "BIOSIG_TEST_PAUSE": str(marker)})
    deadline = time.monotonic() + 240
    while not marker.exists():  # seed 2 is inside its third epoch, its first two checkpointed
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = out / "synthetic" / "cnn1d" / "seed_1" / "results.json"
    killed = out / "synthetic" / "cnn1d" / "seed_2"
    assert done.is_file() and not (killed / "results.json").exists()
    assert (killed / "checkpoints" / "last.ckpt").is_file()
    before = (done.stat().st_mtime_ns, done.read_bytes())
    rerun = _bench(grid, out)
    text = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, text[-3000:]
    assert (done.stat().st_mtime_ns, done.read_bytes()) == before  # the finished cell was not run again
    assert f"synthetic/cnn1d/seed_2: resuming from {killed / 'checkpoints' / 'last.ckpt'}" in text
    assert "synthetic/cnn1d/seed_1: fitting" not in text
    res = json.loads((killed / "results.json").read_text())
    assert res["epochs"] == 3
    # the resumed process trained only the remaining epoch (index 2); a fresh restart trains 0, 1, 2
    assert json.loads((killed / "epochs_trained.json").read_text()) == [2]
    study = open_study(f"sqlite:///{out / 'benchmark.db'}", study_name(load_grid(grid), out))
    complete = [t.user_attrs["cell"] for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(complete) == ["synthetic/cnn1d/seed_1", "synthetic/cnn1d/seed_2"]
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert [t.user_attrs["cell"] for t in failed] == ["synthetic/cnn1d/seed_2"]
    assert "died" in failed[0].user_attrs["error"]


def test_two_workers_on_postgres_run_every_cell_once(tmp_path: Path, postgres_url: str) -> None:
    grid = _tiny_grid(tmp_path, [1, 2], methods=2, extra={
        # each worker's first cell waits until the other worker has one too: both must run cells
        "trainer.callbacks+": "tests.helpers.WaitForPeers",
        "trainer.callbacks.init_args.directory": str(tmp_path / "peers")})
    out = tmp_path / "out"
    out.mkdir()
    procs = [_bench(grid, out, "--storage", postgres_url) for _ in range(2)]
    texts = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [t[-2000:] for t in texts]
    cells = [c.id for c in load_grid(grid).cells()]
    study = optuna.load_study(study_name=study_name(load_grid(grid), out), storage=postgres_url)
    ran = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["cell"] for t in ran) == sorted(cells)  # every cell once, none twice
    assert {t.user_attrs["worker"].rsplit(":", 1)[1] for t in ran} == {str(p.pid) for p in procs}
    fits = [ln for t in texts for ln in t.splitlines() if ": fitting into " in ln]
    assert sorted(ln.split("] ", 1)[1].split(":", 1)[0] for ln in fits) == sorted(cells)
    for cid in cells:
        assert (out / cid / "results.json").is_file()


def test_presets_load_with_their_na_reasons() -> None:
    standins = load_grid(EXPERIMENTS / "benchmarks" / "standins.yaml")
    # 3 stand-ins x 9 methods (the five papers' and four baselines) x 3 seeds: every paper's method reads
    # every
    # stand-in's raw windows, so none is n/a
    assert len(standins.cells()) == 3 * 9 * 3
    assert standins.not_applicable() == []
    assert {"bioformer", "sdformer", "stdro", "spdtransnet", "signed_graph"} <= set(standins.methods)
    papers = load_grid(EXPERIMENTS / "benchmarks" / "papers.yaml")
    mass = [c for c in papers.cells() if c.corpus == "mass"]
    assert {c.fold for c in mass} == set(range(31)) and {c.method for c in mass} == {"spdtransnet"}
    assert "--data.init_args.fold=30" in papers.base_args(next(c for c in mass if c.fold == 30))


def test_the_standins_grid_keeps_each_stand_in_windows_per_subject() -> None:
    # APAVA's stand-in rule (data/corpora/medformer.py): windows per subject within a factor of three of the
    # real corpus's. The grid once cut APAVA's to 30 (six training subjects x 30 windows): BioFormer and the
    # Transformer memorised the training subjects (train accuracy 1.0) and stayed at chance on the others;
    # at 30 windows per subject the Sleep-EDF scores were low and as spread over seeds as over methods
    from biosig_lightning.data.corpora.chb_mit import SYNTHETIC_DEFAULTS as CHBMIT
    from biosig_lightning.data.corpora.sleep_edf import SYNTHETIC_DEFAULTS as SLEEPEDF

    standins = load_grid(EXPERIMENTS / "benchmarks" / "standins.yaml")
    options = {c: standins.corpora[c].overrides["data.init_args.synthetic_options"] for c in standins.corpora}
    apava = {**SYNTHETIC_DEFAULTS["apava"], **options["apava"]}
    subjects, windows = REAL_SCALE["apava"]
    assert 3 * apava["windows_per_subject"] >= windows / subjects
    for corpus, defaults in (("chbmit", CHBMIT), ("sleepedf", SLEEPEDF)):
        assert options[corpus].get("windows_per_subject", defaults["windows_per_subject"]) >= \
            defaults["windows_per_subject"], corpus


def test_corpus_overrides_reach_that_corpus_only_and_after_the_method_overrides(tmp_path: Path) -> None:
    spec = yaml.safe_load(SMOKE.read_text())
    name, method = next(iter(spec["methods"].items()))
    first, second = list(spec["corpora"])[:2]
    method["overrides"] = {"model.init_args.lr": 0.5}
    method["corpus_overrides"] = {first: {"model.init_args.lr": 0.25}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(spec))
    grid = load_grid(path)
    args = {
        c: grid.base_args(next(x for x in grid.cells() if x.corpus == c and x.method == name))
        for c in (first, second)
    }
    assert args[first].index("--model.init_args.lr=0.25") > args[first].index("--model.init_args.lr=0.5")
    assert "--model.init_args.lr=0.25" not in args[second] and "--model.init_args.lr=0.5" in args[second]


def test_the_standins_grid_keeps_every_transformer_branch_cpu_sized() -> None:
    # BioFormer's PCE at {2, 4, 8} would give 1,500 / 750 / 375 tokens on Sleep-EDF's 3,000-sample epochs, and
    # the
    # Transformer one token per sample a 3,000 x 3,000 attention map (out of memory on a CPU): hours per cell
    # or
    # none. No branch of the grid's transformers is longer than CHB-MIT's 2-s window sampled one token per
    # step
    # (512): BioFormer runs at x8 pyramid factors on Sleep-EDF (the per-step Transformer is not in the grid)
    import biosig_lightning.models  # noqa: F401
    from biosig_lightning.models import catalog

    standins = load_grid(EXPERIMENTS / "benchmarks" / "standins.yaml")
    for corpus in standins.corpora:
        for method in ("bioformer", "transformer"):
            if standins.reason_not_applicable(standins.methods[method], standins.corpora[corpus]):
                continue
            spec = standins.methods[method]
            kwargs = {**spec.backbone["init_args"], **{k.rsplit(".", 1)[1]: v for k, v in
                                                       spec.corpus_overrides.get(corpus, {}).items()}}
            model = catalog.get(spec.backbone["class_path"].rsplit(".", 1)[1]).cls(
                **catalog.CORPORA[corpus].as_kwargs(), **kwargs)
            tokens = max(model.seq_lens) if method == "bioformer" else model.n_tokens
            assert tokens <= 512, (corpus, method, tokens)


@pytest.mark.parametrize(("edit", "message"), [
    ({"seeds": [1, 1]}, "seeds repeats a value"),
    ({"methods": {"x": {"tasks": ["window_classification"], "backbone": {"class_path": "NoSuchNet"}}}},
     "methods.x.backbone: no backbone named 'NoSuchNet'"),
    ({"corpora": {"c": {"task": "t", "configs": ["nowhere.yaml"]}}},
     "corpora.c.configs: config file 'nowhere.yaml'"),
    ({"methods": {"x": {"tasks": ["other"]}}}, "every cell is n/a"),
    ({"methods": {"x": {"tasks": ["window_classification"], "backbone": "CNN1D",
                        "corpus_overrides": {"nowhere": {"trainer.max_epochs": 1}}}}},
     "methods.x.corpus_overrides names corpora the grid does not have: ['nowhere']"),
])
def test_a_bad_grid_is_one_line_naming_the_key(tmp_path: Path, edit: dict, message: str) -> None:
    spec = {**yaml.safe_load(SMOKE.read_text()), **edit}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SystemExit) as err:
        main(["benchmark", "--grid", str(path), "--out", str(tmp_path / "o"), "--print-commands"])
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_only_glob_that_matches_no_cell_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        main(["benchmark", "--grid", str(SMOKE), "--out", str(tmp_path / "o"), "--only", "sleepedf/*"])
    message = str(err.value)
    assert message.startswith("biosig benchmark: error: --only sleepedf/*: no cell of grid smoke matches")
    assert "\n" not in message and not (tmp_path / "o").exists()
