"""``biosig tune`` as a library: Optuna studies over config keys of a ``biosig fit`` experiment.

* :mod:`.search_space` reads ``SPACE.yaml`` into distributions and checks them with the fit parser;
* :mod:`.trial_setup` checks what every trial shares (the metric, the trainer) before a study exists;
* :mod:`.storage` opens the study's storage (SQLAlchemy URLs, passwords hidden);
* :mod:`.pruning` is the Lightning callback that reports to the trial and prunes;
* :mod:`.coordination` shares the study between workers: slots, heartbeats, trials of dead workers;
* :mod:`.objective` runs one trial; :mod:`.study` runs one worker's share (:func:`tune`).
"""

from biosig_lightning.tuning.errors import FatalTrialError, TuneError
from biosig_lightning.tuning.study import export_best, tune

__all__ = ["FatalTrialError", "TuneError", "export_best", "tune"]
