"""Reliability sweep: faults and bad inputs, each tried as a new user would, each judged in code.

Run by hand (not collected by pytest, not run in CI), on a checkout with its own environment::

    .venv/bin/python tools/audits/reliability_sweep.py                   # this checkout, writes the result
    file
    .venv/bin/python tools/audits/reliability_sweep.py --only lr_negative ctrl_c_during_fit --no-write
    .venv/bin/python tools/audits/reliability_sweep.py --only full_cache --update   # replace these rows only
    /tmp/clone/.venv/bin/python tools/audits/reliability_sweep.py --checkout /tmp/clone

Every case runs the ``biosig`` console script beside the running Python, with the checkout's package first
on ``PYTHONPATH``, in subprocesses, in a fresh temporary directory with its own window cache
(``BIOSIG_CACHE``), on tiny
stand-in fits: ``experiments/bioformer_apava.yaml`` with the ``synthetic`` and ``smoke`` overlays and a
smaller BioFormer (one layer, ``d_model`` 16, one batch per split). Per case it records the command, the
exit code, the number of stderr lines and the last one, whether that line names the culprit (the config
key, file, channel or directory), and whether anything was lost: every checkpoint left behind loads with
``torch.load(weights_only=True)``, ``metrics.csv`` parses, trial and run directories are kept, the good
runs are still reported, a payload was not executed. A case is *handled* when every one of its checks
holds; the checks are written out per case below, nothing is judged by eye.

A failing command must end with one line ``biosig <command>: ...`` naming the culprit, print no
traceback, and leave nothing half-written. The cases on one ``--out`` (source ``shared``) run two
``biosig cv`` or ``biosig repeat`` on one folder and compare every fold or seed with a single-process
run of the same command: same ``metrics.csv`` bytes and metrics, one fitter per directory, one
attempt per log, a whole ``cv.json``. The inputs that expand run under ``/usr/bin/time -v``
(:meth:`Sweep.run_peak`); their peak resident memory must stay under 1.5 GiB. The disk cases mount
small tmpfs file systems, which needs root; without it they are skipped with that reason. Cases run
two at a time (``--jobs``).

The result file (``docs/results/reliability_sweep.json`` of the checkout, written atomically) is rendered
on the docs' "Run directory" page.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[2]
OUT_NAME = Path("docs") / "results" / "reliability_sweep.json"
TIMEOUT = 600.0  # seconds for any one command (the machine may be shared)
TIME = "/usr/bin/time"  # GNU time: `-v` reports the peak resident memory (apt-get install time)
PEAK_LIMIT_MB = 1536.0  # the most an expanding input may make a command hold

#: two batches per split, no sanity check, small batches
TINY = """\
trainer:
  limit_train_batches: 2
  limit_val_batches: 2
  limit_test_batches: 2
  num_sanity_val_steps: 0
  enable_progress_bar: false
data:
  init_args:
    batch_size: 8
    eval_batch_size: 16
"""
#: a BioFormer small enough that one fit takes seconds
TINY_BIOFORMER = """\
model:
  init_args:
    backbone:
      init_args: {d_model: 16, d_ff: 32, n_heads: 2, n_layers: 1, d_token: 8}
"""
#: two windows per subject of the synthetic stand-in
TINY_SYNTHETIC = "data:\n  init_args:\n    synthetic_options: {windows_per_subject: 2}\n"
#: a 3-fold split of the stand-in's subjects, for ``biosig cv``
KFOLD = "data:\n  init_args:\n    split: {strategy: kfold, n_folds: 3}\n"
#: a callback that holds one fit in its first epoch until the sweep lets it go (the cases on one --out)
HOLD_HOOK = '''"""Holds the fit whose run directory ``BIOSIG_SWEEP_HOLD`` names at the start of its first
epoch: touches ``<that>.holding`` and waits (up to 5 min) for ``<that>.release``."""
import os
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class HoldFirstEpoch(Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        target = os.environ.get("BIOSIG_SWEEP_HOLD")
        if not target or trainer.current_epoch != 0 or Path(trainer.log_dir or "").name != Path(target).name:
            return
        Path(target + ".holding").touch()
        end = time.monotonic() + 300
        while not Path(target + ".release").exists() and time.monotonic() < end:
            time.sleep(0.05)
'''
SEARCH_SPACE = "model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
APAVA_CHANNELS = ("Fp1", "Fp2", "F7", "F3", "F4", "F8", "T3", "C3", "C4", "T4", "T5",
                  "P3", "P4", "T6", "O1", "O2")


# --- running commands ------------------------------------------------------------------------------

@dataclass
class Ran:
    """One finished command: its argv (as typed), exit code and output."""

    argv: list[str]
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    @property
    def last(self) -> str:
        lines = self.err_lines
        return lines[-1] if lines else ""


@dataclass
class Outcome:
    """What a case found: the command that matters, its result, the culprit it must name, other checks."""

    ran: Ran | None
    culprit: list[str] | None = None  # strings the last stderr line must contain (None: a success case)
    checks: dict[str, bool] = field(default_factory=dict)
    skipped: str | None = None
    note: str = ""
    #: the stderr line a user reads for the culprit: the last one, or (a command that warns and goes on)
    #: the first one starting with this prefix
    line_prefix: str | None = None
    #: an expanding input's case: the command's peak resident memory in MiB (:meth:`Sweep.run_peak`), or
    #: ``float("nan")`` where it could not be measured
    peak_mb: float | None = None


class Sweep:
    """The checkout under test, the temporary root and the shared pieces (the tiny overlays, a base run)."""

    def __init__(self, checkout: Path, tmp: Path) -> None:
        self.checkout = checkout
        self.tmp = tmp
        self.biosig = str(Path(sys.executable).parent / "biosig")
        self.exp = checkout / "experiments"
        tiny = tmp / "overlays"
        tiny.mkdir()
        (tiny / "tiny.yaml").write_text(TINY)
        (tiny / "tiny_bioformer.yaml").write_text(TINY_BIOFORMER)
        (tiny / "tiny_synthetic.yaml").write_text(TINY_SYNTHETIC)
        (tiny / "space.yaml").write_text(SEARCH_SPACE)
        (tiny / "kfold3.yaml").write_text(KFOLD)
        (tiny / "sweep_hold.py").write_text(HOLD_HOOK)
        self.kfold = str(tiny / "kfold3.yaml")
        self.tiny = str(tiny / "tiny.yaml")
        self.space = str(tiny / "space.yaml")
        self.bioformer = [str(self.exp / "bioformer_apava.yaml"), str(tiny / "tiny_bioformer.yaml")]
        self.standin = ["--config", self.bioformer[0],
                        "--config", str(self.exp / "overlays" / "synthetic.yaml"),
                        "--config", str(self.exp / "overlays" / "smoke.yaml"),
                        "--config", self.tiny, "--config", self.bioformer[1],
                        "--config", str(tiny / "tiny_synthetic.yaml")]
        self.base: Path | None = None  # the finished run of the stand-in, made once before the cases
        #: single-process runs the cases on one --out compare with, each started once (by name)
        self._references: dict[str, tuple[Path, Future[Ran]]] = {}
        self._reference_lock = threading.Lock()
        self._reference_pool = ThreadPoolExecutor(max_workers=2)

    def env(self, cwd: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["BIOSIG_CACHE"] = str(cwd / "cache")
        env["PYTHONPATH"] = str(
            self.checkout
        )  # the checkout under test, whatever the venv's install points at
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def argv(self, command: str, *args: str) -> list[str]:
        return [self.biosig, command, *args]

    def start(self, cwd: Path, argv: list[str], **kw: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, cwd=cwd, env=kw.pop("env", None) or self.env(cwd),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    def run(self, cwd: Path, argv: list[str], env: dict[str, str] | None = None) -> Ran:
        proc = self.start(cwd, argv, env=env)
        return finish(proc, argv)

    def run_peak(self, cwd: Path, argv: list[str]) -> tuple[Ran, float | None]:
        """:meth:`run` with the command's peak resident memory in MiB: from GNU ``/usr/bin/time -v`` (its
        report cut from stderr) or, where that is missing, from the ``ru_maxrss`` that ``os.wait4``
        returns for the child (what GNU time reports: the largest of the child and the descendants it
        waited for)."""
        if not Path(TIME).is_file():
            return self._run_wait4(cwd, argv)
        ran = self.run(cwd, [TIME, "-v", *argv])
        err, _, stats = ran.err.partition("\tCommand being timed:")
        lines = err.splitlines()
        if lines and lines[-1].startswith(("Command exited with non-zero status",
                                           "Command terminated by signal")):
            err = "\n".join(lines[:-1]) + "\n"  # GNU time's own line
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stats)
        return Ran(argv, ran.rc, ran.out, err), (int(found.group(1)) / 1024 if found else None)

    def _run_wait4(self, cwd: Path, argv: list[str]) -> tuple[Ran, float]:
        """:meth:`run`, reaping the child with ``os.wait4``: the result and its ``ru_maxrss`` in MiB."""
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(argv, cwd=cwd, env=self.env(cwd), stdout=out, stderr=err, text=True)
            end = time.monotonic() + TIMEOUT
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            while not pid and time.monotonic() < end:
                time.sleep(0.05)
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if not pid:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                err.write(f"\n[sweep] killed after {TIMEOUT:g} s")
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            out.seek(0)
            err.seek(0)
            return Ran(argv, proc.returncode, out.read(), err.read()), usage.ru_maxrss / 1024  # KiB on Linux

    def fit(self, cwd: Path, *extra: str) -> Ran:
        return self.run(cwd, self.argv("fit", *self.standin, *extra))

    def shown(self, argv: Sequence[str]) -> str:
        """``argv`` as a user would type it: ``biosig``, paths relative to the checkout or the case folder."""
        words = ["biosig" if a == self.biosig else a for a in argv]
        text = shlex.join(words)
        text = text.replace(str(self.exp) + "/", "experiments/").replace(str(self.tmp / "overlays") + "/", "")
        return text.replace(str(self.tmp) + "/", "$TMP/")


def finish(proc: subprocess.Popen[str], argv: list[str], timeout: float = TIMEOUT) -> Ran:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n[sweep] killed after {timeout:g} s"
    return Ran(argv, proc.returncode, out, err)


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = TIMEOUT,
             step: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds (True) or ``proc`` ended / time ran out (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        if proc.poll() is not None:
            return predicate()
        time.sleep(step)
    return False


# --- checks on what is left ----------------------------------------------------------------------

def loads(path: Path) -> bool:
    """Whether ``path`` is a whole checkpoint: it loads with ``weights_only=True`` and holds a state dict."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any failure means the file is torn or not a checkpoint
        return False
    return isinstance(ckpt, dict) and isinstance(ckpt.get("state_dict"), dict) and bool(ckpt["state_dict"])


def all_checkpoints_load(run_dir: Path) -> bool:
    found = sorted(run_dir.rglob("*.ckpt"))
    return bool(found) and all(loads(p) for p in found)


