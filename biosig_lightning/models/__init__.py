"""Pure torch nn.Modules (no Lightning, no data code)."""

from biosig_lightning.models import signed_graph
from biosig_lightning.models.baselines import dgcnn, gin

__all__ = ["dgcnn", "gin", "signed_graph"]
