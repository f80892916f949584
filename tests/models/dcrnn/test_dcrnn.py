"""DCRNN (Tang et al. 2022) and its graph operators: reference parameter counts, diffusion recurrence,
weight layout (against a naive concat-then-matmul DCGRU written here), the layers in lockstep against
layer after layer, supports, input layouts."""

from __future__ import annotations

import pytest
import torch

from biosig_lightning.models import catalog
from biosig_lightning.models.dcrnn import CHBMIT_BIPOLAR_18, DCRNN, diffusion_terms
from biosig_lightning.models.dcrnn.model import dcgru_encode, runs_lockstep
from biosig_lightning.models.modules.channel_graphs import (
    TUSZ_CHANNELS,
    correlation_adjacency,
    distance_adjacency,
    dual_random_walk,
    electrode_position,
    scaled_laplacian,
)


@pytest.mark.parametrize(("graph", "n_outputs", "count"), [
    ("distance", 2, 168_641), ("correlation", 2, 280_769), ("distance", 4, 168_836),
    ("correlation", 4, 280_964)])
def test_parameter_counts_match_the_reference(graph: str, n_outputs: int, count: int) -> None:
    m = DCRNN(19, n_outputs, 1200, 200.0, step_bins=100, graph=graph)
    assert sum(p.numel() for p in m.parameters() if p.requires_grad) == count


def test_catalog_pins_the_reference_counts() -> None:
    entry = catalog.get("DCRNN")
    assert entry.param_pins["tusz"] == 168_641 and entry.param_pins["tusz_correlation"] == 280_769
    for corpus, pin in entry.param_pins.items():
        assert sum(p.numel() for p in entry.build(corpus).parameters()) == pin


def test_diffusion_terms_carry_the_recurrence_across_supports() -> None:
    g = torch.Generator().manual_seed(0)
    s1, s2, x = torch.randn(5, 5, generator=g), torch.randn(5, 5, generator=g), torch.randn(5, 3, generator=g)
    terms = diffusion_terms([s1, s2], x, 2)
    a1 = s1 @ x
    a2 = 2 * s1 @ a1 - x
    # second support restarts from (x0, x1) := (a1, a2): x1' = S2 a1, x2' = 2 S2 x1' - a1
    b1 = s2 @ a1
    b2 = 2 * s2 @ b1 - a1
    for got, want in zip(terms, [x, a1, a2, b1, b2], strict=True):
        assert torch.allclose(got, want, atol=1e-5)


