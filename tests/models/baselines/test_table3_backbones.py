"""Medformer (Wang et al., 2024) and EEGNet (Lawhern et al., 2018) baseline backbones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from biosig_lightning.cli import main
from biosig_lightning.models.baselines import EEGNet, Medformer
from biosig_lightning.models.bioformer import FBAM
from biosig_lightning.runs.load import load_run
from tests.conftest import EXPERIMENTS
from tests.helpers import assert_metrics_match_predictions

APAVA = dict(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0)
TINY = dict(patch_lens=(4, 2, 4, 8), d_model=16, n_heads=2, e_layers=2, d_ff=32)


def tiny_medformer(**kw: object) -> Medformer:
    args = dict(n_chans=3, n_outputs=3, n_times=24, sfreq=100.0, **TINY)
    args.update(kw)
    return Medformer(**args)


# ---------------------------------------------------------------- learning


def _subject_windows(subjects: range,
                     n_times: int, per_subject: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Class 0: a slow sine on channel 0, class 1: a fast sine on channel 1, plus noise; every subject
    scales and offsets its channels (a per-subject drift a model must see past to score unseen subjects)."""
    g = torch.Generator().manual_seed(1000 + subjects.start)
    t = torch.arange(n_times) / n_times
    xs, ys = [], []
    for _ in subjects:
        y = torch.arange(per_subject) % 2
        x = 0.3 * torch.randn(per_subject, 3, n_times, generator=g)
        x[y == 0, 0] += torch.sin(2 * torch.pi * 2 * t)
        x[y == 1, 1] += torch.sin(2 * torch.pi * 6 * t)
        gain = 1.0 + 0.3 * torch.rand(1, 3, 1, generator=g)
        xs.append(x * gain + 0.3 * torch.randn(1, 3, 1, generator=g))
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def _train_and_score_held_out(make, shuffle_labels: bool = False) -> tuple[list[float], float]:  # noqa: ANN001
    """20 full-batch Adam steps on subjects 0-1; (training losses, accuracy on subjects 2-5, never seen)."""
    torch.manual_seed(0)
    model = make()
    x, y = _subject_windows(range(0, 2), model.n_times)
    if shuffle_labels:
        y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(7))]
    x_test, y_test = _subject_windows(range(2, 6), model.n_times)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        return losses, (model(x_test).argmax(1) == y_test).float().mean().item()


@pytest.mark.parametrize(
    "make",
    [
        lambda: tiny_medformer(n_outputs=2, e_layers=1, dropout=0.0, augmentations=("none",)),
        lambda: tiny_medformer(n_outputs=2, e_layers=1, dropout=0.0, variant="head", fbam=True, fbam_bands=2),
        # fast BN running statistics: 20 steps at Keras momentum 0.01 would leave them near their init
        lambda: EEGNet(n_chans=3, n_outputs=2, n_times=64, sfreq=64.0, kernel_length=8,
                       dropout=0.0, bn_momentum=0.5),
    ],
    ids=["medformer", "medformer-head-fbam", "eegnet"],
)
def test_tiny_models_learn_a_separable_toy_problem(make) -> None:  # noqa: ANN001
    losses, held_out = _train_and_score_held_out(make)
    # control: the same code trained on shuffled labels (it can fit them, but learns no rule)
    control_losses, control = _train_and_score_held_out(make, shuffle_labels=True)
    # the same 20 steps fit the real rule further than shuffled labels (measured: last/first loss 0.002, 0.09
    # and 0.61 for the three models; last loss 0.005, 0.10 and 0.67 of the shuffled-label control's)
    assert losses[-1] < 0.7 * losses[0] and losses[-1] < 0.8 * control_losses[-1], (losses, control_losses)
    # 64 held-out windows: the difference of two chance-level accuracies has a standard error of about 0.09,
    # so the learned model must beat the control by more than 3 of them and classify nearly every unseen
    # window
    assert held_out >= 0.9, (held_out, control)
    assert held_out > control + 0.3, (held_out, control)


