"""``biosig tune --grace-period G``: the storage the study runs on carries G and the heartbeat G needs.

Read from the storage object ``biosig tune`` hands to Optuna (its ``grace_period`` and
``heartbeat_interval``, Optuna's ``RDBStorage`` settings), not from the helper that computes them:
a storage opened with its default grace period passes every test that only kills a worker, just later.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from biosig_lightning.cli import main
from tests.conftest import EXPERIMENTS

SMOKE = ["--config", str(EXPERIMENTS / "overlays" / "demo.yaml"), "--config",
         str(EXPERIMENTS / "overlays" / "smoke.yaml")]
SPACE = "model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}\n"


class _Opened(Exception):
    """Stops ``biosig tune`` once its study storage is open (nothing is trained)."""


# grace period -> heartbeat: three beats fit into it, one every 30 s at most
@pytest.mark.parametrize("grace,beat", [(7, 2), (500, 30)])
def test_the_study_storage_holds_the_given_grace_period(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                       grace: int, beat: int) -> None:
    opened = []

    def create_study(*args: object, storage: optuna.storages.RDBStorage, **kwargs: object) -> None:
        opened.append(storage)
        raise _Opened

    monkeypatch.setattr(optuna, "create_study", create_study)
    (in_tmp / "space.yaml").write_text(SPACE)
    with pytest.raises(_Opened):
        main(["tune", *SMOKE, "--search-space", str(in_tmp / "space.yaml"), "--study-name", "g", "--n-trials",
              "1",
              "--grace-period", str(grace)])
    (storage,) = opened
    assert isinstance(storage, optuna.storages.RDBStorage)
    assert (storage.grace_period, storage.heartbeat_interval) == (grace, beat)