def metrics_parse(run_dir: Path) -> bool:
    """``metrics.csv`` exists and every row has the header's number of cells."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return False
    rows = list(csv.reader(path.read_text().splitlines()))
    return len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions(experiment: Path) -> list[Path]:
    return sorted(experiment.glob("version_*")) if experiment.is_dir() else []


def epoch_of(ckpt: Path) -> int:
    import torch

    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["epoch"])


def study_states(db: Path, study: str) -> list[str]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT t.state FROM trials t JOIN studies s ON s.study_id = t.study_id "
                           "WHERE s.study_name = ? ORDER BY t.number", (study,)).fetchall()
    return [r[0] for r in rows]


def no_traceback(ran: Ran) -> bool:
    return "Traceback" not in ran.err and "Traceback" not in ran.out


# --- corpora on disk -----------------------------------------------------------------------------

def write_apava(root: Path, n_subjects: int = 23, windows: int = 2, seed: int = 0) -> Path:
    """The Medformer APAVA layout: ``Feature/feature_XX.npy`` (windows, 256, 16), ``Label/label.npy``."""
    rng = np.random.default_rng(seed)
    (root / "Feature").mkdir(parents=True)
    (root / "Label").mkdir()
    for sid in range(1, n_subjects + 1):
        np.save(root / "Feature" / f"feature_{sid:02d}.npy",
                rng.normal(size=(windows, 256, 16)).astype(np.float32))
    labels = np.array([[sid % 2, sid] for sid in range(1, n_subjects + 1)], dtype=np.int64)
    np.save(root / "Label" / "label.npy", labels)
    return root


def write_psg(path: Path, seconds: int = 120, channels: dict[str, int] | None = None) -> None:
    """A Sleep Cassette PSG with the two EEG channels at 100 Hz (or ``channels``: name -> rate)."""
    from pyedflib import highlevel

    channels = channels or {"EEG Fpz-Cz": 100, "EEG Pz-Oz": 100}
    rng = np.random.default_rng(0)
    signals = [rng.normal(size=seconds * fs) * 20 for fs in channels.values()]
    headers = [highlevel.make_signal_header(name, sample_frequency=fs, physical_min=-500, physical_max=500)
               for name, fs in channels.items()]
    assert highlevel.write_edf(str(path), signals, headers)


def write_hypnogram(path: Path, notes: list[tuple[float, float, str]]) -> None:
    import pyedflib

    w = pyedflib.EdfWriter(str(path), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
    try:
        for onset, duration, text in notes:
            w.writeAnnotation(onset, duration, text)
    finally:
        w.close()


STAGES = [(0.0, 30.0, "Sleep stage W"), (30.0, 60.0, "Sleep stage 2"), (90.0, 30.0, "Sleep stage W")]


def sleep_edf(root: Path, psg: str = "SC4001E0-PSG.edf", hyp: str = "SC4001EC-Hypnogram.edf") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_psg(root / psg)
    write_hypnogram(root / hyp, STAGES)
    return root


# --- the cases -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    source: str  # "table": a row of the issue's table; "handled": named as handled there; "added": added here
    what: str
    run: Callable[[Sweep, Path], Outcome]
    root: bool = False  # needs root (tmpfs mounts)


CASES: list[Case] = []


def case(
    name: str, source: str, what: str, root: bool = False
) -> Callable[[Callable[[Sweep, Path], Outcome]], Callable[[Sweep, Path], Outcome]]:
    def register(fn: Callable[[Sweep, Path], Outcome]) -> Callable[[Sweep, Path], Outcome]:
        CASES.append(Case(name, source, what, fn, root))
        return fn
    return register


def mount_tmpfs(path: Path, options: str) -> str | None:
    """Mount a tmpfs on ``path``; the reason it cannot be done, or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


EXP = Path("runs") / "bioformer_apava"


# issue table: the run directory's disk fills during a fit
@case("disk_full_during_fit", "table",
      "the run directory's disk (a 700 KiB tmpfs) fills during a fit", root=True)
def _(s: Sweep, d: Path) -> Outcome:
    runs = d / "runs"
    why = mount_tmpfs(runs, "size=700k")
    if why:
        return Outcome(None, skipped=why)
    try:
        ran = s.fit(d, "--trainer.max_epochs=6", "--model.init_args.early_stopping_patience=20")
        run_dir = d / EXP / "version_0"
        checks = {"every checkpoint left loads (weights_only)": all_checkpoints_load(run_dir),
                  "metrics.csv parses": metrics_parse(run_dir),
                  "no temporary file left": not any(p.name.startswith(".") and p.is_file() and "tmp" in p.name
                                                    for p in run_dir.rglob("*"))}
    finally:
        umount(runs)
    return Outcome(ran, ["runs/bioformer_apava/version_0", "No space left"], checks)


@case("tune_two_workers_grace_5", "table", "two `biosig tune` workers on one study, `--grace-period 5`")
def _(s: Sweep, d: Path) -> Outcome:
    argv = s.argv("tune", *s.standin, "--search-space", s.space, "--study-name", "st", "--n-trials", "3",
                  "--grace-period", "5", "--trainer.max_epochs=3")
    workers = [s.start(d, argv)]
    time.sleep(3.0)
    workers.append(s.start(d, argv))
    done = [finish(w, argv) for w in workers]
    states = study_states(d / "st.db", "st") if (d / "st.db").exists() else []
    trial_dirs = sorted((d / "runs" / "tune" / "st").glob("trial_*"))
    ran = done[0] if done[0].rc != 0 else done[1]
    return Outcome(ran, None, {
        "both workers exit 0": all(r.rc == 0 for r in done),
        "no traceback": all(no_traceback(r) for r in done),
        "no trial FAIL": "FAIL" not in states and states.count("COMPLETE") >= 3,
        "one trial directory per trial, each with results or checkpoints": len(trial_dirs) == len(states)
        and all(any(t.rglob("*.ckpt")) or any(t.rglob("results.json")) for t in trial_dirs),
    }, note=f"trials: {', '.join(states)}")


@case("read_only_run_directory", "table", "the run directory's disk is read-only", root=True)
def _(s: Sweep, d: Path) -> Outcome:
    runs = d / "runs"
    why = mount_tmpfs(runs, "ro,size=64k")
    if why:
        return Outcome(None, skipped=why)
    try:
        ran = s.fit(d)
    finally:
        umount(runs)
    return Outcome(ran, ["runs/bioformer_apava", "Read-only file system"])


@case("read_only_cache", "table", "the window cache directory is on a read-only disk", root=True)
def _(s: Sweep, d: Path) -> Outcome:
    cache = d / "cache"
    why = mount_tmpfs(cache, "ro,size=64k")
    if why:
        return Outcome(None, skipped=why)
    try:
        ran = s.fit(d)
        left = versions(d / EXP)
    finally:
        umount(cache)
    return Outcome(ran, [str(cache), "Read-only file system"], {"no run directory left behind": not left})


@case("full_cache", "table", "the window cache's disk is full (a 256 KiB tmpfs)", root=True)
def _(s: Sweep, d: Path) -> Outcome:
    cache = d / "cache"
    why = mount_tmpfs(cache, "size=256k")
    if why:
        return Outcome(None, skipped=why)
    try:
        ran = s.fit(d)
        debris = [p.name for p in cache.iterdir() if p.name.startswith(".tmp-")]
        left = versions(d / EXP)
    finally:
        umount(cache)
    return Outcome(ran, [str(cache), "No space left"], {"no half-built cache left": not debris,
                                                         "no run directory left behind": not left})


def _refused(s: Sweep, d: Path, culprit: list[str], *extra: str, command: str = "fit") -> Outcome:
    """A bad argument: refused in one line naming ``culprit``, with no run directory left."""
    ran = s.run(d, s.argv(command, *s.standin, *extra)) if command else s.run(d, list(extra))
    return Outcome(ran, culprit, {"no run directory left": not versions(d / EXP)})


