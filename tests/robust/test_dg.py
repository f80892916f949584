"""Domain-generalisation plug-ins of BioFormer Table 3: layers, losses, DGTask, CLI overrides."""

from __future__ import annotations

import copy
import csv
import json
import math
import types
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from biosig_lightning.cli import main
from biosig_lightning.models.baselines import CNN1D, EEGNet, Medformer, TransformerClassifier
from biosig_lightning.models.bioformer import FBAM
from biosig_lightning.models.modules.domain import (
    DEFAULT_MMD_SCALES,
    DSU,
    GradientReversal,
    MixStyle,
    SubjectDiscriminator,
    coral_loss,
    grad_reverse,
    mmd_loss,
)
from biosig_lightning.robust import DGTask, dann_lambda
from biosig_lightning.robust.dg import DEFAULT_DG_WEIGHTS
from biosig_lightning.runs import load_run
from tests.conftest import EXPERIMENTS
from tests.helpers import assert_metrics_match_predictions, printed_metrics

TABLE3 = EXPERIMENTS / "bioformer" / "baselines"
TINY_TRANSFORMER = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)


def tiny_transformer(**kw: object) -> TransformerClassifier:
    args = dict(n_chans=3, n_outputs=2, n_times=16, sfreq=100.0, **TINY_TRANSFORMER)
    args.update(kw)
    return TransformerClassifier(**args)


def batch(subjects: list[int], n_chans: int = 3, n_times: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n = len(subjects)
    return {"x": torch.randn(n, n_chans, n_times, generator=g), "y": torch.arange(n) % 2,
            "subject": torch.tensor(subjects), "index": torch.arange(n)}


# ---- gradient reversal ------------------------------------------------------------------------------
def test_gradient_reversal_is_identity_forward_and_scales_gradient_by_minus_lambda() -> None:
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64)
    layer = GradientReversal(0.7)
    y = layer(x)
    assert torch.equal(y, x)
    (y * w).sum().backward()
    assert torch.equal(x.grad, -0.7 * w)
    x.grad = None
    layer.coefficient = 2.5
    (layer(x) * w).sum().backward()
    assert torch.equal(x.grad, -2.5 * w)
    x.grad = None
    (grad_reverse(x, 0.0) * w).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(w))


def test_dann_schedule() -> None:
    assert dann_lambda(0.0) == 0.0
    assert dann_lambda(1.0) == pytest.approx(2 / (1 + math.exp(-10)) - 1)
    assert dann_lambda(0.5, gamma=10) == pytest.approx(2 / (1 + math.exp(-5)) - 1)
    values = [dann_lambda(p / 10) for p in range(11)]
    assert values == sorted(values) and values[-1] < 1
    assert dann_lambda(3.0) == dann_lambda(1.0)  # progress is clipped


def test_subject_discriminator_shapes_and_errors() -> None:
    disc = SubjectDiscriminator(6, 4, hidden=5, n_hidden_layers=2)
    assert disc(torch.randn(3, 6)).shape == (3, 4) and disc.n_subjects == 4
    with pytest.raises(ValueError, match="n_subjects"):
        SubjectDiscriminator(6, 0)