def naive_dcgru_forward(model: DCRNN, x: torch.Tensor) -> torch.Tensor:
    """Per step: concat [input, state], diffuse, stack as (B, N, F, M), flatten feature-major, one matmul."""
    b = x.shape[0]
    supports = model.graph_supports(x)
    seq = x.reshape(b, model.n_chans, model.n_steps, model.step).permute(2, 0, 1, 3)
    for cell in model.cells:
        h = torch.zeros(b, model.n_chans, model.units)
        outs = []
        for t in range(model.n_steps):
            def gconv(inp: torch.Tensor, state: torch.Tensor,
                      w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
                z = torch.cat([inp, state], -1)
                stack = torch.stack(diffusion_terms(supports, z, model.k_max), dim=-1)  # (B, N, F, M)
                return stack.reshape(b, model.n_chans, -1) @ w + bias
            gates = torch.sigmoid(gconv(seq[t], h, cell.gate_weight, cell.gate_bias))
            r, u = gates.split(model.units, -1)
            c = torch.tanh(gconv(seq[t], r * h, cell.cand_weight, cell.cand_bias))
            h = u * h + (1 - u) * c
            outs.append(h)
        seq = torch.stack(outs)
    return model.head(h)


@pytest.mark.parametrize("lockstep", [False, True], ids=["layer-after-layer", "lockstep"])
@pytest.mark.parametrize("graph", ["distance", "correlation"])
def test_fast_recurrence_equals_the_concat_then_matmul_dcgru(graph: str, lockstep: bool) -> None:
    torch.manual_seed(0)
    m = DCRNN(6, 2, 40, 10.0, step_bins=8, graph=graph, rnn_units=5,
              ch_names=["FP1", "FP2", "C3", "C4", "O1", "O2"], lockstep=lockstep)
    for cell in m.cells:  # non-zero biases so their placement is checked too
        torch.nn.init.normal_(cell.gate_bias)
        torch.nn.init.normal_(cell.cand_bias)
    x = torch.randn(3, 6, 40)
    assert torch.allclose(m(x), naive_dcgru_forward(m, x), atol=1e-5)


def _stack(graph: str, layers: int) -> DCRNN:
    torch.manual_seed(0)
    m = DCRNN(6, 2, 40, 10.0, step_bins=8, graph=graph, rnn_units=5, num_rnn_layers=layers,
              ch_names=["FP1", "FP2", "C3", "C4", "O1", "O2"]).double()
    for cell in m.cells:  # non-zero biases: each layer's must land in its own columns
        torch.nn.init.normal_(cell.gate_bias)
        torch.nn.init.normal_(cell.cand_bias)
    return m


@pytest.mark.parametrize("initial", [False, True], ids=["zero-state", "given-state"])
@pytest.mark.parametrize(("graph", "layers"), [("distance", 2), ("distance", 3), ("correlation", 3)])
def test_lockstep_layers_compute_what_layer_after_layer_computes(graph: str, layers: int,
                                                                 initial: bool) -> None:
    """Every layer's last state, the top layer's outputs at every step, and the gradients of the input and
    of every weight agree to float64 rounding; with three layers the middle one is both an input and a
    state of the wave."""
    m = _stack(graph, layers)
    x = torch.randn(3, 6, 40, dtype=torch.float64)
    seq = x.reshape(3, 6, 5, 8).permute(2, 0, 1, 3)
    states = [torch.randn(3, 6, 5, dtype=torch.float64) for _ in range(layers)] if initial else None
    results = []
    for lockstep in (False, True):
        m.zero_grad()
        inp = seq.clone().requires_grad_(True)
        finals, top = dcgru_encode(list(m.cells), m.graph_supports(x), inp, initial=states, lockstep=lockstep)
        (sum(f.sin().sum() for f in finals) + top.cos().sum()).backward()
        results.append([*finals, top, inp.grad, *(p.grad for p in m.parameters())])
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_lockstep_is_auto_on_an_accelerator_only() -> None:
    assert runs_lockstep("auto", torch.device("cuda")) and runs_lockstep("auto", torch.device("mps"))
    assert not runs_lockstep("auto", torch.device("cpu"))
    assert runs_lockstep(True, torch.device("cpu")) and not runs_lockstep(False, torch.device("cuda"))
    with pytest.raises(ValueError, match="lockstep must be true, false or 'auto'"):
        DCRNN(6, 2, 40, 10.0, step_bins=8, ch_names=["FP1", "FP2", "C3", "C4", "O1", "O2"], lockstep="on")


def test_lockstep_compiles_fullgraph_and_matches_eager() -> None:
    """The order an accelerator runs, as one graph and without a host read (a CUDA graph captures it); the
    catalog's one-layer test size, which the paper-model compile test builds, has no lockstep."""
    from tests.models.test_compile_fullgraph import HostSyncWatch

    torch._dynamo.reset()
    m = _stack("correlation", 2).float()
    m.lockstep = True
    x, y = torch.randn(3, 6, 40), torch.tensor([0, 1, 1])
    with HostSyncWatch() as watch:
        torch.nn.functional.cross_entropy(m(x), y).backward()
    assert watch.found == []
    m.zero_grad(set_to_none=True)
    step = torch.compile(lambda a, b: torch.nn.functional.cross_entropy(m(a), b), fullgraph=True,
                         dynamic=False, backend="aot_eager")
    step(x, y).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, fullgraph=True, dynamic=False, backend="aot_eager")(x),
                                   m(x), rtol=1e-4, atol=1e-5)


