"""SD-Former (Sharma): spectral tokens, a learned sparse directed graph, graph-masked attention.

The model is :mod:`.model`; its public names (``biosig_lightning.models.sdformer.SDFormer``, the
class path the experiments name, and the graph maths the SD-Former recipe uses) resolve here.
"""

from biosig_lightning.models.sdformer.model import *  # noqa: F403  (the package's public names)
from biosig_lightning.models.sdformer.model import __all__  # noqa: F401
