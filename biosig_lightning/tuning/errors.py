"""The errors of ``biosig tune``: each is one line naming the key, file or URL."""

from __future__ import annotations


class TuneError(ValueError):
    """Bad ``biosig tune`` input (one line, names the key / file / URL)."""


class FatalTrialError(TuneError):
    """A trial error every later trial would hit too (bad setup): the worker stops instead of retrying."""
