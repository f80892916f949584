"""DCRNN (Tang et al., 2022): diffusion-convolutional recurrent network on EEG channel graphs."""

from biosig_lightning.models.dcrnn.model import CHBMIT_BIPOLAR_18, DCRNN, DCGRUCell, diffusion_terms

__all__ = ["CHBMIT_BIPOLAR_18", "DCGRUCell", "DCRNN", "diffusion_terms"]
