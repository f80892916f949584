"""The one base every backbone uses: signal metadata and the optional feature interface.

A backbone is a pure ``nn.Module`` that maps windows ``x`` of shape ``(batch, n_chans, n_times)``
(or whatever input its corpus hands it) to logits ``(batch, n_outputs)``. It is built from the
signal's shape under braindecode's names, so braindecode models and ours are interchangeable
in a YAML and LightningCLI links the shape from the DataModule:

* ``n_chans``: channels (electrodes, leads), ``n_outputs``: classes,
  ``n_times``: samples per window, ``sfreq``: sampling rate in Hz,
  ``chs_info``: optional per-channel info (MNE-style dicts with at least ``ch_name``).

:class:`BiosignalModel` owns that metadata and validates it in one place, so a model's
``__init__`` starts with ``super().__init__(n_chans=..., n_outputs=..., n_times=..., sfreq=...)``
and never repeats the checks.

Recipes (domain generalisation, STDRO, probes) need more than logits. A backbone *declares*
what it supports instead of a recipe probing attributes:

* ``features``: ``forward_features(x) -> (batch, feature_dim)`` with
  ``forward(x) == head(forward_features(x))``; ``head`` is an ``nn.Module`` and
  ``feature_dim`` an ``int``.
* ``style``: ``style_site`` names the submodule whose output MixStyle/DSU perturb, with
  ``style_channel_dim`` the axis of its channels (``1`` for ``(B, C, T)``, ``-1`` for tokens).
* ``align``: ``align_site`` names the submodule whose (temporally averaged) output feature
  alignment losses use, with ``align_channel_dim`` as above.
* ``aux``: ``forward_with_aux(x)`` returns an object with ``.logits`` (equal to ``forward(x)``)
  and ``.losses()``, a dict of unweighted scalar auxiliary terms. Parameters that only those
  terms train (SD-Former's reconstruction decoder) are reached this way; a recipe that wants
  the model's full objective asks for it.

``batch_independent_eval`` (default ``True``) states that in eval mode each sample's output
depends on that sample alone (so it can be scored alone or in any batch); the contract test
holds every backbone that claims it to it.

:meth:`BiosignalModel.supports` answers for each, and :meth:`BiosignalModel.require` raises one
clear error naming the backbone and what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn

__all__ = [
    "CAPABILITIES",
    "BiosignalModel",
    "Capability",
    "backbone_supports",
    "check_dropout",
    "check_heads",
    "check_positive_ints",
    "check_window",
    "count_parameters",
]

Capability = Literal["features", "style", "align", "aux"]
CAPABILITIES: tuple[Capability, ...] = ("features", "style", "align", "aux")


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters (``requires_grad``), each shared tensor counted once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def check_positive_ints(owner: str, **values: Any) -> None:
    """Raise ``ValueError("<owner>: <name> must be a positive integer ...")`` for the first bad value."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def check_dropout(owner: str, **rates: float) -> None:
    """Raise ``ValueError("<owner>: <name> must lie in [0, 1) ...")`` for the first rate outside ``[0,
    1)``."""
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{owner}: {name} must lie in [0, 1), got {rate}")


def check_heads(owner: str, d_model: int, n_heads: int) -> None:
    """Multi-head attention splits ``d_model`` into ``n_heads`` equal heads."""
    if d_model % n_heads != 0:
        raise ValueError(f"{owner}: d_model ({d_model}) must be divisible by n_heads ({n_heads})")


def check_window(owner: str, x: torch.Tensor, n_chans: int, n_times: int) -> None:
    """Inputs are ``(batch, n_chans, n_times)`` windows of exactly the shape the model was built for."""
    if x.ndim != 3 or x.shape[1] != n_chans or x.shape[2] != n_times:
        raise ValueError(f"{owner} expects x of shape (batch, n_chans={n_chans}, n_times={n_times}), "
                         f"got {tuple(x.shape)}")


