"""Tests for the raw-signal baselines: TransformerClassifier and CNN1D."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.baselines import CNN1D, TransformerClassifier
from biosig_lightning.models.modules.encodings import SinusoidalPositionalEncoding, sinusoidal_positions

BRAINDECODE_NAMES = ("n_chans", "n_outputs", "n_times", "sfreq")


def tiny_transformer(n_chans: int, n_times: int, n_outputs: int = 3, **kw) -> TransformerClassifier:
    cfg = dict(d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.1)
    cfg.update(kw)
    return TransformerClassifier(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=100.0, **cfg)


def tiny_cnn(n_chans: int, n_times: int, n_outputs: int = 3, **kw) -> CNN1D:
    cfg = dict(width=8, dropout=0.1)
    cfg.update(kw)
    return CNN1D(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=100.0, **cfg)


TINY_MODELS = {
    "transformer_step": lambda c, t: tiny_transformer(c, t),
    "transformer_patch": lambda c, t: tiny_transformer(c, t, patch_len=7),
    "transformer_tslib": lambda c, t: tiny_transformer(
        c, t, embedding="circular_conv", norm_first=False, pooling="flatten"
    ),
    "cnn1d": lambda c, t: tiny_cnn(c, t),
    "cnn1d_single_conv": lambda c, t: tiny_cnn(c, t, convs_per_block=1, activation="relu"),
}


# ---------------------------------------------------------------- shapes and contract


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
@pytest.mark.parametrize("n_chans,n_times", [(1, 7), (2, 30), (5, 33), (3, 101)])
def test_output_and_feature_shapes(name: str, n_chans: int, n_times: int) -> None:
    torch.manual_seed(0)
    model = TINY_MODELS[name](n_chans, n_times).eval()
    x = torch.randn(4, n_chans, n_times)
    logits = model(x)
    feats = model.forward_features(x)
    assert logits.shape == (4, 3) and logits.dtype == torch.float32
    assert feats.shape == (4, model.feature_dim)
    assert torch.isfinite(logits).all()
    assert isinstance(model.head, nn.Linear) and model.head.in_features == model.feature_dim
    # The split used by feature-level DG losses must reproduce forward exactly.
    torch.testing.assert_close(model.head(feats), logits, rtol=0, atol=0)


def test_feature_dim_values() -> None:
    assert tiny_transformer(2, 30).feature_dim == 16
    assert tiny_transformer(2, 30, patch_len=7).n_tokens == 5  # ceil(30 / 7)
    assert tiny_transformer(2, 30, patch_len=7, pooling="flatten").feature_dim == 5 * 16
    assert tiny_cnn(2, 30).feature_dim == 8


@pytest.mark.parametrize("cls", [TransformerClassifier, CNN1D])
def test_braindecode_constructor_names(cls: type[nn.Module]) -> None:
    params = inspect.signature(cls.__init__).parameters
    for name in BRAINDECODE_NAMES:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default is inspect.Parameter.empty, name
    model = cls(n_chans=3, n_outputs=2, n_times=40, sfreq=128.0)
    assert (model.n_chans, model.n_outputs, model.n_times, model.sfreq) == (3, 2, 40, 128.0)
    with pytest.raises(TypeError):
        cls(3, 2, 40, 128.0)


@pytest.mark.parametrize("name", ["transformer_step", "cnn1d"])
def test_wrong_input_shape_is_a_clear_error(name: str) -> None:
    model = TINY_MODELS[name](3, 20)
    with pytest.raises(ValueError, match="n_chans=3"):
        model(torch.randn(2, 4, 20))
    with pytest.raises(ValueError, match="n_times=20"):
        model(torch.randn(2, 3, 21))
    with pytest.raises(ValueError, match=r"\(2, 20\)"):
        model(torch.randn(2, 20))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(d_model=18, n_heads=4), "divisible by n_heads"),
        (dict(patch_len=50), "patch_len"),
        (dict(patch_len=0), "patch_len"),
        (dict(embedding="circular_conv", patch_len=4), "circular_conv"),
        (dict(pooling="max"), "pooling"),
        (dict(dropout=1.0), "dropout"),
    ],
)
def test_transformer_bad_hyperparameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_transformer(2, 40, **kwargs)


def test_cnn_bad_hyperparameters() -> None:
    with pytest.raises(ValueError, match="width"):
        tiny_cnn(2, 40, width=0)
    with pytest.raises(ValueError, match="activation"):
        tiny_cnn(2, 40, activation="tanh")


# ---------------------------------------------------------------- gradients, determinism


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_gradients_reach_every_parameter(name: str) -> None:
    torch.manual_seed(1)
    model = TINY_MODELS[name](3, 29).train()
    x = torch.randn(6, 3, 29)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    nn.functional.cross_entropy(model(x), y).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_eval_mode_is_deterministic_and_train_mode_uses_dropout(name: str) -> None:
    torch.manual_seed(2)
    model = TINY_MODELS[name](2, 30)
    x = torch.randn(5, 2, 30)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)
    model.train()
    with torch.no_grad():
        assert not torch.equal(model.forward_features(x), model.forward_features(x))


def test_patch_padding_keeps_the_last_partial_patch() -> None:
    torch.manual_seed(3)
    model = tiny_transformer(2, 30, patch_len=7, dropout=0.0).eval()  # last patch holds samples 28, 29
    x = torch.randn(1, 2, 30)
    x2 = x.clone()
    x2[..., -1] += 5.0
    with torch.no_grad():
        assert not torch.allclose(model(x), model(x2))


def test_positions_make_the_transformer_order_aware() -> None:
    # Mean pooling without positions would be invariant to reordering the time steps.
    torch.manual_seed(4)
    model = tiny_transformer(2, 12, dropout=0.0).eval()
    x = torch.randn(3, 2, 12)
    with torch.no_grad():
        assert not torch.allclose(model(x), model(x.flip(-1)), atol=1e-4)


def test_sinusoidal_table_matches_vaswani_formula() -> None:
    d = 6
    table = sinusoidal_positions(50, d)
    assert table.shape == (50, d) and table.dtype == torch.float32
    for p in (0, 1, 17, 49):
        for i in range(d // 2):
            w = 10000 ** (-2 * i / d)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)
    odd = sinusoidal_positions(4, 5)
    assert odd.shape == (4, 5)
    assert odd[2, 3].item() == pytest.approx(math.cos(2 * 10000 ** (-2 / 5)), abs=1e-6)
    assert odd[2, 4].item() == pytest.approx(math.sin(2 * 10000 ** (-4 / 5)), abs=1e-6)
    enc = SinusoidalPositionalEncoding(d, max_len=8)
    assert "pe" not in enc.state_dict()
    with pytest.raises(ValueError, match="at most 8 tokens"):
        enc(torch.zeros(1, 9, d))


# ---------------------------------------------------------------- parameter counts


def expected_transformer_params(c: int, k: int, d: int, ff: int, layers: int, patch: int) -> int:
    attention = 4 * d * d + 4 * d
    feed_forward = d * ff + ff + ff * d + d
    per_layer = attention + feed_forward + 2 * (2 * d)
    return (c * patch * d + d) + layers * per_layer + 2 * d + (d * k + k)


@pytest.mark.parametrize(
    "n_chans,n_times,n_outputs,patch_len",
    [(2, 3000, 5, None), (2, 3000, 5, 30), (23, 512, 2, None), (16, 256, 2, None)],
)
def test_transformer_parameter_count_at_sdformer_sizes(n_chans, n_times, n_outputs, patch_len) -> None:
    model = TransformerClassifier(
        n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=100.0, patch_len=patch_len
    )
    n = count_parameters(model)
    assert n == expected_transformer_params(n_chans, n_outputs, 128, 512, 6, patch_len or 1)
    # SD-Former Table 5 quotes 1.4 M including its own spectral tokenizer; the raw-signal
    # encoder itself is 1.19 M.
    assert 1_150_000 <= n <= 1_250_000


def test_transformer_tslib_configuration_matches_authors_count() -> None:
    # BioFormer's TSLib Transformer at APAVA's shape holds 867,330 parameters, 512 of which
    # are an unused calendar-feature embedding (github NKU-EmbeddedSystem/BioFormer).
    model = TransformerClassifier(
        n_chans=16,
        n_outputs=2,
        n_times=256,
        sfreq=256.0,
        n_heads=8,
        d_ff=256,
        embedding="circular_conv",
        norm_first=False,
        pooling="flatten",
    )
    assert count_parameters(model) == 867_330 - 512


@pytest.mark.parametrize("n_chans,n_times,n_outputs", [(2, 3000, 5), (23, 512, 2), (16, 256, 2)])
def test_cnn_parameter_count_at_sdformer_sizes(n_chans: int, n_times: int, n_outputs: int) -> None:
    model = CNN1D(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=100.0)
    w, k = 128, 7
    convs = n_chans * w * k + 9 * w * w * k
    batchnorms = 10 * 2 * w
    assert count_parameters(model) == convs + batchnorms + w * n_outputs + n_outputs
    single = CNN1D(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=100.0, convs_per_block=1)
    assert count_parameters(single) == n_chans * w * k + 4 * w * w * k + 5 * 2 * w + w * n_outputs + n_outputs


# ---------------------------------------------------------------- capacity to learn


@pytest.mark.parametrize("name", ["transformer_step", "transformer_patch", "cnn1d"])
def test_tiny_model_memorises_random_labels(name: str) -> None:
    torch.manual_seed(5)
    n_chans, n_times = 3, 32
    x = torch.randn(32, n_chans, n_times)
    y = torch.randint(0, 3, (32,))
    if name == "cnn1d":
        model = tiny_cnn(n_chans, n_times, width=16, n_blocks=3, dropout=0.0)
    else:
        model = tiny_transformer(
            n_chans,
            n_times,
            d_model=32,
            d_ff=64,
            dropout=0.0,
            patch_len=4 if name == "transformer_patch" else None,
        )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(100):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(-1) == y).float().mean().item()
    assert acc > 0.9, f"{name} reached only {acc:.2f} train accuracy"
