"""Every experiment YAML: documented usage that resolves, and the BioFormer protocol as the paper gives it.

The SD-Former experiments are smoke-run in ``test_sdformer_task.py`` and the Table 3 plug-ins in
``test_dg.py``; here the six BioFormer corpora run smoke-sized on their synthetic stand-ins at full
model size, and each Table 5 ablation really removes its part.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS, REPO
from tests.helpers import assert_metrics_match_predictions

ALL_YAMLS = sorted(p for p in EXPERIMENTS.rglob("*.yaml"))
SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml"),
         "--trainer.enable_progress_bar=false"]
BIOFORMER = ["apava", "adftd", "ptb", "ptbxl", "bci2a", "bci2b"]
# Appendix C.3 (the paper; the authors' scripts use batch 32 on BCI)
C3 = {
    "apava": dict(batch=32, kernel_mode="sample", use_magnitude=True, use_scln=True, alpha=0.1,
                  augmentations=["scale0.1", "drop0.25"]),
    "adftd": dict(batch=128, kernel_mode="batch", use_magnitude=True, use_scln=True, alpha=0.1,
                  augmentations=["drop0.5"]),
    "ptb": dict(batch=128, kernel_mode="sample", use_magnitude=False, use_scln=True, alpha=0.2,
                augmentations=["none", "drop0.5"]),
    "ptbxl": dict(batch=128, kernel_mode="batch", use_magnitude=True, use_scln=False, alpha=None,
                  augmentations=["jitter0.2", "scale0.2", "drop0.5"]),
    "bci2a": dict(batch=128, kernel_mode="batch", use_magnitude=True, use_scln=True, alpha=0.1,
                  augmentations=["scale0.1", "drop0.25"]),
    "bci2b": dict(batch=128, kernel_mode="sample", use_magnitude=True, use_scln=True, alpha=0.1,
                  augmentations=["scale0.1", "drop0.25"]),
}

TINY = ["--model.init_args.backbone.init_args.n_layers=1", "--model.init_args.backbone.init_args.d_model=32",
        "--model.init_args.backbone.init_args.d_ff=32", "--model.init_args.backbone.init_args.n_heads=2",
        "--model.init_args.backbone.init_args.d_token=16"]


def _usage_lines(path: Path) -> list[str]:
    """The ``biosig ...`` command lines of a YAML's header comment (continuation lines joined)."""
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = "\n".join(header).replace("\\\n", " ")
    return [m.group(0) for m in re.finditer(r"^biosig \w+ .*$", text, flags=re.M)]


