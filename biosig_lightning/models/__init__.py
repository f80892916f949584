"""Pure torch nn.Modules (no Lightning, no data code).

Importing this package imports every model package, so each backbone's
``@register_backbone`` runs and :mod:`biosig_lightning.models.catalog` is filled (and
LightningCLI, which resolves short class names among imported subclasses, finds them).
"""

from biosig_lightning.models import baselines, bioformer, dcrnn, sdformer, signed_graph, spdtransnet
from biosig_lightning.models.base import BiosignalModel, backbone_supports, count_parameters

__all__ = ["BiosignalModel", "backbone_supports", "baselines", "bioformer", "count_parameters", "dcrnn",
           "sdformer",
           "signed_graph", "spdtransnet"]
