"""The generic classification recipe: schedule, optimiser choice, monitor and callbacks."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from biosig_lightning.models.baselines import CNN1D
from biosig_lightning.tasks import ClassificationTask
from biosig_lightning.tasks.classification import warmup_cosine


def _task(**kw) -> ClassificationTask:
    net = CNN1D(n_chans=2, n_outputs=3, n_times=32, sfreq=32.0, width=8, n_blocks=2)
    return ClassificationTask(backbone=net, n_outputs=3, **kw)


def test_warmup_then_cosine() -> None:
    total, warm = 100, 10
    lrs = [warmup_cosine(s, warm, total) for s in range(total + 1)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10], strict=False))  # rising during warm-up
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))  # then only falling
    assert lrs[55] == pytest.approx(0.5 * (1 + math.cos(math.pi * 45 / 90)))
    assert lrs[-1] == pytest.approx(0.0, abs=1e-9)
    assert warmup_cosine(total, warm, total, min_ratio=0.1) == pytest.approx(0.1)


@pytest.mark.parametrize(("name", "cls"), [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam)])
def test_optimizer_from_config(name: str, cls: type) -> None:
    opt = _task(optimizer=name, lr=0.02, weight_decay=0.0).build_optimizer()
    assert type(opt) is cls and opt.param_groups[0]["lr"] == 0.02


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(ValueError, match="model.init_args.mode"):
        _task(mode="up")
    with pytest.raises(ValueError, match="model.init_args.optimizer"):
        _task(optimizer="sgd").build_optimizer()


def test_monitor_drives_checkpoint_and_early_stopping() -> None:
    callbacks = _task(monitor="val/auroc", mode="max", early_stopping_patience=3).configure_callbacks()
    best = [c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor is not None]
    stop = [c for c in callbacks if isinstance(c, EarlyStopping)]
    assert best[0].monitor == "val/auroc" and best[0].mode == "max"
    assert stop[0].monitor == "val/auroc" and stop[0].patience == 3
    # a separate last.ckpt writer, refreshed every epoch whatever the monitor did
    assert any(isinstance(c, ModelCheckpoint) and c.monitor is None for c in callbacks)
    assert not any(
        isinstance(c, EarlyStopping) for c in _task(early_stopping_patience=None).configure_callbacks()
    )


def test_training_loss_is_cross_entropy() -> None:
    task = _task()
    batch = {"x": torch.randn(4, 2, 32), "y": torch.tensor([0, 1, 2, 1])}
    loss, logits, extra = task.training_loss(batch)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits, batch["y"]))
    assert extra == {}


def test_compile_option_compiles_the_backbone_in_place_where_it_asks() -> None:
    with pytest.raises(ValueError, match="model.init_args.compile must be"):
        _task(compile="yes")
    with pytest.raises(ValueError, match="model.init_args.compile_mode must be"):
        _task(compile=True, compile_mode="fastest")
    auto = _task()
    assert auto.hparams.compile == "auto"  # the default: compiled where the fit runs on CUDA
    auto.on_fit_start()  # on a CPU: stays eager
    assert auto.backbone._compiled_call_impl is None
    task = _task(compile=True, compile_mode="reduce-overhead")
    keys = list(task.state_dict())
    task.on_fit_start()  # nn.Module.compile: lazy, nothing is compiled before the first call
    assert task.backbone._compiled_call_impl is not None
    assert list(task.state_dict()) == keys  # checkpoints keep their keys (no "_orig_mod." prefix)
