"""DCRNN for EEG seizure detection/classification (Tang et al., ICLR 2022; the encoder of eeg-gnn-ssl).

Architecture (reference defaults, 12-s detection): a clip is ``T`` one-second steps of ``F``
features per channel (log|FFT|, ``F = 100`` at 200 Hz); ``L = 2`` stacked DCGRU layers with 64
units run over the steps on the channel graph; the last hidden state ``(B, N, 64)`` goes
through dropout, ReLU and a per-node ``Linear(64, n_classes)``, and the logits are max-pooled
over the nodes. A DCGRU cell is a GRU whose gates are diffusion convolutions: for each support
``S`` the terms ``x_1 = S x_0``, ``x_k = 2 S x_{k-1} - x_{k-2}`` (``k <= K = 2``) are stacked
with ``x_0`` and mapped by one weight matrix; the reference carries the recurrence over from one
support to the next (its second support starts from the first support's last two terms), which
we reproduce. Biases start at 0, weights Xavier-normal with gain 1.414.

Graphs (``graph``): the fixed 3-D ``distance`` graph (one support, its scaled Laplacian) or a per-clip
``correlation`` graph (two supports, dual random walk). Input ``x`` is ``(B, C, n_times)``: a step-major
feature layout (``step_bins > 0``, e.g. TUSZ 12 x 100 log|FFT| bins) or a raw signal cut into 1-s steps.

Reading (detection output): the reference detects with ONE logit and BCEWithLogits. Our task
trains cross-entropy on ``n_outputs = 2`` columns; with ``single_logit`` (default) the model
computes the reference's single logit ``z`` and returns ``(0, z)``, whose softmax is
``(1 - sigmoid(z), sigmoid(z))``, so cross-entropy equals BCEWithLogits on ``z`` and the
parameter count is the reference's (168,641).

Reading (correlation graph input): the reference builds the per-clip graph from the
*unstandardised, unaugmented* FFT clip in its data loader; here the model builds it from the
input it receives (standardised features), so the model stays self-contained and a perturbed
input (STDRO) perturbs its graph consistently.

Speed (same numerics as the reference, same multiply-adds): diffusion is linear, so (i) the
diffusion of ``[x_t, h_t]`` splits into the diffusion of ``x_t`` and of ``h_t``, and the input
part of both gate and candidate convolutions is computed for all time steps at once before the
recurrence; (ii) the diffusion terms are matrices ``x_m = P_m x`` (built once per forward pass
by running the recurrence on the identity, :func:`diffusion_operator`), so a state's diffusion
convolution ``sum_m P_m h W_m`` is two products per step, ``h [W_1 ... W_M]`` and the ``P_m`` side
by side, the second one adding the step's input part in the same call; the update
``u h + (1 - u) c`` is one ``lerp``; (iii) per-step inputs are taken with ``unbind``/``chunk``, whose
backward concatenates instead of zero-filling a full-size gradient per step; (iv) on an accelerator
(``lockstep``) the stacked layers advance together, layer ``l`` at step ``t - l``, so a step of all
layers is the same four products over the joint state (:func:`lockstep_weights`): half the sequential
products and launches of layer after layer, at about a third more multiply-adds (zero blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import torch
from torch import nn

from biosig_lightning.models.base import BiosignalModel
from biosig_lightning.models.catalog import register_backbone
from biosig_lightning.models.modules.channel_graphs import (
    TUSZ_CHANNELS,
    correlation_adjacency,
    distance_adjacency,
    dual_random_walk,
    scaled_laplacian,
)
from biosig_lightning.models.modules.time_steps import step_size

__all__ = ["CHBMIT_BIPOLAR_18", "DCGRUCell", "DCRNN", "NodeMaxHead", "dcgru_encode", "diffusion_operator",
           "diffusion_rows", "diffusion_terms", "lockstep_weights", "runs_lockstep"]

#: the 18 common bipolar channels of CHB-MIT used for STDRO's CHB-MIT runs
CHBMIT_BIPOLAR_18: tuple[str, ...] = (
    "FP1-F7", "F7-T7", "T7-P7", "P7-O1", "FP1-F3", "F3-C3", "C3-P3", "P3-O1", "FP2-F4", "F4-C4", "C4-P4",
    "P4-O2", "FP2-F8", "F8-T8", "T8-P8", "P8-O2", "FZ-CZ", "CZ-PZ")


def diffusion_terms(supports: Sequence[torch.Tensor], x0: torch.Tensor, k_max: int) -> list[torch.Tensor]:
    """``[x_0, S_1 x_0, 2 S_1 S_1 x_0 - x_0, S_2 ..., ...]`` with the reference's recurrence (``x1 = S x0``;
    ``x2 = 2 S x1 - x0``; ``x1, x0 = x2, x1``) carried over from one support to the next."""
    terms = [x0]
    if k_max == 0:
        return terms
    for s in supports:
        x1 = s @ x0
        terms.append(x1)
        for _ in range(2, k_max + 1):
            x2 = 2 * (s @ x1) - x0
            terms.append(x2)
            x1, x0 = x2, x1
    return terms


class DCGRUCell(nn.Module):
    """One DCGRU layer's parameters; weights laid out as the reference's ``(F * M, out)`` (feature-major)."""

    def __init__(self, input_dim: int, units: int, n_matrices: int,
                 activation: Literal["tanh", "relu"] = "tanh",
                 ) -> None:
        super().__init__()
        self.input_dim, self.units, self.n_matrices = input_dim, units, n_matrices
        size = (input_dim + units) * n_matrices
        self.gate_weight = nn.Parameter(torch.empty(size, 2 * units))
        self.gate_bias = nn.Parameter(torch.zeros(2 * units))
        self.cand_weight = nn.Parameter(torch.empty(size, units))
        self.cand_bias = nn.Parameter(torch.zeros(units))
        nn.init.xavier_normal_(self.gate_weight, gain=1.414)
        nn.init.xavier_normal_(self.cand_weight, gain=1.414)
        self.activation = torch.tanh if activation == "tanh" else torch.relu

    def _split(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # rows are f * M + m: the first input_dim * M rows act on the input, the rest on the state
        cut = self.input_dim * self.n_matrices
        return weight[:cut], weight[cut:]

    def weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The weights regrouped: input part of gate+candidate matrix-major (rows ``m * F + f``) ``(M * F_in,
        3U)``;
        state part of the gate ``(U, M * 2U)`` and of the candidate ``(U, M * U)``, the ``M`` matrices' blocks
        side by side (a view of the reference layout); biases."""
        m = self.n_matrices

        def by_matrix(w: torch.Tensor) -> torch.Tensor:
            return w.reshape(-1, m, w.shape[-1]).transpose(0, 1).reshape(-1, w.shape[-1])

        def side_by_side(w: torch.Tensor) -> torch.Tensor:  # rows u * M + m -> [u, m * out + o]
            return w.reshape(self.units, m * w.shape[-1])

        wg_in, wg_h = self._split(self.gate_weight)
        wc_in, wc_h = self._split(self.cand_weight)
        w_in = torch.cat([by_matrix(wg_in), by_matrix(wc_in)], dim=1)
        return w_in, side_by_side(wg_h), side_by_side(wc_h), torch.cat([self.gate_bias, self.cand_bias])

    def input_part(self, op: torch.Tensor, x: torch.Tensor,
                   w_in: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Gate and candidate pre-activations from the input of every step, ``(T, B, N, 3 * units)``.

        ``x`` is ``(T, B, N, F)``; ``op`` the stacked diffusion matrices :func:`diffusion_operator`
        (``(M * N, N)`` or per sample ``(B, M * N, N)``). All steps side by side, one matmul.
        """
        t, b, n, f = x.shape
        wide = x.permute(1, 2, 0, 3).reshape(b, n, t * f)
        y = (op @ wide).reshape(b, self.n_matrices, n, t, f)  # (B, M, N, T, F)
        flat = y.permute(3, 0, 2, 1, 4).reshape(t, b, n, self.n_matrices * f)
        return flat @ w_in + bias

    n_matrices_k: int = 2

    def step(self, rows: torch.Tensor, pre_gate: torch.Tensor, pre_cand: torch.Tensor, h: torch.Tensor,
             wg_h: torch.Tensor, wc_h: torch.Tensor) -> torch.Tensor:
        """One recurrence step from the precomputed input parts (``(B, N, 2U)``, ``(B, N, U)``) and state
        ``h``.

        The state's diffusion convolution ``sum_m P_m z W_m`` is two products: ``z [W_1 ... W_M]`` (one
        matmul for all ``M`` matrices, :meth:`weights`), then ``rows`` ``(B, N, N * M)``, the ``P_m`` side by
        side (:func:`diffusion_rows`), added to the input part in the same call (``baddbmm``).
        """
        b, n, units = h.shape

        def diffuse_into(pre: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            zw = (z.reshape(b * n, units) @ w).reshape(b, n * self.n_matrices, -1)  # rows k * M + m
            return torch.baddbmm(pre, rows, zw)

        r, u = torch.sigmoid(diffuse_into(pre_gate, h, wg_h)).chunk(2, dim=-1)
        c = self.activation(diffuse_into(pre_cand, r * h, wc_h))
        # u * h + (1 - u) * c; under mixed precision the products are bfloat16/float16 and the state keeps
        # its own dtype (lerp takes one; the .to calls are no-ops otherwise)
        return torch.lerp(c.to(h.dtype), h, u.to(h.dtype))


def diffusion_rows(op: torch.Tensor, n_matrices: int, batch: int) -> torch.Tensor:
    """The stacked diffusion matrices of :func:`diffusion_operator` side by side, ``(B, N, N * M)``:
    entry ``[b, n, k * M + m]`` is ``P_m[n, k]`` (for sample ``b``; a fixed graph is expanded, not copied)."""
    n = op.shape[-1]
    rows = (
        op.reshape(*op.shape[:-2], n_matrices, n, n)
        .movedim(-3, -1)
        .reshape(*op.shape[:-2], n, n * n_matrices)
    )
    return rows.expand(batch, n, n * n_matrices) if rows.ndim == 2 else rows


def diffusion_operator(supports: Sequence[torch.Tensor], k_max: int) -> torch.Tensor:
    """The diffusion terms as matrices: ``x_m = P_m x``, stacked ``(M * N, N)`` (or ``(B, M * N, N)``).

    The recurrence is linear, so running :func:`diffusion_terms` on the identity gives every ``P_m``
    once per forward pass; a layer then diffuses its input or state with ONE matmul.
    """
    ref = supports[0]
    n = ref.shape[-1]
    eye = torch.eye(n, dtype=ref.dtype, device=ref.device)
    if any(s.ndim == 3 for s in supports):
        eye = eye.expand(max(s.shape[0] for s in supports if s.ndim == 3), n, n)
    terms = diffusion_terms(supports, eye, k_max)
    return torch.stack(terms, dim=-3).reshape(*eye.shape[:-2], len(terms) * n, n)


def dcgru_encode(cells: Sequence[DCGRUCell], supports: list[torch.Tensor], seq: torch.Tensor,
                 initial: Sequence[torch.Tensor] | None = None,
                 lockstep: bool = False) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Run stacked DCGRU layers over ``seq`` ``(T, B, N, F)``: (last state of every layer, top layer's
    outputs).

    The first layer's input part is computed for all steps at once (:meth:`DCGRUCell.input_part`). Layer
    after layer (default), each later layer's too; with ``lockstep`` (two layers or more, one activation)
    the layers advance together (:func:`_encode_lockstep`), the same function in fewer, larger products.
    """
    op = diffusion_operator(supports, cells[0].n_matrices_k)
    rows = diffusion_rows(op, cells[0].n_matrices, seq.shape[1])
    if lockstep and len(cells) > 1 and len({c.activation for c in cells}) == 1:
        return _encode_lockstep(cells, op, rows, seq, initial)
    finals = []
    for i, cell in enumerate(cells):
        w_in, wg_h, wc_h, bias = cell.weights()
        pre = cell.input_part(op, seq, w_in, bias)  # (T, B, N, 3U)
        pre_gate, pre_cand = pre.split([2 * cell.units, cell.units], dim=-1)
        h = initial[i] if initial is not None else seq.new_zeros(*seq.shape[1:3], cell.units)
        outs = []
        for pg, pc in zip(pre_gate.unbind(0), pre_cand.unbind(0), strict=True):
            h = cell.step(rows, pg, pc, h, wg_h, wc_h)
            outs.append(h)
        seq = torch.stack(outs)
        finals.append(h)
    return finals, seq


