"""Reliability sweep: 42 faults and bad inputs, each tried as a new user would, each judged in code.

Run by hand (not collected by pytest, not run in CI), on a checkout with its own environment::

    .venv/bin/python tools/audits/reliability_sweep.py                   # this checkout, writes the result file
    .venv/bin/python tools/audits/reliability_sweep.py --only lr_negative ctrl_c_during_fit --no-write
    .venv/bin/python tools/audits/reliability_sweep.py --only full_cache --update   # replace these rows only
    /tmp/clone/.venv/bin/python tools/audits/reliability_sweep.py --checkout /tmp/clone

Every case runs the checkout's ``biosig`` console script (the one beside the running Python) in
subprocesses, in a fresh temporary directory with its own window cache (``BIOSIG_CACHE``), on tiny
stand-in fits: ``experiments/bioformer_apava.yaml`` with the ``synthetic`` and ``smoke`` overlays and a
smaller BioFormer (one layer, ``d_model`` 16, one batch per split). Per case it records the command, the
exit code, the number of stderr lines and the last one, whether that line names the culprit (the config
key, file, channel or directory), and whether anything was lost: every checkpoint left behind loads with
``torch.load(weights_only=True)``, ``metrics.csv`` parses, trial and run directories are kept, the good
runs are still reported, a payload was not executed. A case is *handled* when every one of its checks
holds; the checks are written out per case below, nothing is judged by eye.

A failing command must end with one line ``biosig <command>: ...`` naming the culprit, print no
traceback, and leave nothing half-written. The disk cases mount small tmpfs file systems, which needs
root; without it they are skipped with that reason. Cases run two at a time (``--jobs``).

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
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[2]
OUT_NAME = Path("docs") / "results" / "reliability_sweep.json"
TIMEOUT = 600.0  # seconds for any one command (the machine may be shared)

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
SEARCH_SPACE = "model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
APAVA_CHANNELS = ("Fp1", "Fp2", "F7", "F3", "F4", "F8", "T3", "C3", "C4", "T4", "T5", "P3", "P4", "T6", "O1", "O2")


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
        self.tiny = str(tiny / "tiny.yaml")
        self.space = str(tiny / "space.yaml")
        self.bioformer = [str(self.exp / "bioformer_apava.yaml"), str(tiny / "tiny_bioformer.yaml")]
        self.standin = ["--config", self.bioformer[0],
                        "--config", str(self.exp / "overlays" / "synthetic.yaml"),
                        "--config", str(self.exp / "overlays" / "smoke.yaml"),
                        "--config", self.tiny, "--config", self.bioformer[1],
                        "--config", str(tiny / "tiny_synthetic.yaml")]
        self.base: Path | None = None  # the finished run of the stand-in, made once before the cases

    def env(self, cwd: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["BIOSIG_CACHE"] = str(cwd / "cache")
        env.pop("PYTHONPATH", None)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def argv(self, command: str, *args: str) -> list[str]:
        return [self.biosig, command, *args]

    def start(self, cwd: Path, argv: list[str], **kw: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, cwd=cwd, env=kw.pop("env", None) or self.env(cwd), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    def run(self, cwd: Path, argv: list[str], env: dict[str, str] | None = None) -> Ran:
        proc = self.start(cwd, argv, env=env)
        return finish(proc, argv)

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
        np.save(root / "Feature" / f"feature_{sid:02d}.npy", rng.normal(size=(windows, 256, 16)).astype(np.float32))
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


def case(name: str, source: str, what: str, root: bool = False) -> Callable[[Callable[[Sweep, Path], Outcome]],
                                                                              Callable[[Sweep, Path], Outcome]]:
    def register(fn: Callable[[Sweep, Path], Outcome]) -> Callable[[Sweep, Path], Outcome]:
        CASES.append(Case(name, source, what, fn, root))
        return fn
    return register


def mount_tmpfs(path: Path, options: str) -> str | None:
    """Mount a tmpfs on ``path``; the reason it cannot be done, or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


EXP = Path("runs") / "bioformer_apava"


# issue table: the run directory's disk fills during a fit
@case("disk_full_during_fit", "table", "the run directory's disk (a 700 KiB tmpfs) fills during a fit", root=True)
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
    return _refused(s, d, ["BioFormr"], "--model.init_args.backbone.class_path=biosig_lightning.models.bioformer.BioFormr")


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


def _report_with_one_bad(s: Sweep, d: Path, bad_text: str) -> Outcome:
    assert s.base is not None
    good = d / "runs" / "good"
    shutil.copytree(s.base, good)
    bad = d / "runs" / "bad"
    shutil.copytree(s.base, bad)
    (bad / "results.json").write_text(bad_text)
    ran = s.run(d, s.argv("report", "runs", "--format", "csv"))
    rows = [r for r in csv.reader(ran.out.splitlines()) if r]
    return Outcome(ran, ["runs/bad/results.json"], {
        "exit 0": ran.rc == 0,
        "the good run is reported": len(rows) >= 2 and any("bioformer" in ",".join(r).lower() for r in rows[1:]),
    }, line_prefix="biosig report: warning: ")


