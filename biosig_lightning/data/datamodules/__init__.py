"""One thin DataModule per corpus; importing this package registers their short names."""

from biosig_lightning.data.datamodules.bci_iv import BCIIVDataModule
from biosig_lightning.data.datamodules.chb_mit import CHBMITDataModule
from biosig_lightning.data.datamodules.medformer import (
    ADFTDDataModule,
    APAVADataModule,
    MedformerDataModule,
    PTBDataModule,
    PTBXLMedformerDataModule,
)
from biosig_lightning.data.datamodules.ptbxl import PTBXLDataModule
from biosig_lightning.data.datamodules.sleep_edf import SleepEDFDataModule
from biosig_lightning.data.datamodules.synthetic import SyntheticDataModule
from biosig_lightning.data.datamodules.tuab import TUABDataModule
from biosig_lightning.data.datamodules.turkish_epilepsy import TurkishEpilepsyDataModule

__all__ = ["ADFTDDataModule", "APAVADataModule", "BCIIVDataModule", "CHBMITDataModule", "MedformerDataModule",
           "PTBDataModule", "PTBXLDataModule", "PTBXLMedformerDataModule", "SleepEDFDataModule",
           "SyntheticDataModule", "TUABDataModule", "TurkishEpilepsyDataModule"]
