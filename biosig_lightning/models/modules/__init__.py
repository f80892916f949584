"""Blocks used by more than one model (docs/architecture.md, ``models/modules/``).

* :mod:`.alignment` / :mod:`.bands`: BioFormer's FBAM and TSAM with their band controller and
  band layout (inserted into the Table 3 baselines as "+FBAM").
* :mod:`.scln`: Sample-Conditional LayerNorm (BioFormer Sec. 4.3).
* :mod:`.encodings`: fixed sinusoidal positional encodings.
* :mod:`.attention`: head split/merge, written-out softmax attention, the post-norm layer half.
* :mod:`.dropout`: :class:`MaskDropout`, the fast inverted dropout.
* :mod:`.augment`: BioFormer's / Medformer's in-model augmentations.
* :mod:`.learned_graphs`: GCN normalisation, NOTEARS acyclicity, random DAGs.
* :mod:`.channel_graphs`: DCRNN's diffusion supports (scaled Laplacian, dual random walk) and graph
convolution.
* :mod:`.time_steps`: cutting ``(batch, channels, steps * bins)`` inputs into 1-s steps for the recurrent
seizure models.
* :mod:`.domain`: the domain-generalisation blocks every backbone can host (MixStyle, DSU,
  gradient reversal, subject discriminator, MMD, CORAL).
"""

from biosig_lightning.models.modules.alignment import (
    FBAM,
    TSAM,
    BandController,
    HostKernelMode,
    fbam_options,
    resolve_kernel_mode,
)
from biosig_lightning.models.modules.attention import (
    PostNormLayer,
    merge_heads,
    softmax_attention,
    split_heads,
)
from biosig_lightning.models.modules.augment import AUGMENTATION_KINDS, augment, parse_augmentation
from biosig_lightning.models.modules.bands import BandLayout, resolve_edges, uniform_edges
from biosig_lightning.models.modules.domain import (
    DSU,
    GradientReversal,
    MixStyle,
    SubjectDiscriminator,
    coral_loss,
    grad_reverse,
    mmd_loss,
)
from biosig_lightning.models.modules.dropout import MaskDropout
from biosig_lightning.models.modules.encodings import SinusoidalPositionalEncoding, sinusoidal_positions
from biosig_lightning.models.modules.learned_graphs import (
    normalized_adjacency,
    notears_acyclicity,
    random_dag,
)
from biosig_lightning.models.modules.scln import SampleConditionalLayerNorm

__all__ = [
    "AUGMENTATION_KINDS",
    "DSU",
    "FBAM",
    "TSAM",
    "BandController",
    "BandLayout",
    "GradientReversal",
    "HostKernelMode",
    "MaskDropout",
    "MixStyle",
    "PostNormLayer",
    "SampleConditionalLayerNorm",
    "SinusoidalPositionalEncoding",
    "SubjectDiscriminator",
    "augment",
    "coral_loss",
    "fbam_options",
    "grad_reverse",
    "merge_heads",
    "mmd_loss",
    "normalized_adjacency",
    "notears_acyclicity",
    "parse_augmentation",
    "random_dag",
    "resolve_edges",
    "resolve_kernel_mode",
    "sinusoidal_positions",
    "softmax_attention",
    "split_heads",
    "uniform_edges",
]
