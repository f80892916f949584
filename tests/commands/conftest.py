"""Fixtures of the command tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture
def env(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a ``biosig`` subprocess: this checkout importable, one thread, a private cache."""
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("BIOSIG_CACHE", str(in_tmp / "cache"))
    return dict(os.environ)
