"""A throw-away PostgreSQL server on loopback for the shared-study tests (Debian's ``postgresql``).

``.ci/run`` installs the package when it is missing. The server runs as the ``postgres`` system
user when the tests run as root (PostgreSQL refuses to run as root), listens on 127.0.0.1 at a free
port with trust authentication, and is stopped and deleted afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def postgres_bin() -> Path | None:
    """Folder holding ``initdb``/``pg_ctl`` (Debian keeps them under /usr/lib/postgresql/<v>/bin)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, yield its SQLAlchemy URL, stop it and remove its files."""
    bindir = postgres_bin()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL is not installed (apt-get install postgresql)")
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="biosig-pg-")
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    data, log, port = Path(root) / "data", Path(root) / "server.log", _free_port()

    def sh(*cmd: str, timeout: int = 60) -> None:
        proc = subprocess.run([*as_user, *cmd], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = log.read_text()[-1500:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-1500:]}{tail}")

    try:
        sh(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "biosig", "--no-sync", "-E", "UTF8")
        sh(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
           f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        yield f"postgresql+psycopg2://biosig@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