# ---------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("backbone", "overrides"),
    [
        ("EEGNet", ["kernel_length=16"]),
        ("Medformer", ["e_layers=1", "d_model=16", "n_heads=2", "d_ff=32", "patch_lens=[8,16,32]"]),
    ],
)
def test_cli_smoke_fit(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                       backbone: str, overrides: list[str]) -> None:
    args = ["fit"]
    for name in ("demo.yaml", "synthetic.yaml", "smoke.yaml"):
        args += ["--config", str(EXPERIMENTS / "overlays" / name)]
    args += ["--trainer.enable_progress_bar=false",
             f"--model.init_args.backbone=biosig_lightning.models.baselines.{backbone}"]
    args += [f"--model.init_args.backbone.init_args.{o}" for o in overrides]
    main(args)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("results: ")
    res = json.loads(Path(last.split("results: ", 1)[1]).read_text())
    assert res["model"] == backbone
    backbone_cfg = res["config"]["model"]["init_args"]["backbone"]
    assert backbone_cfg["class_path"] == f"biosig_lightning.models.baselines.{backbone}"
    name, value = overrides[0].split("=")
    assert backbone_cfg["init_args"][name] == int(value)
    assert res["num_params"] == sum(
        p.numel() for p in load_run(res["run_dir"]).task.parameters() if p.requires_grad
    )
    assert_metrics_match_predictions(res["run_dir"])


def test_eegnet_with_fbam_between_its_stages() -> None:
    from biosig_lightning.models.baselines import EEGNet

    kw = dict(n_chans=4, n_outputs=3, n_times=64, sfreq=64.0, F1=4, D=2, F2=8,
              kernel_length=8, max_norm=False)
    plain, with_fbam = EEGNet(**kw), EEGNet(**kw, fbam=True)  # 3 classes: "auto" -> batch-shared kernels
    assert with_fbam.fbam[0].fbam.kernel_mode == "batch"
    extra = sum(p.numel() for p in FBAM(16, 64, 6).parameters()) + sum(
        p.numel() for p in FBAM(8, 16, 6).parameters()
    )
    assert (
        sum(p.numel() for p in with_fbam.parameters()) == sum(p.numel() for p in plain.parameters()) + extra
    )
    x = torch.randn(5, 4, 64)
    out = with_fbam(x)
    assert out.shape == (5, 3)
    out.sum().backward()
    grads = [p.grad for p in with_fbam.fbam.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    with_fbam.eval()
    assert torch.allclose(with_fbam(x[:1]), with_fbam(x)[:1], atol=1e-5)  # batch-shared kernels: eval rule


@pytest.mark.parametrize("n_outputs,expected", [(2, "sample"), (3, "batch"), (5, "batch")])
def test_fbam_hosts_pick_the_papers_kernel_mode(n_outputs: int, expected: str) -> None:
    # Appendix C.3: batch-shared kernels for multi-class tasks, sample-specific for binary ones
    from biosig_lightning.models.baselines import TransformerClassifier
    from biosig_lightning.models.bioformer import BioFormer

    shape = dict(n_chans=3, n_outputs=n_outputs, n_times=32, sfreq=32.0)
    hosts = [
        TransformerClassifier(**shape, d_model=8, n_layers=1, n_heads=2, d_ff=8, fbam=True).fbam[0],
        Medformer(**shape, patch_lens=[4, 8], d_model=8, n_heads=2, e_layers=1, d_ff=8, fbam=True).fbam[0],
        EEGNet(**shape, F1=2, D=1, F2=2, kernel_length=4, fbam=True).fbam[0].fbam,
        BioFormer(**shape, d_model=8, d_ff=8, n_heads=2, n_layers=1).mixers[0],
    ]
    assert [m.kernel_mode for m in hosts] == [expected] * 4
    forced = TransformerClassifier(**shape, d_model=8, n_layers=1, n_heads=2, d_ff=8, fbam=True,
                                   fbam_kernel_mode="sample")
    assert forced.fbam[0].kernel_mode == "sample"


def test_fbam_kernel_mode_is_set_in_one_place() -> None:
    with pytest.raises(ValueError, match="fbam_kernel_mode"):
        tiny_medformer(fbam=True, fbam_kwargs={"kernel_mode": "batch"})
    with pytest.raises(ValueError, match="'auto', 'sample' or 'batch'"):
        tiny_medformer(fbam=True, fbam_kernel_mode="shared")

