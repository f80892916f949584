"""numba as an optional accelerator: present or not, and switched off by BIOSIG_NUMBA=0."""

from __future__ import annotations

import types

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