# ---- MixStyle / DSU ----------------------------------------------------------------------------------
def instance_normalise(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return (x - x.mean(dims, keepdim=True)) / x.std(dims, keepdim=True, unbiased=False)


def styled_input(shape: tuple[int, ...], channel_dim: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    stat_shape = [1] * len(shape)
    stat_shape[0] = shape[0]
    stat_shape[channel_dim] = shape[channel_dim]
    # large per-sample, per-channel offsets, mild scale spread: a clear "style"
    return x * (1 + 0.1 * torch.rand(stat_shape, generator=g, dtype=torch.float64)) + 5 * torch.randn(
        stat_shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("cls", [MixStyle, DSU])
@pytest.mark.parametrize(("shape", "channel_dim", "dims"), [((6, 4, 20), 1, (2,)), ((6, 20, 4), -1, (1,)),
                                                             ((6, 4, 5, 7), 1, (2, 3))])
def test_style_layers_change_only_the_channel_statistics(cls: type, shape: tuple, channel_dim: int,
                                                         dims: tuple) -> None:
    torch.manual_seed(0)
    layer = cls(p=1.0, channel_dim=channel_dim)
    x = styled_input(shape, channel_dim)
    out = layer(x)
    assert out.shape == x.shape
    assert not torch.allclose(out.mean(dims), x.mean(dims), atol=1e-3)  # the style moved
    # the content (each channel's instance-normalised signal) is untouched, up to DSU's sign draw
    a, b = instance_normalise(out, dims), instance_normalise(x, dims)
    corr = (a * b).mean(dims)
    assert torch.allclose(corr.abs(), torch.ones_like(corr), atol=1e-6)
    layer.eval()
    assert torch.equal(layer(x), x)
    layer.train()
    assert torch.equal(layer(x[:1]), x[:1])  # nobody to mix with
    assert torch.equal(cls(p=0.0, channel_dim=channel_dim)(x), x)


def test_mixstyle_mixes_with_a_batch_mate() -> None:
    torch.manual_seed(0)
    layer = MixStyle(p=1.0, alpha=0.1, channel_dim=1)
    layer._beta = types.SimpleNamespace(sample=lambda shape: torch.full(shape, 0.3))
    x = styled_input((8, 3, 50), 1)
    out = layer(x)
    mu = x.mean(2)
    # out's means are 0.3 mu_i + 0.7 mu_perm(i): solving for mu_perm gives a permutation of mu
    partner = (out.mean(2) - 0.3 * mu) / 0.7
    assert torch.allclose(partner.sort(0).values, mu.sort(0).values, atol=1e-6)


def test_mixstyle_probability_is_per_batch() -> None:
    torch.manual_seed(0)
    layer = MixStyle(p=0.5, channel_dim=1)
    x = styled_input((4, 2, 10), 1)
    changed = sum(not torch.equal(layer(x), x) for _ in range(200))
    assert 70 < changed < 130


def test_style_layers_reject_bad_settings() -> None:
    with pytest.raises(ValueError, match="p must lie"):
        MixStyle(p=1.5)
    with pytest.raises(ValueError, match="alpha"):
        MixStyle(alpha=0.0)
    with pytest.raises(ValueError, match="batch axis"):
        DSU(p=1.0, channel_dim=0)(torch.randn(3, 4, 5))


# ---- MMD / CORAL -------------------------------------------------------------------------------------
def test_mmd_is_zero_for_identical_sets_and_grows_with_shift() -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randn(10, 6, generator=g)
    assert mmd_loss(a, a.clone()).abs() < 1e-6
    b = torch.randn(12, 6, generator=g)
    near, far = mmd_loss(a, b + 0.5), mmd_loss(a, b + 3.0)
    assert 0 < near < far
    assert mmd_loss(a, b) == pytest.approx(mmd_loss(b, a).item(), abs=1e-6)
    # one sample per set: the median heuristic's width is their squared distance, so the biased estimator is
    # 1 + 1 - 2 k(a, b) with k(a, b) = mean over scales s of exp(-1 / s)
    one = 2 - 2 * sum(math.exp(-1 / s) for s in DEFAULT_MMD_SCALES) / len(DEFAULT_MMD_SCALES)
    assert mmd_loss(a[:1], b[:1]).item() == pytest.approx(one, rel=1e-5)
    a.requires_grad_(True)
    mmd_loss(a, b + 1.0).backward()
    assert a.grad is not None and a.grad.abs().sum() > 0


def test_coral_matches_the_covariance_definition() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(9, 5, generator=g, dtype=torch.float64)
    b = torch.randn(7, 5, generator=g, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0],
                                                                            dtype=torch.float64)
    expected = (torch.cov(a.T) - torch.cov(b.T)).pow(2).sum() / (4 * 5 * 5)
    assert coral_loss(a, b).double().item() == pytest.approx(expected.item(), rel=1e-5)
    # same covariance (a shifted copy and a mirrored copy) -> zero
    assert coral_loss(a, a + 7.0).abs() < 1e-6
    assert coral_loss(a, -a).abs() < 1e-6
    with pytest.raises(ValueError, match="two samples"):
        coral_loss(a[:1], b)


# ---- DGTask ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["mmd", "coral"])
def test_alignment_loss_is_skipped_with_one_subject(method: str) -> None:
    torch.manual_seed(0)
    task = DGTask(tiny_transformer(), method=method)
    assert task.dg_weight == 0.05
    loss, logits, extra = task.training_loss(batch([4] * 6))
    assert extra["dg_loss"] == 0 and torch.equal(loss, extra["cls_loss"])
    assert logits.shape == (6, 2)
    # two subjects: the weighted discrepancy is added
    task.eval()  # no dropout: the features can be recomputed outside the task
    two = batch([4, 4, 4, 9, 9, 9])
    loss, _, extra = task.training_loss(two)
    feats = task.backbone.tokens(two["x"]).mean(1)  # the time-averaged encoder output, subject 4 vs subject 9
    expected = (mmd_loss if method == "mmd" else coral_loss)(feats[:3], feats[3:])
    assert float(expected) > 1e-6  # two different subjects' windows: a discrepancy to align
    assert extra["dg_loss"].item() == pytest.approx(float(expected), rel=1e-5)
    assert loss.item() == pytest.approx((extra["cls_loss"] + 0.05 * extra["dg_loss"]).item(), rel=1e-6)
    # and it trains the features: in one forward pass (dropout off), the gradient of the loss minus that of
    # its
    # classification term is the gradient of 0.05 * aux, not zero
    task.eval()
    b = batch([4, 4, 4, 9, 9, 9])
    loss, logits, extra = task.training_loss(b)
    params = [p for p in task.backbone.parameters() if p.requires_grad]
    total = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    cls = torch.nn.functional.cross_entropy(logits, b["y"], label_smoothing=task.hparams.label_smoothing)
    cls_only = torch.autograd.grad(cls, params, allow_unused=True)
    moved = sum(float((t - c).abs().sum()) for t, c in zip(total, cls_only, strict=True)
                if t is not None and c is not None)
    assert moved > 1e-8, "the alignment loss sends no gradient into the backbone"


@pytest.mark.parametrize("fbam", [False, True])
def test_alignment_reads_the_time_averaged_encoder_output(fbam: bool) -> None:
    torch.manual_seed(0)
    backbone = tiny_transformer(pooling="flatten", fbam=fbam, fbam_bands=2)
    task = DGTask(backbone, method="mmd").eval()
    x = batch([1, 2, 3])["x"]
    features, logits = task._features_and_logits(x)
    assert torch.allclose(
        features, backbone.tokens(x).mean(1), atol=1e-6
    )  # (B, d_model), not the flat head input
    assert torch.allclose(logits, backbone(x), atol=1e-6)
    assert task._captured is None
    task = DGTask(tiny_transformer(pooling="flatten"), method="grl", disc_hidden=4)
    task._build_discriminator([1, 2])
    assert task.discriminator.body[0].in_features == 8
    flat = DGTask(tiny_transformer(pooling="flatten"), method="coral", align_on="features").eval()
    features, _ = flat._features_and_logits(x)
    assert features.shape == (3, 16 * 8)


def test_coral_skips_subjects_with_a_single_window() -> None:
    task = DGTask(tiny_transformer(), method="coral")
    _, _, extra = task.training_loss(batch([1, 2, 3, 3]))  # only subject 3 has two windows
    assert extra["dg_loss"] == 0
    assert DGTask.pick_subject_pair(torch.tensor([1, 2, 3, 3]), min_count=1) is not None
    assert DGTask.pick_subject_pair(torch.tensor([1, 2, 3, 3]), min_count=2) is None
    mask_a, mask_b = DGTask.pick_subject_pair(torch.tensor([5, 6, 5, 6, 6]), min_count=2)
    assert {tuple(mask_a.tolist()), tuple(mask_b.tolist())} == {(1, 0, 1, 0, 0), (0, 1, 0, 1, 1)}


def test_grl_task_maps_subjects_and_reloads_into_a_fresh_task() -> None:
    torch.manual_seed(0)
    task = DGTask(tiny_transformer(), method="grl", disc_hidden=4)
    assert task.dg_weight == 0.1 and task.discriminator is None
    with pytest.raises(RuntimeError, match="never built"):
        task.training_loss(batch([3, 5]))
    task._build_discriminator([9, 3, 5])
    loss, _, extra = task.training_loss(batch([3, 5, 9, 9]))
    assert extra["grl_lambda"].item() == pytest.approx(dann_lambda(1.0))  # no trainer: full progress
    assert loss.item() == pytest.approx((extra["cls_loss"] + 0.1 * extra["dg_loss"]).item(), rel=1e-6)
    assert task._subject_targets(torch.tensor([9, 3, 5])).tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match=r"\[4\] are not training subjects"):
        task.training_loss(batch([3, 4]))
    fresh = DGTask(tiny_transformer(), method="grl", disc_hidden=4)
    fresh.load_state_dict(task.state_dict())
    assert fresh.train_subjects.tolist() == [3, 5, 9]
    for key, value in task.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key


def test_grl_reverses_the_discriminator_gradient_into_the_backbone() -> None:
    torch.manual_seed(0)
    task = DGTask(tiny_transformer(), method="grl", disc_hidden=4)
    task._build_discriminator([1, 2])
    task.eval()  # no dropout: both passes see the same network
    b = batch([1, 2, 1, 2])
    targets = task._subject_targets(b["subject"])
    task.grl.coefficient = 0.6

    def grads(reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
        task.zero_grad()
        feats = task.backbone.forward_features(b["x"])
        nn.functional.cross_entropy(
            task.discriminator(task.grl(feats) if reverse else feats), targets
        ).backward()
        return task.backbone.embed.weight.grad.clone(), task.discriminator.out.weight.grad.clone()

    (plain_backbone, plain_disc), (rev_backbone, rev_disc) = grads(False), grads(True)
    assert plain_backbone.abs().sum() > 0
    assert torch.allclose(rev_backbone, -0.6 * plain_backbone, rtol=1e-5, atol=1e-10)
    assert torch.equal(rev_disc, plain_disc)  # the discriminator itself still minimises its loss


def test_style_methods_hook_the_declared_site() -> None:
    torch.manual_seed(0)
    task = DGTask(tiny_transformer(), method="mixstyle", style_p=1.0)
    plain = tiny_transformer()
    plain.load_state_dict(task.backbone.state_dict())
    x = batch([1, 2, 3, 4])["x"] * torch.linspace(0.5, 3, 4)[:, None, None]
    task.train()
    plain.train()
    assert not torch.allclose(task(x), plain(x))
    task.eval()
    plain.eval()
    assert torch.equal(task(x), plain(x))
    cnn = CNN1D(n_chans=3, n_outputs=2, n_times=16, sfreq=100.0, width=4, n_blocks=2, convs_per_block=2)
    assert cnn.style_site == "blocks.6" and isinstance(cnn.get_submodule(cnn.style_site), nn.MaxPool1d)
    task = DGTask(cnn, method="dsu")
    assert isinstance(task.style, DSU) and task.style.channel_dim == 1


def test_dg_task_clear_errors() -> None:
    class Bare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x.mean(-1))

    with pytest.raises(ValueError, match="backbone Bare declares no style site"):
        DGTask(Bare(), method="mixstyle")
    with pytest.raises(ValueError, match="Bare lacks forward_features, head, feature_dim"):
        DGTask(Bare(), method="coral")
    with pytest.raises(ValueError, match="method must be one of"):
        DGTask(Bare(), method="dann")
    Bare.style_site, Bare.style_channel_dim = "nowhere", 1
    with pytest.raises(ValueError, match="no submodule style_site='nowhere'"):
        DGTask(Bare(), method="dsu")
    assert isinstance(DGTask(Bare(), method="erm").backbone, Bare)


# ---- Transformer + FBAM ------------------------------------------------------------------------------
def test_transformer_fbam_option() -> None:
    tslib = dict(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0, embedding="circular_conv", n_heads=8,
                 d_ff=256, norm_first=False, pooling="flatten")
    plain = TransformerClassifier(**tslib)
    assert plain.fbam is None
    assert sum(p.numel() for p in plain.parameters()) == 866_818  # unchanged default network
    torch.manual_seed(0)
    model = tiny_transformer(fbam=True, fbam_bands=3)
    assert len(model.fbam) == 1 and isinstance(model.fbam[0], FBAM)
    n_fbam = sum(p.numel() for p in model.fbam.parameters())
    assert (
        sum(p.numel() for p in model.parameters())
        == sum(p.numel() for p in tiny_transformer().parameters()) + n_fbam
    )
    x = torch.randn(3, 3, 16)
    out = model(x)
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in model.fbam.parameters() if p.requires_grad)
    assert model.embed.weight.grad.abs().sum() > 0