def lockstep_weights(cells: Sequence[DCGRUCell]) -> tuple[torch.Tensor, torch.Tensor]:
    """The state-side weights of stacked layers over their joint state ``[h_1 ... h_L]`` ``(B, N, L * U)``.

    Gate: ``(L U, M G)``, per matrix ``m`` the columns ``G = [gates of layer 1 ... L (2U each), candidate
    input parts of layers 2 ... L (U each)]``; row block ``i`` (state ``h_i``) holds layer ``i``'s state
    weights in its gate columns and, as the input of layer ``i + 1``, that layer's input weights in its gate
    and candidate-input columns; the rest is zero. Candidate: ``(L U, M L U)``, layer ``i``'s state weights
    on the diagonal block. Both act before the diffusion matrices, as in :meth:`DCGRUCell.step`.
    """
    depth, units, m = len(cells), cells[0].units, cells[0].n_matrices
    zero = cells[0].gate_weight.new_zeros(units, m, units)
    state_gate, state_cand, input_gate, input_cand = [], [], [], []
    for cell in cells:  # each as (U, M, width): rows u, then matrix m, then output o
        w_in, wg_h, wc_h, _ = cell.weights()
        state_gate.append(wg_h.reshape(units, m, 2 * units))
        state_cand.append(wc_h.reshape(units, m, units))
        w = w_in.reshape(m, -1, 3 * units).transpose(0, 1)  # rows m * F + f -> (f, m, 3U); F = U past layer 1
        input_gate.append(w[..., :2 * units])
        input_cand.append(w[..., 2 * units:])
    gate_rows, cand_rows = [], []
    for i in range(depth):
        gates = [state_gate[j] if j == i else input_gate[j] if j == i + 1 else torch.cat([zero, zero], dim=-1)
                 for j in range(depth)]
        inputs = [input_cand[j] if j == i + 1 else zero for j in range(1, depth)]
        gate_rows.append(torch.cat(gates + inputs, dim=-1))
        cand_rows.append(torch.cat([state_cand[j] if j == i else zero for j in range(depth)], dim=-1))
    return torch.cat(gate_rows).reshape(depth * units, -1), torch.cat(cand_rows).reshape(depth * units, -1)