@pytest.mark.parametrize("path", ALL_YAMLS, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_every_experiment_documents_a_usage_that_resolves(path: Path) -> None:
    lines = _usage_lines(path)
    assert lines, f"{path}: no '# biosig <command> ...' usage line in its header"
    rel = str(path.relative_to(REPO))
    assert any(rel in line for line in lines), f"{path}: no usage line mentions {rel}"
    for line in lines:
        for cfg in re.findall(r"--config ([^\s\]]+)", line):
            if "X" in Path(cfg).stem or "<" in cfg:  # a placeholder for "any experiment"
                continue
            assert (REPO / cfg).is_file(), f"{path}: usage names {cfg}, which does not exist"


def _fit(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    main(["fit", *args])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("results: "), last
    return json.loads(Path(last.split("results: ", 1)[1]).read_text())


@pytest.mark.parametrize("corpus", BIOFORMER)
def test_bioformer_experiment_follows_appendix_c3_and_runs(corpus: str, in_tmp: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = EXPERIMENTS / f"bioformer_{corpus}.yaml"
    cfg = yaml.safe_load(path.read_text())
    want = C3[corpus]
    task = cfg["model"]["init_args"]
    bb = task["backbone"]["init_args"]
    assert cfg["data"]["init_args"]["batch_size"] == want["batch"]
    assert (task["optimizer"], task["lr"],
            task["weight_decay"], task["scheduler"]) == ("adam", 1e-4, 0.0, "none")
    assert cfg["trainer"]["max_epochs"] == 100 and task["early_stopping_patience"] == 10
    assert (task["monitor"], task["mode"]) == ("val/f1", "max")
    assert (bb["d_model"], bb["d_ff"], bb["n_layers"], bb["n_bands"], bb["kernel_size"], bb["d_token"]) == (
        128, 256, 6, 6, 3, 64)
    for key in ("kernel_mode", "use_magnitude", "use_scln", "augmentations"):
        assert bb[key] == want[key], (corpus, key)
    assert bb["use_phase"] is True
    if want["alpha"] is not None:
        assert bb["alpha"] == want["alpha"]

    # full model size once (APAVA, the demo); the other corpora check the protocol at a tiny width
    res = _fit(capsys, "--config", str(path), *SMOKE, *([] if corpus == "apava" else TINY))
    assert res["dataset"].endswith("-synthetic") and res["model"] == "BioFormer"
    resolved = res["config"]["model"]["init_args"]["backbone"]["init_args"]
    assert resolved["kernel_mode"] == want["kernel_mode"] and resolved["use_scln"] == want["use_scln"]
    assert set(res["subjects"]["train"]).isdisjoint(res["subjects"]["test"])
    assert_metrics_match_predictions(res["run_dir"])


def _module_counts(backbone: torch.nn.Module) -> dict[str, int]:
    names = [type(m).__name__ for m in backbone.modules()]
    return {k: names.count(k) for k in ("FBAM", "TSAM", "SampleConditionalLayerNorm", "LayerNorm")} | {
        "phase_heads": sum("phase" in n for n, _ in backbone.named_modules()),
        "gain_heads": sum("gain" in n for n, _ in backbone.named_modules()),
    }


def _documented_base(override: Path) -> Path:
    """The experiment an override file's own usage line applies it to (its first ``--config``)."""
    rel = str(override.relative_to(REPO))
    for line in _usage_lines(override):
        if rel in line:
            return REPO / re.findall(r"--config (\S+)", line)[0]
    raise AssertionError(f"{override}: no usage line names it")


@functools.lru_cache(maxsize=8)  # a base is shared by many overrides; the tests only read it
def _built(*configs: Path) -> tuple[torch.nn.Module, dict]:
    """The backbone ``biosig fit`` would build for ``configs`` (synthetic, tiny), freshly initialised with
    seed 0,
    and its resolved ``backbone.init_args``."""
    from biosig_lightning.runs.biosig_cli import BiosigCLI

    torch.manual_seed(0)
    args = [a for c in configs for a in ("--config", str(c))] + SMOKE + TINY
    cli = BiosigCLI(args=args, run=False, save_config_callback=None)
    return cli.model.backbone.eval(), cli.config["model"]["init_args"]["backbone"]["init_args"]


def _structure(module: torch.nn.Module) -> list[tuple[str, ...]]:
    return [(n, type(m).__name__) for n, m in module.named_modules()] + [
        (n, str(tuple(p.shape))) for n, p in module.named_parameters()]


@pytest.mark.parametrize("override", sorted((EXPERIMENTS / "bioformer" / "variants").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_table5_override_changes_the_model(override: Path, in_tmp: Path) -> None:
    # (each override also trains, tests and reports on its base: test_protocol_all_experiments.py)
    base_cfg = _documented_base(override)
    (base, _), (changed, bb) = _built(base_cfg), _built(base_cfg, override)
    expected = yaml.safe_load(override.read_text())["model"]["init_args"]["backbone"]["init_args"]
    for key, value in expected.items():
        assert bb[key] == value, (override.stem, key)
    # the override changes something its base sets otherwise: not a no-op on the experiment it documents
    base_bb = yaml.safe_load(base_cfg.read_text())["model"]["init_args"]["backbone"]["init_args"]
    assert any(base_bb.get(k) != v for k, v in expected.items()), (override.stem, base_cfg.name)
    # ... and the built model: other modules/parameters, or (same ones, same weights) another forward output
    counts = _module_counts(changed)
    if _structure(base) == _structure(changed):
        changed.load_state_dict(base.state_dict())
        x = torch.randn(4, base.n_chans, base.n_times, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert not torch.allclose(base(x), changed(x), atol=1e-6), f"{override.stem} changes nothing"
    name = override.stem
    if name == "no_fbam":
        assert counts["FBAM"] == 0 and counts["TSAM"] == 0
    elif name == "tsam":
        assert counts["TSAM"] == 1 and counts["FBAM"] == 0
    else:
        assert counts["FBAM"] == 1
    if name == "no_scln":
        assert counts["SampleConditionalLayerNorm"] == 0
    if name == "magnitude_only":
        assert counts["phase_heads"] == 0 and counts["gain_heads"] > 0
    if name in ("phase_only",):
        assert counts["gain_heads"] == 0 and counts["phase_heads"] > 0
    if name == "magnitude_phase":
        assert counts["gain_heads"] > 0 and counts["phase_heads"] > 0


@pytest.mark.parametrize("space,experiment",
                         [("bioformer", "bioformer_apava"), ("sdformer", "sdformer_sleepedf"),
                                              ("demo", "overlays/demo")])
def test_shipped_search_spaces_name_real_config_keys(space: str, experiment: str) -> None:
    from biosig_lightning.tuning.search_space import load_search_space, validate_space

    validate_space(["--config", str(EXPERIMENTS / f"{experiment}.yaml")],
                   load_search_space(EXPERIMENTS / "search_spaces" / f"{space}.yaml"))


FBAM_TINY = {
    "transformer": ["--model.init_args.backbone.init_args.n_layers=1",
                    "--model.init_args.backbone.init_args.d_model=16",
                    "--model.init_args.backbone.init_args.d_ff=16",
                    "--model.init_args.backbone.init_args.n_heads=2"],
    "medformer": ["--model.init_args.backbone.init_args.e_layers=1",
                  "--model.init_args.backbone.init_args.d_model=16",
                  "--model.init_args.backbone.init_args.d_ff=16",
                  "--model.init_args.backbone.init_args.n_heads=2",
                  "--model.init_args.backbone.init_args.patch_lens=[8,16]"],
    "eegnet": [],
}


@pytest.mark.parametrize("backbone", sorted(FBAM_TINY))
def test_table3_fbam_trains_on_each_backbone(backbone: str, in_tmp: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    table3 = EXPERIMENTS / "bioformer" / "baselines"
    res = _fit(capsys, "--config", str(EXPERIMENTS / "bioformer_apava.yaml"), "--config",
               str(table3 / f"{backbone}.yaml"),
               "--config", str(table3 / "fbam.yaml"), *SMOKE, *FBAM_TINY[backbone])
    assert res["config"]["model"]["init_args"]["backbone"]["init_args"]["fbam"] is True
    from biosig_lightning.models.bioformer import FBAM
    from biosig_lightning.runs import load_run

    assert any(isinstance(m, FBAM) for m in load_run(res["run_dir"]).task.backbone.modules())
