"""Packaged config names: ``biosig configs copy|path`` resolve only configs shipped with the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from biosig_lightning import configs
from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS


@pytest.mark.parametrize("name", ["../pyproject", "overlays/../../pyproject.toml", "/etc/passwd",
                                  str(EXPERIMENTS / "bioformer_apava")])
def test_configs_copy_and_path_resolve_only_shipped_configs(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert configs.find(name) is None
    for action in ("path", "copy"):
        with pytest.raises(SystemExit,
                           match=rf"^biosig configs: error: {action} {name}: not a packaged config name"):
            main(["configs", action, name])
    assert list(tmp_path.iterdir()) == []
    assert configs.find("overlays/smoke") == (EXPERIMENTS / "overlays" / "smoke.yaml").resolve()
