"""SD-Former (models/sdformer.py) and the short-time band-power front end (features/spectral.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from biosig_lightning.features.spectral import (
    ShortTimeBandPower,
    band_averaging_matrix,
    band_power,
    frame_starts,
    resolve_bands,
)
from biosig_lightning.models.base import count_parameters
from biosig_lightning.models.modules.learned_graphs import notears_acyclicity, random_dag
from biosig_lightning.models.sdformer import (
    SUMMARY_FEATURES,
    GraphMaskedAttention,
    SDFormer,
    SpectralTokenizer,
    dependency_loss,
    masked_attention,
    straight_through_threshold,
)

TINY = dict(
    d_model=16,
    n_layers=2,
    n_heads=2,
    d_ff=32,
    stft_frames=6,
    token_hidden=8,
    encoder_ff=16,
    edge_hidden=16,
    recon_hidden=16,
    dropout=0.0,
)


def tiny_model(n_chans: int = 3, band_pooling: bool = False, **overrides) -> SDFormer:
    kwargs = dict(n_chans=n_chans, n_outputs=4, n_times=200, sfreq=100.0, band_pooling=band_pooling, **TINY)
    kwargs.update(overrides)
    return SDFormer(**kwargs)


# --------------------------------------------------------------------------- spectral features


def test_band_power_recovers_sine_power_in_its_band() -> None:
    sfreq, n_times = 100.0, 1000
    t = torch.arange(n_times) / sfreq
    x = torch.stack([3.0 * torch.sin(2 * math.pi * 10.0 * t), 2.0 * torch.sin(2 * math.pi * 2.0 * t)])
    extractor = ShortTimeBandPower(sfreq=sfreq, n_times=n_times, win_seconds=1.0, n_frames=5, log=False)
    power = extractor(x)  # (2, 5 bands, 5 frames)
    assert power.shape == (2, 5, 5)
    # Mean density times band width (bins of 1 Hz) integrates to the sine's power A^2/2.
    n_bins = (extractor.band_matrix > 0).sum(0)
    alpha, delta = 2, 0
    assert torch.allclose(power[0, alpha] * n_bins[alpha], torch.full((5,), 4.5), rtol=1e-4)
    assert torch.allclose(power[1, delta] * n_bins[delta], torch.full((5,), 2.0), rtol=1e-4)
    others = [b for b in range(5) if b != alpha]
    assert power[0, others].max() < 1e-6
    log_power = band_power(x, sfreq, n_frames=5)
    assert torch.allclose(log_power[0, alpha], torch.log(torch.tensor(4.5 / 5.0)), atol=1e-4)


def test_gamma_is_capped_at_nyquist_and_empty_bands_fail() -> None:
    bands = resolve_bands(100.0)
    assert bands[-1] == ("gamma", 30.0, 50.0)
    assert resolve_bands(256.0)[-1] == ("gamma", 30.0, 100.0)
    with pytest.raises(ValueError, match="gamma"):
        resolve_bands(50.0)  # gamma starts at the Nyquist frequency
    with pytest.raises(ValueError, match="delta"):
        band_averaging_matrix(10, 100.0, resolve_bands(100.0))  # 10 Hz resolution: no delta bin
    # The Nyquist bin belongs to the last band.
    matrix = band_averaging_matrix(100, 100.0, bands)
    assert matrix[-1, -1] > 0 and matrix[0].sum() == 0  # DC bin in no band


def test_frames_are_evenly_spaced_and_cover_the_window() -> None:
    starts = frame_starts(1000, 100, 10)
    assert starts[0] == 0 and starts[-1] == 900 and starts.numel() == 10
    with pytest.raises(ValueError, match="exceeds"):
        frame_starts(50, 100, 4)
    extractor = ShortTimeBandPower(sfreq=100.0, n_times=300, n_frames=4)
    with pytest.raises(ValueError, match="300"):
        extractor(torch.randn(2, 299))


# --------------------------------------------------------------------------- graph maths


def test_notears_is_zero_on_dags_and_positive_with_cycles() -> None:
    generator = torch.Generator().manual_seed(0)
    for n in (2, 5, 12):
        weights = torch.rand(n, n, generator=generator) * torch.tril(torch.ones(n, n), diagonal=-1)
        perm = torch.randperm(n, generator=generator)
        dag = weights[perm][:, perm]  # a relabelled DAG, not triangular
        assert notears_acyclicity(dag).item() == pytest.approx(0.0, abs=1e-9)
        cyclic = dag.clone()
        cyclic[perm[0], perm[-1]] = 0.5  # back edge from the last to the first node of the order
        assert notears_acyclicity(cyclic).item() > 1e-3
    two_cycle = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert notears_acyclicity(two_cycle).item() == pytest.approx(2 * math.cosh(1.0) - 2, rel=1e-6)
    batch = torch.stack([two_cycle, torch.zeros(2, 2)])
    assert torch.allclose(notears_acyclicity(batch), torch.tensor([2 * math.cosh(1.0) - 2, 0.0]))


def test_straight_through_threshold_is_hard_forward_and_sigmoid_backward() -> None:
    scores = torch.tensor([-2.0, -0.1, 0.1, 3.0], requires_grad=True)
    gate, probs = straight_through_threshold(scores)
    assert torch.equal(gate.detach(), torch.tensor([0.0, 0.0, 1.0, 1.0]))
    gate.sum().backward()
    sig = torch.sigmoid(scores.detach())
    assert torch.allclose(scores.grad, sig * (1 - sig))


def test_random_dag_has_exact_edge_count_and_no_cycle() -> None:
    dag = random_dag(10, 0.3, seed=3)
    assert dag.sum().item() == round(0.3 * 90)
    assert dag.diagonal().abs().sum() == 0
    assert notears_acyclicity(dag).item() == pytest.approx(0.0, abs=1e-9)
    assert torch.equal(dag, random_dag(10, 0.3, seed=3))
    assert not torch.equal(dag, random_dag(10, 0.3, seed=4))
    with pytest.raises(ValueError, match="0.5"):
        random_dag(10, 0.6, seed=0)


def test_dependency_loss_rewards_parents_that_predict_the_child() -> None:
    torch.manual_seed(0)
    base = torch.randn(1, 1, 20)
    noise = torch.randn(1, 1, 20)
    partial = base + noise  # correlated with node 0, not a copy
    features = torch.cat([base, base * 2 + 1, noise, -3 * base, partial], dim=1)
    empty = torch.zeros(1, 5, 5)
    assert dependency_loss(empty, features).item() == pytest.approx(2.5, rel=1e-3)  # 1/2 per parentless node

    def with_edge(child: int, parent: int) -> torch.Tensor:
        graph = empty.clone()
        graph[0, child, parent] = 1.0
        return graph

    assert dependency_loss(with_edge(1, 0), features).item() == pytest.approx(2.0, rel=1e-3)  # affine copy: 0
    assert dependency_loss(with_edge(3, 0), features).item() == pytest.approx(
        2.0, rel=1e-3
    )  # sign-flipped copy
    # a parent lowers its child's term by r^2 / 2 (least-squares fit of a multiple of the parent) ...
    r = torch.corrcoef(torch.cat([base, partial])[:, 0])[0, 1].item()
    gain = dependency_loss(empty, features) - dependency_loss(with_edge(4, 0), features)
    assert gain.item() == pytest.approx(r**2 / 2, rel=1e-3) and 0.3 < abs(r) < 0.95
    # ... so even an unrelated parent never raises it (the old mean-of-parents residual charged 1 - r vs 1/2)
    assert dependency_loss(with_edge(1, 2), features) <= dependency_loss(empty, features)
    # a second, unrelated parent dilutes the parents' mean: that costs
    both = with_edge(1, 0)
    both[0, 1, 2] = 1.0
    assert dependency_loss(both, features) > dependency_loss(with_edge(1, 0), features)


def test_dependency_loss_gradient_is_the_exact_single_edge_flip() -> None:
    torch.manual_seed(1)
    batch, m = 2, 5
    features = torch.randn(batch, m, 12)
    features[:, 1] = features[:, 0] + 0.2 * torch.randn(batch, 12)
    for graph in (torch.zeros(batch, m, m), (torch.rand(batch, m, m) > 0.6).float() * (1 - torch.eye(m))):
        leaf = graph.clone().requires_grad_(True)
        dependency_loss(leaf, features).backward()
        expected = torch.zeros(batch, m, m)
        for b, i, j in itertools.product(range(batch), range(m), range(m)):
            if i != j:
                on, off = graph.clone(), graph.clone()
                on[b, i, j], off[b, i, j] = 1.0, 0.0
                expected[b, i, j] = dependency_loss(on, features) - dependency_loss(off, features)
        assert torch.allclose(leaf.grad, expected, atol=1e-5)
    # from the empty graph, the strongly correlated parent is the one the gradient switches on first
    empty = torch.zeros(batch, m, m, requires_grad=True)
    dependency_loss(empty, features).backward()
    assert empty.grad[:, 1, 0].max() < -0.2 and empty.grad[:, 1, 0].max() < empty.grad[:, 1, 2:].min()


def test_acyclicity_gradient_sees_the_edge_that_would_close_a_cycle() -> None:
    chain = torch.zeros(3, 3)
    chain[0, 1] = chain[1, 2] = 1.0  # 2 -> 1 -> 0 (a_ij = 1: j is a parent of i)
    square = chain.clone().requires_grad_(True)
    notears_acyclicity(square).backward()
    assert square.grad[2, 0] == 0.0  # NOTEARS's A o A: no gradient on any absent edge
    plain = chain.clone().requires_grad_(True)
    value = notears_acyclicity(plain, square=False)
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-9)
    # 0 -> 2 (a_20) and 0 -> 1, 1 -> 2 would close a cycle; 2 -> 0 would not; the DAG's own edges cost nothing
    assert plain.grad[2, 0] > 0 and plain.grad[1, 0] > 0 and plain.grad[2, 1] > 0
    assert plain.grad[0, 2] == 0 and plain.grad[0, 1] == 0 and plain.grad[1, 2] == 0
    cyclic = chain.clone()
    cyclic[2, 0] = 1.0
    assert notears_acyclicity(cyclic, square=False).item() == pytest.approx(notears_acyclicity(cyclic).item())


def test_sparsity_gradient_charges_absent_edges_too() -> None:
    torch.manual_seed(0)
    model = tiny_model()  # (almost) no edges at the start
    out = model.forward_with_aux(torch.randn(4, 3, 200))
    assert out.edge_density.item() < 0.05
    grad, = torch.autograd.grad(out.sparse, out.adjacency)
    assert torch.allclose(
        grad, torch.full_like(grad, 1 / 4)
    )  # d(batch mean edge count)/d a_ij, present or not


# --------------------------------------------------------------------------- masked attention


def _reference_multiplicative_attention(q, k, v, gate):
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    weights = gate.unsqueeze(1) * torch.exp(logits - logits.amax(-1, keepdim=True))
    return (weights / weights.sum(-1, keepdim=True)) @ v


def _random_gate(batch: int, n: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    hard = (torch.rand(batch, n, n, generator=generator) > 0.5).float()
    return torch.maximum(hard, torch.eye(n))


def test_masked_attention_matches_reference_and_its_gate_gradient() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    hard = _random_gate(2, 6, seed=1).double()
    gate = hard.clone().requires_grad_(True)
    ref_gate = hard.clone().requires_grad_(True)
    out = masked_attention(q, k, v, gate)
    ref = _reference_multiplicative_attention(q, k, v, ref_gate)
    assert torch.allclose(out, ref, atol=1e-10)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert torch.allclose(gate.grad, ref_gate.grad, atol=1e-10)
    # The masked entries get a gradient too: the task can switch edges on.
    assert gate.grad[hard == 0].abs().min() > 0


def test_gate_gradient_path_matches_the_fused_kernel_for_q_k_v() -> None:
    # with a learning gate the attention runs its own autograd function; output and q/k/v gradients
    # must be those of scaled_dot_product_attention with the same boolean mask
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    hard = _random_gate(2, 7, seed=3).double()
    upstream = torch.randn(2, 3, 7, 4, dtype=torch.float64)
    out = masked_attention(q, k, v, hard.clone().requires_grad_(True))
    grads = torch.autograd.grad((out * upstream).sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=hard.unsqueeze(1) > 0.5)
    ref_grads = torch.autograd.grad((ref * upstream).sum(), (q, k, v))
    assert torch.allclose(out, ref, atol=1e-12)
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.allclose(got, want, atol=1e-12)


def test_gate_gradient_path_under_bf16_autocast() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    hard = _random_gate(2, 6, seed=4)
    gate = hard.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = masked_attention(q.bfloat16().requires_grad_(True), k.bfloat16(), v.bfloat16(), gate)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert gate.grad is not None and gate.grad.dtype == torch.float32 and torch.isfinite(gate.grad).all()
    ref = _reference_multiplicative_attention(q, k, v, hard)
    assert torch.allclose(out.float(), ref, atol=0.05)


@pytest.mark.parametrize("gate_requires_grad", [False, True])
def test_masked_edge_has_exactly_zero_influence_within_one_layer(gate_requires_grad: bool) -> None:
    torch.manual_seed(0)
    n = 7
    attention = GraphMaskedAttention(d_model=8, n_heads=2)
    hard = _random_gate(1, n, seed=5)
    gate = hard.clone().requires_grad_(gate_requires_grad)
    x = torch.randn(1, n, 8)
    jacobian = torch.autograd.functional.jacobian(lambda inp: attention(inp, gate), x)  # (1, n, 8, 1, n, 8)
    influence = jacobian[0, :, :, 0].abs().sum(dim=(1, 3))  # (query i, key j)
    masked = hard[0] == 0
    assert masked.any() and (~masked).any()
    assert torch.all(influence[masked] == 0)
    assert torch.all(influence[~masked] > 0)


# --------------------------------------------------------------------------- the model


def test_forward_shapes_aux_terms_and_feature_head_split() -> None:
    torch.manual_seed(0)
    model = tiny_model(edge_bias_init=0.5)
    x = torch.randn(4, 3, 200)
    out = model.forward_with_aux(x)
    n_tokens = 15
    assert out.logits.shape == (4, 4) and out.features.shape == (4, model.feature_dim)
    assert out.adjacency.shape == out.edge_probs.shape == (4, n_tokens, n_tokens)
    assert out.token_mask.shape == (4, n_tokens, n_tokens) and out.token_mask.dtype == torch.bool
    # the default tokenizer's inputs are 2-number summaries; the trajectory tokenizer's are the 6 frames
    assert out.recon_pred.shape == out.recon_target.shape == (4, n_tokens, SUMMARY_FEATURES)
    trajectory = tiny_model(tokenizer="trajectory").forward_with_aux(x)
    assert trajectory.recon_pred.shape == trajectory.recon_target.shape == (4, n_tokens, 6)
    assert not out.recon_target.requires_grad
    for name, value in out.losses().items():
        assert value.ndim == 0 and torch.isfinite(value), name
    adjacency = out.adjacency.detach()
    assert set(adjacency.unique().tolist()) <= {0.0, 1.0}
    assert adjacency.diagonal(dim1=1, dim2=2).abs().sum() == 0
    assert out.sparse.item() == pytest.approx(adjacency.sum(dim=(1, 2)).mean().item())
    assert out.dag.item() == pytest.approx(notears_acyclicity(adjacency).mean().item(), rel=1e-5)
    assert torch.equal(out.token_mask, (adjacency + torch.eye(n_tokens)) > 0.5)
    # the fraction of the M (M - 1) off-diagonal pairs that are edges, counted on the returned graphs
    assert out.edge_density.item() == pytest.approx(adjacency.sum().item() / (4 * n_tokens * (n_tokens - 1)))
    assert 0 < adjacency.sum() < adjacency.numel() - 4 * n_tokens  # a graph that is neither empty nor full
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), model.head(model.forward_features(x)))
        assert torch.allclose(model(x, return_aux=True).logits, model(x))
    with pytest.raises(ValueError, match="n_times=200"):
        model(torch.randn(2, 3, 100))


def test_task_loss_alone_reaches_the_edge_mlp() -> None:
    torch.manual_seed(0)
    for pooling in (False, True):
        model = tiny_model(band_pooling=pooling)  # default init: (almost) no edges yet
        x = torch.randn(4, 3, 200)
        F.cross_entropy(model(x), torch.tensor([0, 1, 2, 3])).backward()
        edges = model.inferencer.edges
        for parameter in (edges.target.weight, edges.source.weight, edges.out.weight, edges.out.bias):
            assert parameter.grad is not None and torch.isfinite(parameter.grad).all()
            assert parameter.grad.abs().sum() > 0
        # ... and through the edge scores into the light encoder and the tokenizer.
        assert model.inferencer.encoder.attn.qkv.weight.grad.abs().sum() > 0


def test_band_pooling_expands_the_channel_graph_to_band_tokens() -> None:
    torch.manual_seed(0)
    model = tiny_model(n_chans=4, band_pooling=True, edge_bias_init=0.3)
    out = model.forward_with_aux(torch.randn(3, 4, 200))
    assert out.adjacency.shape == (3, 4, 4)
    channel_allowed = (out.adjacency.detach() + torch.eye(4)) > 0.5
    expected = channel_allowed.repeat_interleave(5, dim=1).repeat_interleave(5, dim=2)
    assert torch.equal(out.token_mask, expected)
    assert out.recon_pred.shape == (3, 20, SUMMARY_FEATURES)


def test_graph_controls() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 200)
    full = tiny_model(graph="full")
    assert full.inferencer is None
    out = full.forward_with_aux(x)
    assert out.token_mask.all() and out.dag == 0 and out.dep == 0 and out.sparse == 0
    none = tiny_model(graph="none").forward_with_aux(x)
    assert torch.equal(none.token_mask, torch.eye(15, dtype=torch.bool).expand(2, -1, -1))
    random_model = tiny_model(graph="random", graph_density=0.25, graph_seed=1, band_pooling=True)
    out = random_model.forward_with_aux(x)
    assert torch.equal(out.adjacency[0], random_dag(3, 0.25, seed=1))
    assert torch.equal(out.adjacency[0], out.adjacency[1])
    assert "fixed_adjacency" in random_model.state_dict()
    assert count_parameters(full) < count_parameters(tiny_model())
    with pytest.raises(ValueError, match="graph"):
        tiny_model(graph="dense")


# (config, Table 5 / Sec. 7.5 millions, exact count with the summary tokenizer, with the trajectory tokenizer)
SIZES = [
    (dict(n_chans=2, n_outputs=5, n_times=3000, sfreq=100.0, band_pooling=False), 1.8, 1_771_400, 1_819_078),
    (dict(n_chans=12, n_outputs=5, n_times=1000, sfreq=100.0, band_pooling=True), 2.4, 2_197_000, 2_443_078),
    (dict(n_chans=23, n_outputs=2, n_times=512, sfreq=256.0, band_pooling=True), 3.1, 2_664_773, 3_129_091),
]


@pytest.mark.parametrize(("config", "paper_millions", "summary", "trajectory"), SIZES,
                         ids=["sleepedf", "ptbxl", "chbmit"])
def test_parameter_counts_against_table_5(config: dict, paper_millions: float, summary: int,
                                          trajectory: int) -> None:
    by_summary, by_trajectory = SDFormer(**config), SDFormer(**config, tokenizer="trajectory")
    assert count_parameters(by_summary) == summary
    assert count_parameters(by_trajectory) == trajectory
    # the trajectory tokenizer meets the paper's rounded totals; the summary one is below them ...
    assert round(trajectory / 1e6, 1) == paper_millions
    assert summary < paper_millions * 1e6 * 0.985
    # ... and the whole difference is the per-pair first layer (64 frames vs 2 numbers into 64 units)
    # plus the decoder's output layer (128 -> 64 vs 128 -> 2)
    n_tokens = by_summary.n_tokens
    assert trajectory - summary == n_tokens * (64 - SUMMARY_FEATURES) * 64 + (64 - SUMMARY_FEATURES) * 129
    for model in (by_summary, by_trajectory):
        assert count_parameters(model.inferencer.edges) == 132_097  # paper: ~0.13 M
    # paper: ~0.26 M (LayerNorm -> 128x1024 -> 1024x128 -> 128xS, module docstring)
    assert count_parameters(by_summary.decoder) == 263_810
    assert count_parameters(by_trajectory.decoder) == 271_808


def test_summary_tokens_carry_no_channel_gain_and_trajectory_tokens_do() -> None:
    """A subject's channel gain must not reach the summary tokens; the trajectory tokenizer's
    BatchNorm passes it through as an offset (the reason the default changed)."""
    torch.manual_seed(0)
    x = torch.randn(6, 3, 200)
    gain = torch.tensor([4.0, 0.3, 1.7])[None, :, None]  # one subject's amplitude per channel
    for mode, invariant in (("summary", True), ("trajectory", False)):
        tokenizer = SpectralTokenizer(n_chans=3, sfreq=100.0, n_times=200, d_model=8, win_seconds=1.0,
                                      n_frames=6, hidden=8, mode=mode)
        tokenizer.train()
        tokenizer(torch.randn(32, 3, 200))  # running statistics from other windows
        tokenizer.eval()
        with torch.no_grad():
            plain, scaled = tokenizer(x)[0], tokenizer(x * gain)[0]
        assert torch.allclose(plain, scaled, atol=1e-4) is invariant, mode


def test_summary_is_relative_log_power_and_its_spread() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 200)
    tokenizer = SpectralTokenizer(n_chans=3, sfreq=100.0, n_times=200, d_model=8, win_seconds=1.0, n_frames=6,
                                  hidden=8)
    log_power = ShortTimeBandPower(sfreq=100.0, n_times=200, win_seconds=1.0, n_frames=6)(x)  # (2, 3, 5, 6)
    summary = tokenizer.summary(log_power)  # (2, 15, 2), token 5 c + b
    for c, b in itertools.product(range(3), range(5)):
        band = log_power[:, c, b]
        expected_level = band.mean(-1) - log_power[:, c].mean(dim=(-2, -1))
        assert torch.allclose(summary[:, 5 * c + b, 0], expected_level, atol=1e-5)
        assert torch.allclose(summary[:, 5 * c + b, 1], band.std(-1, unbiased=False), atol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        tiny_model(tokenizer="frames")