@case("lr_negative", "table", "`--model.init_args.lr=-0.1`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["model.init_args.lr", "-0.1"], "--model.init_args.lr=-0.1")


@case("misspelt_key", "table", "a misspelt key, `--trainer.max_epohcs=2`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["max_epohcs"], "--trainer.max_epohcs=2")


@case("max_epochs_abc", "table", "`--trainer.max_epochs=abc`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["trainer.max_epochs", "abc"], "--trainer.max_epochs=abc")


@case("unknown_class_path", "table", "an unknown backbone `class_path`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["BioFormr"],
                    "--model.init_args.backbone.class_path=biosig_lightning.models.bioformer.BioFormr")


@case("missing_config_file", "table", "a `--config` file that does not exist")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["nowhere.yaml"], "--config", "nowhere.yaml")


@case("config_is_a_list", "table", "a `--config` YAML that is a list")
def _(s: Sweep, d: Path) -> Outcome:
    (d / "list.yaml").write_text("- trainer\n- model\n")
    return _refused(s, d, ["list.yaml"], "--config", "list.yaml")


@case("config_is_a_scalar", "table", "a `--config` YAML that is a scalar")
def _(s: Sweep, d: Path) -> Outcome:
    (d / "scalar.yaml").write_text("just some words\n")
    return _refused(s, d, ["scalar.yaml"], "--config", "scalar.yaml")


def _edf_fit(s: Sweep, d: Path, root: Path) -> Ran:
    return s.run(d, s.argv("fit", "--config", str(s.exp / "sdformer" / "baselines" / "cnn1d_sleepedf.yaml"),
                           "--config", s.tiny,
                           f"--data.init_args.root={root}", "--trainer.max_epochs=1"))


def _edf_refused(s: Sweep, d: Path, root: Path, culprit: list[str]) -> Outcome:
    ran = _edf_fit(s, d, root)
    return Outcome(ran, culprit, {"no run directory left": not any((d / "runs").rglob("version_*"))})


@case("corpus_self_symlink", "table", "a corpus file that is a self-referencing symlink")
def _(s: Sweep, d: Path) -> Outcome:
    root = d / "sleep"
    root.mkdir()
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", STAGES)
    os.symlink("SC4001E0-PSG.edf", root / "SC4001E0-PSG.edf")
    return _edf_refused(s, d, root, ["SC4001E0-PSG.edf", "loops"])


def _report_with_one_bad(s: Sweep, d: Path, bad_text: str, extra: list[str] | None = None) -> Outcome:
    assert s.base is not None
    good = d / "runs" / "good"
    shutil.copytree(s.base, good)
    bad = d / "runs" / "bad"
    shutil.copytree(s.base, bad)
    (bad / "results.json").write_text(bad_text)
    ran = s.run(d, s.argv("report", "runs", "--format", "csv"))
    rows = [r for r in csv.reader(ran.out.splitlines()) if r]
    return Outcome(
        ran,
        ["runs/bad/results.json", *(extra or [])],
        {
            "exit 0": ran.rc == 0,
            "the good run is reported": len(rows) >= 2
            and any("bioformer" in ",".join(r).lower() for r in rows[1:]),
        },
        line_prefix="biosig report: warning: ",
    )


@case("report_results_json_list", "table",
      "`biosig report` over a folder where one `results.json` is a JSON list")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_with_one_bad(s, d, "[1, 2, 3]\n")


@case("report_results_json_truncated", "table",
      "`biosig report` over a folder where one `results.json` is truncated")
def _(s: Sweep, d: Path) -> Outcome:
    assert s.base is not None
    text = (s.base / "results.json").read_text()
    return _report_with_one_bad(s, d, text[: len(text) // 2])


def _interrupted_fit(s: Sweep, d: Path, sig: int) -> tuple[Ran, Path]:
    """A fit signalled with ``sig`` as soon as its first ``last.ckpt`` exists."""
    argv = s.argv("fit", *s.standin, "--trainer.max_epochs=1000",
                  "--model.init_args.early_stopping_patience=1000")
    proc = s.start(d, argv)
    run_dir = d / EXP / "version_0"
    hit = wait_for(lambda: (run_dir / "checkpoints" / "last.ckpt").exists(), proc)
    if hit:
        time.sleep(0.3)
        proc.send_signal(sig)
    ran = finish(proc, argv)
    if not hit:
        ran.err += "\n[sweep] the fit ended before its first checkpoint"
    return ran, run_dir


@case("ctrl_c_during_fit", "table",
      "Ctrl-C during a fit; then `biosig report` and the printed resume command")
def _(s: Sweep, d: Path) -> Outcome:
    ran, run_dir = _interrupted_fit(s, d, signal.SIGINT)
    last_ok = loads(run_dir / "checkpoints" / "last.ckpt")
    report = s.run(d, s.argv("report", "runs"))
    listed = str(run_dir.relative_to(d)) in report.out + report.err
    resume = ran.last.split("resume it with: ", 1)[1] if "resume it with: " in ran.last else ""
    checks = {"INTERRUPTED marker written": (run_dir / "INTERRUPTED").is_file(),
              "last.ckpt loads (weights_only)": last_ok,
              "report lists the run as unfinished": listed,
              "the last line is the resume command": resume.endswith("--ckpt_path last")}
    if resume:
        words = shlex.split(resume)
        epoch = epoch_of(run_dir / "checkpoints" / "last.ckpt") if last_ok else 0
        again = s.run(d, [s.biosig, *words[1:], f"--trainer.max_epochs={epoch + 2}"])
        checks["the printed command resumes it to results.json in the same directory"] = (
            again.rc == 0 and (run_dir / "results.json").is_file() and not (run_dir / "INTERRUPTED").exists())
        checks["metrics.csv keeps the epochs before the interrupt"] = metrics_parse(run_dir) and "0" in [
            r.get("epoch") for r in csv.DictReader((run_dir / "metrics.csv").read_text().splitlines())]
    return Outcome(ran, ["resume it with: ", "--ckpt_path last"], checks)


@case("sigterm_during_fit", "inputs",
      "SIGTERM during a fit (a SLURM or Kubernetes preemption); then the printed resume command")
def _(s: Sweep, d: Path) -> Outcome:
    ran, run_dir = _interrupted_fit(s, d, signal.SIGTERM)
    last_ok = loads(run_dir / "checkpoints" / "last.ckpt")
    resume = ran.last.split("resume it with: ", 1)[1] if "resume it with: " in ran.last else ""
    checks = {"exits non-zero (not counted as done)": ran.rc not in (0, None),
              "INTERRUPTED marker written": (run_dir / "INTERRUPTED").is_file(),
              "no results.json": not (run_dir / "results.json").exists(),
              "last.ckpt loads (weights_only)": last_ok}
    if resume:
        words = shlex.split(resume)
        epoch = epoch_of(run_dir / "checkpoints" / "last.ckpt") if last_ok else 0
        again = s.run(d, [s.biosig, *words[1:], f"--trainer.max_epochs={epoch + 2}"])
        checks["the printed command resumes it to results.json in the same directory"] = (
            again.rc == 0 and (run_dir / "results.json").is_file() and not (run_dir / "INTERRUPTED").exists())
    return Outcome(ran, ["preempted (SIGTERM)", "resume it with: "], checks)


@case("ctrl_c_during_start_up", "table", "Ctrl-C 2 s after `biosig fit` starts (while it imports)")
def _(s: Sweep, d: Path) -> Outcome:
    argv = s.argv("fit", *s.standin)
    proc = s.start(d, argv)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    ran = finish(proc, argv)
    return Outcome(ran, ["interrupted (Ctrl-C)"], {"no run directory left": not versions(d / EXP)})


def _apava_fit(s: Sweep, d: Path, root: Path) -> Ran:
    return s.run(d, s.argv("fit", "--config", s.bioformer[0], "--config", s.tiny, "--config", s.bioformer[1],
                           f"--data.init_args.root={root}", "--trainer.max_epochs=1"))


@case("apava_nan_and_inf", "table", "NaN and Inf in different windows and channels of one APAVA `.npy`")
def _(s: Sweep, d: Path) -> Outcome:
    root = write_apava(d / "APAVA")
    path = root / "Feature" / "feature_03.npy"
    x = np.load(path)
    x[1, 10, 4] = np.nan   # window 1, channel F4
    x[0, 20, 7] = np.inf   # window 0, channel C3
    np.save(path, x)
    ran = _apava_fit(s, d, root)
    return Outcome(ran, ["feature_03.npy", "NaN in channel 'F4' (window 1", "Inf in channel 'C3' (window 0"],
                   {"no run directory left": not any((d / "runs").rglob("version_*"))})


@case("kill_9_during_cache_build", "table",
      "kill -9 while the window cache is being built; then the same fit again")
def _(s: Sweep, d: Path) -> Outcome:
    cache = d / "cache"
    argv = s.argv("fit", *s.standin, '--data.init_args.synthetic_options={"windows_per_subject": 400}')
    proc = s.start(d, argv)
    hit = wait_for(lambda: cache.is_dir() and any(p.name.startswith(".tmp-") for p in cache.iterdir()), proc,
                   step=0.01)
    proc.kill()
    finish(proc, argv)
    again = s.fit(d)
    runs = versions(d / EXP)
    debris = [p.name for p in cache.iterdir() if p.name.startswith(".tmp-")] if cache.is_dir() else []
    return Outcome(
        again,
        None,
        {
            "killed during the build": hit,
            "the rerun exits 0": again.rc == 0,
            "the rerun is the only run directory, with its results": len(runs) == 1
            and (runs[0] / "results.json").is_file(),
            "no half-built cache left": not debris,
        },
    )


@case("truncated_edf", "table", "a truncated EDF file in a Sleep-EDF corpus")
def _(s: Sweep, d: Path) -> Outcome:
    root = sleep_edf(d / "sleep")
    psg = root / "SC4001E0-PSG.edf"
    psg.write_bytes(psg.read_bytes()[:1500])
    out = _edf_refused(s, d, root, ["SC4001E0-PSG.edf", "not a readable EDF"])
    assert out.ran is not None
    stray = [line for line in out.ran.out.splitlines() + out.ran.err_lines[:-1]
             if "SC4001E0" in line or "edflib" in line.lower()]
    out.checks["nothing else printed about the file (by the EDF library)"] = not stray
    return out


# issue: handled ----------------------------------------------------------------------------------

@case("kill_9_during_fit_then_resume", "handled", "kill -9 during a fit, then `--ckpt_path last`")
def _(s: Sweep, d: Path) -> Outcome:
    ran, run_dir = _interrupted_fit(s, d, signal.SIGKILL)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    whole = loads(ckpt)
    epoch = epoch_of(ckpt) if whole else 0
    # the same command (the model section must match what is resumed) with a nearer end
    again = s.fit(d, "--model.init_args.early_stopping_patience=1000", "--ckpt_path", "last",
                  f"--trainer.max_epochs={epoch + 2}")
    return Outcome(
        again,
        None,
        {
            "killed (rc -9)": ran.rc == -signal.SIGKILL,
            "last.ckpt loads (weights_only)": whole,
            "the resume exits 0": again.rc == 0,
            "it finishes the same directory": (run_dir / "results.json").is_file()
            and len(versions(d / EXP)) == 1,
            "metrics.csv parses": metrics_parse(run_dir),
        },
    )


@case("two_fits_at_once", "handled", "two identical `biosig fit` started at once")
def _(s: Sweep, d: Path) -> Outcome:
    argv = s.argv("fit", *s.standin)
    procs = [s.start(d, argv) for _ in range(2)]
    done = [finish(p, argv) for p in procs]
    runs = versions(d / EXP)
    return Outcome(done[0], None, {
        "both exit 0": all(r.rc == 0 for r in done),
        "two complete run directories": len(runs) == 2 and all((r / "results.json").is_file() for r in runs),
    })


@case("tune_worker_killed", "handled",
      "a `biosig tune` worker killed -9 mid-trial; a second worker takes over")
def _(s: Sweep, d: Path) -> Outcome:
    argv = s.argv("tune", *s.standin, "--search-space", s.space, "--study-name", "k", "--n-trials", "2",
                  "--grace-period", "5", "--trainer.max_epochs=1000",
                  "--model.init_args.early_stopping_patience=1000")
    first = s.start(d, argv)
    trials = d / "runs" / "tune" / "k"
    hit = wait_for(lambda: any(trials.rglob("last.ckpt")) if trials.is_dir() else False, first)
    first.kill()
    finish(first, argv)
    second_argv = [*argv[:-2], "--trainer.max_epochs=2", "--model.init_args.early_stopping_patience=10"]
    second = s.run(d, second_argv)
    states = study_states(d / "k.db", "k") if (d / "k.db").exists() else []
    return Outcome(second, None, {
        "killed mid-trial": hit,
        "the second worker exits 0": second.rc == 0,
        "the dead trial is FAIL, the study completes": bool(states) and states[0] == "FAIL"
        and states.count("COMPLETE") >= 2,
        "the dead trial's directory is kept": any(trials.glob("trial_0*")),
    }, note=f"trials: {', '.join(states)}")


def _broken_edf(name: str, what: str, culprit: list[str], build: Callable[[Path], None]) -> None:
    @case(name, "handled", what)
    def _(s: Sweep, d: Path) -> Outcome:
        root = d / "sleep"
        root.mkdir()
        build(root)
        return _edf_refused(s, d, root, [*culprit])


def _not_an_edf(root: Path) -> None:
    (root / "SC4001E0-PSG.edf").write_bytes(b"this is not an EDF file\n" * 20)
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", STAGES)


def _no_hypnogram(root: Path) -> None:
    write_psg(root / "SC4001E0-PSG.edf")


def _missing_channel(root: Path) -> None:
    write_psg(root / "SC4001E0-PSG.edf", channels={"EEG Fpz-Cz": 100, "EOG horizontal": 100})
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", STAGES)


def _wrong_rate(root: Path) -> None:
    write_psg(root / "SC4001E0-PSG.edf", channels={"EEG Fpz-Cz": 100, "EEG Pz-Oz": 200})
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", STAGES)


def _unknown_annotation(root: Path) -> None:
    write_psg(root / "SC4001E0-PSG.edf")
    write_hypnogram(root / "SC4001EC-Hypnogram.edf",
                    [(0.0, 30.0, "Sleep stage W"), (30.0, 30.0, "Sleep stage X")])


def _empty_root(root: Path) -> None:
    (root / "README.txt").write_text("the recordings are still downloading\n")


_broken_edf("edf_not_an_edf", "a Sleep-EDF PSG that is not an EDF file",
            ["SC4001E0-PSG.edf", "not a readable EDF"],
            _not_an_edf)
_broken_edf("edf_no_hypnogram", "a Sleep-EDF PSG without its hypnogram", ["SC4001E0-PSG.edf", "no hypnogram"],
            _no_hypnogram)
_broken_edf("edf_missing_channel", "a Sleep-EDF PSG without the EEG Pz-Oz channel",
            ["SC4001E0-PSG.edf", "missing channel 'EEG Pz-Oz'"], _missing_channel)
_broken_edf("edf_wrong_rate", "a Sleep-EDF PSG whose EEG Pz-Oz is sampled at 200 Hz",
            ["SC4001E0-PSG.edf", "'EEG Pz-Oz'", "200 Hz"], _wrong_rate)
_broken_edf("edf_unknown_annotation", "a Sleep-EDF hypnogram with an unknown stage",
            ["SC4001EC-Hypnogram.edf", "Sleep stage X"], _unknown_annotation)
_broken_edf("edf_no_recordings", "a Sleep-EDF root that holds no recordings",
            ["sleep", "Sleep Cassette"], _empty_root)


@case("non_ascii_paths", "handled", "corpus and run directory under non-ASCII paths (APAVA layout)")
def _(s: Sweep, d: Path) -> Outcome:
    here = d / "données ü" / "実験"
    here.mkdir(parents=True)
    root = write_apava(here / "APAVA ß")
    ran = _apava_fit(s, here, root)
    runs = versions(here / EXP)
    return Outcome(
        ran,
        None,
        {
            "exit 0": ran.rc == 0,
            "results.json written": len(runs) == 1 and (runs[0] / "results.json").is_file(),
        },
    )


@case("corpus_symlink_loop", "handled", "two corpus files that are symlinks to each other")
def _(s: Sweep, d: Path) -> Outcome:
    root = d / "sleep"
    root.mkdir()
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", STAGES)
    os.symlink("other.edf", root / "SC4001E0-PSG.edf")
    os.symlink("SC4001E0-PSG.edf", root / "other.edf")
    return _edf_refused(s, d, root, ["SC4001E0-PSG.edf", "loops"])


def _base_ckpt(s: Sweep) -> Path:
    assert s.base is not None
    return next((s.base / "checkpoints").glob("best-*.ckpt"))


@case("another_models_checkpoint", "handled", "`biosig test` of the demo's CNN1D with a BioFormer checkpoint")
def _(s: Sweep, d: Path) -> Outcome:
    ckpt = d / "bioformer.ckpt"
    shutil.copy(_base_ckpt(s), ckpt)
    ran = s.run(d, s.argv("test", "--config", str(s.exp / "overlays" / "demo.yaml"),
                          "--config", str(s.exp / "overlays" / "smoke.yaml"), "--ckpt_path", str(ckpt)))
    return Outcome(ran, ["bioformer.ckpt", "model.init_args.backbone.class_path"],
                   {"the checkpoint is untouched":
                                                               digest(ckpt) == digest(_base_ckpt(s))})


@case("another_corpus_checkpoint", "handled", "resuming an APAVA checkpoint on the ADFTD stand-in")
def _(s: Sweep, d: Path) -> Outcome:
    ckpt = d / "apava.ckpt"
    shutil.copy(_base_ckpt(s), ckpt)
    ran = s.run(d, s.argv("fit", "--config", str(s.exp / "bioformer_adftd.yaml"),
                          *s.standin[2:], "--ckpt_path", str(ckpt)))  # the same overlays, ADFTD's corpus
    return Outcome(ran, ["apava.ckpt", "data.class_path"],
                   {"no run directory left": not any((d / "runs").rglob("version_*"))})


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch PWNED",))


@case("pickle_payload_checkpoint", "handled", "a checkpoint whose pickle runs a shell command when unpickled")
def _(s: Sweep, d: Path) -> Outcome:
    import torch

    ckpt = d / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Payload()}, ckpt)
    ran = s.run(d, s.argv("test", *s.standin, "--ckpt_path", str(ckpt)))
    return Outcome(ran, ["evil.ckpt"], {"the payload did not run": not (d / "PWNED").exists()})


@case("yaml_python_tag", "handled", "a `--config` YAML with a `!!python/object/apply` tag")
def _(s: Sweep, d: Path) -> Outcome:
    (d / "evil.yaml").write_text('trainer: !!python/object/apply:os.system ["touch PWNED"]\n')
    out = _refused(s, d, ["evil.yaml"], "--config", "evil.yaml")
    out.checks["the tag did not run"] = not (d / "PWNED").exists()
    return out


# added: cases of the same kinds a researcher hits -------------------------------------------------

@case("malformed_yaml", "added", "a `--config` YAML with an unclosed list")
def _(s: Sweep, d: Path) -> Outcome:
    (d / "mine.yaml").write_text("trainer:\n  max_epochs: 2\n  limit_train_batches: [1, 2\n")
    return _refused(s, d, ["mine.yaml", "line"], "--config", "mine.yaml")


@case("batch_size_zero", "added", "`--data.init_args.batch_size=0`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["data.init_args.batch_size"], "--data.init_args.batch_size=0")


@case("dropout_above_one", "added", "`--model.init_args.backbone.init_args.dropout=1.5`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["dropout", "1.5"], "--model.init_args.backbone.init_args.dropout=1.5")


@case("corrupt_window_cache", "added", "a window cache whose `signals.bin` lost its last bytes")
def _(s: Sweep, d: Path) -> Outcome:
    assert s.base is not None
    shutil.copytree(s.base.parents[2] / "cache", d / "cache")
    signals = next((d / "cache").glob("*/signals.bin"))
    signals.write_bytes(signals.read_bytes()[:-4])
    out = _refused(s, d, ["signals.bin", "--data.init_args.rebuild_cache true"])
    return out


@case("retrain_a_finished_run", "added", "`--run.version version_0` naming a run that has its `results.json`")
def _(s: Sweep, d: Path) -> Outcome:
    assert s.base is not None
    run_dir = d / EXP / "version_0"
    shutil.copytree(s.base, run_dir)
    before = digest(run_dir / "results.json")
    ran = s.fit(d, "--run.version", "version_0")
    return Outcome(ran, ["version_0"], {"results.json unchanged": digest(run_dir / "results.json") == before,
                                        "checkpoints still load": all_checkpoints_load(run_dir)})


@case("apava_wrong_channel_count", "added", "an APAVA `.npy` with 15 channels instead of 16")
def _(s: Sweep, d: Path) -> Outcome:
    root = write_apava(d / "APAVA")
    path = root / "Feature" / "feature_05.npy"
    np.save(path, np.load(path)[:, :, :15])
    ran = _apava_fit(s, d, root)
    return Outcome(ran, ["feature_05.npy", "C=16 channels", "got (2, 256, 15)"], {"no run directory left":
                                                           not any((d / "runs").rglob("version_*"))})


@case("missing_checkpoint", "added", "`biosig test --ckpt_path` naming a file that does not exist")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["--ckpt_path", "nowhere.ckpt", "no such file"], "--ckpt_path", "nowhere.ckpt",
                    command="test")


# --- judging and writing ---------------------------------------------------------------------------

# --- inputs that expand, and one line for every bad input ----------------------------------------

def _bomb_yaml(levels: int = 9) -> str:
    """A few hundred bytes of YAML aliases standing for 9**levels scalars (billion laughs)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _peak(s: Sweep, d: Path, argv: list[str], culprit: list[str], **checks: bool) -> Outcome:
    ran, peak = s.run_peak(d, argv)
    return Outcome(ran, culprit, {"no run directory left": not versions(d / EXP), **checks},
                   peak_mb=float("nan") if peak is None else peak)


@case("yaml_alias_bomb_config", "inputs", "a 400-byte `--config` whose aliases stand for 387 million values")
def _(s: Sweep, d: Path) -> Outcome:
    bomb = d / "bomb.yaml"
    bomb.write_text(_bomb_yaml())
    return _peak(s, d, s.argv("fit", *s.standin, "--config", str(bomb)), ["bomb.yaml", "aliases expand"])


@case("yaml_alias_bomb_grid", "inputs", "`biosig benchmark --grid` a file of nested aliases")
def _(s: Sweep, d: Path) -> Outcome:
    bomb = d / "grid.yaml"
    bomb.write_text(_bomb_yaml())
    return _peak(s, d, s.argv("benchmark", "--grid", str(bomb), "--out", str(d / "out"), "--print-commands"),
                 ["grid.yaml", "aliases expand"])


@case("yaml_alias_bomb_search_space", "inputs", "`biosig tune --search-space` a file of nested aliases")
def _(s: Sweep, d: Path) -> Outcome:
    bomb = d / "space.yaml"
    bomb.write_text(_bomb_yaml())
    return _peak(s, d,
                 s.argv("tune", *s.standin, "--search-space", str(bomb),
                        "--study-name", "b", "--n-trials", "1"),
                 ["space.yaml", "aliases expand"])


def _zip_bomb(s: Sweep, path: Path, inflated: int = 3 * 2**30) -> Path:
    """The base run's last.ckpt with one extra member: ``inflated`` zero bytes, deflated to a few MiB."""
    import zipfile

    assert s.base is not None
    src = zipfile.ZipFile(s.base / "checkpoints" / "last.ckpt")
    prefix = src.infolist()[0].filename.split("/")[0]
    with zipfile.ZipFile(path, "w") as z:
        for info in src.infolist():
            z.writestr(info, src.read(info))
        info = zipfile.ZipInfo(f"{prefix}/data/9999")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as member:
            chunk = bytes(2**24)
            for _ in range(inflated // len(chunk)):
                member.write(chunk)
    return path


@case("checkpoint_zip_bomb_test", "inputs",
      "`biosig test --ckpt_path` a checkpoint with a member that inflates to 3 GiB")
def _(s: Sweep, d: Path) -> Outcome:
    bomb = _zip_bomb(s, d / "bomb.ckpt")
    return _peak(s, d, s.argv("test", *s.standin, "--ckpt_path", str(bomb)),
                 ["bomb.ckpt", "inflate to 3,072 MiB"],
                 **{"the file is small": bomb.stat().st_size < 16 * 2**20})


@case("checkpoint_zip_bomb_resume", "inputs", "`biosig fit --ckpt_path` the same inflating checkpoint")
def _(s: Sweep, d: Path) -> Outcome:
    bomb = _zip_bomb(s, d / "bomb.ckpt")
    return _peak(s, d, s.argv("fit", *s.standin, "--ckpt_path", str(bomb)), ["bomb.ckpt", "inflate"])


def _npy_header(path: Path, shape: tuple[int, ...], data: bytes) -> None:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + data)


@case("npy_feature_header_huge", "inputs", "an APAVA feature `.npy` whose header claims 10^12 windows")
def _(s: Sweep, d: Path) -> Outcome:
    root = write_apava(d / "apava")
    _npy_header(root / "Feature" / "feature_04.npy", (10**12, 256, 16), bytes(1024))
    ran, peak = s.run_peak(d,
                           s.argv("fit", "--config", s.bioformer[0], "--config", s.tiny, "--config",
                                  s.bioformer[1],
                                     f"--data.init_args.root={root}", "--trainer.max_epochs=1"))
    return Outcome(ran, ["feature_04.npy", "header says shape (1000000000000, 256, 16)"],
                   {"no run directory left": not any((d / "runs").rglob("version_*"))},
                   peak_mb=float("nan") if peak is None else peak)


@case("npy_label_header_huge", "inputs",
      "an APAVA `label.npy` whose header claims 10^11 rows (read whole, not mapped)")
def _(s: Sweep, d: Path) -> Outcome:
    root = write_apava(d / "apava")
    _npy_header(root / "Label" / "label.npy", (10**11, 2), bytes(64))
    ran, peak = s.run_peak(d,
                           s.argv("fit", "--config", s.bioformer[0], "--config", s.tiny, "--config",
                                  s.bioformer[1],
                                     f"--data.init_args.root={root}", "--trainer.max_epochs=1"))
    return Outcome(ran, ["label.npy", "header says shape (100000000000, 2)"],
                   {"no run directory left": not any((d / "runs").rglob("version_*"))},
                   peak_mb=float("nan") if peak is None else peak)


def _report_bad(s: Sweep, d: Path, bad: Any, culprit: str) -> Outcome:
    text = bad if isinstance(bad, str) else None
    if text is None:
        assert s.base is not None
        res = json.loads((s.base / "results.json").read_text())
        res.update(bad)
        text = json.dumps(res)
    return _report_with_one_bad(s, d, text, extra=[culprit])


@case("report_deeply_nested_json", "inputs",
      "`biosig report` where one `results.json` nests 100,000 lists deep")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_bad(s, d, '{"metrics": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply")


@case("report_metrics_not_a_mapping", "inputs", "`biosig report` where one run's `metrics` is a list")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_bad(s, d, {"metrics": [0.5, 0.7]}, "'metrics' is a list")


@case("report_metric_not_a_number", "inputs",
      "`biosig report` where one run's `metrics[\"test/acc\"]` is a string")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_bad(s, d, {"metrics": {"test/acc": "high"}}, "metrics['test/acc'] is a string")


@case("report_ragged_confusion_matrix", "inputs",
      "`biosig report` where one run's `confusion_matrix` is ragged")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_bad(s, d, {"confusion_matrix": [[1, 2], [3]]}, "'confusion_matrix' is not a square table")


@case("report_many_classes", "inputs",
      "`biosig report` of a run with 2,000 classes (its confusion matrix figure)")
def _(s: Sweep, d: Path) -> Outcome:
    assert s.base is not None
    run = d / "runs" / "many"
    shutil.copytree(s.base, run)
    res = json.loads((run / "results.json").read_text())
    n = 2000
    res["confusion_matrix"] = np.eye(n, dtype=int).tolist()
    res["classes"] = [f"class_{i}" for i in range(n)]
    (run / "results.json").write_text(json.dumps(res))
    ran, peak = s.run_peak(d, s.argv("report", "runs", "--figures", "figs"))
    pngs = sorted((d / "figs").glob("confusion_*.png"))
    size_ok = False
    if pngs:
        from PIL import Image

        with Image.open(pngs[0]) as im:
            size_ok = max(im.size) <= 12 * 110 + 1
    return Outcome(
        ran,
        None,
        {
            "exit 0": ran.rc == 0,
            "the confusion figure is at most 12 in a side": size_ok,
            "no temporary file left in the figures folder": not any(
                p.name.startswith(".") for p in (d / "figs").iterdir()
            )
            if (d / "figs").is_dir()
            else False,
        },
        peak_mb=float("nan") if peak is None else peak,
    )


@case("biosig_cache_is_a_file", "inputs", "`BIOSIG_CACHE` naming a file")
def _(s: Sweep, d: Path) -> Outcome:
    cache = d / "cache.txt"
    cache.write_text("a file")
    env = {**s.env(d), "BIOSIG_CACHE": str(cache)}
    ran = s.run(d, s.argv("fit", *s.standin), env=env)
    return Outcome(ran, ["cache.txt", "is a file, not a directory", "BIOSIG_CACHE"],
                   {"no run directory left": not versions(d / EXP),
                    "the file is untouched": cache.read_text() == "a file"})


@case("biosig_cache_below_a_file", "inputs", "`BIOSIG_CACHE` naming a folder below a file")
def _(s: Sweep, d: Path) -> Outcome:
    (d / "f").write_text("a file")
    env = {**s.env(d), "BIOSIG_CACHE": str(d / "f" / "cache")}
    ran = s.run(d, s.argv("fit", *s.standin), env=env)
    return Outcome(ran, ["f/cache", "is a file, not a directory"],
                   {"no run directory left": not versions(d / EXP)})


@case("fit_seed_too_large", "inputs", "`biosig fit --seed_everything=4294967296`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["seed_everything", "4294967296"], "--seed_everything=4294967296")


@case("fit_seed_negative", "inputs", "`biosig fit --seed_everything=-5`")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["seed_everything", "-5"], "--seed_everything=-5")


@case("checkpoint_hparam_model_lost", "inputs",
      "a checkpoint whose hyper-parameters hold a key the model no longer takes")
def _(s: Sweep, d: Path) -> Outcome:
    import torch

    assert s.base is not None
    state = torch.load(s.base / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    state["hyper_parameters"]["dropped_in_v2"] = 0.5
    old = d / "old.ckpt"
    torch.save(state, old)
    ran = s.run(d, s.argv("test", *s.standin, "--ckpt_path", str(old)))
    return Outcome(ran, ["old.ckpt", "'dropped_in_v2'"])


def _epochs_file(path: Path, codes: list[int], event_id: dict[str, int]) -> Path:
    import mne
    import pandas as pd

    n = len(codes)
    rng = np.random.default_rng(0)
    events = np.column_stack([np.arange(n) * 200, np.zeros(n, int), codes])
    mne.EpochsArray(rng.normal(0, 1e-5, (n, 3, 100)), mne.create_info(["C3", "C4", "Cz"], 100.0, "eeg"),
                    events=events, event_id=event_id,
                    metadata=pd.DataFrame({"subject": np.repeat(np.arange(1, n // 4 + 1), 4)}),
                    verbose="error").save(path, verbose="error")
    return path


def _own_config(d: Path, data: dict[str, Any], name: str = "own") -> Path:
    """A whole config for a user's own data: a tiny CNN1D, one short epoch."""
    import yaml

    config = {
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 2,
                    "limit_test_batches": 2,
                    "num_sanity_val_steps": 0, "enable_progress_bar": False, "accelerator": "cpu",
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": "runs", "name": name}}},
        "model": {"class_path": "ClassificationTask",
                  "init_args": {"backbone": {"class_path": "biosig_lightning.models.baselines.CNN1D",
                                             "init_args": {"width": 8,
                                                           "n_blocks": 1, "convs_per_block": 1}}}},
        "data": data,
    }
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _own_fit(s: Sweep, d: Path, data: dict[str, Any], culprit: list[str], name: str = "own") -> Outcome:
    ran = s.run(d, s.argv("fit", "--config", str(_own_config(d, data, name))))
    return Outcome(ran, culprit, {"no run directory left": not any((d / "runs").rglob("version_*"))})


@case("epochs_one_class", "inputs", "an Epochs `-epo.fif` file whose events are all one class")
def _(s: Sweep, d: Path) -> Outcome:
    path = _epochs_file(d / "mine-epo.fif", [1] * 24, {"left": 1})
    return _own_fit(s, d,
                    {"class_path": "EpochsDataModule", "init_args": {"epochs": str(path), "batch_size": 4}},
                    ["mine-epo.fif", "one class only", "left"])


@case("epochs_not_a_fif", "inputs", "an Epochs file that is not a FIF file")
def _(s: Sweep, d: Path) -> Outcome:
    path = d / "mine-epo.fif"
    path.write_bytes(b"\0" * 4096)
    return _own_fit(s, d,
                    {"class_path": "EpochsDataModule", "init_args": {"epochs": str(path), "batch_size": 4}},
                    ["mine-epo.fif", "cannot read epochs file"])


@case("epochs_truncated", "inputs", "an Epochs file cut to half its bytes")
def _(s: Sweep, d: Path) -> Outcome:
    path = _epochs_file(d / "mine-epo.fif", [1, 2] * 12, {"left": 1, "right": 2})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return _own_fit(s, d,
                    {"class_path": "EpochsDataModule", "init_args": {"epochs": str(path), "batch_size": 4}},
                    ["mine-epo.fif", "cannot read epochs file"])


@case("cv_folds_huge_range", "inputs", "`biosig cv --folds 0-3000000000` (a typo)")
def _(s: Sweep, d: Path) -> Outcome:
    ran, peak = s.run_peak(d, s.argv("cv", *s.standin, "--folds", "0-3000000000", "--out", "cvout"))
    return Outcome(ran, ["--folds", "0-3000000000", "3,000,000,001"],
                   {"no output folder left": not (d / "cvout").exists()},
                   peak_mb=float("nan") if peak is None else peak)


@case("cv_folds_reversed", "inputs", "`biosig cv --folds 5-2`")
def _(s: Sweep, d: Path) -> Outcome:
    ran = s.run(d, s.argv("cv", *s.standin, "--folds", "5-2", "--out", "cvout"))
    return Outcome(ran, ["--folds", "'5-2'"], {"no output folder left": not (d / "cvout").exists()})


def _twice(d: Path, text: str) -> Path:
    path = d / "twice.yaml"
    path.write_text(text)
    return path


@case("yaml_same_top_level_key_twice", "inputs",
      "a `--config` with `trainer:` twice (YAML keeps the second silently)")
def _(s: Sweep, d: Path) -> Outcome:
    path = _twice(d,
                  "trainer:\n  max_epochs: 3\nmodel:\n  init_args: {lr: 1.0e-3}\ntrainer:\n  max_epochs: 1\n")
    return _refused(s, d, ["twice.yaml", "'trainer' appears twice", "lines 1 and 5"], "--config", str(path))


@case("yaml_same_nested_key_twice", "inputs", "a `--config` with `lr:` twice in one mapping")
def _(s: Sweep, d: Path) -> Outcome:
    path = _twice(d, "model:\n  init_args:\n    lr: 1.0e-3\n    lr: 1.0e-2\n")
    return _refused(s, d, ["twice.yaml", "'lr' appears twice", "lines 3 and 4"], "--config", str(path))


@case("grid_same_key_twice", "inputs", "a grid file naming `seeds:` twice")
def _(s: Sweep, d: Path) -> Outcome:
    text = (s.exp / "benchmarks" / "smoke.yaml").read_text()
    path = d / "grid.yaml"
    path.write_text(text + "\nseeds: [1]\n")
    ran = s.run(d, s.argv("benchmark", "--grid", str(path), "--out", "bout", "--print-commands"))
    return Outcome(ran, ["grid.yaml", "'seeds' appears twice"],
                   {"no output folder left": not (d / "bout").exists()})


def _ptbxl(root: Path, filename: str | None = None, hea: str | None = None,
           dat_bytes: int | None = None) -> Path:
    """A one-patient PTB-XL tree (two 10-s records at 100 Hz, wfdb), its database and statements."""
    import wfdb

    leads = ["I", "II", "III", "AVR", "AVL", "AVF", "V1", "V2", "V3", "V4", "V5", "V6"]
    folder = root / "records100" / "00000"
    folder.mkdir(parents=True)
    for ecg_id in (1, 2):
        sig = np.random.default_rng(ecg_id).normal(0, 0.1, (1000, 12))
        wfdb.wrsamp(f"{ecg_id:05d}_lr", fs=100, units=["mV"] * 12, sig_name=leads, p_signal=sig,
                    fmt=["16"] * 12,
                    write_dir=str(folder))
    with open(root / "ptbxl_database.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ecg_id", "patient_id", "scp_codes", "strat_fold", "filename_lr", "filename_hr"])
        for ecg_id in (1, 2):
            name = filename if (filename is not None and ecg_id == 2) else f"records100/00000/{ecg_id:05d}_lr"
            w.writerow([ecg_id, f"{100 + ecg_id}.0", "{'NORM': 100.0}" if ecg_id == 1 else "{'IMI': 100.0}",
                        ecg_id, name, f"records500/00000/{ecg_id:05d}_hr"])
    with open(root / "scp_statements.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["", "description", "diagnostic", "form", "rhythm",
                    "diagnostic_class", "diagnostic_subclass"])
        w.writerow(["NORM", "normal", "1.0", "", "", "NORM", "NORM"])
        w.writerow(["IMI", "inferior MI", "1.0", "", "", "MI", "IMI"])
    if hea is not None:
        (folder / "00002_lr.hea").write_text(hea)
    if dat_bytes is not None:
        dat = folder / "00002_lr.dat"
        dat.write_bytes(dat.read_bytes()[:dat_bytes])
    return root


def _ptbxl_fit(s: Sweep, d: Path, root: Path, culprit: list[str]) -> Outcome:
    return _own_fit(s, d,
                    {"class_path": "PTBXLDataModule", "init_args": {"root": str(root), "batch_size": 2}},
                    culprit, "ptbxl")


@case("ptbxl_absolute_filename", "inputs",
      "PTB-XL's database listing an absolute `filename_lr` (`/etc/hostname`)")
def _(s: Sweep, d: Path) -> Outcome:
    root = _ptbxl(d / "ptbxl", filename="/etc/hostname")
    return _ptbxl_fit(s, d, root,
                      ["ptbxl_database.csv", "row 3", "filename_lr '/etc/hostname' leads outside"])


@case("ptbxl_dotdot_filename", "inputs", "PTB-XL's database listing `filename_lr` `records100/../../x`")
def _(s: Sweep, d: Path) -> Outcome:
    root = _ptbxl(d / "ptbxl", filename="records100/../../x")
    return _ptbxl_fit(s, d, root, ["ptbxl_database.csv", "records100/../../x", "leads outside"])


@case("ptbxl_garbage_header", "inputs", "a PTB-XL record whose WFDB `.hea` is garbage")
def _(s: Sweep, d: Path) -> Outcome:
    root = _ptbxl(d / "ptbxl", hea="this is not a header\n")
    return _ptbxl_fit(s, d, root, ["00002_lr", "cannot read WFDB record"])


@case("ptbxl_truncated_data", "inputs", "a PTB-XL record whose `.dat` lost most of its bytes")
def _(s: Sweep, d: Path) -> Outcome:
    root = _ptbxl(d / "ptbxl", dat_bytes=100)
    return _ptbxl_fit(s, d, root, ["00002_lr"])


@case("search_space_dropout_above_one", "inputs", "a search space whose dropout range reaches 1.5")
def _(s: Sweep, d: Path) -> Outcome:
    space = d / "space.yaml"
    space.write_text("model.init_args.backbone.init_args.dropout: {type: float, low: 0.0, high: 1.5}\n")
    ran = s.run(d,
                s.argv("tune", *s.standin, "--search-space", str(space),
                       "--study-name", "dr", "--n-trials", "2"))
    return Outcome(ran, ["model.init_args.backbone.init_args.dropout", "1.5", "probability"],
                   {"no study left": not (d / "dr.db").exists() or not study_states(d / "dr.db", "dr"),
                    "no trial directory left": not any((d / "runs").rglob("trial_*"))})


@case("search_space_lr_negative", "inputs", "a search space whose learning rate range starts below 0")
def _(s: Sweep, d: Path) -> Outcome:
    space = d / "space.yaml"
    space.write_text("model.init_args.lr: {type: float, low: -0.1, high: 0.01}\n")
    ran = s.run(d,
                s.argv("tune", *s.standin, "--search-space", str(space),
                       "--study-name", "lr", "--n-trials", "2"))
    return Outcome(ran, ["model.init_args.lr", "-0.1"],
                   {"no trial directory left": not any((d / "runs").rglob("trial_*"))})


def _grid_recipe(s: Sweep, d: Path, recipe: str) -> Outcome:
    import yaml

    spec = yaml.safe_load((s.exp / "benchmarks" / "smoke.yaml").read_text())
    for corpus in spec["corpora"].values():  # the grid's own relative paths, from this folder
        for key in ("configs", "overlays"):
            corpus[key] = [
                str(s.exp / Path(p).relative_to("experiments")) if p.startswith("experiments/") else p
                for p in corpus.get(key) or []
            ]
    name = next(iter(spec["methods"]))
    spec["methods"][name]["recipe"] = {"class_path": recipe}
    path = d / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    ran = s.run(d, s.argv("benchmark", "--grid", str(path), "--out", "bout"))
    return Outcome(
        ran,
        ["grid.yaml", f"methods.{name}.recipe", recipe, "names no task"],
        {
            "no cell ran": not any((d / "bout").rglob("results.json"))
            and not any((d / "bout").rglob("*.ckpt"))
        },
    )


@case("grid_unknown_recipe", "inputs", "a grid whose method names the recipe `ClasificationTask` (a typo)")
def _(s: Sweep, d: Path) -> Outcome:
    return _grid_recipe(s, d, "ClasificationTask")


@case("grid_unknown_recipe_dotted", "inputs", "a grid whose method names `biosig_lightning.robust.DGTsk`")
def _(s: Sweep, d: Path) -> Outcome:
    return _grid_recipe(s, d, "biosig_lightning.robust.DGTsk")


@case("precision_16_mixed_on_cpu", "inputs",
      "`--trainer.precision 16-mixed` on a CPU (Lightning would run bf16-mixed)")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["trainer.precision", "16-mixed", "bf16-mixed"], "--trainer.accelerator=cpu",
                    "--trainer.precision=16-mixed")


@case("precision_16_on_cpu", "inputs", "`--trainer.precision 16` on a CPU")
def _(s: Sweep, d: Path) -> Outcome:
    return _refused(s, d, ["trainer.precision", "16 asked for", "bf16-mixed"], "--trainer.accelerator=cpu",
                    "--trainer.precision=16")


def _bids(root: Path, n_subjects: int = 4) -> Path:
    """A BIDS dataset written by mne-bids: ``n_subjects`` 16-s BrainVision recordings, events every 2 s."""
    import mne
    import mne_bids

    rng = np.random.default_rng(0)
    for sub in range(1, n_subjects + 1):
        raw = mne.io.RawArray(rng.normal(0, 1e-5, (3, 1600)),
                              mne.create_info(["C3", "C4", "Cz"], 100.0, "eeg"),
                              verbose="error")
        raw.set_annotations(mne.Annotations([2.0 * i for i in range(8)], [1.0] * 8, ["left", "right"] * 4))
        mne_bids.write_raw_bids(raw,
                                mne_bids.BIDSPath(subject=f"{sub:02d}", task="mi", datatype="eeg", root=root),
                                format="BrainVision", allow_preload=True, verbose="error")
    return root


def _bids_fit(s: Sweep, d: Path, root: Path, culprit: list[str]) -> Outcome:
    return _own_fit(
        s,
        d,
        {
            "class_path": "BIDSDataModule",
            "init_args": {"root": str(root), "task": "mi", "window_seconds": 1.0, "batch_size": 4},
        },
        culprit,
        "bids",
    )


@case("bids_channels_tsv_mismatch", "inputs",
      "a BIDS dataset (mne-bids) whose `channels.tsv` names other channels")
def _(s: Sweep, d: Path) -> Outcome:
    root = _bids(d / "bids")
    tsv = root / "sub-03" / "eeg" / "sub-03_task-mi_channels.tsv"
    tsv.write_text(tsv.read_text().replace("C3\t", "Fz\t"))
    return _bids_fit(s, d, root, ["sub-03_task-mi_eeg.vhdr", "Channel mismatch"])


@case("bids_empty_data_files", "inputs", "a BIDS dataset (mne-bids) whose `.eeg` data files are empty")
def _(s: Sweep, d: Path) -> Outcome:
    root = _bids(d / "bids")
    for data in root.rglob("*.eeg"):
        data.write_bytes(b"")
    return _bids_fit(s, d, root, ["sub-01_task-mi_eeg.vhdr", "sub-01_task-mi_eeg.eeg is empty"])


@case("bids_garbage_header", "inputs", "a BIDS dataset (mne-bids) whose first `.vhdr` header is garbage")
def _(s: Sweep, d: Path) -> Outcome:
    root = _bids(d / "bids")
    (root / "sub-01" / "eeg" / "sub-01_task-mi_eeg.vhdr").write_text("not a BrainVision header\n")
    return _bids_fit(s, d, root, ["sub-01_task-mi_eeg.vhdr", "cannot read the BIDS recording"])


@case("bids_sidecar_json_truncated", "inputs",
      "a BIDS dataset (mne-bids) whose second `_eeg.json` sidecar is cut short")
def _(s: Sweep, d: Path) -> Outcome:
    root = _bids(d / "bids")
    (root / "sub-02" / "eeg" / "sub-02_task-mi_eeg.json").write_text('{"SamplingFrequency": ')
    return _bids_fit(s, d, root,
                     ["sub-02_task-mi_eeg.vhdr", "cannot read the BIDS recording", "JSONDecodeError"])


@case("bids_events_tsv_garbage", "inputs", "a BIDS dataset (mne-bids) whose `events.tsv` onsets are text")
def _(s: Sweep, d: Path) -> Outcome:
    root = _bids(d / "bids")
    events = root / "sub-02" / "eeg" / "sub-02_task-mi_events.tsv"
    lines = events.read_text().splitlines()
    events.write_text("\n".join([lines[0], *("soon\t" + ln.split("\t", 1)[1] for ln in lines[1:])]) + "\n")
    return _bids_fit(s, d, root, ["sub-02_task-mi_eeg.vhdr", "cannot read the BIDS recording"])


@case("configs_path_dotdot", "inputs", "`biosig configs path ../pyproject`")
def _(s: Sweep, d: Path) -> Outcome:
    ran = s.run(d, s.argv("configs", "path", "../pyproject"))
    return Outcome(ran, ["../pyproject", "not a packaged config name"],
                   {"prints no path": not ran.out.strip()})


@case("configs_copy_absolute", "inputs", "`biosig configs copy /etc/hostname`")
def _(s: Sweep, d: Path) -> Outcome:
    ran = s.run(d, s.argv("configs", "copy", "/etc/hostname"))
    return Outcome(ran, ["/etc/hostname", "not a packaged config name"],
                   {"nothing copied": not any(d.iterdir())})


@case("configs_copy_dotdot_inside", "inputs", "`biosig configs copy overlays/../../pyproject`")
def _(s: Sweep, d: Path) -> Outcome:
    ran = s.run(d, s.argv("configs", "copy", "overlays/../../pyproject"))
    return Outcome(ran, ["overlays/../../pyproject", "not a packaged config name"],
                   {"nothing copied": not any(d.iterdir())})


# two processes on one --out ---------------------------------------------------------------------

def _shared_env(s: Sweep, d: Path, hold: Path | None = None) -> dict[str, str]:
    """The case's environment with the hold callback importable; ``hold`` arms it (:data:`HOLD_HOOK`)."""
    env = s.env(d)
    env["PYTHONPATH"] = os.pathsep.join([str(s.checkout), str(s.tmp / "overlays")])
    if hold is not None:
        env["BIOSIG_SWEEP_HOLD"] = str(hold)
    return env


def _sweep_argv(s: Sweep, command: str, *extra: str) -> list[str]:
    """``biosig cv`` (3-fold kfold of the stand-in) or ``biosig repeat`` with the (idle) hold callback."""
    kfold = ["--config", s.kfold] if command == "cv" else []
    return s.argv(command, *s.standin, *kfold, "--trainer.callbacks+=sweep_hold.HoldFirstEpoch", *extra)


def _reference(s: Sweep, command: str, *extra: str) -> tuple[Path, Future[Ran]]:
    """The single-process run ``biosig <command> ... *extra --out ref`` (started by the first case asking,
    alongside its own commands, and shared): its folder and its result to come."""
    name = f"{command}{''.join(extra)}"
    with s._reference_lock:
        if name not in s._references:
            d = s.tmp / f"reference-{command}"
            d.mkdir()
            s._references[name] = (d / "ref", s._reference_pool.submit(
                s.run, d, _sweep_argv(s, command, *extra, "--out", "ref"), _shared_env(s, d)))
        return s._references[name]


class JsonWatch:
    """Reads a summary file over and over while commands run: a read that does not parse is a torn file."""

    def __init__(self, path: Path) -> None:
        self.path, self.reads, self.torn = path, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                doc = json.loads(self.path.read_text())
                self.reads += 1
                self.torn += not isinstance(doc, dict)
            except FileNotFoundError:
                pass
            except ValueError:
                self.torn += 1
            time.sleep(0.005)

    def stop(self) -> bool:
        """Stop reading; whether it read the file at least once and never found it torn."""
        self._stop.set()
        self._thread.join()
        return self.reads > 0 and self.torn == 0


def _attempts(log: Path) -> list[str]:
    """The ``host:pid`` of each attempt header of a fit log (``== date time host:pid: biosig fit ...``)."""
    text = log.read_text() if log.is_file() else ""
    return re.findall(r"^== \S+ \S+ \S+?:(\d+): biosig fit ", text, re.M)


def _fitted_by(outs: list[str], label: str) -> list[int]:
    """Which of the processes (by index) printed ``<label>: fitting into``."""
    return [k for k, out in enumerate(outs) if re.search(rf"^{label}: fitting into ", out, re.M)]


def _skipped_by(outs: list[str], label: str) -> list[int]:
    return [k for k, out in enumerate(outs) if re.search(rf"^{label}: \S+ exists, skipped$", out, re.M)]


def _same_as_reference(runs: dict[str, tuple[Path, Path]]) -> dict[str, bool]:
    """Per name, (run directory, the single-process run's): results and checkpoints whole, metrics.csv the
    same bytes, the same test metrics."""
    def metrics(run: Path) -> dict[str, Any] | None:
        path = run / "results.json"
        return json.loads(path.read_text()).get("metrics") if path.is_file() else None

    return {
        "every run has results.json and checkpoints that load (weights_only)": all(
            metrics(run) is not None and all_checkpoints_load(run) for run, _ in runs.values()),
        "every metrics.csv is byte for byte the single-process run's (no row lost)": all(
            metrics_parse(run) and (run / "metrics.csv").read_bytes() == (ref / "metrics.csv").read_bytes()
            for run, ref in runs.values()),
        "every run's test metrics are the single-process run's": all(
            metrics(run) is not None and metrics(run) == metrics(ref) for run, ref in runs.values()),
    }


def _nothing_left(out: Path, names: set[str]) -> bool:
    """``out`` holds exactly ``names``: no claim or lock file, no temporary file."""
    return {p.name for p in out.iterdir()} == names if out.is_dir() else False


@case("cv_two_at_once_same_out", "shared", "two `biosig cv` (3 folds) started at once on one `--out`")
def _(s: Sweep, d: Path) -> Outcome:
    argv = _sweep_argv(s, "cv", "--folds", "0-2", "--out", "cv")
    env, out = _shared_env(s, d), d / "cv"
    watch = JsonWatch(out / "cv.json")
    procs = [s.start(d, argv, env=env) for _ in range(2)]
    ref_dir, ref_run = _reference(s, "cv", "--folds", "0-2")
    done = [finish(p, argv) for p in procs]
    untorn = watch.stop()
    ref = ref_run.result()
    outs = [r.out for r in done]
    folds = {k: (out / f"fold_{k:02d}", ref_dir / f"fold_{k:02d}") for k in range(3)}
    by = {k: _fitted_by(outs, f"fold {k}") for k in folds}
    pids = [str(p.pid) for p in procs]
    summary = json.loads((out / "cv.json").read_text()) if (out / "cv.json").is_file() else {}
    expected = json.loads((ref_dir / "cv.json").read_text()) if ref.rc == 0 else None
    return Outcome(done[0] if done[0].rc != 0 else done[1], None, {
        "both exit 0, the single-process run too": all(r.rc == 0 for r in (*done, ref)),
        "no traceback": all(no_traceback(r) for r in done),
        "each fold fitted by one process and found held or finished (skipped) by the other": all(
            len(by[k]) == 1 and _skipped_by(outs, f"fold {k}") == [1 - by[k][0]] for k in folds),
        "each fold's log holds one attempt, by the process that fitted it": all(
            len(by[k]) == 1 and _attempts(out / f"fold_{k:02d}.log") == [pids[by[k][0]]] for k in folds),
        **_same_as_reference({str(k): v for k, v in folds.items()}),
        "cv.json holds every fold with the single-process run's summary": expected is not None
        and summary == expected and summary.get("missing") == [] and summary.get("n_folds") == 3,
        "cv.json never read torn while both ran": untorn,
        "nothing else left in --out (no claim, lock or temporary file)": _nothing_left(
            out, {"cv.json", *(f"fold_{k:02d}{x}" for k in folds for x in ("", ".log"))}),
    }, note="fitted: " + "; ".join(f"fold {k} by process {by[k][0] + 1 if by[k] else '?'}" for k in folds))


@case("repeat_two_at_once_same_out", "shared", "two `biosig repeat` (3 seeds) started at once on one `--out`")
def _(s: Sweep, d: Path) -> Outcome:
    argv = _sweep_argv(s, "repeat", "--seeds", "1,2,3", "--out", "rep")
    env, out = _shared_env(s, d), d / "rep"
    procs = [s.start(d, argv, env=env) for _ in range(2)]
    ref_dir, ref_run = _reference(s, "repeat", "--seeds", "1,2,3")
    done = [finish(p, argv) for p in procs]
    ref = ref_run.result()
    outs = [r.out for r in done]
    seeds = {k: (out / f"seed_{k}", ref_dir / f"seed_{k}") for k in (1, 2, 3)}
    by = {k: _fitted_by(outs, f"seed {k}") for k in seeds}
    return Outcome(done[0] if done[0].rc != 0 else done[1], None, {
        "both exit 0, the single-process run too": all(r.rc == 0 for r in (*done, ref)),
        "no traceback": all(no_traceback(r) for r in done),
        "each seed fitted by one process and found held or finished (skipped) by the other": all(
            len(by[k]) == 1 and _skipped_by(outs, f"seed {k}") == [1 - by[k][0]] for k in seeds),
        "both report 3/3 seeds finished": all(re.search(r"^repeat: 3/3 seeds finished under ", o, re.M)
                                              for o in outs),
        **_same_as_reference({str(k): v for k, v in seeds.items()}),
        "nothing else left in --out (no claim, lock or temporary file)": _nothing_left(
            out, {f"seed_{k}" for k in seeds}),
    }, note="fitted: " + "; ".join(f"seed {k} by process {by[k][0] + 1 if by[k] else '?'}" for k in seeds))


@case("cv_second_while_first_holds", "shared",
      "`biosig cv --folds 1` started on the `--out` of a `biosig cv --folds 0-1` that is training fold 1")
def _(s: Sweep, d: Path) -> Outcome:
    out, hold = d / "cv", d / "hold" / "fold_01"
    hold.parent.mkdir()
    first_argv = _sweep_argv(s, "cv", "--folds", "0-1", "--out", "cv")
    first = s.start(d, first_argv, env=_shared_env(s, d, hold))
    ref_dir, ref_run = _reference(s, "cv", "--folds", "0-2")
    holding = wait_for(lambda: Path(f"{hold}.holding").exists(), first)
    second_argv = _sweep_argv(s, "cv", "--folds", "1", "--out", "cv")
    second = s.start(d, second_argv, env=_shared_env(s, d))
    assert second.stdout is not None and second.stderr is not None
    err: list[str] = []
    stderr = second.stderr
    drain = threading.Thread(target=lambda: err.append(stderr.read()), daemon=True)
    drain.start()
    said: list[str] = []
    seen: dict[str, bool] = {}
    for line in second.stdout:  # the second's own lines, as they come
        said.append(line)
        if " is held by another process" in line and not seen:
            seen = {"dir": (out / "fold_01").is_dir(),
                    "no ckpt": not (out / "fold_01" / "checkpoints" / "last.ckpt").exists(),
                    "first alive": first.poll() is None}
            Path(f"{hold}.release").touch()  # the first may finish fold 1 now
    Path(f"{hold}.release").touch()
    drain.join()
    second_done = Ran(second_argv, second.wait(), "".join(said), "".join(err))
    first_ended_before = first.poll() is not None
    first_done, ref_done = finish(first, first_argv), ref_run.result()
    summary = json.loads((out / "cv.json").read_text()) if (out / "cv.json").is_file() else {}
    ref_folds = json.loads((ref_dir / "cv.json").read_text())["folds"] if ref_done.rc == 0 else {}
    f1 = [ref_folds[k]["test/f1"] for k in ("0", "1") if k in ref_folds]
    host = socket.gethostname()
    return Outcome(second_done, None, {
        "the first held fold 1 in its first epoch when the second started": holding,
        "the second says fold 1 is held by the first, naming it": re.search(
            rf"^fold 1: cv/fold_01 is held by another process \({re.escape(host)}:{first.pid}\); "
            "taking it up when that process lets it go$", second_done.out, re.M) is not None,
        "while it waited, the fold being trained (no last.ckpt yet) was there and the first alive": bool(seen)
        and all(seen.values()),
        "the second did not fit fold 1 and found it finished after the first let it go": not _fitted_by(
            [second_done.out], "fold 1") and _skipped_by([second_done.out], "fold 1") == [0],
        "fold 1's log holds one attempt, by the first": _attempts(out / "fold_01.log") == [str(first.pid)],
        "all exit 0, the single-process run too": all(r.rc == 0 for r in (first_done, second_done, ref_done)),
        "no traceback": all(no_traceback(r) for r in (first_done, second_done)),
        **_same_as_reference({str(k): (out / f"fold_{k:02d}", ref_dir / f"fold_{k:02d}") for k in (0, 1)}),
        "the first ended before the second (which wrote cv.json last)": first_ended_before,
        "cv.json holds both folds with the single-process run's values, mean and std": len(f1) == 2
        and summary.get("folds") == {k: ref_folds[k] for k in ("0", "1")} and summary.get("missing") == []
        and summary.get("n_folds") == 2 and summary.get("test/f1", {}).get("n") == 2
        and np.isclose(summary["test/f1"]["mean"], np.mean(f1), rtol=0, atol=1e-12)
        and np.isclose(summary["test/f1"]["std"], np.std(f1, ddof=1), rtol=0, atol=1e-12),
        "nothing else left in --out (no claim, lock or temporary file)": _nothing_left(
            out, {"cv.json", *(f"fold_{k:02d}{x}" for k in (0, 1) for x in ("", ".log"))}),
    })


def judge(s: Sweep, c: Case, d: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        out = c.run(s, d)
    except Exception as err:  # noqa: BLE001 - a broken case is reported, not fatal to the sweep
        out = Outcome(None, checks={f"the case ran ({type(err).__name__}: {err})": False})
    row: dict[str, Any] = {"case": c.name, "source": c.source, "what": c.what,
                           "seconds": round(time.monotonic() - t0, 1)}
    if out.skipped:
        row.update(result="skipped", reason=out.skipped)
        return row
    checks = dict(out.checks)
    ran = out.ran
    if ran is not None:
        line = ran.last
        if out.line_prefix:
            line = next((x for x in ran.err_lines if x.startswith(out.line_prefix)), "")
        row.update(command=s.shown(ran.argv), exit=ran.rc, stderr_lines=len(ran.err_lines),
                   last_line=line.replace(str(d) + "/", "").replace(str(d), "."))
        if out.line_prefix:
            row["line_judged"] = f"the line starting {out.line_prefix.strip()!r}"
        if out.culprit is not None:
            command = ran.argv[1] if ran.argv[0] == s.biosig else ""
            which = "the warning" if out.line_prefix else "the last line"
            if not out.line_prefix:
                checks["fails (exit != 0)"] = ran.rc != 0
            checks["no traceback"] = no_traceback(ran)
            checks[f"{which} is 'biosig {command}: ...'"] = line.startswith(f"biosig {command}: ")
            row["names_culprit"] = all(part in line for part in out.culprit)
            checks[f"{which} names " + ", ".join(repr(p) for p in out.culprit)] = row["names_culprit"]
        else:
            checks.setdefault("no traceback", no_traceback(ran))
    if out.peak_mb is not None:
        measured = out.peak_mb == out.peak_mb  # not NaN
        row["peak_rss_mb"] = round(out.peak_mb, 1) if measured else None
        how = "/usr/bin/time -v" if Path(TIME).is_file() else "os.wait4 ru_maxrss"
        checks[f"peak memory under {PEAK_LIMIT_MB / 1024:g} GiB ({how})"] = (
            measured and out.peak_mb < PEAK_LIMIT_MB
        )
    row["checks"] = checks
    row["result"] = "handled" if checks and all(checks.values()) else "NOT handled"
    if out.note:
        row["note"] = out.note
    return row


def make_base(s: Sweep) -> None:
    """One finished stand-in run (its checkpoints, results.json and window cache) for the cases that need
    one."""
    d = s.tmp / "base"
    d.mkdir()
    ran = s.fit(d)
    if ran.rc != 0:
        raise SystemExit(f"the stand-in fit itself failed (exit {ran.rc}): {ran.last}")
    s.base = d / EXP / "version_0"


def write_result(rows: list[dict[str, Any]], out: Path, command: str, dates: list[str], timing: str) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from biosig_lightning.atomic_io import atomic_write_json

    handled = sum(r["result"] == "handled" for r in rows)
    skipped = sum(r["result"] == "skipped" for r in rows)
    machine = (f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, Python "
               f"{platform.python_version()}, "
               f"torch {torch.__version__}; a fresh clone of the branch, its package first on PYTHONPATH")
    source = {"table": "issue table", "handled": "listed as handled", "added": "added",
              "inputs": "inputs that expand, one-line errors", "shared": "two processes, one --out"}
    table_rows = []
    for k, r in enumerate(rows, 1):
        last = r.get("last_line", "") or ""
        failed = [name for name, ok in r.get("checks", {}).items() if not ok]
        table_rows.append(
            [
                str(k),
                f"`{r['case']}`",
                r["what"],
                source[r["source"]],
                str(r.get("exit", "")),
                str(r.get("stderr_lines", "")),
                f"{r['peak_rss_mb']:.0f}" if r.get("peak_rss_mb") is not None else "",
                ("`" + last.replace("|", "\N{BROKEN BAR}").replace("`", "'") + "`") if last else "",
                r["result"]
                + (f" ({r['reason']})" if r.get("reason") else "")
                + (f" (re-run alone, {r['rerun']})" if r.get("rerun") else "")
                + ("; failed: " + "; ".join(failed) if failed else ""),
            ]
        )
    doc = {
        "title": f"Reliability sweep: {len(rows)} faults and bad inputs, run as a new user",
        "page": "run-directory",
        "machine": machine,
        "dates": dates,
        "command": command,
        "handled": handled,
        "skipped": skipped,
        "cases": len(rows),
        "timing": timing,
        "items": [
            {"text": f"**{handled}/{len(rows)} cases handled**" + (f", {skipped} skipped" if skipped else "")
                     + f" ({timing}). Each case runs the `biosig` console script in its own "
                       "temporary directory on a tiny BioFormer stand-in fit; a failing command must end in "
                       "one line "
                       "`biosig <command>: ...` that names the culprit, with no traceback, and nothing may "
                       "be lost "
                       "(every checkpoint left loads with `weights_only=True`, `metrics.csv` parses, runs, "
                       "trial "
                       "directories and other runs' reports kept). *Last stderr line* is the line a user "
                       "reads; "
                       "*stderr lines* counts Lightning's own notices too (a `|` in a line is shown as "
                       "`\N{BROKEN BAR}`); "
                       "*peak MiB* is the command's maximum resident memory from `/usr/bin/time -v` "
                       "(`os.wait4`'s `ru_maxrss` where GNU time is missing), measured for the inputs "
                       f"that expand (each must stay under {PEAK_LIMIT_MB:.0f} MiB). The checks of each case "
                       f"are in "
                       "`tools/audits/reliability_sweep.py`."},
            {"table": {"columns": ["#", "case", "what", "from", "exit", "stderr lines", "peak MiB",
                                   "last stderr line",
                                   "result"],
                       "align": ["right", "left", "left", "left", "right", "right", "right", "left", "left"],
                       "rows": table_rows}},
        ],
        "rows": rows,
    }
    atomic_write_json(out, doc)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=HERE, help="repository to test (default: this one)")
    parser.add_argument("--only", nargs="+", default=None, help="run only these cases")
    parser.add_argument("--source", nargs="+", default=None,
                        choices=("table", "handled", "added", "inputs", "shared"),
                        help="run only the cases of these sources")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--no-write", action="store_true", help="print only, write no result file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--update", action="store_true",
                        help="with --only or --source: replace only these cases' rows in the existing result "
                             "file "
                             "(and add the rows of cases it lacks)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    cases = [c for c in CASES if (args.only is None or c.name in args.only)
             and (args.source is None or c.source in args.source)]
    unknown = set(args.only or []) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if args.update and not (args.only or args.source):
        parser.error("--update re-runs the cases named by --only or --source")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started in the background by a shell: the children would inherit an ignored Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="reliability-"))
    rows: list[dict[str, Any]] = []
    try:
        s = Sweep(checkout, tmp)
        make_base(s)

        def one(c: Case) -> dict[str, Any]:
            d = tmp / c.name
            d.mkdir()
            row = judge(s, c, d)
            print(
                f"{row['result']:12s} {c.name} ({row['seconds']} s)"
                + "".join(f"\n      failed: {k}" for k, v in row.get("checks", {}).items() if not v)
                + (f"\n      last line: {row.get('last_line')}" if row["result"] != "handled" else ""),
                flush=True,
            )
            return row

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = list(pool.map(one, cases))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    minutes = (time.monotonic() - t0) / 60
    handled = sum(r["result"] == "handled" for r in rows)
    print(f"{handled}/{len(rows)} handled in {minutes:.1f} min")
    if args.no_write:
        return 0 if handled == len(rows) else 1
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [
        a
        for k, a in enumerate(given)
        if not a.startswith("--checkout") and not (k and given[k - 1] == "--checkout")
    ]
    command = "python tools/audits/reliability_sweep.py" + ("" if not shown else " " + " ".join(shown))
    today = dt.date.today().isoformat()
    dates, timing = [today], f"the sweep took {minutes:.1f} min"
    out = checkout / OUT_NAME
    if args.update:
        # the rows of the cases run now replace theirs; every other row stays as the earlier run left it
        old = json.loads(out.read_text(encoding="utf-8"))
        fresh = {r["case"]: {**r, "rerun": today} for r in rows}
        rows = [fresh.get(r["case"], r) for r in old["rows"]]
        known = {r["case"] for r in old["rows"]}
        order = {c.name: k for k, c in enumerate(CASES)}
        rows += [
            r for r in fresh.values() if r["case"] not in known
        ]  # cases added since: in the sweep's order
        rows.sort(key=lambda r: order.get(r["case"], len(order)))
        dates = sorted(set(old["dates"]) | {today})
        command = f"{old['command']}; then {command}"
        before = old.get("timing") or next(
            iter(re.findall(r"the sweep took [\d.]+ min", old["items"][0]["text"])), ""
        )
        timing = f"{before}; {len(fresh)} case(s) re-run alone with --update: {minutes:.1f} min"
    write_result(rows, out, command, dates, timing)
    handled = sum(r["result"] == "handled" for r in rows)
    return 0 if handled == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
