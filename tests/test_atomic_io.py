"""``atomic_io``: an atomically written file gets the mode ``open()`` would give it (umask), not
``mkstemp``'s 0600, so the other machines and users of a shared run or benchmark folder can read it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_atomic_writes_follow_the_umask(tmp_path: Path, umask: int) -> None:
    # a fresh interpreter: the module reads the umask once, when imported
    code = ("import os, sys; os.umask(int(sys.argv[1], 8)); from biosig_lightning.atomic_io import "
            "atomic_write_json; "
            "atomic_write_json(sys.argv[2], {'a': 1}); open(sys.argv[3], 'w').close()")
    written, opened = tmp_path / "results.json", tmp_path / "plain.txt"
    subprocess.run([sys.executable, "-c", code, oct(umask)[2:], str(written), str(opened)], check=True)
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(opened.stat().st_mode) == 0o666 & ~umask
