from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

# `make test` runs `pytest -n 2` (pytest-xdist): each worker gets its share of the cores, else two workers
# running torch's default thread count each oversubscribe the machine and every test slows down several times
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    import torch

    _threads = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(
        _threads
    )  # the subprocesses a test starts (console script, DDP spawn)
    torch.set_num_threads(_threads)


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    # one window cache for the whole session, shared by its xdist workers (each stand-in is built once; the
    # cache's own lock makes a second builder wait and load it), never the user's ~/.cache
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "biosig-cache"
    path.mkdir(exist_ok=True)
    os.environ["BIOSIG_CACHE"] = str(path)


#: what an in-process DDP run (Lightning's launcher) leaves in os.environ: a later test that starts
#: subprocesses with a copy of the environment would hand every one of them the same MASTER_PORT, and two
#: process groups then fight over it (EADDRINUSE); which test ran first on a worker decides, so restore them
_PROCESS_GROUP_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK",
                      "GROUP_RANK",
                      "LOCAL_WORLD_SIZE")


@pytest.fixture(autouse=True)
def _restore_process_group_env() -> Iterator[None]:
    before = {k: os.environ.get(k) for k in _PROCESS_GROUP_ENV}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary directory (runs/ lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A live PostgreSQL server on loopback; CI (``CI`` set) must have one, elsewhere it may be absent."""
    from tests.postgres import postgres_bin, postgres_server

    if postgres_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed; .ci/run installs Debian's postgresql package")
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    with postgres_server() as url:
        yield url
