"""braindecode backbones under names that hold for braindecode 0.8 and 1.x alike.

braindecode 1.x renamed some models after their papers (its "What's new", 1.2: ``EEGNetv4`` ->
``EEGNet``, ``SleepStagerEldele2021`` -> ``AttnSleep``, ``TSceptionV1`` -> ``TSception``; 1.0:
``TCN`` -> ``BDTCN``), while 0.8 knows only the old names. A YAML that says
``class_path: biosig_lightning.models.braindecode_names.EEGNet`` gets whichever class the
installed braindecode has; every other name is braindecode's own (``Deep4Net``,
``ShallowFBCSPNet``...). braindecode is an extra: without it, asking for a name is one line
saying how to install it. Nothing is imported until a name is asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RENAMED", "MissingExtraError", "braindecode_model"]

#: braindecode 1.x name -> the 0.8 name of the same model
RENAMED: dict[str, str] = {
    "EEGNet": "EEGNetv4",
    "AttnSleep": "SleepStagerEldele2021",
    "TSception": "TSceptionV1",
    "BDTCN": "TCN",
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def braindecode_model(name: str) -> type:
    """The braindecode model class called ``name`` in either naming (new or old)."""
    try:
        import braindecode.models as models
    except ImportError as err:
        raise MissingExtraError(f"braindecode model {name!r} needs braindecode: pip install "
                                f"'biosig-lightning[braindecode]' (see docs/install.md for the "
                                f"torch/torchaudio "
                                f"pairs that load; import failed with: {err})") from None
    old = {v: k for k, v in RENAMED.items()}
    for candidate in (name, RENAMED.get(name), old.get(name)):
        if candidate and hasattr(models, candidate):
            return getattr(models, candidate)
    import braindecode

    raise AttributeError(f"braindecode {braindecode.__version__} has no model named {name!r}")


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return braindecode_model(name)
