"""Pure torch nn.Modules (no Lightning, no data code)."""

from biosig_lightning.models import baselines, dcrnn  # noqa: F401  (fills the backbone catalog)
