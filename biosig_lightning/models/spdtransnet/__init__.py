"""SPDTransNet: structure-preserving Transformers for sequences of SPD matrices (Seraphim et al.)."""

from biosig_lightning.models.spdtransnet.attention import SPEncoderLayer, SPMultiheadAttention
from biosig_lightning.models.spdtransnet.model import SPDTransNet

__all__ = ["SPDTransNet", "SPEncoderLayer", "SPMultiheadAttention"]