# ---- CLI: base + backbone override + method override -------------------------------------------------
TINY_CLI = [f"--model.init_args.backbone.init_args.{k}={v}" for k, v in TINY_TRANSFORMER.items()]
SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "synthetic.yaml"),
         "--config", str(EXPERIMENTS / "overlays" / "smoke.yaml"), "--trainer.enable_progress_bar=false",
         "--data.init_args.n_times=32"]


def fit(capsys: pytest.CaptureFixture[str], *configs: str, extra: tuple[str, ...] = ()) -> dict:
    args = [a for name in configs for a in ("--config", str(TABLE3 / f"{name}.yaml"))]
    main(["fit", *SMOKE, *args, *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("results: "), out[-5:]
    return json.loads(Path(out[-1].split("results: ", 1)[1]).read_text())


def train_log(res: dict) -> dict[str, float]:
    rows = list(csv.DictReader((Path(res["run_dir"]) / "metrics.csv").open()))
    return {k: float(v) for row in rows for k, v in row.items() if k.startswith("train/") and v}


@pytest.mark.parametrize(("name", "cls", "restated"), [
    ("transformer", "TransformerClassifier", dict(d_model=128, n_layers=6, n_heads=8, d_ff=256, dropout=0.1,
                                                  embedding="circular_conv",
                                                  norm_first=False, pooling="flatten")),
    ("medformer", "Medformer", dict(d_model=128, e_layers=6, n_heads=8, d_ff=256, dropout=0.1,
                                    augmentations=["none", "drop0.35"])),
    ("eegnet", "EEGNet", dict(dropout=0.25)),
])
def test_override_switches_the_task_and_keeps_the_base(capsys: pytest.CaptureFixture[str], name: str,
                                                       cls: str,
                                                       restated: dict) -> None:
    base = EXPERIMENTS / "bioformer_apava.yaml"
    configs = [a for n in (name, "grl") for a in ("--config", str(TABLE3 / f"{n}.yaml"))]
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(base), *configs, "--print_config"])
    assert stop.value.code in (0, None)
    cfg = yaml.safe_load(capsys.readouterr().out)["model"]
    assert cfg["class_path"] == "biosig_lightning.robust.DGTask"
    args = cfg["init_args"]
    assert args["method"] == "grl" and args["dg_weight"] is None
    # the base's optimisation (Adam 1e-4, no decay, no schedule, patience 10) is kept
    assert (args["optimizer"], args["lr"],
            args["weight_decay"], args["scheduler"]) == ("adam", 1.0e-4, 0.0, "none")
    assert args["early_stopping_patience"] == 10
    backbone = args["backbone"]
    assert backbone["class_path"] == f"biosig_lightning.models.baselines.{cls}"
    # BioFormer's own values never leak into the new backbone through a shared argument name
    assert {k: backbone["init_args"][k] for k in restated} == restated


