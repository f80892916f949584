"""The issue's "done when": ``repeat``, ``report`` and ``tune`` work on a smoke-sized run of every experiment
YAML.

Every complete experiment under ``experiments/`` (a YAML naming both a model and a data class) and
every override file (Table 3 / Table 5 / SD-Former ablations / bf16), combined with its base as the
first usage line of its header says, is run by ``biosig repeat`` with one seed on its synthetic
stand-in (``synthetic.yaml`` + ``smoke.yaml``, backbones shrunk by command-line overrides, which
change neither the experiment's name nor its report row). One ``biosig report`` then covers all of
them: each config must have its own row (model + variant) with an ``n=1`` cell in its dataset's
column, and its figures. The logging overlays (``wandb.yaml``, ``tensorboard.yaml``) must leave a
finished experiment's folder alone (its seed is skipped). (``biosig tune`` on every complete experiment:
``test_tune_every_experiment.py``.)

Cost on 2 shared cores: one smoke fit per config (~50, ~45 s), one report with its figures (~15 s).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from biosig_lightning.cli import main
from biosig_lightning.runs.naming import experiment_name
from tests.conftest import EXPERIMENTS, REPO
from tests.helpers import assert_metrics_match_predictions

SEED = 7
SMOKE_CONFIGS = [EXPERIMENTS / "overlays" / "synthetic.yaml", EXPERIMENTS / "overlays" / "smoke.yaml"]
#: our own tiny sizes per backbone class (the YAMLs keep the papers' sizes)
TINY: dict[str, dict[str, Any]] = {
    "BioFormer": dict(n_layers=1, d_model=32, d_ff=32, n_heads=2, d_token=16),
    "TransformerClassifier": dict(d_model=16, n_layers=1, n_heads=2, d_ff=16),
    "Medformer": dict(e_layers=1, d_model=16, d_ff=16, n_heads=2, patch_lens=[8, 16]),
    "EEGNet": {},
    "SDFormer": dict(d_model=16, n_layers=1, n_heads=2, d_ff=16, stft_frames=4, token_hidden=4, encoder_ff=16,
                     edge_hidden=16, recon_hidden=16),
    "CNN1D": dict(width=8, n_blocks=2, convs_per_block=1),
    "PatchTST": dict(d_model=16, n_layers=1, n_heads=2, d_ff=16),
    "StaticGNN": dict(width=8, encoder_blocks=1),
    "SPDTransNet": dict(d_model=21, tokens_per_epoch=7, intra_heads=3, intra_layers=1, inter_heads=3,
                        inter_layers=1,
                        d_ff=28, fc_width=28),
    "SignedGraphClassifier": dict(n_blocks=1, conv_layers=1, conv_width=2, feature_dim=4,
                                  n_metric_candidates=2,
                                  metric_rank=2, krylov_dim=2),
    "EEGNetv4": {},
    "ShallowFBCSPNet": {},
    "Deep4Net": {},
    "DGCNN": dict(hidden=8),
    "GIN": dict(hidden=8),
    "DCRNN": dict(rnn_units=8, num_rnn_layers=1),
    "DCRNNNextClip": dict(rnn_units=8, num_rnn_layers=1),
    "SeizureLSTM": dict(rnn_units=8, num_rnn_layers=1),
    "CNNLSTM": dict(embed_dim=16, rnn_units=8),
    "DenseCNN": dict(base_channels=2),
}


# ---- which configs, combined how ------------------------------------------------------------------------
def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _merged(configs: list[Path]) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    for c in configs:
        cfg = _merge(cfg, _load(c))
    return cfg


def _is_experiment(path: Path) -> bool:
    cfg = _load(path)
    return bool((cfg.get("model") or {}).get("class_path")) and bool(
        (cfg.get("data") or {}).get("class_path")
    )


def _rel(path: Path) -> str:
    return str(path.relative_to(EXPERIMENTS))


# : every config a `biosig fit` reads; the benchmark grids (experiments/benchmarks/) are read by `biosig
# benchmark`
#: and checked by tests/commands/test_benchmark.py
ALL = sorted(p for p in EXPERIMENTS.rglob("*.yaml") if EXPERIMENTS / "benchmarks" not in p.parents)
SPACES = EXPERIMENTS / "search_spaces"
EXPERIMENT_FILES = [p for p in ALL if SPACES not in p.parents and _is_experiment(p)]
OVERLAYS = EXPERIMENTS / "overlays"
#: overlays that change no result (data source, size, loggers); the others (bf16) are cases of their own
MODIFIERS = [p for p in ALL if p.parent == OVERLAYS and p.stem in ("smoke",
                                                                   "synthetic", "wandb", "tensorboard")]
OVERRIDES = [p for p in ALL if SPACES not in p.parents and p.parent != EXPERIMENTS and p not in MODIFIERS
             and not _is_experiment(p)]


def _header_configs(path: Path) -> list[Path]:
    """The ``--config`` files of the first usage line in ``path``'s header that names it, up to it."""
    rel = str(path.relative_to(REPO))
    header = "\n".join(ln.lstrip("#").strip() for ln in path.read_text().splitlines() if ln.startswith("#"))
    for line in header.replace("\\\n", " ").splitlines():
        if re.match(r"(\.\.\.|biosig (fit|repeat))\b", line) and rel in line:
            configs = [REPO / c for c in re.findall(r"--config (\S+)", line)]
            configs = configs[:configs.index(REPO / rel) + 1]
            return [c for c in configs if c not in SMOKE_CONFIGS]
    raise AssertionError(f"{path}: no 'biosig fit/repeat --config <base> ... --config {rel}' line in its "
                         f"header")


