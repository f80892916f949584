"""DCRNN (Tang et al., 2022): diffusion-convolutional recurrent network on EEG channel graphs."""

from biosig_lightning.models.dcrnn.model import (
    CHBMIT_BIPOLAR_18,
    DCRNN,
    DCGRUCell,
    dcgru_encode,
    diffusion_terms,
)
from biosig_lightning.models.dcrnn.ssl import DCRNNNextClip

__all__ = ["CHBMIT_BIPOLAR_18", "DCGRUCell", "DCRNN", "DCRNNNextClip", "dcgru_encode", "diffusion_terms"]
