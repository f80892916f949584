"""The unrolled signed-graph denoisers and their reconstruction-error classifier (Yao et al., Secs. 4-5)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from biosig_lightning.features import product_graph as pg
from biosig_lightning.features import signed_graph as sg
from biosig_lightning.models import catalog
from biosig_lightning.models.signed_graph import SignedGraphClassifier, SignedGraphDenoiser

TINY = dict(n_chunks=2, n_blocks=2, conv_layers=2, conv_width=3, feature_dim=8, n_metric_candidates=2,
            metric_rank=3, krylov_dim=6)


def _count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def test_paper_configuration_has_table1_parameter_count() -> None:
    den = SignedGraphDenoiser(35, 6000)
    assert _count(den) == 14_787
    block = den.blocks[0]
    assert _count(block.cnn) == 833 and block.q.numel() == 4095
    # 1000-sample chunks reach d = 63 through four stride-2 convolutions (App. E.2): the pool is a no-op
    assert block.cnn(torch.zeros(1, 1, 2, 1000)).shape[-1] == 63
    pair = catalog.get("SignedGraphClassifier").build("turkish_epilepsy")
    assert _count(pair) == 2 * 14_787 == catalog.get("SignedGraphClassifier").param_pins["turkish_epilepsy"]
    # the ablations change only what they say: Euclidean metric drops Q, sequence length changes nothing
    assert _count(SignedGraphDenoiser(35, 6000, metric="euclidean")) == 14_787 - 3 * 4095
    assert _count(SignedGraphDenoiser(35, 6000, n_chunks=10)) == 14_787


def test_balanced_block_filters_on_a_balanced_graph() -> None:
    torch.manual_seed(0)
    den = SignedGraphDenoiser(5, 40, **TINY).eval()
    y = torch.randn(3, 5, 40)
    nodes = sg.chunk_nodes(y, 2)
    beta = sg.covariance_polarity(y)
    lap, node_beta, _ = den.laplacian(0, nodes, beta)
    assert torch.linalg.eigvalsh(lap.double()).min() > -1e-5  # PSD (eq. 9)
    lap_b = sg.similarity_transform(lap, node_beta)  # back to L^B: its off-diagonal is -W^B
    assert sg.balance_violations(-(lap_b - torch.diag_embed(torch.diagonal(lap_b, dim1=-2, dim2=-1)))) == 0
    # exact and Lanczos filtering agree once the Krylov space is the whole graph
    exact = SignedGraphDenoiser(5, 40, **{**TINY, "krylov_dim": 10}, filter_method="exact").eval()
    exact.load_state_dict(den.state_dict())
    full = SignedGraphDenoiser(5, 40, **{**TINY, "krylov_dim": 10}).eval()
    full.load_state_dict(den.state_dict())
    torch.testing.assert_close(full(y), exact(y), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("graph", ["balanced", "positive", "unbalanced"])
@pytest.mark.parametrize("metric", ["mahalanobis", "cosine"])
def test_classifier_logits_are_minus_errors_and_train(graph: str, metric: str) -> None:
    torch.manual_seed(0)
    model = SignedGraphClassifier(4, 2, 32, 100.0, graph=graph, metric=metric, noise_std=0.5, **TINY)
    x = torch.randn(6, 4, 32)
    logits = model(x)
    assert logits.shape == (6, 2)
    err = torch.stack([(x - model.denoise(x, c)).square().sum((1, 2)) for c in range(2)], 1)
    torch.testing.assert_close(logits, -err / (0.5 * 4 * 32))  # per sample (logit_scale="sample")
    F.cross_entropy(logits, torch.tensor([0, 1, 0, 1, 0, 1])).backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()
            or p.grad.abs().sum() == 0]
    assert not dead


def test_per_sample_logits_rank_windows_where_the_window_posterior_saturates() -> None:
    """Over a long window the whole-window log-likelihoods of two classes differ by far more than float32's
    softmax resolves: the window posterior is exactly 0 or 1 and AUROC would rank ties. Per sample the
    argmax (eq. 22) is the same and every window keeps its own probability."""
    torch.manual_seed(0)
    kwargs = dict(noise_std=0.5, **TINY)
    window = SignedGraphClassifier(4, 2, 512, 100.0, logit_scale="window", **kwargs)
    sample = SignedGraphClassifier(4, 2, 512, 100.0, **kwargs)
    sample.load_state_dict(window.state_dict())
    x = torch.randn(32, 4, 512) * torch.linspace(0.5, 2.0, 32)[:, None, None]
    with torch.no_grad():
        lw, ls = window(x), sample(x)
    assert torch.equal(lw.argmax(1), ls.argmax(1))
    pw, ps = torch.softmax(lw, -1)[:, 1], torch.softmax(ls, -1)[:, 1]
    assert len(torch.unique(pw)) < len(x) // 2  # saturated: mostly exactly 0 or 1
    assert len(torch.unique(ps)) == len(x)
    with pytest.raises(ValueError, match="logit_scale"):
        SignedGraphClassifier(4, 2, 32, 100.0, logit_scale="batch", **kwargs)


def test_identity_when_cutoff_above_spectrum() -> None:
    den = SignedGraphDenoiser(4, 32, **TINY).eval()
    with torch.no_grad():
        den.cutoffs.fill_(50.0)  # every eigenvalue of L^+ (<= ||L||_inf ~ 3) passes
    y = torch.randn(2, 4, 32)
    torch.testing.assert_close(den(y), y, atol=1e-4, rtol=1e-4)


def test_bad_configuration_errors() -> None:
    with pytest.raises(ValueError, match="multiple of n_chunks"):
        SignedGraphDenoiser(4, 33, n_chunks=2)
    with pytest.raises(ValueError, match="ch_names"):
        SignedGraphDenoiser(4, 32, n_chunks=2, spatial="line")
    with pytest.raises(ValueError, match="graph must be"):
        SignedGraphDenoiser(4, 32, n_chunks=2, graph="signed")  # type: ignore[arg-type]
    model = SignedGraphClassifier(4, 2, 32, 100.0, **TINY)
    with pytest.raises(ValueError, match="n_chans=4"):
        model(torch.randn(1, 3, 32))


def test_line_graph_from_bipolar_channel_names() -> None:
    chs = [{"ch_name": n} for n in ("FP1-F7", "F7-T3", "T3-T5", "T5-O1")]
    model = SignedGraphClassifier(4, 2, 32, 100.0, chs_info=chs, spatial="line", **TINY)
    mask = model.denoisers[0].mask
    assert mask[0, 1] and not mask[0, 2]  # FP1-F7 and T3-T5 share no electrode
    assert model(torch.randn(2, 4, 32)).shape == (2, 2)


def test_class_polarities_come_from_each_class_and_drive_the_filter() -> None:
    torch.manual_seed(0)
    model = SignedGraphClassifier(4, 2, 32, 100.0, **TINY).eval()
    base = torch.randn(6, 1, 32)
    signs = torch.tensor([[1.0, 1, 1, 1], [1.0, -1, 1, -1]])
    x = torch.cat([signs[0][None, :, None] * base,
                   signs[1][None, :, None] * base]) + 0.05 * torch.randn(12, 4, 32)
    y = torch.tensor([0] * 6 + [1] * 6)
    probe = torch.randn(3, 4, 32)
    before = model(probe)  # not fitted yet: per-input polarities
    model.fit_polarity(x, y)
    for c in range(2):
        den = model.denoisers[c]
        assert bool(den.polarity_fitted) and torch.equal(den.polarity[0], signs[c])
    after = model(probe)
    assert not torch.allclose(before, after)
    with torch.no_grad():
        model.denoisers[1].polarity[:, 1] *= -1  # the stored signs are what the filter uses
    assert not torch.allclose(model(probe)[:, 1], after[:, 1])
    fresh = SignedGraphClassifier(4, 2, 32, 100.0, **TINY).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(probe), model(probe))


def test_auto_filter_takes_the_dense_one_until_lanczos_needs_far_fewer_flops() -> None:
    # at the paper's N = 210, D = 1000 one dense eigendecomposition shared by the 1000 signals needs fewer
    # flops than 1000 Krylov spaces over the full spatial graph; at 20 chunks Lanczos needs 11x fewer flops,
    # still too few to pay for its slower flops (LANCZOS_FLOP_WEIGHT); at 40 chunks of 150 samples it does
    assert sg.choose_filter(35, 6, 1000, 20) == "exact"
    assert sg.choose_filter(35, 20, 300, 20) == "exact"
    assert sg.choose_filter(35, 40, 150, 20) == "lanczos"
    assert SignedGraphDenoiser(35, 6000, filter_method="auto").filter_method == "exact"
    assert SignedGraphDenoiser(35, 6000, n_chunks=40, filter_method="auto").filter_method == "lanczos"
    flops = sg.filter_flops(35, 6, 1000, 20)
    assert flops["exact"] == 11 * 210 ** 3 + 2 * 210 ** 2 * 1000
    assert flops["lanczos"] == 1000 * (20 * (2 * (6 * 35 ** 2 + 2 * 5 * 35) + 10 * 210) + 9 * 20 ** 3)


@pytest.mark.parametrize(("graph", "refine"), [("balanced", True), ("balanced", False), ("positive", False),
                                               ("unbalanced", False)])
def test_dense_blocks_build_the_edge_blocks_laplacian(graph: str, refine: bool) -> None:
    # the exact filter's dense path and the edge-stored path are one graph (eqs. 6-9, 3, 5)
    torch.manual_seed(0)
    den = SignedGraphDenoiser(5, 48, graph=graph, **{**TINY, "n_chunks": 3}).eval()
    nodes = sg.chunk_nodes(torch.randn(3, 5, 48), 3)
    beta = torch.tensor([[1.0, -1, 1, 1, -1]]).expand(3, 5) if graph == "balanced" else None
    dense, beta_dense = den.dense_laplacian(1, nodes, beta, refine=refine)
    edges, beta_edges = den.edge_laplacian(1, nodes, beta, refine=refine)
    torch.testing.assert_close(dense, edges.dense(), atol=1e-5, rtol=1e-5)
    if graph == "balanced":
        assert torch.equal(beta_dense, beta_edges)


def test_metric_candidates_scored_together_as_one_by_one() -> None:
    # App. E.2's candidate set: the soft choice scores each Q_k by the GLR of the block input on its graph
    torch.manual_seed(0)
    den = SignedGraphDenoiser(5, 48, **{**TINY, "n_chunks": 3, "n_metric_candidates": 3}).eval()
    bgl, mask = den.blocks[0], den.node_mask
    nodes = sg.chunk_nodes(torch.randn(2, 5, 48), 3)
    gap, _ = sg.signal_gaps(nodes)
    f = bgl.features(nodes)
    mean_gap = (gap * mask).sum((1, 2)) / mask.sum()
    scores = []
    for k in range(3):
        aff = (
            torch.exp(-sg.normalise_distance(sg.pairwise_distance(f, "mahalanobis", bgl.q[k : k + 1]), mask))
            * mask
        )
        scores.append((aff * gap).sum((1, 2)) / (aff.sum((1, 2)) * mean_gap))
    mix = torch.softmax(-torch.stack(scores, 1) / bgl.selection_temperature, 1)
    want = sg.normalise_distance(sg.pairwise_distance(f, "mahalanobis", bgl.q, mix), mask)
    torch.testing.assert_close(bgl.distances(nodes, gap, mask), want)
    flat_nodes = nodes.reshape(2, 3, 5, -1)
    ds, dt = bgl.edge_distances(flat_nodes, *pg.edge_gaps(flat_nodes)[::2], den.spatial_mask)
    edge_view = pg.ProductLaplacian(torch.zeros(2, 3, 5), ds * den.spatial_mask, dt).dense()
    torch.testing.assert_close(edge_view, want * mask)


@pytest.mark.parametrize("filter_method", ["exact", "lanczos"])
def test_graph_and_filter_stay_float32_under_autocast(filter_method: str) -> None:
    # bf16-mixed training: the CNN may run in bfloat16, the eigendecomposition / Lanczos path must not
    torch.manual_seed(0)
    model = SignedGraphClassifier(5, 2, 48, 100.0, **{**TINY, "n_chunks": 3}, filter_method=filter_method)
    x = torch.randn(3, 5, 48)
    model.fit_polarity(x, torch.tensor([0, 1, 0]))
    ref = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.sum().backward()
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.05 * float(ref.abs().max()))


def test_error_offsets_put_back_the_class_constants_eq22_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors that rank every window right but are all smaller for class 1 (a denoiser that keeps more):
    eq. 22 names class 1 for every window; the fitted offsets read every window right and keep the
    ranking; a state dict from before the offsets loads as eq. 22 itself."""
    model = SignedGraphClassifier(n_chans=4, n_outputs=2, n_times=16, sfreq=16.0, n_chunks=2, n_blocks=1,
                                  conv_layers=1, conv_width=2, feature_dim=4, n_metric_candidates=2,
                                  metric_rank=2, krylov_dim=2, filter_method="exact")
    labels = torch.tensor([0, 1] * 20)
    errors = torch.where(labels.unsqueeze(1) == 0, torch.tensor([1.0, 0.9]), torch.tensor([1.2, 0.8]))
    errors = errors * 64 * (1 + 0.01 * torch.arange(40.0)).unsqueeze(1)  # C x T = 64 samples per window
    x = torch.zeros(40, 4, 16)
    x[:, 0, 0] = torch.arange(40.0)  # each window carries its row, so batched calls get their own errors
    monkeypatch.setattr(model, "reconstruction_errors", lambda y: errors[y[:, 0, 0].long()])
    raw = model(x)
    assert bool((raw.argmax(1) == 1).all())  # eq. 22 as stated
    offsets = model.fit_error_offsets(x, labels)
    assert abs(float(offsets.sum())) < 1e-6 and float(offsets[1]) > 0
    fitted = model(x)
    assert bool((fitted.argmax(1) == labels).all())
    assert torch.equal((fitted[:, 1] - fitted[:, 0]).argsort(), (raw[:, 1] - raw[:, 0]).argsort())
    state = {k: v for k, v in model.state_dict().items() if k != "error_offsets"}
    model.load_state_dict(state)
    assert torch.equal(model.error_offsets, torch.zeros(2))
    model.fit_error_offsets(x[:10:2], torch.zeros(5, dtype=torch.long))  # one class only: left as it is
    assert torch.equal(model.error_offsets, torch.zeros(2))