def test_lockstep_under_bf16_autocast_keeps_float32_states() -> None:
    m = _stack("distance", 2).float()
    seq = torch.randn(5, 3, 6, 8)
    sup = m.graph_supports(torch.zeros(3, 6, 40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        finals, top = dcgru_encode(list(m.cells), sup, seq, lockstep=True)
        ref, _ = dcgru_encode(list(m.cells), sup, seq, lockstep=False)
    assert all(f.dtype == torch.float32 for f in finals) and top.dtype == torch.float32
    for got, want in zip(finals, ref, strict=True):
        torch.testing.assert_close(got, want, rtol=0.0, atol=0.02)


def test_single_logit_detection_is_bce_on_one_logit() -> None:
    torch.manual_seed(0)
    m = DCRNN(19, 2, 1200, 200.0, step_bins=100, rnn_units=4, num_rnn_layers=1)
    x = torch.randn(4, 19, 1200)
    out = m(x)
    assert m.head.fc.out_features == 1 and torch.equal(out[:, 0], torch.zeros(4))
    y = torch.tensor([0, 1, 1, 0])
    ce = torch.nn.functional.cross_entropy(out, y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out[:, 1], y.float())
    assert torch.allclose(ce, bce, atol=1e-6)


def test_raw_input_is_cut_into_one_second_steps() -> None:
    m = DCRNN(18, 2, 256, 64.0, step_bins=0, ch_names=CHBMIT_BIPOLAR_18, rnn_units=4, num_rnn_layers=1)
    assert (m.n_steps, m.step) == (4, 64) and m(torch.randn(2, 18, 256)).shape == (2, 2)
    with pytest.raises(ValueError, match="whole number of steps"):
        DCRNN(18, 2, 250, 64.0, ch_names=CHBMIT_BIPOLAR_18)


def test_scaled_laplacian_spectrum_is_in_minus_one_one() -> None:
    adj = distance_adjacency(TUSZ_CHANNELS)
    lap = scaled_laplacian(adj)
    eig = torch.linalg.eigvalsh(lap.double())
    assert torch.allclose(lap, lap.T) and eig.max() == pytest.approx(1.0, abs=1e-5) and eig.min() >= -1 - 1e-5
    # 36 undirected edges (72 off-diagonal entries), as the reference's distance graph
    assert int((adj > 0).sum()) - 19 == 72 and torch.allclose(adj, adj.T)


def test_electrode_geometry_reproduces_reference_distances() -> None:
    def dist(a: str, b: str) -> float:
        return float(torch.dist(torch.tensor(electrode_position(a)), torch.tensor(electrode_position(b))))

    assert dist("FP1", "FP2") == pytest.approx(0.618, abs=1e-3)
    assert dist("FP1", "FZ") == pytest.approx(0.8093, abs=1e-3)
    assert dist("FP1", "C3") == pytest.approx(1.2502, abs=1e-3)
    assert dist("EEG FP1-REF", "O1") == pytest.approx(1.9022, abs=1e-3)
    assert electrode_position("T7") == electrode_position("T3")
    with pytest.raises(ValueError, match="FT9"):
        electrode_position("FT9-FT10")


def test_correlation_graph_keeps_top_k_per_row_and_self_loops() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 30, generator=g)
    x[:, 1] = -3 * x[:, 0] + 0.01 * torch.randn(2, 30, generator=g)
    adj = correlation_adjacency(x, top_k=3)
    assert torch.all((adj > 0).sum(-1) == 4)  # 3 neighbours + self
    assert torch.all(torch.diagonal(adj, dim1=-2, dim2=-1) == 1)
    assert adj[0, 0, 1] == pytest.approx(1.0, abs=1e-3)  # |ncc| of anti-correlated channels
    s1, s2 = dual_random_walk(adj)
    assert torch.allclose(s1.sum(-2), torch.ones(2, 6)) and torch.allclose(s2.sum(-2), torch.ones(2, 6))
