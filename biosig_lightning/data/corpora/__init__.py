"""Corpus readers: one public on-disk layout per file, no training code."""