class BiosignalModel(nn.Module):
    """Base of every backbone: validated signal metadata plus the optional feature interface.

    Args:
        n_chans: input channels.
        n_outputs: number of classes (logits per window).
        n_times: samples per window.
        sfreq: sampling rate in Hz (positive).
        chs_info: optional per-channel descriptions (braindecode / MNE ``info["chs"]`` style);
            when given its length must equal ``n_chans``, and ``n_chans`` may be left out.
        input_window_seconds: optional window length in seconds; ``n_times`` may be left out
            when it is given (``round(input_window_seconds * sfreq)``), as in braindecode.

    Subclasses that expose features set ``head`` and ``feature_dim`` in ``__init__`` and
    override :meth:`forward_features`; ones with a style or alignment site set the class or
    instance attributes ``style_site`` / ``align_site`` (dotted submodule names).
    """

    #: dotted name of the submodule MixStyle/DSU act on, or None
    style_site: str | None = None
    style_channel_dim: int = 1
    #: dotted name of the submodule whose output feature-alignment losses pool, or None
    align_site: str | None = None
    align_channel_dim: int = 1
    #: width of ``forward_features``' output, or None when the backbone has no feature interface
    feature_dim: int | None = None
    #: maps ``forward_features``' output to the logits; set by the backbones with the feature interface
    head: nn.Module
    #: in eval mode each sample's output depends on that sample alone
    batch_independent_eval: bool = True
    #: False for a pretext model that shares the signal metadata but predicts something other than class
    #: logits (DCRNN's next-clip pre-training); the catalog and its contract test hold classifiers only
    outputs_logits: bool = True

    def __init__(
        self,
        *,
        n_chans: int | None = None,
        n_outputs: int,
        n_times: int | None = None,
        sfreq: float,
        chs_info: Sequence[dict[str, Any]] | None = None,
        input_window_seconds: float | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        # braindecode's inference: channels from chs_info, samples from the window length and the rate
        if n_chans is None and chs_info is not None:
            n_chans = len(chs_info)
        if n_times is None and input_window_seconds is not None and isinstance(sfreq, int | float):
            n_times = int(round(float(input_window_seconds) * float(sfreq)))
        if n_chans is None or n_times is None:
            missing = "n_chans (or chs_info)" if n_chans is None else "n_times (or input_window_seconds)"
            raise ValueError(f"{owner}: {missing} is required (a DataModule links it from the data)")
        check_positive_ints(owner, n_chans=n_chans, n_outputs=n_outputs, n_times=n_times)
        if isinstance(sfreq, bool) or not isinstance(sfreq, int | float) or not float(sfreq) > 0.0:
            raise ValueError(f"{owner}: sfreq must be a positive number of Hz, got {sfreq!r}")
        if chs_info is not None and len(chs_info) != n_chans:
            raise ValueError(f"{owner}: chs_info describes {len(chs_info)} channels but n_chans={n_chans}")
        if (
            input_window_seconds is not None
            and abs(n_times - float(input_window_seconds) * float(sfreq)) > 0.5
        ):
            raise ValueError(f"{owner}: input_window_seconds={input_window_seconds} at sfreq={sfreq} is "
                             f"{float(input_window_seconds) * float(sfreq):g} samples, but n_times={n_times}")
        self.n_chans = int(n_chans)
        self.n_outputs = int(n_outputs)
        self.n_times = int(n_times)
        self.sfreq = float(sfreq)
        self.chs_info = list(chs_info) if chs_info is not None else None

    # ---- metadata ------------------------------------------------------------------------------
    @property
    def ch_names(self) -> list[str] | None:
        """Channel names from ``chs_info``, or None when it was not given."""
        if self.chs_info is None:
            return None
        return [str(ch.get("ch_name", i)) for i, ch in enumerate(self.chs_info)]

    @property
    def input_window_seconds(self) -> float:
        """Window length in seconds (``n_times / sfreq``)."""
        return self.n_times / self.sfreq

    def check_input(self, x: torch.Tensor) -> None:
        """Raise one clear error unless ``x`` is ``(batch, n_chans, n_times)``."""
        check_window(type(self).__name__, x, self.n_chans, self.n_times)

    # ---- optional feature interface ------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, n_outputs)``: ``head(forward_features(x))`` for a backbone with the feature
        interface (so that identity holds by construction); others override ``forward``."""
        return self.head(self.forward_features(x))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Embedding ``(batch, feature_dim)`` that ``head`` maps to the logits of :meth:`forward`."""
        raise TypeError(f"{type(self).__name__} has no feature interface (forward_features, head, "
                        f"feature_dim)")

    def supports(self, capability: Capability) -> bool:
        """Whether this backbone offers ``capability`` (``features``, ``style``, ``align`` or ``aux``)."""
        if capability == "aux":
            # no default on the base: a recipe that probes for forward_with_aux must not find one
            return callable(getattr(self, "forward_with_aux", None))
        if capability == "features":
            overridden = type(self).forward_features is not BiosignalModel.forward_features
            head = getattr(self, "head", None)
            return overridden and isinstance(head, nn.Module) and isinstance(self.feature_dim, int)
        if capability in ("style", "align"):
            site = getattr(self, f"{capability}_site")
            return site is not None and _has_submodule(self, site)
        raise ValueError(f"unknown capability {capability!r}; expected one of {', '.join(CAPABILITIES)}")

    def capabilities(self) -> frozenset[str]:
        """Every capability this backbone offers."""
        return frozenset(c for c in CAPABILITIES if self.supports(c))

    def require(self, capability: Capability, who: str) -> None:
        """Raise ``TypeError`` naming ``who`` needs ``capability`` that this backbone lacks."""
        if not self.supports(capability):
            need = {"features": "forward_features(x), head and feature_dim",
                    "style": "a style_site (the submodule MixStyle/DSU perturb)",
                    "align": "an align_site (the submodule whose output is aligned)",
                    "aux": "forward_with_aux(x) (auxiliary loss terms)"}[capability]
            raise TypeError(f"{who} needs a backbone with {need}; {type(self).__name__} has none")


def backbone_supports(backbone: nn.Module, capability: Capability) -> bool:
    """:meth:`BiosignalModel.supports` for any module (a foreign backbone, e.g. braindecode's, supports none
    of the optional interface unless it defines it the same way)."""
    if isinstance(backbone, BiosignalModel):
        return backbone.supports(capability)
    if capability == "aux":
        return callable(getattr(backbone, "forward_with_aux", None))
    if capability == "features":
        return (callable(getattr(backbone, "forward_features", None))
                and isinstance(getattr(backbone, "head", None), nn.Module)
                and isinstance(getattr(backbone, "feature_dim", None), int))
    site = getattr(backbone, f"{capability}_site", None)
    return site is not None and _has_submodule(backbone, site)


def _has_submodule(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True
