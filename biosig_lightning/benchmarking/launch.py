"""Starting one ``biosig fit``: in this process, or as a child process with its output in a log file.

The one launcher of the commands that run many fits (``repeat``, ``cv``, ``benchmark``, whose
``--workers`` are children too; ``biosig tune`` fits its trials in its own process). A child
is ``python -m biosig_lightning.cli fit ...`` without progress bars (a log file is no terminal),
with ``OMP_NUM_THREADS`` set so that N children do not each take every core; its log is appended
to (a header line per attempt), so a resumed run keeps the log of its first part.

Preemption reaches children too: while :func:`forwarding_signals` is active, SIGTERM, SIGHUP or
SIGUSR1 sent to the runner is passed on to every live child (which stops, saves ``last.ckpt`` and
marks its run :data:`~biosig_lightning.runs.rundir.INTERRUPTED`), and :func:`stop_signal` names the
signal so the runner starts nothing new.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["PREEMPTION_SIGNALS", "fit_inline", "forwarding_signals", "launch", "launch_fit", "stop_signal"]

#: the signals a scheduler sends before it takes the machine away (SIGUSR1: SLURM's ``--signal``)
PREEMPTION_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, n))
_live: set[subprocess.Popen[Any]] = set()
_lock = threading.RLock()  # re-entered by the signal handler when it interrupts the main thread inside
_stopped: list[str] = []  # the name of the first preemption signal this runner received


def stop_signal() -> str | None:
    """The preemption signal this runner received (``"SIGTERM"``, ...), ``None`` while none came."""
    return _stopped[0] if _stopped else None


def _forward(signum: int, _: FrameType | None) -> None:
    if not _stopped:
        _stopped.append(signal.Signals(signum).name)
    with _lock:
        for proc in list(_live):
            if proc.poll() is None:
                proc.send_signal(signum)


@contextmanager
def forwarding_signals() -> Iterator[None]:
    """Pass preemption signals on to the live children while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stopped.clear()
    previous = {s: signal.signal(s, _forward) for s in PREEMPTION_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def launch(command: list[str], env: dict[str, str] | None = None, stdout: Any = None) -> int:
    """Run ``command`` as a child that preemption signals reach (:func:`forwarding_signals`); its exit
    status (``128 + signal`` when a preemption signal came before it could start)."""
    with _lock:
        if stop_signal():
            return 128 + int(getattr(signal, stop_signal() or "SIGTERM"))
        proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT if stdout else None, env=env)
        _live.add(proc)
        if stop_signal():  # the signal came while the child was being started: it is passed on here
            proc.send_signal(getattr(signal, stop_signal() or "SIGTERM"))
    try:
        return proc.wait()
    finally:
        with _lock:
            _live.discard(proc)


def launch_fit(args: list[str], log: Path, threads: int | None = None) -> int:
    """Run ``biosig fit ARGS`` as a child process, appending its output to ``log``; its exit status."""
    if not any(a.split("=", 1)[0] == "--trainer.enable_progress_bar" for a in args):
        args = [*args, "--trainer.enable_progress_bar=false"]
    env = dict(os.environ)
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {socket.gethostname()}:{os.getpid()}: "
                 f"{shlex.join(['biosig', 'fit', *args])}\n")
        fh.flush()
        return launch([sys.executable, "-m", "biosig_lightning.cli", "fit", *args], env, fh)


def fit_inline(args: list[str], refusal: list[str] | None = None) -> int:
    """Run ``biosig fit ARGS`` in this process; 0, or 1 after its one-line refusal (printed to stderr and
    appended to ``refusal`` when given).

    An interrupted fit (Ctrl-C, preemption) is not a failure of this one run: its
    :class:`~biosig_lightning.runs.interrupt.Interrupted` propagates and ends the runner.
    """
    from biosig_lightning.runs.biosig_cli import run_lightning
    from biosig_lightning.runs.interrupt import Interrupted

    try:
        run_lightning(["fit", *args])
    except SystemExit as exc:
        if isinstance(exc, Interrupted) or str(exc.code).startswith("biosig fit: interrupted"):
            raise
        if exc.code in (0, None):
            return 0
        message = exc.code if isinstance(exc.code, str) else f"biosig fit: exit {exc.code}"
        print(message, file=sys.stderr, flush=True)
        if refusal is not None:
            refusal.append(message)
        return 1
    return 0
