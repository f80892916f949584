"""BioFormer's override files compose with their corpus YAML and build the model the paper's row asks for.

Each case goes through the real CLI (``BiosigCLI(run=False)``: the YAMLs stacked as ``biosig fit``
stacks them, synthetic stand-in, tiny width) and asserts on the built backbone: the band edges,
the descriptor set, the band-parameter generator, FBAM's heads, the final norm. Expected values
are written here from the paper (Appendix G.3's printed edges, Table 10's descriptor sets, Table
5's ticks), not read from the files under test. The Table 5 commands are parsed from BioFormer's docs page,
so the documented commands are the ones checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from biosig_lightning.models.modules.alignment import FBAM, TSAM
from biosig_lightning.models.modules.scln import SampleConditionalLayerNorm
from tests.conftest import EXPERIMENTS, REPO

T5 = EXPERIMENTS / "bioformer" / "variants"
T3 = EXPERIMENTS / "bioformer" / "baselines"
SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "synthetic.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml"),
         "--trainer.enable_progress_bar=false"]
TINY = [f"--model.init_args.backbone.init_args.{k}={v}"
        for k, v in (("n_layers", 2), ("d_model", 16), ("d_ff", 16), ("n_heads", 2), ("d_token", 8))]

# Appendix G.3, Variant 1: "The resulting band boundaries for each dataset and scale" (P/2, P/4, P/8).
G3_EDGES = {
    "apava": [[0, 5, 12, 20, 32, 48, 64], [0, 5, 12, 20, 32], [0, 4, 8, 12, 16]],
    "adftd": [[0, 5, 9, 12, 32, 48, 64], [0, 4, 7, 12, 32], [0, 3, 8, 12, 16]],
    "ptb": [[0, 5, 10, 15, 20, 48, 75], [0, 5, 10, 20, 37], [0, 3, 6, 10, 19]],
    "ptbxl": [[0, 4, 8, 15, 20, 48, 62], [0, 3, 5, 10, 31], [0, 2, 6, 9, 16]],
}
# Table 10: LogMom = {log mean, log sigma, peak}; +PeakLoc adds the peak location; +BandEnergy the energy.
TABLE10 = {
    "descriptors_logmom": {"mean", "std", "max"},
    "descriptors_logmom_peakloc": {"mean", "std", "max", "argmax"},
    "descriptors_logmom_energy": {"mean", "std", "max", "energy"},
}


def _cli(configs: list[str], extra: list[str]):
    from biosig_lightning.runs.biosig_cli import BiosigCLI

    torch.manual_seed(0)
    args = [a for c in configs for a in ("--config", str(c))] + SMOKE + extra
    return BiosigCLI(args=args, run=False, save_config_callback=None)


def _backbone(*configs: object, extra: list[str] = TINY) -> nn.Module:
    """The backbone ``biosig fit`` builds for ``configs``; it must also run a forward pass."""
    backbone = _cli([str(c) for c in configs], extra).model.backbone.eval()
    with torch.no_grad():
        out = backbone(torch.randn(2, backbone.n_chans, backbone.n_times))
    assert out.shape == (2, backbone.n_outputs) and torch.isfinite(out).all()
    return backbone


def _fbams(backbone: nn.Module) -> list[FBAM]:
    return [m for m in backbone.modules() if isinstance(m, FBAM)]


@pytest.mark.parametrize("corpus", sorted(G3_EDGES))
def test_custom_band_override_builds_the_papers_edges(corpus: str) -> None:
    override = T5 / ("custom_bands.yaml" if corpus == "apava" else f"custom_bands_{corpus}.yaml")
    fbams = _fbams(_backbone(EXPERIMENTS / f"bioformer_{corpus}.yaml", override))
    assert len(fbams) == 2 and all(f.band_edges == G3_EDGES[corpus] for f in fbams)
    # bands past a short branch's last edge are masked out of the band attention
    assert [int(v.sum()) for v in fbams[0].layout.valid] == [6, 4, 4]


@pytest.mark.parametrize("variant,attention", [("static_bands", "static"), ("band_self_attention", "self")])
def test_band_modulation_variant_builds_its_generator(variant: str, attention: str) -> None:
    """G.3 Variant 4 (free band parameters) and Variant 5 (self-attention among band contexts)."""
    base = _fbams(_backbone(EXPERIMENTS / "bioformer_apava.yaml"))
    fbams = _fbams(_backbone(EXPERIMENTS / "bioformer_apava.yaml", T5 / f"{variant}.yaml"))
    assert base[0].controller.attention == "cross" and hasattr(base[0].controller, "tokens")
    for fbam in fbams:
        ctl = fbam.controller
        assert ctl.attention == attention and not hasattr(ctl, "tokens")
        names = {n for n, _ in ctl.named_parameters()}
        if attention == "static":  # the kernel, gain and phase of Eq. 4 as free parameters, nothing else
            assert names == {"static.kernel", "static.gain", "static.phase"}
            assert ctl.static["kernel"].shape == (3, 6, 3)  # (branches, bands, taps)
        else:
            assert {"query.weight", "key.weight", "value.weight"} <= names


@pytest.mark.parametrize("variant", sorted(TABLE10))
def test_descriptor_override_feeds_table10s_statistics(variant: str) -> None:
    for fbam in _fbams(_backbone(EXPERIMENTS / "bioformer_apava.yaml", T5 / f"{variant}.yaml")):
        assert set(fbam.descriptors) == TABLE10[variant] and len(fbam.descriptors) == len(TABLE10[variant])
        assert fbam.controller.describe[0].in_features == len(TABLE10[variant])


# --------------------------------------------------------------------------- Table 5 rows (README)


def _readme_table5_commands() -> list[tuple[str, list[str], tuple[bool, bool, bool]]]:
    """``(corpus, configs, (mag, phase, scln))`` of each command in the README's Table 5 block."""
    text = (REPO / "docs" / "papers" / "bioformer.md").read_text()
    section = text.split("## Table 5 rows, band and descriptor variants", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    shorthand = dict(re.findall(r"^(\w+)=(\S+)$", block, flags=re.M))
    rows = []
    for line in block.splitlines():
        if not line.startswith("biosig fit"):
            continue
        command, ticks = line.split("#")
        configs = [re.sub(r"\$(\w+)", lambda m: shorthand[m.group(1)], c)
                   for c in re.findall(r"--config (\S+)", command)]
        corpus = re.fullmatch(r"experiments/bioformer_(\w+)\.yaml", configs[0]).group(1)
        mag, phase, scln = (t == "v" for t in ticks.split())
        rows.append((corpus, configs, (mag, phase, scln)))
    return rows


README_ROWS = _readme_table5_commands()
# alpha of SCLN when on: Appendix C.3 (0.2 on PTB, 0.1 elsewhere); PTB-XL's rows: scln_on.yaml's 0.1
SCLN_ALPHA = {"apava": 0.1, "ptb": 0.2, "ptbxl": 0.1}


def test_readme_lists_every_table5_row_for_each_corpus_group() -> None:
    table5 = {(False, False, False), (False, False, True), (True, False, False), (True, False, True),
              (False, True, True), (True, True, True)}
    for corpus in SCLN_ALPHA:
        assert sorted(r for c, _, r in README_ROWS if c == corpus) == sorted(table5), corpus


@pytest.mark.parametrize("corpus,configs,row", README_ROWS,
                         ids=[f"{c}-{''.join('v' if t else 'x' for t in r)}" for c, _, r in README_ROWS])
def test_readme_table5_command_builds_its_row(corpus: str, configs: list[str],
                                              row: tuple[bool, bool, bool]) -> None:
    mag, phase, scln = row
    backbone = _backbone(*(REPO / c for c in configs))
    fbams = _fbams(backbone)
    if mag or phase:
        assert len(fbams) == 2 and not any(isinstance(m, TSAM) for m in backbone.modules())
        for fbam in fbams:
            assert (fbam.use_magnitude, fbam.use_phase) == (mag, phase)
            assert set(fbam.controller.heads) == ({"kernel", "gain"} if mag else set()) | (
                {"phase"} if phase else set()
            )
    else:
        assert backbone.mixers is None and not fbams
    if scln:
        assert isinstance(backbone.norm,
                          SampleConditionalLayerNorm) and backbone.norm.alpha == SCLN_ALPHA[corpus]
    else:
        assert type(backbone.norm) is nn.LayerNorm


# --------------------------------------------------------------------------- Fig. 5: TSAM in the Transformer

TRANSFORMER_TINY = [f"--model.init_args.backbone.init_args.{k}={v}"
                    for k, v in (("n_layers", 2), ("d_model", 16), ("d_ff", 16), ("n_heads", 2))]


@pytest.mark.parametrize("plugin,module", [("tsam", TSAM), ("fbam", FBAM)])
def test_table3_transformer_hosts_tsam_or_fbam_from_the_override(plugin: str, module: type) -> None:
    backbone = _backbone(EXPERIMENTS / "bioformer_apava.yaml", T3 / "transformer.yaml", T3 / f"{plugin}.yaml",
                         extra=TRANSFORMER_TINY)
    assert type(backbone).__name__ == "TransformerClassifier"
    mixers = backbone.tsam if plugin == "tsam" else backbone.fbam
    assert len(mixers) == len(backbone.encoder.layers) == 2 and all(type(m) is module for m in mixers)
    other = backbone.fbam if plugin == "tsam" else backbone.tsam
    assert other is None
    assert mixers[0].kernel_mode == "sample"  # "auto" on APAVA's two classes (Appendix C.3)


# --------------------------------------------------------------------------- the authors' training loop


def test_authors_clip_and_min_delta_from_the_yaml_act_in_training(in_tmp: Path) -> None:
    """``gradient_clip_val: 4.0`` and ``early_stopping_min_delta: 1e-5`` of ``bioformer_apava.yaml``
    reach the trainer and the callback: a training step whose gradient norm is far above 4 leaves
    gradients of norm 4 (clip_grad_norm_ 4.0 of the authors' loop)."""
    from lightning.pytorch.callbacks import Callback, EarlyStopping

    cfg = yaml.safe_load((EXPERIMENTS / "bioformer_apava.yaml").read_text())
    clip = cfg["trainer"].get("gradient_clip_val")
    cli = _cli([str(EXPERIMENTS / "bioformer_apava.yaml")],
               TINY + ["--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1",
                       "--trainer.logger=false",
                       "--trainer.enable_checkpointing=false"])
    (stop,) = [cb for cb in cli.model.configure_callbacks() if isinstance(cb, EarlyStopping)]
    assert abs(stop.min_delta) == 1e-5

    norms: dict[str, float] = {}

    def grad_norm(module: nn.Module) -> float:
        return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None]).norm().item()

    class Probe(Callback):
        def on_after_backward(self, trainer, pl_module) -> None:  # before Lightning clips
            for p in pl_module.parameters():
                if p.grad is not None:
                    p.grad.mul_(1e3)  # far past any clip threshold
            norms["before"] = grad_norm(pl_module)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            norms["after"] = grad_norm(pl_module)  # clipped in place, not yet zeroed

    cli.trainer.callbacks.append(Probe())
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert clip == 4.0 and norms["before"] > 100
    assert norms["after"] == pytest.approx(4.0, rel=1e-3)
