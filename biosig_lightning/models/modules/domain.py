"""Building blocks of the domain-generalisation (DG) baselines of BioFormer's Table 3.

BioFormer (Sec. 5.2, Appendix C.4) compares FBAM with plug-in DG methods wrapped around a
backbone. This module holds the pure-torch parts; the training recipe that wires them
into any backbone is :class:`biosig_lightning.robust.DGTask`.

* :class:`GradientReversal` / :func:`grad_reverse`: the gradient reversal layer of DANN
  (Ganin et al., 2016, Eq. 13-14): identity forward, gradient multiplied by ``-lambda``
  backward, so the feature extractor *maximises* the loss the subject discriminator
  minimises.
* :class:`SubjectDiscriminator`: the MLP that predicts the subject from the features.
* :class:`MixStyle` (Zhou et al., ICLR 2021, Eq. 3-5): with probability ``p``, a sample's
  per-channel mean and standard deviation are replaced by a convex mix of its own and a
  random batch-mate's, ``lambda ~ Beta(alpha, alpha)``.
* :class:`DSU` (Li et al., ICLR 2022, Eq. 5-8): with probability ``p``, a sample's
  per-channel mean and standard deviation are re-drawn from Gaussians centred on them,
  whose scales are the standard deviations of those statistics across the batch.
* :func:`mmd_loss` (multi-kernel Gaussian MMD, Long et al. 2015) and :func:`coral_loss`
  (Deep CORAL, Sun & Saenko 2016): discrepancies between two feature sets.

"Channel" and the statistics' axes. Both style modules take ``channel_dim``: ``1`` for
convolutional maps ``(B, C, T)`` / ``(B, C, H, W)``, ``-1`` for token sequences
``(B, L, D)``. The statistics of one sample and channel are taken over every other
non-batch axis (time, or the tokens), which is the instance-normalisation statistics
both papers use. Both modules are identity in eval mode and on a batch of one sample
(there is no batch-mate to mix with, no batch spread to scale the noise with).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from biosig_lightning.models.base import check_dropout, check_positive_ints

__all__ = [
    "DSU",
    "GradientReversal",
    "MixStyle",
    "SubjectDiscriminator",
    "coral_loss",
    "grad_reverse",
    "mmd_loss",
]


class _GradReverse(torch.autograd.Function):
    """``y = x`` forward; ``dL/dx = -coefficient * dL/dy`` backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, coefficient: float) -> torch.Tensor:
        ctx.coefficient = coefficient
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.coefficient * grad_output, None


def grad_reverse(x: torch.Tensor, coefficient: float = 1.0) -> torch.Tensor:
    """Gradient reversal (DANN): identity forward, gradient times ``-coefficient`` backward."""
    return _GradReverse.apply(x, float(coefficient))


class GradientReversal(nn.Module):
    """Gradient reversal layer with a settable coefficient ``lambda`` (DANN, Ganin et al. 2016).

    The coefficient is a plain attribute, not a parameter or buffer, so a training loop can
    follow a schedule (DANN's ``lambda_p = 2 / (1 + exp(-gamma p)) - 1``) by assigning
    ``layer.coefficient = ...`` before each step.
    """

    def __init__(self, coefficient: float = 1.0) -> None:
        super().__init__()
        self.coefficient = float(coefficient)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return grad_reverse(x, self.coefficient)

    def extra_repr(self) -> str:
        return f"coefficient={self.coefficient:g}"


