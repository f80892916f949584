"""The denoiser pair's optimiser: the cutoffs' own learning rate."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask, contrastive_pairs
from tests.models.test_compile_fullgraph import HostSyncWatch
from tests.tasks.test_denoiser_pair_montage import small


def _one_adam_step(task: DenoiserPairTask) -> dict[str, float]:
    """How far one optimiser step moves each parameter (Adam's first step, without weight decay, moves
    every parameter with a gradient by its group's learning rate, whatever the gradient's size)."""
    opt = task.build_optimizer()
    before = {n: p.detach().clone() for n, p in task.named_parameters()}
    x, y = torch.randn(8, 6, 32), torch.tensor([0, 1] * 4)
    loss, _, _ = task.denoising_loss(x, y, torch.randn_like(x))
    loss.backward()
    opt.step()
    return {n: float((p.detach() - before[n]).abs().max()) for n, p in task.named_parameters()}


def test_cutoff_lr_trains_the_cutoffs_at_their_own_rate_and_nothing_else_changes() -> None:
    base = DenoiserPairTask(small(2), n_outputs=2, restart_period=None, scheduler="none", lr=1e-3,
                            weight_decay=0.0)
    fast = DenoiserPairTask(small(2), n_outputs=2, restart_period=None, scheduler="none", lr=1e-3,
                            weight_decay=0.0, cutoff_lr=3e-2)
    groups = fast.parameter_groups()
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in fast.parameters() if p.requires_grad)  # each once
    assert [g.get("lr") for g in groups] == [None, 3e-2]  # the first group takes the task's lr
    moved, moved_base = _one_adam_step(fast), _one_adam_step(base)
    cutoffs = [n for n in moved if n.endswith("cutoffs")]
    assert len(cutoffs) == 2  # one per denoiser
    for n in cutoffs:
        assert moved[n] == pytest.approx(3e-2, rel=1e-3)
        assert moved_base[n] == pytest.approx(1e-3, rel=1e-3)
    others = [n for n in moved if n not in cutoffs and moved[n] > 0]
    assert others and all(moved[n] == pytest.approx(moved_base[n], rel=1e-4) for n in others)


def test_cutoff_lr_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cutoff_lr must be > 0"):
        DenoiserPairTask(small(2), n_outputs=2, restart_period=None, scheduler="none", cutoff_lr=0.0)


def test_compile_reaches_the_denoisers_the_training_step_calls() -> None:
    """``compile`` compiles the backbone's ``denoise_all`` too (the step calls it, not the backbone's
    forward), and the compiled loss and logits are the eager ones (``aot_eager``: Inductor's C++ build is
    too slow here)."""
    torch._dynamo.reset()
    task = DenoiserPairTask(small(2), n_outputs=2, restart_period=None, scheduler="none")
    x, y = torch.randn(4, 6, 32), torch.tensor([0, 1, 0, 1])
    noise = torch.randn_like(x)
    task.backbone.fit_polarity(x, y)
    task.eval()
    with torch.no_grad():
        want_loss, want_logits = task.denoising_loss(x, y, noise)[0], task.backbone(x)
    task.compile_for_fit(True, backend="aot_eager")
    assert getattr(task.backbone.denoise_all, "_torchdynamo_orig_callable", None) is not None
    with torch.no_grad():
        torch.testing.assert_close(task.denoising_loss(x, y, noise)[0], want_loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(task.backbone(x), want_logits, rtol=1e-4, atol=1e-4)


def test_calibration_windows_fit_the_offsets_before_a_fit_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    task = DenoiserPairTask(small(2), n_outputs=2, calibration_windows=3, restart_period=None,
                            scheduler="none")
    batches = [{"x": torch.randn(4, 6, 32), "y": torch.tensor([0, 1, 1, 1])} for _ in range(3)]
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    monkeypatch.setattr(task.backbone, "fit_error_offsets", lambda x, y: seen.append((x, y)))
    dm = SimpleNamespace(train_dataloader=lambda: iter(batches))
    task._trainer = SimpleNamespace(datamodule=dm, state=SimpleNamespace(fn="fit"))
    task.on_validation_epoch_start()
    assert len(seen) == 1 and seen[0][1].tolist() == [0, 1, 1, 1, 0, 0]  # three windows of each class
    task._trainer = SimpleNamespace(datamodule=dm, state=SimpleNamespace(fn="validate"))
    task.on_validation_epoch_start()  # `biosig validate/test` keep the checkpoint's offsets
    assert len(seen) == 1
    with pytest.raises(ValueError, match="calibration_windows must be >= 0"):
        DenoiserPairTask(small(2), n_outputs=2, calibration_windows=-1, restart_period=None, scheduler="none")


def _selected_loss(task: DenoiserPairTask, x: torch.Tensor, y: torch.Tensor,
                   noise: torch.Tensor) -> torch.Tensor:
    """Eq. 21 + eq. 23 written with selections, class by class: a class without windows or partners in the
    batch adds nothing."""
    noisy = x + task.backbone.noise_std * noise
    pair = contrastive_pairs(x, y)
    total = x.new_zeros(())
    for c, den in enumerate(task.backbone.denoisers):
        mse = (x - den(noisy)).square().mean((1, 2))
        own = y == c
        if own.any():
            total = total + mse[own].mean()
        partner = pair[own]
        partner = partner[partner >= 0]
        if partner.numel():
            total = total + (task.margin - mse[partner]).clamp_min(0).mean()
    return total


@pytest.mark.parametrize("labels", [[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [2, 0, 2, 2, 0]],
                         ids=["both_classes", "one_class", "a_class_missing"])
def test_denoising_loss_is_eq23_class_by_class_without_waiting_for_the_device(labels: list[int]) -> None:
    torch.manual_seed(0)
    task = DenoiserPairTask(small(3), n_outputs=3, restart_period=None, scheduler="none", margin=2.0)
    x, y = torch.randn(5, 6, 32), torch.tensor(labels)
    noise = torch.randn_like(x)
    task.backbone.fit_polarity(x, torch.arange(5) % 3)  # every class's polarities, as its epochs start
    task.train()
    with HostSyncWatch() as watch:
        loss, logits, _ = task.denoising_loss(x, y, noise)
        loss.backward()
    assert watch.found == []
    assert logits.shape == (5, 3)
    task.eval()  # the same BatchNorm statistics for both
    with torch.no_grad():
        torch.testing.assert_close(task.denoising_loss(x, y, noise)[0], _selected_loss(task, x, y, noise))
