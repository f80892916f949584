"""Blocks shared by several backbones (graph operators, ...)."""