class _EighCount(TorchDispatchMode):
    """Counts the eigendecompositions a computation dispatches (one per launch on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.eigh = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.eigh += func.overloadpacket.__name__ == "_linalg_eigh"
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fitted", [True, False], ids=["class_polarity", "input_polarity"])
@pytest.mark.parametrize("graph", ["balanced", "positive"])
def test_denoise_all_runs_the_classes_as_one_batch_with_their_own_values(graph: str, fitted: bool) -> None:
    """``denoise_all`` (what the pair's training step calls) gives each denoiser's own estimate, gradients
    and BatchNorm statistics, while each block's eigendecomposition is launched once for all classes."""
    torch.manual_seed(0)
    model = SignedGraphClassifier(n_chans=5, n_outputs=3, n_times=48, sfreq=100.0, n_chunks=4, n_blocks=2,
                                  conv_layers=2, conv_width=3, feature_dim=6, n_metric_candidates=3,
                                  metric_rank=2, filter_method="exact", graph=graph)
    x, y = torch.randn(6, 5, 48), torch.arange(6) % 3
    if fitted:
        model.fit_polarity(x, y)
    with torch.no_grad():
        for den in model.denoisers:  # each class its own cutoffs, so a mixed-up cutoff shows
            den.cutoffs.uniform_(0.5, 1.5)
    alone = copy.deepcopy(model)
    model.train()
    alone.train()
    with _EighCount() as together_count:
        together = model.denoise_all(x)
    with _EighCount() as alone_count:
        each = torch.stack([den(x) for den in alone.denoisers])
    assert together_count.eigh == 2 and alone_count.eigh == 2 * 3  # per block, not per block and class
    torch.testing.assert_close(together, each, rtol=1e-4, atol=1e-5)
    weights = torch.randn_like(each)
    (together * weights).sum().backward()
    (each * weights).sum().backward()
    for (name, p), q in zip(model.named_parameters(), alone.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5 * float(q.grad.abs().max()), msg=name)
    for (name, b), c in zip(model.named_buffers(), alone.buffers(), strict=True):
        torch.testing.assert_close(b, c, msg=name)
    torch.testing.assert_close(model.reconstruction_errors(x), (x - each).square().sum((2, 3)).T)


def test_denoisers_that_cannot_share_a_batch_run_one_by_one() -> None:
    torch.manual_seed(0)
    model = SignedGraphClassifier(n_chans=5, n_outputs=2, n_times=48, sfreq=100.0, n_chunks=4, n_blocks=1,
                                  conv_layers=1, conv_width=2, feature_dim=4, n_metric_candidates=2,
                                  metric_rank=2, filter_method="exact")
    x, y = torch.randn(4, 5, 48), torch.arange(4) % 2
    cast(SignedGraphDenoiser, model.denoisers[0]).fit_polarity(x[y == 0])  # class 1 not fitted yet
    assert model.denoisers[0].batch_key() != model.denoisers[1].batch_key()
    with _EighCount() as count:
        out = model.denoise_all(x)
    assert count.eigh == 2
    torch.testing.assert_close(out, torch.stack([den(x) for den in model.denoisers]))


def test_the_batched_classes_compile_as_one_graph_and_train_under_bf16() -> None:
    """The paper configurations' path (dense filter, classes in one batch), which the catalog's test size
    (Lanczos) does not take in tests/models/test_compile_fullgraph.py and test_bf16_autocast.py."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = SignedGraphClassifier(n_chans=5, n_outputs=2, n_times=48, sfreq=100.0, n_chunks=4, n_blocks=2,
                                  conv_layers=1, conv_width=2, feature_dim=4, n_metric_candidates=2,
                                  metric_rank=2, filter_method="exact")
    x, y = torch.randn(4, 5, 48), torch.arange(4) % 2
    model.fit_polarity(x, y)
    model.train()
    step = torch.compile(lambda a, b: F.cross_entropy(model(a), b), fullgraph=True, dynamic=False,
                         backend="aot_eager")
    step(x, y).backward()  # a graph break raises here
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