def test_fbam_override_reaches_the_backbone(capsys: pytest.CaptureFixture[str]) -> None:
    configs = [a for n in ("transformer", "fbam") for a in ("--config", str(TABLE3 / f"{n}.yaml"))]
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(EXPERIMENTS / "bioformer_apava.yaml"), *configs, "--print_config"])
    cfg = yaml.safe_load(capsys.readouterr().out)["model"]
    assert cfg["class_path"].endswith("ClassificationTask")
    assert cfg["init_args"]["backbone"]["init_args"]["fbam"] is True


TABLE3_SHAPE = dict(n_chans=3, n_outputs=2, n_times=64, sfreq=128.0)
# : the three backbones of BioFormer Table 3, tiny and without dropout (so train/eval differ only by the
# method)
TABLE3_BACKBONES = {
    "TransformerClassifier": lambda: TransformerClassifier(**TABLE3_SHAPE, **TINY_TRANSFORMER, patch_len=8,
                                                           pooling="flatten"),
    "Medformer": lambda: Medformer(**TABLE3_SHAPE, patch_lens=[4, 8], d_model=8, n_heads=2, e_layers=1,
                                   d_ff=16,
                                   dropout=0.0, augmentations=["none"]),
    "EEGNet": lambda: EEGNet(**TABLE3_SHAPE, F1=2, D=1, F2=2, kernel_length=8, separable_kernel=4, pool1=2,
                             pool2=2, dropout=0.0),
}
TABLE3_SUBJECTS = [1, 1, 2, 2, 3, 3]


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n,
            p in module.named_parameters()}


