"""Domain-generalisation (DG) recipes that wrap any backbone: BioFormer's Table 3 baselines.

BioFormer (Du et al., ICML 2026), Sec. 5.2 and Appendix C.4, plugs six generic DG methods
into three backbones (Transformer, Medformer, EEGNet) and compares them with FBAM.
:class:`DGTask` is one recipe for five of them (SubjectNorm is a data option,
``data.init_args.normalization: subject``, and FBAM an architecture option):

=========  ===================================================================================
method     what happens during training (evaluation is always the plain backbone)
=========  ===================================================================================
erm        cross-entropy only (the "None" row).
mmd        ``L = L_cls + 0.05 L_MMD`` between the features of two random subjects of the batch.
coral      ``L = L_cls + 0.05 L_CORAL`` between the features of two random subjects.
grl        ``L = L_cls + 0.1 L_subj``: a subject discriminator on the features behind a
           gradient reversal layer whose coefficient follows DANN's schedule
           ``lambda_p = 2 / (1 + exp(-gamma p)) - 1``, ``gamma = 10``, ``p`` = training progress.
mixstyle   MixStyle (p 0.5, alpha 0.1) at the backbone's style site, train mode only.
dsu        DSU (p 0.5) at the backbone's style site, train mode only.
=========  ===================================================================================

Features. ``mmd``/``coral``/``grl`` align "the temporal average of the encoder outputs"
(Appendix C.4). A backbone says where its encoder output is with the attributes
``align_site`` (dotted submodule name) and ``align_channel_dim`` (as for the style site);
the output of that submodule is captured by a forward hook during the ordinary forward
pass and averaged over every non-batch, non-channel axis, giving ``(B, channels)``
features (the TSLib Transformer: its final encoder LayerNorm, ``(B, N, D) -> (B, D)``,
although its head flattens the tokens). A backbone without ``align_site``, or
``align_on="features"``, uses ``forward_features(x)`` and ``head`` instead (``logits =
head(forward_features(x))``): for globally average-pooled backbones (CNN1D, EEGNet-like
nets) that is the same temporal average. Either way the backbone runs once per step.

How two subjects are drawn, where a backbone declares its style site, and how the GRL discriminator
indexes the training subjects: :class:`DGTask`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from biosig_lightning.models.base import BiosignalModel, backbone_supports
from biosig_lightning.models.modules.domain import (
    DSU,
    GradientReversal,
    MixStyle,
    SubjectDiscriminator,
    coral_loss,
    mmd_loss,
)
from biosig_lightning.tasks.classification import ClassificationTask

__all__ = ["DEFAULT_DG_WEIGHTS", "DGMethod", "DGTask", "dann_lambda"]

DGMethod = Literal["erm", "mmd", "coral", "grl", "mixstyle", "dsu"]
METHODS = ("erm", "mmd", "coral", "grl", "mixstyle", "dsu")
#: BioFormer Appendix C.4 loss weights.
DEFAULT_DG_WEIGHTS: dict[str, float] = {"mmd": 0.05, "coral": 0.05, "grl": 0.1}


def dann_lambda(progress: float, gamma: float = 10.0) -> float:
    """DANN's reversal coefficient ``2 / (1 + exp(-gamma p)) - 1`` for progress ``p`` in [0, 1]."""
    p = min(1.0, max(0.0, float(progress)))
    return 2.0 / (1.0 + math.exp(-gamma * p)) - 1.0


