"""biosig-lightning: cross-subject biosignal classification with PyTorch Lightning."""

__version__ = "0.1.0"