def _encode_lockstep(cells: Sequence[DCGRUCell], op: torch.Tensor, rows: torch.Tensor, seq: torch.Tensor,
                     initial: Sequence[torch.Tensor] | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """:func:`dcgru_encode` with the layers in lockstep: at wave ``k`` layer ``l`` (from 0) runs its step
    ``k - l``, whose input is layer ``l - 1``'s state entering the wave; ``T + L - 1`` waves. A layer
    outside its steps keeps its state (before: the initial one; after: its last)."""
    t, b, n, _ = seq.shape
    depth, units, m, first = len(cells), cells[0].units, cells[0].n_matrices, cells[0]
    w_in, _, _, bias = first.weights()
    pre = first.input_part(op, seq, w_in, bias)  # (T, B, N, 3U): layer 1's input parts
    w_gate, w_cand = lockstep_weights(cells)
    waves, n_gates = t + depth - 1, 2 * units * depth
    later_bias = torch.cat((*(c.gate_bias for c in cells[1:]), *(c.cand_bias for c in cells[1:])))
    pre = torch.cat([pre, pre.new_zeros(depth - 1, b, n, 3 * units)])  # layer 1 idles in the last waves
    pre_gate = torch.cat([pre[..., :2 * units], later_bias.expand(waves, b, n, -1)], dim=-1)
    h = torch.cat(list(initial), dim=-1) if initial is not None else seq.new_zeros(b, n, depth * units)
    outs = []
    for k in range(waves):
        zw = (h.reshape(b * n, depth * units) @ w_gate).reshape(b, n * m, -1)
        g = torch.baddbmm(pre_gate[k], rows, zw)  # (B, N, G): every layer's gates, later layers' input parts
        r, u = torch.sigmoid(g[..., :n_gates]).reshape(b, n, depth, 2, units).unbind(-2)
        r, u = r.reshape(b, n, depth * units), u.reshape(b, n, depth * units)
        zc = ((r * h).reshape(b * n, depth * units) @ w_cand).reshape(b, n * m, -1)
        pre_cand = torch.cat([pre[k, ..., 2 * units:], g[..., n_gates:]], dim=-1)
        c = first.activation(torch.baddbmm(pre_cand, rows, zc))
        new = torch.lerp(c.to(h.dtype), h, u.to(h.dtype))
        lo, hi = max(0, k - t + 1), min(depth, k + 1)  # the layers with a step in this wave
        h = new if (lo, hi) == (0, depth) else torch.cat(
            [h[..., :lo * units], new[..., lo * units:hi * units], h[..., hi * units:]], dim=-1)
        if k >= depth - 1:
            outs.append(h[..., (depth - 1) * units:])
    return list(h.split(units, dim=-1)), torch.stack(outs)


def runs_lockstep(setting: bool | Literal["auto"], device: torch.device) -> bool:
    """Whether the layers run in lockstep: ``auto`` on an accelerator, where a step costs its launches;
    layer after layer on a CPU, where it costs its multiply-adds."""
    return device.type != "cpu" if setting == "auto" else bool(setting)


class NodeMaxHead(nn.Module):
    """DCRNN's classifier on the flattened node states ``(B, N * units)``: dropout, ReLU, a per-node
    ``Linear(units, n_classes)`` and the max over nodes. With ``single`` the per-node layer has one
    output ``z`` and the head returns ``(0, z)`` (module docstring, Reading: detection output)."""

    def __init__(self, n_nodes: int, units: int, n_outputs: int, dropout: float, single: bool) -> None:
        super().__init__()
        self.n_nodes, self.units, self.single = n_nodes, units, single
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(units, 1 if single else n_outputs)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.reshape(h.shape[0], self.n_nodes, self.units)
        logits = self.fc(torch.relu(self.dropout(h))).amax(dim=1)
        if self.single:
            return torch.cat([torch.zeros_like(logits), logits], dim=-1)
        return logits


@register_backbone(
    "DCRNN",
    shapes={
        "tusz": (19, 2, 1200, 200.0),
        "tusz_correlation": (19, 2, 1200, 200.0),
        "tusz_classification": (19, 4, 1200, 200.0),
        "tusz_correlation_classification": (19, 4, 1200, 200.0),
        "tusz_60s": (19, 2, 6000, 200.0),
        "chbmit_stdro": (18, 2, 128, 64.0),
    },
    kwargs={
        "tusz": {"step_bins": 100},
        "tusz_correlation": {"step_bins": 100, "graph": "correlation"},
        "tusz_classification": {"step_bins": 100, "dropout": 0.5},
        "tusz_correlation_classification": {"step_bins": 100, "graph": "correlation", "dropout": 0.5},
        "tusz_60s": {"step_bins": 100},
        "chbmit_stdro": {"step_bins": 32, "ch_names": list(CHBMIT_BIPOLAR_18)},
    },
    param_pins={"tusz": 168_641, "tusz_correlation": 280_769, "tusz_classification": 168_836,
                "tusz_correlation_classification": 280_964, "tusz_60s": 168_641},
    test_kwargs={"rnn_units": 8, "num_rnn_layers": 2},
)
class DCRNN(BiosignalModel):
    """Diffusion-convolutional recurrent network (module docstring).

    Args:
        n_chans, n_outputs, n_times, sfreq, chs_info: signal metadata (:class:`BiosignalModel`).
        graph: ``distance``: the fixed 3-D distance graph (:func:`distance_adjacency` of ``ch_names``, or
            an explicit ``adj``), one support: its scaled Laplacian; 168,641 parameters for 12-s
            detection, 168,836 for 4-class classification. ``correlation``: a per-clip graph from the
            clip itself (:func:`correlation_adjacency`, top-3, directed), two supports (dual random
            walk); 280,769 / 280,964 parameters.
        step_bins: features per 1-s step of a step-major input (``n_times = T * step_bins``; each step's
            ``step_bins`` values are the node features); 0 for a raw signal, cut into 1-s steps of
            ``sfreq`` samples (``n_times`` a multiple of ``sfreq``), each step's samples the features.
        ch_names: channel names placing the nodes on the 10-20 sphere (distance graph); default
            the 19 TUSZ channels when ``n_chans == 19``.
        adj: explicit ``(C, C)`` adjacency for the distance graph (overrides ``ch_names``).
        rnn_units, num_rnn_layers, max_diffusion_step: 64, 2, 2 in the reference.
        top_k: neighbours per node of the correlation graph (3).
        dropout: before the ReLU and the per-node classifier (0 detection, 0.5 classification).
        activation: ``tanh`` (reference) or ``relu`` for the candidate state.
        single_logit: with ``n_outputs == 2``, one logit ``z`` returned as ``(0, z)`` (see Reading).
        dist_threshold: distance beyond which the distance graph has no edge (0.9).
        pretrained: a checkpoint (or state dict) of a self-supervised next-clip run
            (:class:`~biosig_lightning.models.dcrnn.ssl.DCRNNNextClip`); its encoder's first
            ``num_rnn_layers`` DCGRU layers initialise this model's (Tang et al.'s fine-tuning copies
            the encoder's diffusion convolutions; the classifier stays freshly initialised).
    """

    support: torch.Tensor  # buffer: the distance graph's scaled Laplacian (empty otherwise)

    def __init__(
        self,
        n_chans: int, n_outputs: int, n_times: int, sfreq: float,
        chs_info: Sequence[dict[str, Any]] | None = None,
        # the graph: which one, and what it is built from
        graph: Literal["distance", "correlation"] = "distance", step_bins: int = 0,
        ch_names: Sequence[str] | None = None, adj: Sequence[Sequence[float]] | None = None,
        # the recurrent encoder and its read-out
        rnn_units: int = 64, num_rnn_layers: int = 2, max_diffusion_step: int = 2, top_k: int = 3,
        dropout: float = 0.0, activation: Literal["tanh", "relu"] = "tanh", single_logit: bool = True,
        dist_threshold: float = 0.9,
        pretrained: str | None = None,
        lockstep: bool | Literal["auto"] = "auto",
    ) -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        if graph not in ("distance", "correlation"):
            raise ValueError(f"DCRNN: graph must be 'distance' or 'correlation', got {graph!r}")
        step = step_size(type(self).__name__, n_times, sfreq, step_bins)
        self.graph, self.step, self.n_steps = graph, step, n_times // step
        self.units, self.num_layers, self.k_max, self.top_k = (
            rnn_units,
            num_rnn_layers,
            max_diffusion_step,
            top_k,
        )
        if lockstep not in (True, False, "auto"):
            raise ValueError(f"DCRNN: lockstep must be true, false or 'auto', got {lockstep!r}")
        self.lockstep = lockstep
        self.n_supports = 1 if graph == "distance" else 2
        n_matrices = self.n_supports * max_diffusion_step + 1
        cells = []
        for i in range(num_rnn_layers):
            cell = DCGRUCell(step if i == 0 else rnn_units, rnn_units, n_matrices, activation)
            cell.n_matrices_k = max_diffusion_step
            cells.append(cell)
        self.cells = nn.ModuleList(cells)
        self.single = single_logit and n_outputs == 2
        self.head = NodeMaxHead(n_chans, rnn_units, n_outputs, dropout, self.single)
        self.feature_dim = n_chans * rnn_units
        if graph == "distance":
            if adj is not None:
                a = torch.as_tensor(adj, dtype=torch.float32)
                if a.shape != (n_chans, n_chans):
                    raise ValueError(f"DCRNN: adj must be ({n_chans}, {n_chans}), got {tuple(a.shape)}")
            else:
                names = list(ch_names) if ch_names is not None else (
                    list(TUSZ_CHANNELS) if n_chans == 19 else (self.ch_names or []))
                if len(names) != n_chans:
                    raise ValueError(f"DCRNN(graph='distance') needs ch_names for its {n_chans} channels "
                                     "(or adj); none given")
                a = distance_adjacency(names, dist_threshold)
            self.register_buffer("support", scaled_laplacian(a).float())
        else:
            self.register_buffer("support", torch.empty(0))
        if pretrained is not None:
            self.load_encoder(pretrained)

    def load_encoder(self, path: str) -> None:
        """Copy the DCGRU encoder layers of a next-clip pre-training checkpoint into ``cells``."""
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"DCRNN: pretrained checkpoint {file} does not exist")
        state = torch.load(file, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state)
        found = {k.split("encoder.", 1)[1]: v for k, v in state.items() if "encoder.cells." in k}
        own = {k: v for k, v in self.state_dict().items() if k.startswith("cells.")}
        missing = sorted(set(own) - set(found))
        if missing:
            raise ValueError(f"DCRNN: {file} has no encoder weights for {', '.join(missing[:4])}"
                             f"{' ...' if len(missing) > 4 else ''} (a DCRNNNextClip checkpoint with at "
                             f"least "
                             f"{len(self.cells)} layers and the same graph and sizes is needed)")
        for key, value in own.items():
            if found[key].shape != value.shape:
                raise ValueError(f"DCRNN: {file}: encoder weight {key} has shape {tuple(found[key].shape)}, "
                                 f"this model needs {tuple(value.shape)}")
        self.load_state_dict({k: found[k] for k in own}, strict=False)

    def graph_supports(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The diffusion supports for the batch ``x`` ``(B, C, n_times)``.

        Not named ``supports``: that is :meth:`BiosignalModel.supports`, the capability query."""
        if self.graph == "distance":
            return [self.support]
        return dual_random_walk(correlation_adjacency(x, self.top_k))

    def encode(self, x: torch.Tensor, supports: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Last hidden state of every layer, each ``(B, N, units)``."""
        self.check_input(x)
        b = x.shape[0]
        if supports is None:
            supports = self.graph_supports(x)
        seq = x.reshape(b, self.n_chans, self.n_steps, self.step).permute(2, 0, 1, 3)  # (T, B, N, F)
        finals, _ = dcgru_encode(cast("Sequence[DCGRUCell]", self.cells), supports, seq,  # a ModuleList
                                 lockstep=runs_lockstep(self.lockstep, x.device))
        return finals

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The top layer's last hidden state of every node, flattened: ``(B, N * units)``."""
        return self.encode(x)[-1].flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))