class SubjectDiscriminator(nn.Module):
    """MLP subject classifier on pooled features (the DANN domain classifier).

    ``n_hidden_layers`` blocks of Linear -> ReLU -> Dropout of width ``hidden``, then a
    linear layer to ``n_subjects`` logits. The number of subjects is read back from the
    last layer (``out.out_features``) when a checkpoint is reloaded.
    """

    def __init__(
        self, in_features: int, n_subjects: int, hidden: int = 256, n_hidden_layers: int = 2,
        dropout: float = 0.1
    ) -> None:
        super().__init__()
        check_positive_ints("SubjectDiscriminator",
            in_features=in_features, n_subjects=n_subjects, hidden=hidden,
        )
        if n_hidden_layers < 0:
            raise ValueError(f"SubjectDiscriminator: n_hidden_layers must be >= 0, got {n_hidden_layers}")
        check_dropout("SubjectDiscriminator", dropout=dropout)
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(n_hidden_layers):
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(width, n_subjects)

    @property
    def n_subjects(self) -> int:
        return self.out.out_features

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Subject logits ``(B, n_subjects)`` for features ``(B, in_features)``."""
        return self.out(self.body(features))


def _stat_dims(x: torch.Tensor, channel_dim: int) -> tuple[int, ...]:
    """Axes of the per-sample, per-channel statistics: every non-batch axis but the channel axis."""
    if x.ndim < 3:
        raise ValueError(
            f"style statistics need x with a batch, a channel and at least one more axis, got shape "
            f"{tuple(x.shape)}"
        )
    ch = channel_dim % x.ndim
    if ch == 0:
        raise ValueError(f"channel_dim={channel_dim} points at the batch axis of x with shape "
                         f"{tuple(x.shape)}")
    return tuple(d for d in range(1, x.ndim) if d != ch)


class _StyleBase(nn.Module):
    def __init__(self, p: float, channel_dim: int, eps: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: p must lie in [0, 1], got {p}")
        if eps <= 0:
            raise ValueError(f"{type(self).__name__}: eps must be positive, got {eps}")
        self.p = float(p)
        self.channel_dim = int(channel_dim)
        self.eps = float(eps)

    def _active(self, x: torch.Tensor) -> bool:
        # One Bernoulli(p) draw per batch, as in both papers' reference description.
        return self.training and x.shape[0] > 1 and self.p > 0 and torch.rand(()).item() < self.p

    def _stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dims = _stat_dims(x, self.channel_dim)
        mu = x.mean(dim=dims, keepdim=True)
        sig = (x.var(dim=dims, keepdim=True, unbiased=False) + self.eps).sqrt()
        return mu, sig

    def extra_repr(self) -> str:
        return f"p={self.p:g}, channel_dim={self.channel_dim}"


class MixStyle(_StyleBase):
    """MixStyle (Zhou et al., ICLR 2021): mix instance statistics with a random batch-mate.

    With probability ``p`` per training batch:
    ``mu, sig`` = per-sample, per-channel mean and std (over the non-channel axes);
    ``lambda_i ~ Beta(alpha, alpha)``; ``j = perm(i)`` a random permutation of the batch;
    ``out = sig_mix * (x - mu) / sig + mu_mix`` with
    ``mu_mix = lambda mu_i + (1 - lambda) mu_j`` and ``sig_mix`` alike (Eq. 3-5).
    As in the original method the statistics are detached, so no gradient flows through
    the style (only through the normalised content). BioFormer C.4: ``p = 0.5``,
    ``alpha = 0.1``, random (not cross-domain) shuffling.

    Args:
        p: probability of mixing a training batch.
        alpha: Beta concentration (small: most mixes stay close to one of the two styles).
        channel_dim: the channel axis (``1`` for ``(B, C, ...)``, ``-1`` for ``(B, L, D)``).
        eps: added to the variance before the square root.
    """

    def __init__(self, p: float = 0.5, alpha: float = 0.1, channel_dim: int = 1, eps: float = 1e-6) -> None:
        super().__init__(p, channel_dim, eps)
        if alpha <= 0:
            raise ValueError(f"MixStyle: alpha must be positive, got {alpha}")
        self.alpha = float(alpha)
        self._beta = torch.distributions.Beta(torch.tensor(self.alpha), torch.tensor(self.alpha))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._active(x):
            return x
        mu, sig = self._stats(x)
        mu, sig = mu.detach(), sig.detach()
        normed = (x - mu) / sig
        shape = [x.shape[0]] + [1] * (x.ndim - 1)
        lam = self._beta.sample(torch.Size(shape)).to(device=x.device, dtype=x.dtype)
        perm = torch.randperm(x.shape[0], device=x.device)
        mu_mix = lam * mu + (1 - lam) * mu[perm]
        sig_mix = lam * sig + (1 - lam) * sig[perm]
        return normed * sig_mix + mu_mix

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, alpha={self.alpha:g}"


class DSU(_StyleBase):
    """DSU, domain shifts with uncertainty (Li et al., ICLR 2022).

    With probability ``p`` per training batch, for per-sample, per-channel statistics
    ``mu, sig`` (Eq. 1): the batch spreads ``Sigma_mu = sqrt(Var_batch(mu) + eps)`` and
    ``Sigma_sig = sqrt(Var_batch(sig) + eps)`` (Eq. 5-6) scale Gaussian noise,
    ``beta = mu + eps_1 Sigma_mu``, ``gamma = sig + eps_2 Sigma_sig`` with
    ``eps_1, eps_2 ~ N(0, 1)`` per sample and channel (Eq. 7), and
    ``out = gamma * (x - mu) / sig + beta`` (Eq. 8). BioFormer C.4 calls the uncertainty
    "learnable"; DSU has no trainable parameter (the spreads are estimated from the batch,
    and gradients flow through ``mu``, ``sig`` and the spreads, as in Li et al.), which is
    the reading implemented here. ``p = 0.5`` as in Li et al.

    Args:
        p: probability of perturbing a training batch.
        channel_dim: the channel axis (``1`` for ``(B, C, ...)``, ``-1`` for ``(B, L, D)``).
        eps: added to the variances before the square roots.
    """

    def __init__(self, p: float = 0.5, channel_dim: int = 1, eps: float = 1e-6) -> None:
        super().__init__(p, channel_dim, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._active(x):
            return x
        mu, sig = self._stats(x)
        spread_mu = (mu.var(dim=0, keepdim=True, unbiased=False) + self.eps).sqrt()
        spread_sig = (sig.var(dim=0, keepdim=True, unbiased=False) + self.eps).sqrt()
        beta = mu + torch.randn_like(mu) * spread_mu
        gamma = sig + torch.randn_like(sig) * spread_sig
        return (x - mu) / sig * gamma + beta


DEFAULT_MMD_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


def _check_pair(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"{name} expects two (n, d) feature sets of equal width, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.shape[0] < 1 or b.shape[0] < 1:
        raise ValueError(f"{name} needs at least one sample per set, got {a.shape[0]} and {b.shape[0]}")


def mmd_loss(a: torch.Tensor, b: torch.Tensor,
             scales: tuple[float, ...] = DEFAULT_MMD_SCALES) -> torch.Tensor:
    """Squared multi-kernel MMD between feature sets ``a`` ``(n, d)`` and ``b`` ``(m, d)``.

    The kernel is the mean of Gaussian kernels ``exp(-||u - v||^2 / (s * h))`` for
    ``s`` in ``scales``, with the bandwidth ``h`` set by the median heuristic: the median
    squared distance between distinct samples of the pooled set (detached, so the
    bandwidth is not a path for the gradient), as in the multi-kernel MMD of DAN
    (Long et al., 2015, Eq. 2-3, a family of bandwidths around a base width).

    Estimator: the *biased* (V-statistic) one,
    ``mean K(a, a) + mean K(b, b) - 2 mean K(a, b)``, diagonals included. It is the
    squared RKHS distance between the two empirical mean embeddings, so it is never
    negative, is exactly zero for identical sets and is defined for a single sample per
    set; the unbiased U-statistic has none of these properties on the few windows one
    subject contributes to a mini-batch.
    """
    _check_pair(a, b, "mmd_loss")
    z = torch.cat([a, b]).float()
    d2 = torch.cdist(z, z).pow(2)
    n = z.shape[0]
    off = d2[~torch.eye(n, dtype=torch.bool, device=z.device)]
    h = off.median().detach() if off.numel() else d2.new_tensor(1.0)
    h = h.clamp_min(torch.finfo(d2.dtype).eps)
    k = cast(torch.Tensor, sum(torch.exp(-d2 / (s * h)) for s in scales)) / len(scales)
    na = a.shape[0]
    return k[:na, :na].mean() + k[na:, na:].mean() - 2 * k[:na, na:].mean()


def coral_loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Deep CORAL loss ``||C_a - C_b||_F^2 / (4 d^2)`` (Sun & Saenko, 2016, Eq. 1).

    ``C`` are the unbiased feature covariances (Eq. 2), so each set needs at least two
    samples. The Frobenius norm is evaluated through Gram matrices,
    ``||C_a - C_b||_F^2 = ||A A^T||^2/(n-1)^2 - 2 ||A B^T||^2/((n-1)(m-1)) + ||B B^T||^2/(m-1)^2``
    for the centred sets ``A``, ``B``: identical to forming the ``d x d`` covariances, but
    it costs ``O((n + m)^2 d)``, so flattened token features (``d`` in the tens of
    thousands) cost no ``d x d`` matrix.
    """
    _check_pair(a, b, "coral_loss")
    if a.shape[0] < 2 or b.shape[0] < 2:
        raise ValueError(f"coral_loss needs at least two samples per set, got {a.shape[0]} and {b.shape[0]}")
    a = a.float() - a.float().mean(0, keepdim=True)
    b = b.float() - b.float().mean(0, keepdim=True)
    na, nb, d = a.shape[0] - 1, b.shape[0] - 1, a.shape[1]
    aa = (a @ a.T).pow(2).sum() / na**2
    bb = (b @ b.T).pow(2).sum() / nb**2
    ab = (a @ b.T).pow(2).sum() / (na * nb)
    return (aa + bb - 2 * ab).clamp_min(0.0) / (4 * d * d)
