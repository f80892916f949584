"""braindecode model names that hold for 0.8 and 1.x, and braindecode-style shape inference in the base."""

from __future__ import annotations

import sys
import types

import pytest

from biosig_lightning.models import braindecode_names
from biosig_lightning.models.base import BiosignalModel


def _fake_braindecode(monkeypatch: pytest.MonkeyPatch, version: str, **classes: type) -> None:
    package = types.ModuleType("braindecode")
    package.__version__ = version
    models = types.ModuleType("braindecode.models")
    for name, cls in classes.items():
        setattr(models, name, cls)
    package.models = models
    monkeypatch.setitem(sys.modules, "braindecode", package)
    monkeypatch.setitem(sys.modules, "braindecode.models", models)


@pytest.mark.parametrize("version, installed", [("0.8", "EEGNetv4"), ("1.2", "EEGNet")])
def test_eegnet_resolves_under_either_name(monkeypatch: pytest.MonkeyPatch,
                                           version: str, installed: str) -> None:
    cls = type(installed, (), {})
    _fake_braindecode(monkeypatch, version, **{installed: cls, "Deep4Net": type("Deep4Net", (), {})})
    assert braindecode_names.EEGNet is cls
    assert braindecode_names.EEGNetv4 is cls
    assert braindecode_names.Deep4Net.__name__ == "Deep4Net"  # a name that did not move is braindecode's own


def test_every_renamed_model_resolves_from_its_new_name_on_0_8(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_braindecode(monkeypatch, "0.8",
                      **{old: type(old, (), {}) for old in braindecode_names.RENAMED.values()})
    for new, old in braindecode_names.RENAMED.items():
        assert braindecode_names.braindecode_model(new).__name__ == old


def test_unknown_name_and_missing_braindecode_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_braindecode(monkeypatch, "1.2")
    with pytest.raises(AttributeError, match="braindecode 1.2 has no model named 'NoSuchNet'"):
        braindecode_names.NoSuchNet  # noqa: B018
    monkeypatch.setitem(sys.modules, "braindecode", None)
    monkeypatch.setitem(sys.modules, "braindecode.models", None)
    with pytest.raises(braindecode_names.MissingExtraError,
                       match=r"pip install 'biosig-lightning\[braindecode\]'"):
        braindecode_names.EEGNet  # noqa: B018


def test_shape_inferred_from_chs_info_and_window_seconds() -> None:
    chs = [{"ch_name": n} for n in ("C3", "C4", "Cz")]
    model = BiosignalModel(n_outputs=2, sfreq=250.0, chs_info=chs, input_window_seconds=2.0)
    assert (model.n_chans, model.n_times, model.ch_names) == (3, 500, ["C3", "C4", "Cz"])
    with pytest.raises(ValueError, match=r"n_times \(or input_window_seconds\) is required"):
        BiosignalModel(n_chans=3, n_outputs=2, sfreq=250.0)
    with pytest.raises(ValueError,
                       match="input_window_seconds=1.0 at sfreq=250.0 is 250 samples, but n_times=500"):
        BiosignalModel(n_chans=3, n_outputs=2, n_times=500, sfreq=250.0, input_window_seconds=1.0)