@pytest.mark.parametrize("name", sorted(TABLE3_BACKBONES))
@pytest.mark.parametrize("method", ["mixstyle", "dsu"])
def test_table3_style_methods_change_features_in_train_mode_only(name: str, method: str) -> None:
    torch.manual_seed(0)
    task = DGTask(TABLE3_BACKBONES[name](), method=method, style_p=1.0)
    site = task.backbone.get_submodule(task.backbone.style_site)
    seen: dict[str, torch.Tensor] = {}
    # one hook before the method's (the site's own output), one after it (what the next layer gets)
    site.register_forward_hook(lambda m, i, o: seen.__setitem__("raw", o.detach().clone()), prepend=True)
    site.register_forward_hook(lambda m, i, o: seen.__setitem__("styled", o.detach().clone()))
    x = batch(TABLE3_SUBJECTS, n_chans=3, n_times=64)["x"]
    task.train()
    logits_train = task(x)
    raw, styled = seen["raw"], seen["styled"]
    dims = tuple(d for d in range(1, raw.ndim) if d != task.backbone.style_channel_dim % raw.ndim)
    # the per-sample, per-channel statistics are what MixStyle/DSU re-draw: they moved
    moved = torch.maximum((styled.mean(dims) - raw.mean(dims)).abs().max(),
                          (styled.std(dims) - raw.std(dims)).abs().max())
    assert moved > 1e-3, (name, method, float(moved))
    task.eval()
    logits_eval = task(x)
    assert torch.equal(seen["styled"], seen["raw"])  # identity at evaluation
    task._style_handle.remove()
    assert torch.equal(task(x), logits_eval)  # evaluation is the plain backbone
    assert not torch.allclose(logits_train, logits_eval, atol=1e-5)


