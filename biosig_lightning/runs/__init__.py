"""The run-directory library: everything between a ``biosig`` command and its run directory.

* :mod:`.biosig_cli` -- :class:`BiosigCLI`, the LightningCLI behind ``biosig fit|validate|test|predict``;
* :mod:`.placement` -- where every logger of a run writes (``--run.*``);
* :mod:`.naming` -- experiment and variant names;
* :mod:`.results` -- ``results.json`` and its metrics table;
* :mod:`.resume`, :mod:`.csv_history` -- resuming a run in its own directory without losing its curves;
* :mod:`.dashboard` -- the wandb logger and run summary;
* :mod:`.load` -- reopening a finished run (:func:`load_run`) for the analysis commands;
* :mod:`.errors` -- the one-line error policy of every command.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LoadedRun", "RunError", "load_run", "read_results", "resolve_checkpoint"]


def __getattr__(name: str) -> Any:
    # imported on first use, so `biosig --help` (which reaches runs.errors) does not load torch and Lightning
    if name in __all__:
        from biosig_lightning.runs import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
