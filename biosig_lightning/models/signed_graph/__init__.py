"""Balanced signed graph unrolled denoisers (Yao et al., "Lightweight transformer for EEG classification via
balanced signed graph algorithm unrolling")."""

from biosig_lightning.models.signed_graph.model import (
    BalancedGraphLearning,
    SignedGraphClassifier,
    SignedGraphDenoiser,
)

__all__ = ["BalancedGraphLearning", "SignedGraphClassifier", "SignedGraphDenoiser"]
