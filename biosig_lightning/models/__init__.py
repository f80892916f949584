"""Pure torch nn.Modules (no Lightning, no data code)."""
