"""BioFormer (Du et al., ICML 2026) and its reusable parts.

``BioFormer`` is the classifier; ``FBAM`` can be inserted between the encoder layers of
any token backbone (Table 3, "+FBAM"); ``TSAM`` is its time-domain control (Appendix
B.2); ``SampleConditionalLayerNorm`` is SCLN (Sec. 4.3).
"""

from biosig_lightning.models.bioformer.alignment import FBAM, TSAM, BandController, resolve_kernel_mode
from biosig_lightning.models.bioformer.bands import BandLayout, resolve_edges, uniform_edges
from biosig_lightning.models.bioformer.embedding import PyramidConvEmbedding, parse_augmentation
from biosig_lightning.models.bioformer.encoder import SegmentedEncoderLayer
from biosig_lightning.models.bioformer.model import BioFormer
from biosig_lightning.models.bioformer.scln import SampleConditionalLayerNorm

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
