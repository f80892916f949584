from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    # one window cache for the whole session, never the user's ~/.cache
    os.environ["BIOSIG_CACHE"] = str(tmp_path_factory.mktemp("biosig-cache"))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary directory (runs/ lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
