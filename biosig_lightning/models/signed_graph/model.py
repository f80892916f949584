"""Unrolled balanced-signed-graph denoisers and the reconstruction-error classifier (Yao et al., Secs. 3-5).

:class:`SignedGraphDenoiser` is one denoiser ``Psi`` (Fig. 2): ``n_blocks`` unrolled blocks, each a
balanced graph learning module (BGL, Sec. 4.1, App. E.2) followed by a low-pass filter (LPF, Sec. 3.2,
App. B, E.3). :class:`SignedGraphClassifier` holds one denoiser per class and classifies a window by
the smaller reconstruction error (eq. 22); its logits are minus the errors, scaled as the AWGN
log-likelihood of eq. 18 per sample, ``logit_c = -||y - Psi_c(y)||^2 / (2 sigma_n^2 C T)`` (a tempered
form of App. D's posterior, see :class:`SignedGraphClassifier`), so every metric, the calibration figures
and ``results.json`` work as for any classifier.
:class:`~biosig_lightning.tasks.denoiser_pair.DenoiserPairTask` trains the denoisers (eq. 21 / eq. 23);
cross-entropy on the logits also works (the catalog contract uses it).

One block (:class:`SignedGraphDenoiser`): chunk nodes (product graph, Fig. 1c) -> CNN features (App. E.2)
-> Mahalanobis distances (eq. 6) -> channel polarities (eq. 5) -> weights (eq. 7) -> normalisation
(eq. 8) -> Gershgorin self-loops (eq. 9) -> Lanczos low-pass filter (eq. 25, eq. 31).

Ablations (Tables 2, 4, 5, 6): ``graph`` = ``balanced`` | ``positive`` (``exp(-d)``, ``L = D - W``) |
``unbalanced`` (eq. 28 weights, ``L^s = D^s - W`` as App. C says); ``n_chunks`` (sequence length);
``conv_layers`` (CNN blocks); ``metric`` = ``mahalanobis`` | ``euclidean`` | ``cosine`` | ``manhattan``.

Size: the paper's configuration (Sec. 6.1, App. E) gives **14,787 parameters per denoiser**, Table 1's
count exactly; the inferred sizes, and the readings of the paper's other ambiguities, are in
:class:`SignedGraphClassifier`'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from torch import nn

from biosig_lightning.features import product_graph as pg
from biosig_lightning.features import signed_graph as sg
from biosig_lightning.models.base import BiosignalModel, check_positive_ints
from biosig_lightning.models.catalog import register_backbone

__all__ = ["BalancedGraphLearning", "SignedGraphClassifier", "SignedGraphDenoiser", "denoise_together"]

Spatial = Literal["full", "line"]
FilterMethod = Literal["lanczos", "exact", "auto"]


def _float32(t: torch.Tensor) -> torch.autocast:
    """A region without autocast: the graph and its filter (eigendecomposition, Lanczos) stay float32."""
    return torch.autocast(t.device.type, enabled=False)


class BalancedGraphLearning(nn.Module):
    """Node features (shallow CNN) and the per-block metric of one BGL module (Sec. 4.1, App. E.2)."""

    def __init__(self, conv_layers: int = 4, conv_width: int = 7, feature_dim: int = 63,
                 metric: sg.DistanceKind = "mahalanobis", n_metric_candidates: int = 5, metric_rank: int = 13,
                 selection_temperature: float = 0.1) -> None:
        super().__init__()
        check_positive_ints(type(self).__name__, conv_layers=conv_layers, conv_width=conv_width,
                            feature_dim=feature_dim,
                            n_metric_candidates=n_metric_candidates, metric_rank=metric_rank)
        if metric not in ("mahalanobis", "euclidean", "cosine", "manhattan"):
            raise ValueError(f"metric must be mahalanobis, euclidean, cosine or manhattan, got {metric!r}")
        layers: list[nn.Module] = []
        width_in = 1
        for _ in range(conv_layers):
            layers += [nn.Conv2d(width_in, conv_width, (1, 5), stride=(1, 2), padding=(0, 2), bias=False),
                       nn.BatchNorm2d(conv_width), nn.LeakyReLU(0.01)]
            width_in = conv_width
        layers.append(nn.Conv2d(conv_width, 1, 1, bias=False))
        self.cnn = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool1d(feature_dim)
        self.metric = metric
        self.selection_temperature = selection_temperature
        if metric == "mahalanobis":
            # candidates near a scaled identity so that the first distances are Euclidean-like
            q = torch.randn(n_metric_candidates, feature_dim, metric_rank) / feature_dim ** 0.5
            self.q = nn.Parameter(q)
        else:
            self.register_parameter("q", None)

    def features(self, nodes: torch.Tensor) -> torch.Tensor:
        """``(B, N, D)`` node signals -> ``(B, N, K)`` features."""
        b, n, _ = nodes.shape
        f = self.cnn(nodes.unsqueeze(1)).squeeze(1)  # (B, N, D')
        return self.pool(f)

    def edge_distances(self, nodes: torch.Tensor, gap_s: torch.Tensor, gap_t: torch.Tensor,
                       spatial_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised feature distances on the product graph's edges (eq. 6, App. E.2).

        ``nodes`` ``(B, H, C, D)``; ``gap_s`` ``(B, H, C, C)`` / ``gap_t`` ``(B, H - 1, C)`` are the block
        input's signal gaps on the spatial / temporal edges (they score the metric candidates). Returns
        ``(spatial (B, H, C, C), temporal (B, H - 1, C))``.
        """
        b, h, c, d = nodes.shape
        f = self.features(nodes.reshape(b, h * c, d)).reshape(b, h, c, -1).float()
        with _float32(f):
            return self._mixed_edge_distances(f, gap_s, gap_t, spatial_mask)

    def _mixed_edge_distances(self, f: torch.Tensor, gap_s: torch.Tensor, gap_t: torch.Tensor,
                              spatial_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, h, c, _ = f.shape
        if self.metric != "mahalanobis" or self.q.shape[0] == 1:
            return pg.normalise_edge_distances(*pg.edge_distances(f, self.metric, self.q), spatial_mask)
        m = spatial_mask.to(f.dtype)
        with torch.no_grad():
            n_edges = (
                2 * (h - 1) * c + h * m.sum()
            )  # ordered pairs, as a sum over the N x N edge mask counts them
            mean_gap = ((gap_s * m).sum((1, 2, 3)) + 2 * gap_t.sum((1, 2))) / n_edges  # (B,)
        # every candidate k at once: raw distances (B, n, H, C, C) / (B, n, H - 1, C), normalised per
        # candidate
        raw_s, raw_t = pg.edge_distances(f, "mahalanobis", self.q, per_candidate=True)
        ds, dt = pg.normalise_edge_distances(raw_s, raw_t, spatial_mask)
        aff_s, aff_t = torch.exp(-ds) * m, torch.exp(-dt)
        smooth = torch.einsum("bnhij,bhij->bn", aff_s, gap_s) + 2 * torch.einsum("bnhc,bhc->bn", aff_t, gap_t)
        mass = aff_s.sum((2, 3, 4)) + 2 * aff_t.sum((2, 3))
        scores = smooth / (mass * mean_gap.clamp_min(1e-12).unsqueeze(1))
        mix = torch.softmax(-scores / self.selection_temperature, dim=1)
        mixed = torch.einsum("bn,bnhij->bhij", mix, raw_s), torch.einsum("bn,bnhc->bhc", mix, raw_t)
        return pg.normalise_edge_distances(*mixed, spatial_mask)


    def distances(self, nodes: torch.Tensor, gap: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:meth:`edge_distances` on the dense ``(N, N)`` edge set: ``(B, N, N)`` normalised distances.

        ``nodes`` ``(B, N, D)``; ``gap`` ``(B, N, N)`` the block input's signal gaps; ``mask`` the float edge
        set.
        """
        f = self.features(nodes).float()
        with _float32(f):
            return self._mixed_distances(f, gap, mask)

    def _mixed_distances(self, f: torch.Tensor, gap: torch.Tensor, mask: torch.Tensor,
                         q: torch.Tensor | None = None) -> torch.Tensor:
        """Distances from features ``f``; ``q`` replaces :attr:`q` (grouped, see :func:`denoise_together`)
        and ``mask`` is ``(N, N)`` or one per window ``(B, N, N)``."""
        q = self.q if q is None else q
        if self.metric != "mahalanobis" or q.shape[-3] == 1:
            return sg.normalise_distance(sg.pairwise_distance(f, self.metric, q), mask)
        with torch.no_grad():
            mean_gap = (gap * mask).sum((1, 2)) / mask.sum((-1, -2))  # (B,)
        raw = sg.pairwise_distance(f, "mahalanobis", q, per_candidate=True)  # (B, n, N, N), every candidate
        cand_mask = mask.unsqueeze(-3) if mask.ndim == 3 else mask  # over the candidates
        aff = torch.exp(-sg.normalise_distance(raw, cand_mask)) * cand_mask
        scores = torch.einsum("bnij,bij->bn", aff, gap) / (
            aff.sum((2, 3)) * mean_gap.clamp_min(1e-12).unsqueeze(1)
        )
        mix = torch.softmax(-scores / self.selection_temperature, dim=1)
        return sg.normalise_distance(torch.einsum("bn,bnij->bij", mix, raw), mask)


class SignedGraphDenoiser(nn.Module):
    """One unrolled graph denoiser ``Psi`` (Fig. 2).

    One block, on the block's input signal ``y`` (the window for the first block, the previous block's
    output after that):

    1. nodes: ``y`` ``(B, C, H*D)`` is cut into ``H = n_chunks`` chunks per channel, ``N = C*H`` nodes with
       ``D``-sample signals (product graph, Fig. 1c).
    2. features (App. E.2): a CNN shared by all nodes, ``conv_layers`` x [Conv2d kernel (1, 5), stride
       (1, 2), padding (0, 2) -> BatchNorm -> LeakyReLU(0.01)], a 1x1 convolution to one map and an adaptive
       average pool to ``feature_dim = K`` values per node.
    3. distances: Mahalanobis (eq. 6) with ``M = Q_k Q_k^T`` from ``n_metric_candidates`` learnable
       candidates (App. E.2: "adaptively selected from a learnable candidate set"), or the Table 6
       alternatives; normalised to ``[0, 1]`` per sample (App. E.2).
    4. polarities (``polarity="class"``, the default): each denoiser's per-block channel polarities are
       estimated from its class's training windows (:meth:`SignedGraphDenoiser.fit_polarity`: reference row
       ``polarity_ref`` of the pooled covariance, then minimum GLR of eq. 5 summed over the windows, block by
       block, until no flip helps) and stored as buffers; until then (or with ``polarity="input"``) every
       window gets its own polarities the same way from its own signals.
    5. weights (eq. 7) -> symmetric normalisation (eq. 8) -> ``L = D - W`` -> Gershgorin self-loops (eq. 9)
       -> ``L^+ = T L^B T`` (eq. 3); ``y^+ = T y`` is low-pass filtered by Lanczos (eq. 25) with the
       block's learnable cutoff ``omega`` and the sigmoid response (eq. 31, steepness 10); ``x = T x^+``.

    Args:
        n_chans, n_times: window shape; ``n_times`` must be a multiple of ``n_chunks``.
        n_chunks: temporal chunks per channel ``H`` (Table 4's sequence length).
        n_blocks: unrolled BGL + LPF blocks.
        conv_layers, conv_width, feature_dim: the BGL CNN (Table 5 varies ``conv_layers``).
        metric, n_metric_candidates, metric_rank, selection_temperature: eq. 6 / Table 6.
        graph: ``balanced`` (eq. 7), ``positive`` or ``unbalanced`` (eq. 28) (Table 2).
        negative_weight: ``eq7`` (``exp(-d) - 1``) or ``mirror`` (``-exp(-d)``, eq. 8's closed form).
        spatial: ``full`` (every channel pair inside a chunk) or ``line`` (line graph of the bipolar
            montage named by ``ch_names``, App. E.1).
        krylov_dim: Lanczos dimension ``m``; ``filter_method="exact"`` uses a dense eigendecomposition,
            ``"auto"`` the one of the two expected to be faster for this window shape.
        reorth_passes: Gram-Schmidt sweeps per Lanczos step (0: the three-term recurrence, see
            :func:`~biosig_lightning.features.signed_graph.lanczos_filter`).
        steepness, cutoff_init: eq. 31's ``alpha`` and the initial ``omega``.
        polarity_ref: the covariance row that initialises the polarities.
        polarity: ``class`` (per-block polarities from :meth:`fit_polarity`, once called) or ``input``.
        d_star: eq. 28's shift (distances are in ``[0, 1]``, so its middle, 0.5).
    """

    spatial_mask: torch.Tensor  # buffers (see __init__)
    node_mask: torch.Tensor
    polarity: torch.Tensor
    polarity_fitted: torch.Tensor

    def __init__(self, n_chans: int, n_times: int, n_chunks: int = 6, n_blocks: int = 3, conv_layers: int = 4,
                 conv_width: int = 7, feature_dim: int = 63, metric: sg.DistanceKind = "mahalanobis",
                 n_metric_candidates: int = 5, metric_rank: int = 13, selection_temperature: float = 0.1,
                 graph: sg.GraphKind = "balanced", negative_weight: Literal["eq7", "mirror"] = "eq7",
                 spatial: Spatial = "full", ch_names: Sequence[str] | None = None, krylov_dim: int = 20,
                 filter_method: FilterMethod = "lanczos", steepness: float = 10.0,
                 cutoff_init: float = 1.0, polarity_ref: int = 0, d_star: float = 0.5,
                 polarity: Literal["class", "input"] = "class", reorth_passes: int = 0) -> None:
        super().__init__()
        owner = type(self).__name__
        if polarity not in ("class", "input"):
            raise ValueError(f"{owner}: polarity must be 'class' or 'input', got {polarity!r}")
        self.polarity_source = polarity
        check_positive_ints(owner, n_chans=n_chans, n_times=n_times, n_chunks=n_chunks, n_blocks=n_blocks,
                            krylov_dim=krylov_dim)
        if n_times % n_chunks:
            raise ValueError(f"{owner}: n_times={n_times} is not a multiple of n_chunks={n_chunks} "
                             "(each chunk must have the same length)")
        if graph not in ("balanced", "positive", "unbalanced"):
            raise ValueError(f"{owner}: graph must be balanced, positive or unbalanced, got {graph!r}")
        if negative_weight not in ("eq7", "mirror"):
            raise ValueError(f"{owner}: negative_weight must be eq7 or mirror, got {negative_weight!r}")
        if filter_method not in ("lanczos", "exact", "auto"):
            raise ValueError(f"{owner}: filter_method must be lanczos, exact or auto, got {filter_method!r}")
        if filter_method == "auto":
            filter_method = sg.choose_filter(n_chans, n_chunks, n_times // n_chunks, krylov_dim)
        if not 0 <= polarity_ref < n_chans:
            raise ValueError(f"{owner}: polarity_ref={polarity_ref} is not a channel index below {n_chans}")
        if spatial == "line":
            if ch_names is None:
                raise ValueError(f"{owner}: spatial='line' needs the bipolar channel names (ch_names)")
            spatial_mask = sg.line_graph_mask(ch_names)
        elif spatial == "full":
            spatial_mask = None
        else:
            raise ValueError(f"{owner}: spatial must be full or line, got {spatial!r}")
        self.n_chans, self.n_times, self.n_chunks = n_chans, n_times, n_chunks
        self.graph, self.negative_weight = graph, negative_weight
        if reorth_passes < 0:
            raise ValueError(f"{owner}: reorth_passes must be >= 0, got {reorth_passes}")
        self.krylov_dim, self.filter_method, self.steepness = krylov_dim, filter_method, steepness
        self.reorth_passes = reorth_passes
        self.polarity_ref, self.d_star = polarity_ref, d_star
        spatial_mask = ~torch.eye(n_chans, dtype=torch.bool) if spatial_mask is None else spatial_mask
        self.register_buffer("spatial_mask",
                             spatial_mask & ~torch.eye(n_chans, dtype=torch.bool), persistent=False)
        # the (N, N) edge set as weights, for the dense blocks of filter_method="exact"
        self.register_buffer("node_mask", sg.product_graph_mask(n_chans, n_chunks, self.spatial_mask).float(),
                             persistent=False)
        self.blocks = nn.ModuleList(
            BalancedGraphLearning(conv_layers, conv_width, feature_dim, metric, n_metric_candidates,
                                  metric_rank,
                                  selection_temperature) for _ in range(n_blocks))
        self.cutoffs = nn.Parameter(torch.full((n_blocks,), float(cutoff_init)))
        # per-block channel polarities estimated from the class's training windows (fit_polarity)
        self.register_buffer("polarity", torch.ones(n_blocks, n_chans))
        self.register_buffer("polarity_fitted", torch.zeros((), dtype=torch.bool))
        self._polarity_fitted = False  # the buffer's value on the host: forward reads this, never the buffer

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._polarity_fitted = bool(self.polarity_fitted)

    def edge_laplacian(self, block: int, nodes: torch.Tensor, beta: torch.Tensor | None, refine: bool = True,
                       pool: bool = False) -> tuple[pg.ProductLaplacian, torch.Tensor | None]:
        """Block ``block``'s filtering Laplacian for node signals ``(B, N, D)``, stored by its edges.

        Returns ``(L, beta)``: ``L^+`` and the (refined) channel polarities ``(B or 1, C)`` for the
        balanced graph, handed to the next block; else ``L`` and ``None``. ``refine=False`` uses ``beta``
        as given; ``pool=True`` refines one polarity for the whole batch.
        """
        b, n, d = nodes.shape
        nodes4 = nodes.reshape(b, self.n_chunks, self.n_chans, d)
        with torch.no_grad(), _float32(nodes):
            gap_s, sum_gap_s, gap_t = pg.edge_gaps(nodes4)
        ds, dt = cast(BalancedGraphLearning, self.blocks[block]).edge_distances(nodes4, gap_s, gap_t,
                                                                                self.spatial_mask)
        if self.graph != "balanced":
            ws, wt = pg.edge_weights(ds, dt, self.spatial_mask, self.graph, d_star=self.d_star)
            return pg.edge_laplacian(*pg.normalize_edge_weights(ws, wt),
                                     signed=self.graph == "unbalanced"), None
        assert beta is not None
        if refine:
            beta = pg.refine_polarity_edges(beta, ds.detach(), gap_s, sum_gap_s, self.spatial_mask, pool=pool)
        ws, wt = pg.edge_weights(ds, dt, self.spatial_mask, "balanced", beta,
                                 mirror=self.negative_weight == "mirror")
        lap_b, _ = pg.edge_laplacian(*pg.normalize_edge_weights(ws, wt)).gershgorin_shift()
        return lap_b.similarity_transform(beta), beta

    def dense_laplacian(self, block: int, nodes: torch.Tensor, beta: torch.Tensor | None, refine: bool = True
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`edge_laplacian` built on the dense ``(B, N, N)`` edge set (the ``exact`` filter's path).

        The same equations (6-9, 3, 5) one dense tensor each, instead of a spatial and a temporal one: the
        dense
        filter forms the ``N x N`` matrix anyway, and every step is one operation per block.
        """
        return _dense_laplacian([self], block, nodes, beta, refine, self.node_mask)

    def laplacian(self, block: int, nodes: torch.Tensor, beta: torch.Tensor | None, refine: bool = True,
                  pool: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """:meth:`edge_laplacian` as a dense ``(B, N, N)`` matrix, with the node polarities ``(B, N)``.

        Returns ``(L, node_beta, beta)`` (``None`` twice for the positive and unbalanced graphs).
        """
        lap, beta = self.edge_laplacian(block, nodes, beta, refine, pool)
        node_beta = None if beta is None else self.node_polarity(beta, nodes.shape[0])
        return lap.dense(), node_beta, beta

    def node_polarity(self, beta: torch.Tensor, batch: int) -> torch.Tensor:
        """Channel polarities ``(B or 1, C)`` -> node polarities ``(B, N)`` (node ``h*C + c`` takes channel
        ``c``'s)."""
        return beta.expand(batch, -1).repeat(1, self.n_chunks)

    def lowpass(self, block: int, lap: pg.ProductLaplacian | torch.Tensor, nodes: torch.Tensor,
                omega: torch.Tensor | None = None) -> torch.Tensor:
        """``g(L) y`` with block ``block``'s cutoff (or ``omega``, one per window ``(B, 1)``): Lanczos on the
        edges (eq. 25) or dense eigh (eq. 12)."""
        omega = self.cutoffs[block] if omega is None else omega
        with _float32(nodes):
            return self._lowpass(omega, lap, nodes.float())

    def _lowpass(self, omega: torch.Tensor, lap: pg.ProductLaplacian | torch.Tensor, nodes: torch.Tensor
                 ) -> torch.Tensor:
        if self.filter_method == "exact":
            return sg.exact_filter(lap if isinstance(lap, torch.Tensor) else lap.dense(), nodes, omega,
                                   "sigmoid",
                                   self.steepness)
        return sg.lanczos_filter(lap, nodes, omega, self.krylov_dim, "sigmoid", self.steepness,
                                 reorth_passes=self.reorth_passes)

    def set_spatial_mask(self, spatial_mask: torch.Tensor) -> None:
        """Use ``spatial_mask`` ``(C, C)`` as the spatial edges (self-loops dropped): both the edge-stored
        graph's :attr:`spatial_mask` and the dense filter's ``(N, N)`` edge set follow it."""
        eye = torch.eye(self.n_chans, dtype=torch.bool, device=self.spatial_mask.device)
        self.spatial_mask.copy_(spatial_mask.to(self.spatial_mask.device, torch.bool) & ~eye)
        self.node_mask.copy_(sg.product_graph_mask(self.n_chans, self.n_chunks, self.spatial_mask.cpu()))

    @property
    def mask(self) -> torch.Tensor:
        """The ``(N, N)`` edge set (for inspection; the blocks work on :attr:`spatial_mask` and the chunk
        chain)."""
        return sg.product_graph_mask(self.n_chans, self.n_chunks, self.spatial_mask.cpu())

    def uses_class_polarity(self) -> bool:
        return self.graph == "balanced" and self.polarity_source == "class" and self._polarity_fitted

    @torch.no_grad()
    def fit_polarity(self, windows: torch.Tensor) -> torch.Tensor:
        """Estimate the per-block polarities from training windows of this denoiser's class (Sec. 3.1).

        Block 1 starts from the reference row of the covariance pooled over ``windows``; every block
        refines by eq. 5 with all graph signals of all ``windows`` as the training set (the GLR summed
        over them) and hands its polarity to the next; the windows are filtered block by block as in
        :meth:`forward`. Stores and returns the ``(n_blocks, C)`` polarities.
        """
        if self.graph != "balanced":
            return self.polarity
        was_training = self.training
        self.eval()  # no BatchNorm statistics from this pass
        beta: torch.Tensor | None = sg.covariance_polarity(windows, self.polarity_ref, pool=True)
        x = windows
        for block in range(len(self.blocks)):
            nodes = sg.chunk_nodes(x, self.n_chunks)
            lap, beta = self.edge_laplacian(block, nodes, beta, refine=True, pool=True)
            assert beta is not None
            self.polarity[block] = beta[0]
            node_beta = self.node_polarity(beta, nodes.shape[0])
            nodes = node_beta.unsqueeze(-1) * self.lowpass(block, lap, node_beta.unsqueeze(-1) * nodes)
            x = sg.unchunk_nodes(nodes, self.n_chans)
        self.polarity_fitted.fill_(True)
        self._polarity_fitted = True
        self.train(was_training)
        return self.polarity

    def batch_key(self) -> tuple[Any, ...] | None:
        """What denoisers must share to run as one batch (:func:`denoise_together`); ``None``: this one
        cannot (the Lanczos filter works on the edge-stored graph, one denoiser at a time)."""
        if self.filter_method != "exact":
            return None
        bgl = cast(BalancedGraphLearning, self.blocks[0])
        return (self.n_chans, self.n_chunks, len(self.blocks), self.graph, self.negative_weight,
                self.steepness, self.polarity_ref, self.d_star, self.polarity_source,
                self.uses_class_polarity(), bgl.metric, bgl.selection_temperature,
                None if bgl.q is None else tuple(bgl.q.shape))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """Denoise windows ``y`` ``(B, C, T)``; returns the estimate of the same shape."""
        if self.filter_method == "exact":
            return _dense_together([self], y)[0]
        fixed = self.uses_class_polarity()
        beta = None
        if self.graph == "balanced" and not fixed:
            beta = sg.covariance_polarity(y.detach(), self.polarity_ref)
        x = y
        lap: pg.ProductLaplacian | torch.Tensor
        for block in range(len(self.blocks)):
            nodes = sg.chunk_nodes(x, self.n_chunks)
            if fixed:
                beta = self.polarity[block].unsqueeze(0)
            lap, beta = self.edge_laplacian(block, nodes, beta, refine=not fixed)
            if beta is not None:  # filter T y on the positive graph, map back with T (Sec. 3.2)
                node_beta = self.node_polarity(beta, nodes.shape[0])
                nodes = node_beta.unsqueeze(-1) * self.lowpass(block, lap, node_beta.unsqueeze(-1) * nodes)
            else:
                nodes = self.lowpass(block, lap, nodes)
            x = sg.unchunk_nodes(nodes, self.n_chans)
        return x


def denoise_together(denoisers: Sequence[SignedGraphDenoiser], y: torch.Tensor) -> torch.Tensor:
    """Every denoiser's estimate of the same windows ``y`` ``(B, C, T)``, stacked: ``(K, B, C, T)``.

    Denoisers with one :meth:`~SignedGraphDenoiser.batch_key` (a classifier's, with the dense filter) run
    as one batch of ``K x B`` windows: only each BGL's CNN runs per denoiser; the metric candidates,
    polarities, cutoffs and edge sets are stacked, so each graph operation (distances, weights, Laplacian,
    eigendecomposition, filter) is launched once for all classes instead of ``K`` times. Others run one
    after the other. Same values either way (tests/models/signed_graph/test_signed_graph.py).
    """
    key = denoisers[0].batch_key()
    if len(denoisers) > 1 and key is not None and all(d.batch_key() == key for d in denoisers[1:]):
        return _dense_together(denoisers, y)
    return torch.stack([d(y) for d in denoisers])


def _per_window(per_denoiser: torch.Tensor, batch: int) -> torch.Tensor:
    """``(K, ...)`` -> ``(K * batch, ...)``: each denoiser's value for each of its copies of the windows."""
    k = per_denoiser.shape[0]
    return per_denoiser.unsqueeze(1).expand(k, batch, *per_denoiser.shape[1:]).reshape(
        k * batch, *per_denoiser.shape[1:])


def _dense_together(denoisers: Sequence[SignedGraphDenoiser], y: torch.Tensor) -> torch.Tensor:
    """The dense-filter blocks of :meth:`SignedGraphDenoiser.forward` for ``K`` denoisers of one
    :meth:`~SignedGraphDenoiser.batch_key` on ``K`` copies of ``y`` (class-major); ``(K, B, C, T)``.
    With one denoiser nothing is copied or stacked."""
    first, k, b = denoisers[0], len(denoisers), y.shape[0]
    fixed = first.uses_class_polarity()
    x, mask, polarity, cutoffs = y, first.node_mask, first.polarity.unsqueeze(1), None
    if k > 1:
        x = y.repeat(k, 1, 1)
        mask = _per_window(torch.stack([d.node_mask for d in denoisers]), b)
        polarity = _per_window(torch.stack([d.polarity for d in denoisers]), b).transpose(0, 1)
        # (n_blocks, K * B, 1): each block's cutoff per window
        cutoffs = _per_window(torch.stack([d.cutoffs for d in denoisers]), b).T.unsqueeze(-1)
    beta = None
    if first.graph == "balanced" and not fixed:
        beta = sg.covariance_polarity(x.detach(), first.polarity_ref)
    for block in range(len(first.blocks)):
        nodes = sg.chunk_nodes(x, first.n_chunks)
        if fixed:
            beta = polarity[block]  # (1 or K * B, C)
        lap, beta = _dense_laplacian(denoisers, block, nodes, beta, not fixed, mask)
        omega = None if cutoffs is None else cutoffs[block]
        if beta is not None:  # filter T y on the positive graph, map back with T (Sec. 3.2)
            node_beta = first.node_polarity(beta, nodes.shape[0]).unsqueeze(-1)
            nodes = node_beta * first.lowpass(block, lap, node_beta * nodes, omega)
        else:
            nodes = first.lowpass(block, lap, nodes, omega)
        x = sg.unchunk_nodes(nodes, first.n_chans)
    return x.reshape(k, b, *x.shape[1:])


def _dense_laplacian(denoisers: Sequence[SignedGraphDenoiser], block: int, nodes: torch.Tensor,
                     beta: torch.Tensor | None, refine: bool, mask: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:meth:`SignedGraphDenoiser.dense_laplacian` of ``K`` denoisers on their ``K`` slices of ``nodes``
    ``(K * B, N, D)``; ``mask`` is ``(N, N)`` or one per window."""
    first = denoisers[0]
    with torch.no_grad(), _float32(nodes):
        gap, sum_gap = sg.signal_gaps(nodes)
    bgls = [cast(BalancedGraphLearning, d.blocks[block]) for d in denoisers]
    if len(bgls) == 1:
        dist = bgls[0].distances(nodes, gap, mask)
    else:
        parts = nodes.chunk(len(bgls))
        f = torch.cat([bgl.features(part) for bgl, part in zip(bgls, parts, strict=True)]).float()
        q = None if bgls[0].q is None else torch.stack([bgl.q for bgl in bgls])
        with _float32(f):
            dist = bgls[0]._mixed_distances(f, gap, mask, q)
    if first.graph != "balanced":
        w = sg.normalize_weights(sg.signed_weights(dist, mask, first.graph, d_star=first.d_star))
        return (
            sg.signed_laplacian(w) if first.graph == "unbalanced" else sg.combinatorial_laplacian(w)
        ), None
    assert beta is not None
    if refine:
        beta = sg.refine_polarity(beta, dist.detach(), gap, sum_gap, mask)
    node_beta = first.node_polarity(beta, nodes.shape[0])
    w = sg.signed_weights(dist, mask, "balanced", node_beta, mirror=first.negative_weight == "mirror")
    lap_b, _ = sg.gershgorin_shift(sg.combinatorial_laplacian(sg.normalize_weights(w)))
    return sg.similarity_transform(lap_b, node_beta), beta


@register_backbone(
    "SignedGraphClassifier",
    shapes=["turkish_epilepsy", "tuab"],
    param_pins={"turkish_epilepsy": 2 * 14_787, "tuab": 2 * 14_787},
    # the contract runs at the full 35 x 6000 window: one small block keeps its 60 memorisation steps short
    test_kwargs={"n_chunks": 2, "n_blocks": 1, "conv_layers": 1, "conv_width": 2, "feature_dim": 4,
                 "n_metric_candidates": 2, "metric_rank": 2, "krylov_dim": 2},
)
class SignedGraphClassifier(BiosignalModel):
    """One :class:`SignedGraphDenoiser` per class; logits = minus the reconstruction errors (eq. 22).

    Size: the paper's configuration (Sec. 6.1, App. E: 35 channels, 500 Hz, 12 s windows, 6 chunks of
    1000 samples, 3 blocks) gives **14,787 parameters per denoiser**, Table 1's count exactly, with these
    inferred sizes (the text does not state them):

    * ``conv_layers = 4``: App. E.2 says four convolutional blocks (Sec. 6.1 says three, Table 5's best row
      six); four is the only count for which stride-2, kernel-5, padding-2 convolutions take 1000 samples
      to exactly ``d = 63`` (1000 -> 500 -> 250 -> 125 -> 63), the feature size App. E.2 gives;
    * ``conv_width = 7`` hidden maps, convolutions without bias (each is followed by BatchNorm, and a bias
      on the last 1x1 convolution would cancel in ``f_i - f_j`` and never get a gradient);
    * metric: ``n_metric_candidates = 5`` candidates ``Q_k`` of ``63 x 13`` (4,095 parameters per block);
    * one cutoff per block.

    Per block: 35 + 14 + 3 x (245 + 14) + 7 = 833 (CNN) + 4,095 (metric) + 1 (cutoff) = 4,929; x 3 = 14,787.
    Reading: 14,787 is odd, so it cannot be the total of two identical denoisers; it counts one denoiser
    and the classifier pair has 29,574.

    Readings of other ambiguities:

    * Eq. 7 gives opposite-polarity edges the weight ``exp(-d) - 1``; the closed form on the right of
      eq. 8 (and App. E.2) would instead use ``-exp(-d)``. We follow eq. 7 and the general (left) form of
      eq. 8, which normalises by ``sum |w|``; ``negative_weight="mirror"`` switches to ``-exp(-d)``.
    * The candidate metric is chosen per sample by a soft minimum of the graph Laplacian regulariser:
      candidate ``k`` scores ``s_k = sum_ij a^k_ij ||e_i - e_j||^2 / (sum_ij a^k_ij * mean ||e_i - e_j||^2)``
      with ``a^k = exp(-d^k)`` on the edge set (how smooth the block input is on candidate ``k``'s graph, as
      eq. 5 chooses polarities), and ``M = sum_k softmax(-s / selection_temperature)_k Q_k Q_k^T``.
      A soft choice keeps every candidate trained.
    * Polarity is per channel (see :mod:`biosig_lightning.features.signed_graph`). Eq. 5 chooses it with
      "a set of training signals", so it is a property of a denoiser's *class*, not of the window being
      classified: with per-window polarities both denoisers put every input on graphs of the same signs and,
      for one block, the one with the higher cutoff has the smaller error on every input (``||y - g(L)y||^2``
      falls as ``omega`` grows), so eq. 22 could not tell the classes apart. Class polarities are what makes
      the pair discriminative (tests/e2e/test_signed_graph_learns.py); they are buffers, saved with the
      weights.
    * Eq. 5's GLR is measured on the positive twin, ``sum |w_ij| (beta_i x_i - beta_j x_j)^2``; the literal
      signed GLR is minimised by a max-cut (see
      :func:`~biosig_lightning.features.signed_graph.refine_polarity`).
    * The Krylov dimension ``m`` is not given; ``krylov_dim = 20`` (``m << N = 210``). Nor is
      re-orthogonalisation: the plain three-term recurrence (``reorth_passes = 0``) keeps the filter at
      ``O(m |E| D)`` time and ``O(m N D)`` memory per window, and eq. 25 stays accurate without it.
    * The graph is stored by its edges (:mod:`biosig_lightning.features.product_graph`): ``H`` spatial
      ``C x C`` blocks and ``H - 1`` temporal links per channel; no ``N x N`` matrix is formed except for
      ``filter_method="exact"``, whose blocks build the graph on the dense ``N x N`` edge set
      (:meth:`SignedGraphDenoiser.dense_laplacian`, the same equations, one tensor per step); the metric
      candidates are scored together, not one by one.
    * ``filter_method="auto"`` (the shipped configs') filters with whichever of Lanczos and the dense
      eigendecomposition is expected to be faster for the window shape, from both filters' flop counts
      (:func:`~biosig_lightning.features.signed_graph.choose_filter`). App. B's linear cost assumes
      ``|E| = O(N)``; with the full spatial graph a Lanczos product costs ``O(N C)`` per signal and each of
      the ``D`` signals needs its own ``m x m`` eigendecomposition, while the dense filter decomposes one
      ``N x N`` matrix per window and shares it by all ``D`` signals, so at the paper's ``N = 210``,
      ``D = 1000`` the dense filter is the cheaper one; Lanczos takes over as ``H`` grows. Both compute
      eq. 12's ``g(L) y`` (Lanczos to its approximation error).
    * ``omega`` is in eigenvalue units (eq. 31 compares it with ``lambda_i``) and starts at ``cutoff_init``.
    * ``noise_std`` (``sigma_n`` of eq. 18) only scales the logits; the task adds noise of that level.

    ``logits[:, c] = -||y - Psi_c(y)||^2 / (2 noise_std^2)`` (the log-likelihood of eq. 18 up to a
    constant shared by the classes) divided, with ``logit_scale="sample"`` (the default), by the window's
    ``C x T`` samples, minus the class's ``error_offsets`` (zero, eq. 22 itself, unless
    :meth:`fit_error_offsets` set them). Reading: App. D compares the likelihoods at each denoiser's own
    estimate and leaves out each class's prior and normalising constant; a denoiser that keeps more of its
    input (a higher cutoff) then has the smaller error on every window, whichever its class, and the
    comparison names one class for most windows while the errors still rank them. The offsets put those
    constants back, estimated from labelled training windows (one number per class).
    Reading: App. D's posterior is the softmax of the whole window's log-likelihood
    (``logit_scale="window"``), but over thousands of samples two classes' log-likelihoods differ by far
    more than float32's softmax resolves, so nearly every probability is exactly 0 or 1: AUROC then ranks
    ties, and cross-entropy and STDRO's input gradients are those of a step function. Per sample
    (a tempered posterior) eq. 22's decision is the same and the softmax ranks windows. All other
    arguments go to every denoiser (see :class:`SignedGraphDenoiser`); ``n_outputs`` denoisers are built
    (the paper uses two).
    The catalog pins 29,574 = 2 x 14,787 parameters (Table 1 counts one denoiser, see above).
    """

    def __init__(self, n_chans: int, n_outputs: int, n_times: int, sfreq: float,
                 chs_info: Sequence[dict[str, Any]] | None = None, noise_std: float = 0.5,
                 n_chunks: int = 6, n_blocks: int = 3, conv_layers: int = 4, conv_width: int = 7,
                 feature_dim: int = 63, metric: sg.DistanceKind = "mahalanobis", n_metric_candidates: int = 5,
                 metric_rank: int = 13, selection_temperature: float = 0.1, graph: sg.GraphKind = "balanced",
                 negative_weight: Literal["eq7", "mirror"] = "eq7", spatial: Spatial = "full",
                 krylov_dim: int = 20, filter_method: FilterMethod = "lanczos",
                 steepness: float = 10.0, cutoff_init: float = 1.0, polarity_ref: int = 0,
                 d_star: float = 0.5, polarity: Literal["class", "input"] = "class",
                 reorth_passes: int = 0, logit_scale: Literal["sample", "window"] = "sample") -> None:
        super().__init__(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times,
                         sfreq=sfreq, chs_info=chs_info)
        if not noise_std > 0:
            raise ValueError(f"{type(self).__name__}: noise_std must be positive, got {noise_std!r}")
        if logit_scale not in ("sample", "window"):
            raise ValueError(f"{type(self).__name__}: logit_scale must be 'sample' or 'window', got "
                             f"{logit_scale!r}")
        self.noise_std, self.logit_scale = float(noise_std), logit_scale
        self.register_buffer("error_offsets", torch.zeros(n_outputs))  # see fit_error_offsets
        self.denoisers = nn.ModuleList(
            SignedGraphDenoiser(n_chans, n_times, n_chunks, n_blocks, conv_layers, conv_width, feature_dim,
                                metric,
                                n_metric_candidates, metric_rank, selection_temperature, graph,
                                negative_weight,
                                spatial, self.ch_names, krylov_dim, filter_method, steepness, cutoff_init,
                                polarity_ref, d_star, polarity, reorth_passes=reorth_passes)
            for _ in range(n_outputs))

    error_offsets: torch.Tensor

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        # a checkpoint from before the offsets existed holds none: eq. 22 itself (zero offsets)
        state_dict.setdefault(prefix + "error_offsets", torch.zeros_like(self.error_offsets))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def fit_error_offsets(self, windows: torch.Tensor, labels: torch.Tensor,
                          batch_size: int = 32) -> torch.Tensor:
        """Set :attr:`error_offsets` to the per-class offsets that minimise the cross-entropy of the
        offset logits on labelled clean ``windows`` (Newton's method on a convex problem of ``n_outputs``
        unknowns, centred to sum 0); returns them. Windows without every class leave them as they are."""
        was_training = self.training
        self.eval()
        errors = torch.cat([self.reconstruction_errors(windows[i:i + batch_size])
                            for i in range(0, len(windows), batch_size)])
        self.train(was_training)
        per = windows.shape[1] * windows.shape[2] if self.logit_scale == "sample" else 1
        base = (-errors / (2 * self.noise_std ** 2 * per)).double().cpu()  # a problem of n_outputs numbers
        freq = torch.nn.functional.one_hot(labels.long().cpu(), base.shape[1]).double().mean(0)
        if not bool((freq > 0).all()):
            return self.error_offsets
        offsets = torch.zeros(base.shape[1], dtype=torch.float64)
        for _ in range(100):
            p = torch.softmax(base - offsets, dim=1)
            grad = freq - p.mean(0)  # d CE / d offsets
            hess = torch.diag(p.mean(0)) - p.T @ p / len(p)
            # softmax ignores a shift shared by all offsets: solve with offset 0 held, then centre
            step = torch.zeros_like(offsets)
            step[1:] = torch.linalg.solve(hess[1:, 1:] + 1e-12 * torch.eye(len(hess) - 1, dtype=hess.dtype),
                                          grad[1:])
            step = step * min(1.0, 1.0 / max(float(step.abs().max()), 1e-12))  # no overshoot at saturation
            offsets = offsets - step
            offsets = offsets - offsets.mean()
            if float(step.abs().max()) < 1e-10:
                break
        self.error_offsets.copy_(offsets.to(self.error_offsets))
        return self.error_offsets

    def fit_polarity(self, windows: torch.Tensor, labels: torch.Tensor) -> None:
        """Each denoiser's polarities from the windows of its class (see
        :meth:`SignedGraphDenoiser.fit_polarity`)."""
        for c, den in enumerate(self.denoisers):
            own = windows[labels == c]
            if own.shape[0]:
                cast(SignedGraphDenoiser, den).fit_polarity(own)

    def denoise(self, y: torch.Tensor, cls: int) -> torch.Tensor:
        """``Psi_cls(y)``."""
        return self.denoisers[cls](y)

    def denoise_all(self, y: torch.Tensor) -> torch.Tensor:
        """``Psi_c(y)`` of every class, ``(n_outputs, B, C, T)``, as one batch (:func:`denoise_together`)."""
        return denoise_together(cast("Sequence[SignedGraphDenoiser]", self.denoisers), y)

    def reconstruction_errors(self, y: torch.Tensor) -> torch.Tensor:
        """``(B, n_outputs)`` squared errors ``||y - Psi_c(y)||^2`` (eq. 22)."""
        self.check_input(y)
        return (y - self.denoise_all(y)).square().sum((2, 3)).T

    def error_logits(self, errors: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The logits of the ``(B, n_outputs)`` errors ``||x - Psi_c(x)||^2`` of windows ``x`` (see the class
        docstring: per sample, or the whole window's with ``logit_scale="window"``)."""
        per = x.shape[1] * x.shape[2] if self.logit_scale == "sample" else 1
        return -errors / (2 * self.noise_std ** 2 * per) - self.error_offsets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.error_logits(self.reconstruction_errors(x), x)