def _is_pretext(path: Path) -> bool:
    """A self-supervised pre-training experiment (DCRNN's next-clip task): no classes, so no classification
    metrics, predictions or report row; its own test pre-trains and fine-tunes
    (tests/tasks/test_next_clip.py)."""
    return str((_load(path).get("model") or {}).get("class_path") or "").endswith("NextClipTask")


CASES: dict[str, list[Path]] = {_rel(p): [p] for p in EXPERIMENT_FILES if not _is_pretext(p)}
CASES |= {_rel(p): _header_configs(p) for p in OVERRIDES}


def _model(configs: list[Path]) -> str:
    path = _merged(configs)["model"]["init_args"]["backbone"]["class_path"]
    if path.startswith("biosig_lightning.models.braindecode_names."):  # the installed braindecode's own name
        from biosig_lightning.models.braindecode_names import braindecode_model

        return braindecode_model(path.rsplit(".", 1)[-1]).__name__
    return path.rsplit(".", 1)[-1]


def _expected_variant(configs: list[Path]) -> str:
    """Override files after the base that do not swap the backbone, then smoke (what a reader of the table
    expects)."""
    picks = [
        c.stem
        for c in configs[1:]
        if "class_path" not in (((_load(c).get("model") or {}).get("init_args") or {}).get("backbone") or {})
    ]
    recipe = (
        "STDRO"
        if str((_merged(configs).get("model") or {}).get("class_path", "")).endswith("STDROTask")
        else None
    )
    return "+".join([*([recipe] if recipe else []), *picks, "smoke"])


def _fit_args(configs: list[Path]) -> list[str]:
    """``--config`` args plus the sizes and budget that make it a smoke run (command line: not in the
    name)."""
    merged = _merged([*configs, *SMOKE_CONFIGS])
    args = [a for c in [*configs, *SMOKE_CONFIGS] for a in ("--config", str(c))]
    # smaller batches than smoke.yaml's and no sanity validation: each run only has to go through every
    # stage once (BioFormer on STDRO's raw TUSZ clips attends over 2,400 samples per branch)
    args += ["--trainer.enable_progress_bar=false", "--trainer.num_sanity_val_steps=0",
             "--data.init_args.batch_size=4", "--data.init_args.eval_batch_size=16"]
    args += [f"--model.init_args.backbone.init_args.{k}={json.dumps(v)}" for k,
             v in TINY[_model(configs)].items()]
    if str(merged["model"].get("class_path", "")).endswith("SDFormerTask"):
        phase2 = min(1, int(merged["model"]["init_args"].get("phase2_epochs", 1)))
        args += ["--trainer.max_epochs", str(1 + phase2), "--model.init_args.phase1_epochs", "1",
                 "--model.init_args.phase2_epochs", str(phase2)]
    if merged.get("trainer", {}).get("accelerator") == "gpu" and not torch.cuda.is_available():
        args += [
            "--trainer.accelerator",
            "cpu",
        ]  # bf16.yaml's GPU on a CPU-only machine: bf16 autocast on CPU
    return args


# ---- one repeat per config, one report over all of them -------------------------------------------------
@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("protocol")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second intra-op thread only adds contention on 2 shared cores
    yield path
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def repeated(root: Path) -> dict[str, Any]:
    """``case -> run directory`` (or the exception its repeat raised), each run by ``biosig repeat``."""
    out: dict[str, Any] = {}
    learned: Path | None = None
    order = sorted(CASES, key=lambda c: "random_graph" in c)  # the control needs a finished learned run
    with contextlib.chdir(root):
        for case in order:
            configs = CASES[case]
            args = _fit_args(configs)
            if "random_graph" in case:
                # its header: a learned run of the same corpus first; here the one this fixture made
                assert learned is not None, "no learned sdformer_sleepedf run to match"
                args += ["--model.init_args.graph_density_from", str(learned)]
            name = experiment_name(args)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    main(["repeat", *args, "--seeds", str(SEED)])
            except (Exception, SystemExit) as err:  # reported by that case's test, the others go on
                # (pytest's own outcomes -- a pytest-timeout failure, pytest.exit -- and Ctrl-C are
                # BaseExceptions outside this tuple: they end the fixture instead of leaving the
                # remaining fits to run untimed)
                out[case] = err
                continue
            out[case] = root / "runs" / "repeat" / name
            if case == "sdformer_sleepedf.yaml":
                learned = out[case] / f"seed_{SEED}"
    return out


