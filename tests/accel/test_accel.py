"""numba as an optional accelerator: present or not, and switched off by BIOSIG_NUMBA=0."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from biosig_lightning import accel


def test_enabled_needs_the_module_and_no_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("numba")
    monkeypatch.delenv("BIOSIG_NUMBA", raising=False)
    assert accel.enabled(fake)
    assert not accel.enabled(None)
    monkeypatch.setenv("BIOSIG_NUMBA", "0")
    assert not accel.enabled(fake)
    monkeypatch.setenv("BIOSIG_NUMBA", "1")
    assert accel.enabled(fake)


@pytest.mark.parametrize(("flags", "native"), [
    ("fpu sse avx2 avx512f avx512bw avx512_bf16 avx512_vnni", True),  # AMD Zen 4, Intel Cooper Lake
    ("fpu avx2 avx512f amx_bf16 amx_tile amx_int8", True),  # Intel Sapphire Rapids
    ("fpu sse avx2 avx512f avx512bw avx512_vnni", False),  # AVX-512 without bfloat16 (Skylake-SP, Ice Lake)
    ("fpu sse avx2 fma", False),
])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path: Path, flags: str, native: bool) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "".join(f"processor\t: {i}\nmodel name\t: test\nflags\t\t: {flags}\n\n" for i in range(2))
    )
    assert accel.cpu_native_bf16(info) is native
    assert accel.cpu_native_bf16(tmp_path / "absent") is None


def test_bf16_warning_only_for_emulated_bfloat16_on_a_cpu() -> None:
    msg = accel.bf16_cpu_warning("bf16-mixed", "cpu", native=False)
    assert msg is not None and "trainer.precision=bf16-mixed" in msg and "avx512_bf16" in msg
    assert accel.bf16_cpu_warning("bf16-true", "cpu", native=False) is not None
    for args in (("bf16-mixed", "cpu", True), ("bf16-mixed", "cpu", None), ("bf16-mixed", "cuda", False),
                 ("32-true", "cpu", False), ("16-mixed", "cpu", False)):
        assert accel.bf16_cpu_warning(*args) is None, args


def test_numba_is_imported_on_first_use_not_by_the_fit_command() -> None:
    """``biosig fit``'s start-up does not pay for numba; ``accel.numba`` imports it when a kernel asks."""
    import subprocess
    import sys

    script = """
import sys
import biosig_lightning.runs.biosig_cli
assert "numba" not in sys.modules, "numba imported at start-up"
from biosig_lightning import accel
print(accel.numba is not None and accel.enabled() == accel.enabled(accel.numba), "numba" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "True"], proc.stdout
