"""One thin DataModule per corpus, plus the ones for a user's own data (BIDS, arrays, ``mne.Epochs``);
importing this package registers their short names."""

from biosig_lightning.data.datamodules.arrays import ArrayDataModule, ArrayFileDataModule, EpochsDataModule
from biosig_lightning.data.datamodules.bci_iv import BCIIVDataModule
from biosig_lightning.data.datamodules.bids import BIDSDataModule
from biosig_lightning.data.datamodules.chb_mit import CHBMITDataModule, CHBMITSeizureDataModule
from biosig_lightning.data.datamodules.dodh import DODHDataModule
from biosig_lightning.data.datamodules.mass_ss3 import MASSSS3DataModule, SleepEDFSPDDataModule
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
from biosig_lightning.data.datamodules.tusz import TUSZDataModule

__all__ = ["ADFTDDataModule", "APAVADataModule", "ArrayDataModule", "ArrayFileDataModule", "BCIIVDataModule",
           "BIDSDataModule", "CHBMITDataModule", "CHBMITSeizureDataModule",
           "DODHDataModule", "EpochsDataModule", "MASSSS3DataModule", "MedformerDataModule", "PTBDataModule",
           "PTBXLDataModule",
           "PTBXLMedformerDataModule", "SleepEDFDataModule", "SleepEDFSPDDataModule", "SyntheticDataModule",
           "TUABDataModule", "TUSZDataModule", "TurkishEpilepsyDataModule"]