class DGTask(ClassificationTask):
    """:class:`ClassificationTask` plus one DG method (BioFormer Table 3, Appendix C.4).

    Two random subjects. When a batch holds windows of at least two subjects, two of them are
    drawn uniformly (global torch RNG, so seeded runs repeat) and the discrepancy is taken
    between their windows' features. CORAL needs covariances, so only subjects with at least
    two windows in the batch are eligible for it. With fewer eligible subjects the auxiliary
    loss is skipped (exactly 0, no gradient), as the paper specifies.

    Style site. MixStyle and DSU perturb the output of one submodule through a forward hook.
    Each backbone declares where: ``style_site`` (dotted submodule name, e.g. ``"embed"``) and
    ``style_channel_dim`` (``1`` for ``(B, C, T)`` maps, ``-1`` for ``(B, L, D)`` tokens). Paper:
    right after the embedding layer for Transformer and Medformer, after the first convolution
    block for EEGNet.

    GRL subjects. The discriminator classifies the *training* subjects,
    ``len(trainer.datamodule.subjects["train"])`` of them; their sorted ids are kept in the
    ``train_subjects`` buffer and a batch's ``subject`` ids are mapped to ``0..n-1`` through
    it. The discriminator is built in :meth:`setup` (before the optimiser is configured, so
    it is optimised) and rebuilt from the weights by :meth:`load_state_dict` when a
    checkpoint is loaded into a fresh task.

    Args:
        backbone: as :class:`ClassificationTask`.
        task_args: every other :class:`ClassificationTask` argument (``n_outputs``, ``optimizer``, ``lr``,
            ...), passed on unchanged with its defaults.
        method: ``erm``, ``mmd``, ``coral``, ``grl``, ``mixstyle`` or ``dsu`` (module docstring).
        dg_weight: weight of the auxiliary loss; ``None`` takes the paper's value for the
            method (0.05 for MMD and CORAL, 0.1 for GRL). Unused by the other methods.
        grl_gamma: ``gamma`` of the DANN schedule (10 in Ganin et al.).
        disc_hidden, disc_layers, disc_dropout: the subject discriminator MLP (hidden width,
            number of hidden layers, dropout).
        style_p: probability that MixStyle/DSU perturbs a training batch (0.5).
        style_alpha: MixStyle's Beta(alpha, alpha) concentration (0.1).
        align_on: ``"auto"`` aligns the pooled output of the backbone's ``align_site`` when it
            declares one, else ``forward_features``; ``"features"`` always uses
            ``forward_features`` (module docstring).

    Logged extra terms (``train/<name>``, epoch means): ``cls_loss`` and ``dg_loss`` (the
    unweighted auxiliary loss, 0 on skipped batches) for the loss methods, plus
    ``grl_lambda`` and ``subject_acc`` (discriminator accuracy) for ``grl``.
    """

    train_subjects: torch.Tensor  # buffer of the grl discriminator's subject ids

    def __init__(
        self,
        backbone: nn.Module,
        method: DGMethod = "erm",
        dg_weight: float | None = None,
        grl_gamma: float = 10.0,
        disc_hidden: int = 256,
        disc_layers: int = 2,
        disc_dropout: float = 0.1,
        style_p: float = 0.5,
        style_alpha: float = 0.1,
        align_on: Literal["auto", "features"] = "auto",
        **task_args: Any,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"model.init_args.method must be one of {'/'.join(METHODS)}, got {method!r}")
        if dg_weight is not None and dg_weight < 0:
            raise ValueError(f"model.init_args.dg_weight must be >= 0, got {dg_weight}")
        if align_on not in ("auto", "features"):
            raise ValueError(f"model.init_args.align_on must be 'auto' or 'features', got {align_on!r}")
        if grl_gamma < 0:
            raise ValueError(f"model.init_args.grl_gamma must be >= 0, got {grl_gamma}")
        # the ClassificationTask arguments (n_outputs, optimizer, lr, ...) pass through unchanged;
        # jsonargparse
        # follows **task_args into ClassificationTask.__init__, so --print_config still lists each one
        super().__init__(backbone, **task_args)
        self.method = method
        self.dg_weight = float(dg_weight) if dg_weight is not None else DEFAULT_DG_WEIGHTS.get(method, 0.0)
        self.discriminator: SubjectDiscriminator | None = None
        self.grl = GradientReversal(0.0)
        self._grl_lambda = 0.0
        # where the aligned features come from: a hooked encoder output, or forward_features
        self._align_channel_dim: int | None = None
        self._capturing = False
        self._captured: torch.Tensor | None = None
        if method in ("mmd", "coral", "grl"):
            if align_on == "auto" and backbone_supports(backbone, "align"):
                site, self._align_channel_dim = self._site("align")
                self._align_handle = site.register_forward_hook(self._capture_hook)
            else:
                self._check_feature_api()
        self.style: nn.Module | None = None
        if method in ("mixstyle", "dsu"):
            site, channel_dim = self._site("style")
            if method == "mixstyle":
                self.style = MixStyle(p=style_p, alpha=style_alpha, channel_dim=channel_dim)
            else:
                self.style = DSU(p=style_p, channel_dim=channel_dim)
            self._style_handle = site.register_forward_hook(self._style_hook)

    # ---- construction helpers ------------------------------------------------------------------
    def _check_feature_api(self) -> None:
        if not backbone_supports(self.backbone, "features"):
            missing = [
                n for n in ("forward_features", "head", "feature_dim") if not hasattr(self.backbone, n)
            ]
            missing = missing or ["an nn.Module head and an int feature_dim"]
            raise ValueError(
                f"DGTask(method={self.method!r}) needs a backbone with forward_features(x), head and "
                f"feature_dim; "
                f"{type(self.backbone).__name__} lacks {', '.join(missing)}"
            )

    def _site(self, kind: Literal["style", "align"]) -> tuple[nn.Module, int]:
        """The backbone submodule named by its ``<kind>_site`` attribute and its channel axis."""
        name = type(self.backbone).__name__
        site = getattr(self.backbone, f"{kind}_site", None)
        if not backbone_supports(self.backbone, kind):
            if isinstance(site, str):
                raise ValueError(f"DGTask(method={self.method!r}): backbone {name} has no submodule "
                                 f"{kind}_site={site!r}")
            raise ValueError(
                f"DGTask(method={self.method!r}): backbone {name} declares no {kind} site; give the class "
                f"the "
                f"attributes {kind}_site (dotted submodule name whose output is used) and {kind}_channel_dim "
                "(1 for (B, C, T) maps, -1 for (B, L, D) tokens)"
            )
        channel_dim = getattr(self.backbone, f"{kind}_channel_dim", None)
        if not isinstance(channel_dim, int):
            raise ValueError(f"DGTask(method={self.method!r}): backbone {name} declares {kind}_site={site!r} "
                             f"but no integer {kind}_channel_dim (1 for (B, C, T) maps, -1 for (B, L, D) "
                             f"tokens)")
        return self.backbone.get_submodule(cast(str, site)), channel_dim  # backbone_supports checked it

    def _capture_hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if not self._capturing:
            return
        if not isinstance(output, torch.Tensor):
            raise TypeError(f"DGTask: the align site {type(module).__name__} of "
                            f"{type(self.backbone).__name__} "
                            f"returns {type(output).__name__}, not a tensor")
        self._captured = output

    def _features_and_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Aligned features ``(B, F)`` and logits from one pass of the backbone."""
        if self._align_channel_dim is None:
            backbone = cast(BiosignalModel, self.backbone)  # the feature interface (checked in __init__)
            features = backbone.forward_features(x)
            return features, backbone.head(features)
        self._capturing, self._captured = True, None
        try:
            logits = self.backbone(x)
        finally:
            self._capturing = False
        captured, self._captured = self._captured, None
        if captured is None:
            raise RuntimeError(f"DGTask: the align site {self.backbone.align_site!r} of "
                               f"{type(self.backbone).__name__} was not called by its forward pass")
        ch = self._align_channel_dim % captured.ndim
        dims = tuple(d for d in range(1, captured.ndim) if d != ch)
        return (captured.mean(dim=dims) if dims else captured), logits

    def _feature_width(self) -> int:
        """Width of the aligned features: ``feature_dim``, or measured by a dry eval pass."""
        if self._align_channel_dim is None:
            return int(cast(int, self.backbone.feature_dim))  # the feature interface's width
        dm = getattr(self._trainer, "datamodule", None)
        n_chans, n_times = (
            getattr(self.backbone, k, None) or getattr(dm, k, None) for k in ("n_chans", "n_times")
        )
        if not (n_chans and n_times):
            raise ValueError(f"DGTask(method='grl'): cannot size the discriminator; "
                             f"{type(self.backbone).__name__} "
                             "has no n_chans/n_times and there is no DataModule to read them from")
        device = next(self.backbone.parameters(), torch.empty(0)).device
        was_training = self.backbone.training
        self.backbone.eval()
        try:
            with torch.no_grad():
                features, _ = self._features_and_logits(torch.zeros(2, int(n_chans),
                                                                    int(n_times), device=device))
        finally:
            self.backbone.train(was_training)
        return features.shape[1]

    def _style_hook(self, module: nn.Module, inputs: Any, output: Any) -> torch.Tensor:
        if not isinstance(output, torch.Tensor):
            raise TypeError(f"DGTask: the style site {type(module).__name__} of "
                            f"{type(self.backbone).__name__} "
                            f"returns {type(output).__name__}, not a tensor")
        assert self.style is not None
        return self.style(output)

    def _build_discriminator(self, train_subjects: list[int], in_features: int | None = None) -> None:
        ids = torch.as_tensor(sorted(int(s) for s in train_subjects), dtype=torch.long)
        if ids.numel() < 2:
            raise ValueError(f"DGTask(method='grl') needs at least two training subjects, got {ids.tolist()}")
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"DGTask(method='grl'): duplicate training subject ids {ids.tolist()}")
        self.discriminator = SubjectDiscriminator(
            in_features if in_features is not None else self._feature_width(), ids.numel(),
            hidden=self.hparams.disc_hidden,
            n_hidden_layers=self.hparams.disc_layers, dropout=self.hparams.disc_dropout,
        )
        self.register_buffer("train_subjects", ids)
        device = next(self.backbone.parameters(), torch.empty(0)).device
        self.discriminator.to(device)
        self.train_subjects = self.train_subjects.to(device)

    def setup(self, stage: str) -> None:
        """Build the GRL discriminator for the DataModule's training subjects (once)."""
        if self.method != "grl" or self.discriminator is not None:
            return
        dm = getattr(self.trainer, "datamodule", None)
        train = (getattr(dm, "subjects", None) or {}).get("train")
        if not train:
            raise ValueError(
                "DGTask(method='grl') needs the training subjects to size its subject discriminator, but "
                f"trainer.datamodule.subjects['train'] is empty ({type(dm).__name__}); train through a "
                "biosig DataModule"
            )
        self._build_discriminator(list(train))

    def load_state_dict(self, state_dict: Mapping[str, Any],
                        strict: bool = True, assign: bool = False) -> Any:
        """Load weights; a GRL checkpoint rebuilds the discriminator if :meth:`setup` has not run."""
        if self.method == "grl" and self.discriminator is None and "train_subjects" in state_dict:
            first = next(k for k in state_dict if k.startswith("discriminator.") and k.endswith(".weight"))
            self._build_discriminator(state_dict["train_subjects"].tolist(), int(state_dict[first].shape[1]))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    # ---- training ------------------------------------------------------------------------------
    def training_progress(self) -> float:
        """``global_step / estimated_stepping_batches`` in [0, 1] (1 outside a Trainer)."""
        trainer = self._trainer
        if trainer is None:
            return 1.0
        total = float(trainer.estimated_stepping_batches)
        if not math.isfinite(total) or total <= 0:
            return 1.0
        return min(1.0, trainer.global_step / total)

    def _subject_targets(self, subjects: torch.Tensor) -> torch.Tensor:
        ids = self.train_subjects
        pos = torch.searchsorted(ids, subjects).clamp_max(ids.numel() - 1)
        unknown = ids[pos] != subjects
        if bool(unknown.any()):
            raise ValueError(f"DGTask(method='grl'): batch subjects "
                             f"{sorted(set(subjects[unknown].tolist()))} are "
                             f"not training subjects {ids.tolist()}")
        return pos

    @staticmethod
    def pick_subject_pair(
        subjects: torch.Tensor, min_count: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Masks of two distinct random subjects with ``>= min_count`` windows each, or ``None``."""
        ids, counts = torch.unique(subjects, return_counts=True)
        ids = ids[counts >= min_count]
        if ids.numel() < 2:
            return None
        chosen = ids[torch.randperm(ids.numel())[:2].to(ids.device)]
        return subjects == chosen[0], subjects == chosen[1]

    def training_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     torch.Tensor, dict[str, torch.Tensor]]:
        if self.method in ("erm", "mixstyle", "dsu"):
            return super().training_loss(batch)
        features, logits = self._features_and_logits(batch["x"])
        cls = F.cross_entropy(logits, batch["y"], label_smoothing=self.hparams.label_smoothing)
        extra: dict[str, torch.Tensor] = {"cls_loss": cls.detach()}
        if self.method == "grl":
            if self.discriminator is None:
                raise RuntimeError("DGTask(method='grl'): the subject discriminator was never built; "
                                   "run through a Trainer (setup) or load a GRL checkpoint first")
            self._grl_lambda = dann_lambda(self.training_progress(), self.hparams.grl_gamma)
            self.grl.coefficient = self._grl_lambda
            subject_logits = self.discriminator(self.grl(features))
            targets = self._subject_targets(batch["subject"])
            aux = F.cross_entropy(subject_logits, targets)
            extra["grl_lambda"] = torch.tensor(self._grl_lambda)
            extra["subject_acc"] = (subject_logits.argmax(-1) == targets).float().mean()
        else:
            pair = self.pick_subject_pair(batch["subject"], min_count=2 if self.method == "coral" else 1)
            if pair is None:
                aux = features.new_zeros(())
            else:
                fn = coral_loss if self.method == "coral" else mmd_loss
                aux = fn(features[pair[0]], features[pair[1]])
        extra["dg_loss"] = aux.detach()
        return cls + self.dg_weight * aux, logits, extra