@pytest.mark.parametrize("name", sorted(TABLE3_BACKBONES))
def test_table3_grl_discriminator_learns_and_reverses_its_gradient_into_the_backbone(name: str) -> None:
    torch.manual_seed(0)
    task = DGTask(TABLE3_BACKBONES[name](), method="grl", disc_hidden=16, disc_dropout=0.0)
    task._build_discriminator([1, 2, 3])
    task.train()  # no dropout anywhere: two passes over one batch are identical, so gradients compare
    b = batch(TABLE3_SUBJECTS, n_chans=3, n_times=64)
    loss, logits, extra = task.training_loss(b)
    assert logits.shape == (6, 2) and extra["dg_loss"] > 0
    loss.backward()
    disc = _grads(task.discriminator)
    assert all(g.abs().sum() > 0 for g in disc.values()), {n: float(g.abs().sum()) for n, g in disc.items()}
    full = _grads(task.backbone)
    # the same step's two terms without the reversal layer: d(cls)/dtheta and d(w * L_subj)/dtheta
    features, logits2 = task._features_and_logits(b["x"])
    params = [p for _, p in task.backbone.named_parameters()]
    cls = torch.nn.functional.cross_entropy(logits2, b["y"])
    aux = torch.nn.functional.cross_entropy(task.discriminator(features), task._subject_targets(b["subject"]))
    g_cls = torch.autograd.grad(cls, params, retain_graph=True, allow_unused=True)
    g_aux = torch.autograd.grad(task.dg_weight * aux, params, allow_unused=True)
    lam = task.grl.coefficient
    assert lam == pytest.approx(dann_lambda(1.0))  # outside a Trainer: end of training
    reached = 0
    for (pname, _), gc, ga in zip(task.backbone.named_parameters(), g_cls, g_aux, strict=True):
        gc = torch.zeros_like(full[pname]) if gc is None else gc
        ga = torch.zeros_like(full[pname]) if ga is None else ga
        # DANN: the backbone descends the class loss and ascends the subject loss
        torch.testing.assert_close(full[pname], gc - lam * ga, atol=1e-6, rtol=1e-4)
        reached += int(ga.abs().sum() > 0)
    assert reached > 1, f"{name}: the subject loss reaches only {reached} backbone tensors"


