"""The errors of ``biosig tune``: each is one line naming the key, file or URL."""

from __future__ import annotations


class TuneError(ValueError):
    """Bad ``biosig tune`` input (one line, names the key / file / URL)."""


class FatalTrialError(TuneError):
    """A trial error every later trial would hit too (bad setup): the worker stops instead of retrying."""


class TunePreempted(TuneError):
    """A preemption signal (SIGTERM) stopped this worker's trial: it is FAIL and queued again with the same
    parameters, so the rerun of the same command runs it first."""


class TrialPreempted(Exception):  # noqa: N818 (Optuna records it on the trial as FAIL, then the worker stops)
    """Raised out of the objective when Lightning stopped the trial's fit on SIGTERM."""
