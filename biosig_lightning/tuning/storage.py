"""Study storage: SQLAlchemy URLs (passwords hidden in every message, a missing driver named) and the
RDB storage every worker of a study opens."""

from __future__ import annotations

import inspect
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from biosig_lightning.tuning.coordination import WorkerAwareStorage, heartbeat_interval
from biosig_lightning.tuning.errors import TuneError

# heartbeats are what lets a restarted worker take over a dead one's slot; the warning is Optuna's
# note that the option is "experimental", nothing the user can act on
warnings.filterwarnings("ignore", message=r".*``(heartbeat_interval|grace_period)``.*experimental",
                        category=optuna.exceptions.ExperimentalWarning)


def shown_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for every message and log line."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)  # not a URL SQLAlchemy parses; mask anyway


def storage_url(url: str) -> str:
    """The URL to connect with: a plain ``postgresql://`` goes through psycopg2 when psycopg 3 is missing.

    SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3; the ``postgres`` extra installs psycopg2.
    A missing driver is one error naming the module to install.
    """
    from importlib.util import find_spec

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: not an SQLAlchemy URL "
                        "(e.g. sqlite:///study.db, postgresql://user@host/db)") from None
    if (
        parsed.drivername == "postgresql"
        and find_spec("psycopg") is None
        and find_spec("psycopg2") is not None
    ):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: SQLAlchemy has no dialect "
                        f"{parsed.drivername!r}") from None
    except ImportError as err:
        module = getattr(err, "name", None) or str(err)
        hint = "pip install 'biosig-lightning[postgres]'" if parsed.get_backend_name() == "postgresql" else \
            f"install the {module} package"
        raise TuneError(f"cannot open study storage {shown_url(url)!r}: its driver module {module!r} is not "
                        f"installed ({hint})") from None
    return parsed.render_as_string(hide_password=False)


def _stale_kwargs(callback: Callable[[optuna.Study, FrozenTrial], None] | None) -> dict[str, Any]:
    """``callback`` under the name this Optuna takes it (``heartbeat_stale_trial_callback`` since 4.9)."""
    if callback is None:
        return {}
    params = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    return {"heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params
            else "failed_trial_callback": callback}


def serialise_sqlite(engine: Any) -> None:
    """Make every transaction on an SQLite ``engine`` take the database's write lock when it begins
    (``BEGIN IMMEDIATE``), so that a read followed by a write is atomic.

    Optuna pops a WAITING trial by reading its state and writing RUNNING in one transaction, with
    ``SELECT ... FOR UPDATE``; PostgreSQL locks the row there, SQLite ignores it, and Python's sqlite3
    begins a transaction only at the first write, so two workers asking at once can both read WAITING
    and both pop the same trial. The recipe is SQLAlchemy's (pysqlite dialect, "Serializable isolation").
    """
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver's own BEGIN off; ours below

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners (creating the tables) are not reused


def open_storage(url: str, heartbeat: int | None = None, grace: int = 120, *,
                 stale_callback: Callable[[optuna.Study, FrozenTrial], None] | None = None,
                 gone_is_stale: bool = False, atomic_sqlite: bool = False) -> optuna.storages.RDBStorage:
    """An RDB storage with trial heartbeats; an unreachable URL is one error naming it (password hidden).

    ``heartbeat`` (seconds between a trial's heartbeats) defaults to what the grace period needs
    (:func:`~.coordination.heartbeat_interval`); stale trials of live workers are kept, and with
    ``gone_is_stale`` those of gone workers on this host fail without waiting for the grace period
    (:class:`~.coordination.WorkerAwareStorage`). ``stale_callback`` runs for each trial failed as
    stale (e.g. Optuna's retry callback, which enqueues the trial again). ``atomic_sqlite``: on SQLite,
    each transaction holds the write lock from its start (:func:`serialise_sqlite`), so two workers
    never pop the same enqueued trial.
    """
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    heartbeat = heartbeat_interval(grace) if heartbeat is None else heartbeat
    real = storage_url(url)
    parsed = make_url(real)
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs["connect_args"] = {"timeout": 60}  # concurrent workers wait for the file lock
    elif parsed.drivername == "postgresql+psycopg2":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}  # an unroutable host fails in seconds
    last: Exception | None = None
    for attempt in range(6):
        try:
            storage = WorkerAwareStorage(real, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat,
                                         grace_period=grace, gone_is_stale=gone_is_stale,
                                         **_stale_kwargs(stale_callback))
            if atomic_sqlite and parsed.get_backend_name() == "sqlite":
                serialise_sqlite(storage.engine)
            return storage
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as err:
            last = err
            text = str(err).lower()
            if "locked" in text or "already exists" in text or "unique" in text:
                time.sleep(0.5 * (attempt + 1))  # another worker is creating the tables right now
                continue
            break
        except (sqlalchemy.exc.ArgumentError, ImportError, ValueError) as err:
            last = err
            break
    msg = str(getattr(last, "orig", None) or last).strip().splitlines()[0] if last else "unknown error"
    if parsed.password:
        msg = msg.replace(str(parsed.password), "***")
    raise TuneError(f"cannot open study storage {shown_url(url)!r}: {msg}")