@pytest.mark.parametrize("name", sorted(TABLE3_BACKBONES))
@pytest.mark.parametrize("method", ["mmd", "coral"])
def test_table3_alignment_losses_are_nonzero_and_train_the_backbone(name: str, method: str) -> None:
    torch.manual_seed(0)
    backbone = TABLE3_BACKBONES[name]()
    tasks = {w: DGTask(copy.deepcopy(backbone), method=method, dg_weight=w).train() for w in (0.0, 1.0)}
    b = batch(TABLE3_SUBJECTS, n_chans=3, n_times=64)
    grads = {}
    for w, task in tasks.items():
        torch.manual_seed(1)  # the same random subject pair for both weights
        loss, _, extra = task.training_loss(b)
        assert extra["dg_loss"] > 1e-6, (name, method, float(extra["dg_loss"]))
        assert loss.item() == pytest.approx(extra["cls_loss"].item() + w * extra["dg_loss"].item(), rel=1e-5)
        loss.backward()
        grads[w] = _grads(task.backbone)
    # the auxiliary term's gradient in the backbone, parameter by parameter
    moved = [n for n in grads[0.0] if not torch.allclose(grads[0.0][n], grads[1.0][n], atol=1e-7)]
    first = next(n for n, _ in backbone.named_parameters())
    assert first in moved, (name, method, moved)  # it reaches the input layer, not only the last one
    assert len(moved) > len(grads[0.0]) // 2, (name, method, len(moved), len(grads[0.0]))


@pytest.mark.parametrize("method", ["mmd", "coral", "grl", "mixstyle"])
def test_each_method_trains_through_the_cli(in_tmp: Path,
                                            capsys: pytest.CaptureFixture[str], method: str) -> None:
    extra = (*TINY_CLI, "--model.init_args.disc_hidden=8")
    res = fit(capsys, "transformer", method, extra=extra)
    model = res["config"]["model"]
    assert model["class_path"].endswith("DGTask") and model["init_args"]["method"] == method
    # the base survived the class switch: demo.yaml's optimiser, transformer.yaml's backbone
    assert model["init_args"]["lr"] == 3.0e-3 and model["init_args"]["optimizer"] == "adamw"
    assert model["init_args"]["backbone"]["class_path"].endswith("TransformerClassifier")
    assert model["init_args"]["backbone"]["init_args"]["pooling"] == "flatten"
    assert res["model"] == "TransformerClassifier" and res["task"] == "DGTask"
    assert_metrics_match_predictions(res["run_dir"])
    log = train_log(res)
    if method in ("mmd", "coral", "grl"):
        assert log["train/dg_loss"] > 0  # a pair of subjects (or the discriminator) was found in the batches
        # and the alignment term is part of what is minimised: loss = classification + weight * alignment
        weight = model["init_args"].get("dg_weight")
        weight = DEFAULT_DG_WEIGHTS[method] if weight is None else weight
        assert log["train/loss_epoch"] == pytest.approx(
            log["train/cls_loss"] + weight * log["train/dg_loss"], rel=1e-4
        )
    if method == "grl":
        # two steps of smoke training: progress 0 and 1/2, epoch mean of the two coefficients
        assert log["train/grl_lambda"] == pytest.approx((dann_lambda(0.0) + dann_lambda(0.5)) / 2, rel=1e-5)
        loaded = load_run(res["run_dir"])
        assert loaded.task.discriminator.n_subjects == len(res["subjects"]["train"])
        assert loaded.task.train_subjects.tolist() == sorted(res["subjects"]["train"])
        assert loaded.task.discriminator.body[0].in_features == TINY_TRANSFORMER["d_model"]
        ckpt = res["best_checkpoint"]
        main(["test", *SMOKE, "--config", str(TABLE3 / "transformer.yaml"), "--config",
              str(TABLE3 / "grl.yaml"),
              *extra, "--ckpt_path", ckpt])
        # the reloaded GRL checkpoint scores the test windows exactly as the fit's own test did
        tested = printed_metrics(capsys.readouterr().out, "test")
        for key, value in res["metrics"].items():
            assert tested[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key


def test_dsu_on_cnn_with_subjectnorm_through_the_cli(in_tmp: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    res = fit(capsys, "dsu", "subjectnorm")  # demo.yaml's CNN1D keeps its own style site
    assert res["model"] == "CNN1D" and res["config"]["model"]["init_args"]["method"] == "dsu"
    assert res["config"]["data"]["init_args"]["normalization"] == "subject"
