"""``count_forward_flops`` sees the attention matmuls that fused kernels hide from the counter."""

from __future__ import annotations

import torch

from biosig_lightning.models.baselines import TransformerClassifier
from biosig_lightning.profiling import count_forward_flops

# BioFormer's Table 3 "Trans." at APAVA's shape (experiments/bioformer/baselines/transformer.yaml).
TSLIB_APAVA = dict(n_chans=16, n_outputs=2, n_times=256, sfreq=256.0, d_model=128, n_layers=6, n_heads=8,
                   d_ff=256, dropout=0.1, embedding="circular_conv", norm_first=False, pooling="flatten")


def test_eval_mode_transformer_counts_attention_matmuls() -> None:
    model = TransformerClassifier(**TSLIB_APAVA).eval()
    x = torch.randn(1, 16, 256)
    flops = count_forward_flops(model, x)
    # measured on NKU-EmbeddedSystem/BioFormer: 0.607 GFLOP for the authors' TSLib Transformer with this
    # counter; the
    # fused eval-mode kernel would hide QK^T and AV, 2 * 2 * 6 layers * 256^2 * 128 = 0.201 GFLOP
    attention = 2 * 2 * 6 * 256 * 256 * 128
    assert abs(flops - 607_256_576) < 0.01 * flops
    with torch.no_grad():
        assert count_forward_flops(model, x) == flops
    assert count_forward_flops(model.train(), x) == flops
    assert flops > attention


def test_count_is_per_call_and_scales_with_batch() -> None:
    model = TransformerClassifier(**{**TSLIB_APAVA, "n_layers": 1}).eval()
    one = count_forward_flops(model, torch.randn(1, 16, 256))
    assert count_forward_flops(model, torch.randn(2, 16, 256)) == 2 * one