#: the module fixtures (one smoke fit per config, then one report) run inside the first test that asks for
#: them: ~2 min on 2 shared cores, so those tests get a larger budget than pyproject's 300 s per test
FIXTURE_TIMEOUT = pytest.mark.timeout(600)


@FIXTURE_TIMEOUT
@pytest.mark.parametrize("case", sorted(CASES))
def test_repeat_runs_every_experiment_and_override(case: str, repeated: dict[str, Any]) -> None:
    out = repeated[case]
    if isinstance(out, BaseException):
        pytest.fail(f"{case}: biosig repeat failed: {type(out).__name__}: {out}")
    res = json.loads((out / f"seed_{SEED}" / "results.json").read_text())
    assert res["seed"] == SEED and res["experiment"] == out.name
    assert res["model"] == _model(CASES[case]) and res["variant"] == _expected_variant(CASES[case])
    # the stand-in (a split that is not subject-disjoint says so after it: "-recording-split")
    assert "synthetic" in res["dataset"].split("-"), res["dataset"]
    # the logged test metrics are those of the windows it saved (recomputed with scikit-learn)
    assert_metrics_match_predictions(out / f"seed_{SEED}")


@FIXTURE_TIMEOUT
def test_every_config_has_its_own_folder(repeated: dict[str, Any]) -> None:
    # two configs in one folder would make the second one's seeds "already done"
    folders = [p for p in repeated.values() if isinstance(p, Path)]
    assert len(folders) == len(set(folders))


@pytest.fixture(scope="module")
def reported(root: Path, repeated: dict[str, Any]) -> dict[str, Any]:
    table, figures = root / "table.csv", root / "figures"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        main(["report", str(root / "runs" / "repeat"), "--format", "csv", "--out", str(table),
              "--figures", str(figures)])
    return {"rows": list(csv.DictReader(table.open())), "figures": {p.name for p in figures.glob("*.png")},
            "stderr": err.getvalue()}


@FIXTURE_TIMEOUT
@pytest.mark.parametrize("case", sorted(CASES))
def test_report_has_a_row_and_cell_for_every_config(case: str, repeated: dict[str, Any],
                                                    reported: dict[str, Any]) -> None:
    from biosig_lightning.analysis.report.figures import _slug

    out = repeated[case]
    if isinstance(out, BaseException):
        pytest.fail(f"{case}: its repeat failed, so the report cannot hold its row: {type(out).__name__}: "
                    f"{out}")
    res = json.loads((out / f"seed_{SEED}" / "results.json").read_text())
    rows = [r for r in reported["rows"] if (r["model"], r["variant"]) == (res["model"], res["variant"])]
    # exactly one row, not split by experiment: no other config lands in this model+variant+dataset cell
    assert len(rows) == 1 and rows[0]["experiment"] == "", (case, rows)
    assert rows[0][f"{res['dataset']}/f1/n"] == "1"
    assert float(rows[0][f"{res['dataset']}/f1/mean"]) == pytest.approx(res["metrics"]["test/f1"])
    label = f"{res['model']} +{res['variant']}"
    for kind in ("confusion", "reliability", "curves"):
        assert f"{_slug(kind, label, res['dataset'])}.png" in reported["figures"], (case, kind)
    assert "several experiments" not in reported["stderr"] and "warning" not in reported["stderr"]


@FIXTURE_TIMEOUT
@pytest.mark.parametrize("overlay", [p for p in MODIFIERS if p.stem in ("wandb", "tensorboard")],
                         ids=lambda p: p.stem)
def test_logging_overlays_resume_a_finished_experiment(overlay: Path, root: Path, repeated: dict[str, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from biosig_lightning.runs.naming import is_overlay

    assert is_overlay(overlay)
    monkeypatch.chdir(root)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["repeat", *_fit_args(CASES["overlays/demo.yaml"]), "--config",
              str(overlay), "--seeds", str(SEED)])
    done = (repeated["overlays/demo.yaml"] / f"seed_{SEED}" / "results.json").relative_to(root)
    assert f"seed {SEED}: {done} exists, skipped" in buf.getvalue()


def test_every_yaml_is_covered() -> None:
    # the pre-training experiments are covered by test_tune_every_experiment.py (one trial each)
    covered = (
        {c for configs in CASES.values() for c in configs} | set(MODIFIERS) | set(filter(_is_pretext, ALL))
    )
    missing = [p for p in ALL if SPACES not in p.parents and p not in covered]
    assert not missing, missing
    assert {p.stem for p in MODIFIERS} == {"smoke", "synthetic", "wandb", "tensorboard"}