@case("report_results_json_list", "table", "`biosig report` over a folder where one `results.json` is a JSON list")
def _(s: Sweep, d: Path) -> Outcome:
    return _report_with_one_bad(s, d, "[1, 2, 3]\n")


@case("report_results_json_truncated", "table", "`biosig report` over a folder where one `results.json` is truncated")
def _(s: Sweep, d: Path) -> Outcome:
    assert s.base is not None
    text = (s.base / "results.json").read_text()
    return _report_with_one_bad(s, d, text[: len(text) // 2])


def _interrupted_fit(s: Sweep, d: Path, sig: int) -> tuple[Ran, Path]:
    """A fit signalled with ``sig`` as soon as its first ``last.ckpt`` exists."""
    argv = s.argv("fit", *s.standin, "--trainer.max_epochs=1000", "--model.init_args.early_stopping_patience=1000")
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


@case("ctrl_c_during_fit", "table", "Ctrl-C during a fit; then `biosig report` and the printed resume command")
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


@case("kill_9_during_cache_build", "table", "kill -9 while the window cache is being built; then the same fit again")
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
    return Outcome(again, None, {
        "killed during the build": hit,
        "the rerun exits 0": again.rc == 0,
        "the rerun is the only run directory, with its results": len(runs) == 1 and (runs[0] / "results.json").is_file(),
        "no half-built cache left": not debris,
    })


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
    return Outcome(again, None, {
        "killed (rc -9)": ran.rc == -signal.SIGKILL,
        "last.ckpt loads (weights_only)": whole,
        "the resume exits 0": again.rc == 0,
        "it finishes the same directory": (run_dir / "results.json").is_file() and len(versions(d / EXP)) == 1,
        "metrics.csv parses": metrics_parse(run_dir),
    })


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


@case("tune_worker_killed", "handled", "a `biosig tune` worker killed -9 mid-trial; a second worker takes over")
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
    write_hypnogram(root / "SC4001EC-Hypnogram.edf", [(0.0, 30.0, "Sleep stage W"), (30.0, 30.0, "Sleep stage X")])


def _empty_root(root: Path) -> None:
    (root / "README.txt").write_text("the recordings are still downloading\n")


_broken_edf("edf_not_an_edf", "a Sleep-EDF PSG that is not an EDF file", ["SC4001E0-PSG.edf", "not a readable EDF"],
            _not_an_edf)
_broken_edf("edf_no_hypnogram", "a Sleep-EDF PSG without its hypnogram", ["SC4001E0-PSG.edf", "no hypnogram"],
            _no_hypnogram)
_broken_edf("edf_missing_channel", "a Sleep-EDF PSG without the EEG Pz-Oz channel",
            ["SC4001E0-PSG.edf", "missing channel 'EEG Pz-Oz'"], _missing_channel)
_broken_edf("edf_wrong_rate", "a Sleep-EDF PSG whose EEG Pz-Oz is sampled at 200 Hz",
            ["SC4001E0-PSG.edf", "'EEG Pz-Oz'", "200 Hz"], _wrong_rate)
_broken_edf("edf_unknown_annotation", "a Sleep-EDF hypnogram with an unknown stage",
            ["SC4001EC-Hypnogram.edf", "Sleep stage X"], _unknown_annotation)
_broken_edf("edf_no_recordings", "a Sleep-EDF root that holds no recordings", ["sleep", "Sleep Cassette"], _empty_root)


@case("non_ascii_paths", "handled", "corpus and run directory under non-ASCII paths (APAVA layout)")
def _(s: Sweep, d: Path) -> Outcome:
    here = d / "données ü" / "実験"
    here.mkdir(parents=True)
    root = write_apava(here / "APAVA ß")
    ran = _apava_fit(s, here, root)
    runs = versions(here / EXP)
    return Outcome(ran, None, {"exit 0": ran.rc == 0,
                               "results.json written": len(runs) == 1 and (runs[0] / "results.json").is_file()})


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
    return Outcome(ran, ["bioformer.ckpt", "model.init_args.backbone.class_path"], {"the checkpoint is untouched":
                                                               digest(ckpt) == digest(_base_ckpt(s))})


@case("another_corpus_checkpoint", "handled", "resuming an APAVA checkpoint on the ADFTD stand-in")
def _(s: Sweep, d: Path) -> Outcome:
    ckpt = d / "apava.ckpt"
    shutil.copy(_base_ckpt(s), ckpt)
    ran = s.run(d, s.argv("fit", "--config", str(s.exp / "bioformer_adftd.yaml"),
                          *s.standin[2:], "--ckpt_path", str(ckpt)))  # the same overlays, ADFTD's corpus
    return Outcome(ran, ["apava.ckpt", "data.class_path"], {"no run directory left": not any((d / "runs").rglob("version_*"))})


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

def judge(s: Sweep, c: Case, d: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        out = c.run(s, d)
    except Exception as err:  # noqa: BLE001 - a broken case is reported, not fatal to the sweep
        out = Outcome(None, checks={f"the case ran ({type(err).__name__}: {err})": False})
    row: dict[str, Any] = {"case": c.name, "source": c.source, "what": c.what, "seconds": round(time.monotonic() - t0, 1)}
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
    row["checks"] = checks
    row["result"] = "handled" if checks and all(checks.values()) else "NOT handled"
    if out.note:
        row["note"] = out.note
    return row


def make_base(s: Sweep) -> None:
    """One finished stand-in run (its checkpoints, results.json and window cache) for the cases that need one."""
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
    machine = (f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, Python {platform.python_version()}, "
               f"torch {torch.__version__}; a fresh clone with its own venv")
    source = {"table": "issue table", "handled": "listed as handled", "added": "added"}
    table_rows = []
    for k, r in enumerate(rows, 1):
        last = r.get("last_line", "") or ""
        failed = [name for name, ok in r.get("checks", {}).items() if not ok]
        table_rows.append([str(k), f"`{r['case']}`", r["what"], source[r["source"]],
                           str(r.get("exit", "")), str(r.get("stderr_lines", "")),
                           ("`" + last.replace("|", "\N{BROKEN BAR}").replace("`", "'") + "`") if last else "",
                           r["result"] + (f" ({r['reason']})" if r.get("reason") else "")
                           + (f" (re-run alone, {r['rerun']})" if r.get("rerun") else "")
                           + ("; failed: " + "; ".join(failed) if failed else "")])
    doc = {
        "title": "Reliability sweep: 42 faults and bad inputs, run as a new user on a fresh clone",
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
                       "temporary directory on a tiny BioFormer stand-in fit; a failing command must end in one line "
                       "`biosig <command>: ...` that names the culprit, with no traceback, and nothing may be lost "
                       "(every checkpoint left loads with `weights_only=True`, `metrics.csv` parses, runs, trial "
                       "directories and other runs' reports kept). *Last stderr line* is the line a user reads; "
                       "*stderr lines* counts Lightning's own notices too (a `|` in a line is shown as `\N{BROKEN BAR}`). The checks of each case are in "
                       "`tools/audits/reliability_sweep.py`."},
            {"table": {"columns": ["#", "case", "what", "from", "exit", "stderr lines", "last stderr line", "result"],
                       "align": ["right", "left", "left", "left", "right", "right", "left", "left"],
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
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--no-write", action="store_true", help="print only, write no result file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--update", action="store_true",
                        help="with --only: replace only these cases' rows in the existing result file")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    cases = [c for c in CASES if args.only is None or c.name in args.only]
    unknown = set(args.only or []) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    if args.update and not args.only:
        parser.error("--update re-runs the cases named by --only")
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
            print(f"{row['result']:12s} {c.name} ({row['seconds']} s)"
                  + "".join(f"\n      failed: {k}" for k, v in row.get("checks", {}).items() if not v)
                  + (f"\n      last line: {row.get('last_line')}" if row["result"] != "handled" else ""), flush=True)
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
    shown = [a for k, a in enumerate(given) if not a.startswith("--checkout") and not (k and given[k - 1] == "--checkout")]
    command = "python tools/audits/reliability_sweep.py" + ("" if not shown else " " + " ".join(shown))
    today = dt.date.today().isoformat()
    dates, timing = [today], f"the sweep took {minutes:.1f} min"
    out = checkout / OUT_NAME
    if args.update:
        # the rows of the cases run now replace theirs; every other row stays as the earlier run left it
        old = json.loads(out.read_text(encoding="utf-8"))
        fresh = {r["case"]: {**r, "rerun": today} for r in rows}
        rows = [fresh.get(r["case"], r) for r in old["rows"]]
        dates = sorted(set(old["dates"]) | {today})
        command = f"{old['command']}; then {command}"
        before = old.get("timing") or next(iter(re.findall(r"the sweep took [\d.]+ min", old["items"][0]["text"])), "")
        timing = f"{before}; {len(fresh)} case(s) re-run alone with --update: {minutes:.1f} min"
    write_result(rows, out, command, dates, timing)
    handled = sum(r["result"] == "handled" for r in rows)
    return 0 if handled == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
