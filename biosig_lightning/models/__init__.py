"""Pure torch nn.Modules (no Lightning, no data code)."""

from biosig_lightning.models import signed_graph

__all__ = ["signed_graph"]
