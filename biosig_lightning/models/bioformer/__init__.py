"""BioFormer (Du et al., ICML 2026).

``BioFormer`` is the classifier (:mod:`.model`), built from the Pyramid Convolutional Embedding
(:mod:`.embedding`) and the segmented encoder layer (:mod:`.encoder`). Its reusable parts live in
:mod:`biosig_lightning.models.modules`, because other models host them too: ``FBAM`` (inserted
between the encoder layers of any token backbone, Table 3 "+FBAM"), ``TSAM`` (its time-domain
control, Appendix B.2), ``SampleConditionalLayerNorm`` (SCLN, Sec. 4.3), the band layout and the
in-model augmentations. They are re-exported here so ``biosig_lightning.models.bioformer.FBAM``
and the other names keep resolving in users' code and configs.
"""

from biosig_lightning.models.bioformer.embedding import PyramidConvEmbedding
from biosig_lightning.models.bioformer.encoder import SegmentedEncoderLayer
from biosig_lightning.models.bioformer.model import BioFormer
from biosig_lightning.models.modules.alignment import FBAM, TSAM, BandController, resolve_kernel_mode
from biosig_lightning.models.modules.augment import parse_augmentation
from biosig_lightning.models.modules.bands import BandLayout, resolve_edges, uniform_edges
from biosig_lightning.models.modules.scln import SampleConditionalLayerNorm

__all__ = [
    "FBAM",
    "TSAM",
    "BandController",
    "BandLayout",
    "BioFormer",
    "PyramidConvEmbedding",
    "SampleConditionalLayerNorm",
    "SegmentedEncoderLayer",
    "parse_augmentation",
    "resolve_kernel_mode",
    "resolve_edges",
    "uniform_edges",
]
