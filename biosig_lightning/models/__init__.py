"""Pure torch nn.Modules (no Lightning, no data code)."""

from biosig_lightning.models import spdtransnet  # noqa: F401  (fills the catalog)
