"""One thin DataModule per corpus; importing this package registers their short names."""

from biosig_lightning.data.datamodules.synthetic import SyntheticDataModule

__all__ = ["SyntheticDataModule"]
