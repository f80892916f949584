"""Finding the runs a report covers and grouping them into its rows and columns.

Every ``results.json`` below the given directories is one run (a file reached through two of the
directories counts once). A file that cannot be read as a results object (truncated, a JSON list) is
skipped with a warning naming it, so the other runs are still reported. A run directory with a
checkpoint but no ``results.json`` (an interrupted fit) is listed apart, with the command that resumes it.

Runs are grouped ``(row, dataset) -> runs``: a row is the backbone (``results["model"]``) plus its
variant (``results["variant"]``), so one model on several corpora shares a row; two experiments that
put one model and variant on one dataset are kept apart by the experiment's name.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from biosig_lightning.analysis.run_stats import (
    SLEEP_TABLE1_DERIVED,
    RunStatsError,
    run_key,
    sleep_table1_metrics,
    table1_metrics,
)
from biosig_lightning.runs.rundir import RESULTS

LOWER_IS_BETTER = {"ece", "loss"}
#: columns that are no score: never marked best, left out of --baseline and --ranks, shown as integers
NOT_SCORES = {"params"}
DEFAULT_METRICS = ("acc", "f1", "auroc", "ece")
#: the papers' own columns, the default when every run was evaluated that way (the first entry whose
#: marker metric every run has): seizure detection at the validation-chosen threshold (STDRO Tables 1,
#: 2, 4), seizure typing (Table 3), SPDTransNet's Table 1 (macro-F1, macro accuracy = mean per-class
#: recall, N1 F1; logged by ``SPDTransNetTask``, so a ``biosig cv`` directory of its folds gets them as
#: mean ± std over folds), sleep staging (``eval_metrics: sleep``, STDRO Table 5)
PROTOCOL_METRICS = (
    ("det_f1", ("auroc", "det_f1", "det_acc", "det_recall", "det_precision")),
    ("weighted_f1", ("weighted_f1", "acc")),
    ("f1_n1", ("f1", "macro_acc", "f1_n1")),
    ("macro_f1", ("macro_f1", "kappa", "acc")),
)


class ReportError(ValueError):
    """No results to report or bad ``biosig report`` arguments (one line)."""


class Row(NamedTuple):
    """One table row: a model, its variant, and (only when needed to keep them apart) its experiment."""

    model: str
    variant: str = ""
    experiment: str = ""

    @property
    def label(self) -> str:
        text = f"{self.model} +{self.variant}" if self.variant else self.model
        return f"{text} ({self.experiment})" if self.experiment else text


Groups = dict[tuple[Row, str], list[tuple[Path, dict[str, Any]]]]


def warn(message: str) -> None:
    """A status line of ``biosig report`` on stderr (stdout holds the table alone)."""
    print(f"biosig report: {message}", file=sys.stderr)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", dict: "an object", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def shape_problem(results: Any) -> str | None:
    """What keeps ``results`` from being reported (the key and what it holds), or ``None``: an object whose
    ``metrics`` map names to numbers, whose names are strings, whose ``classes`` is a list and whose
    ``confusion_matrix`` is a square table of counts."""
    if not isinstance(results, dict):
        return f"its JSON is {_kind(results)}, not an object"
    metrics = results.get("metrics", {})
    if not isinstance(metrics, dict):
        return f"'metrics' is {_kind(metrics)}, not a mapping of metric names to numbers"
    bad = next((k for k, v in metrics.items() if v is not None and not _is_number(v)), None)
    if bad is not None:
        return f"metrics[{bad!r}] is {_kind(metrics[bad])}, not a number"
    for key in ("model", "dataset", "variant", "experiment"):
        if results.get(key) is not None and not isinstance(results[key], str):
            return f"{key!r} is {_kind(results[key])}, not a string"
    if results.get("classes") is not None and not isinstance(results["classes"], list):
        return f"'classes' is {_kind(results['classes'])}, not a list"
    cm = results.get("confusion_matrix")
    if cm is not None and not (isinstance(cm, list) and all(isinstance(r, list) and len(r) == len(cm)
                                                            and all(_is_number(v) for v in r) for r in cm)):
        return "'confusion_matrix' is not a square table of counts"
    return None


def _read_results(path: Path) -> dict[str, Any] | None:
    """``path`` parsed, or ``None`` with a warning naming it when it is not a results object that can be
    reported (unreadable, nested past Python's recursion limit, or a key of the wrong kind:
    :func:`shape_problem`)."""
    try:
        results = json.loads(path.read_text())
    except RecursionError:
        warn(f"warning: skipping {path}: not a readable results.json (nested too deeply to parse)")
        return None
    except (OSError, UnicodeDecodeError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        warn(f"warning: skipping {path}: not a readable results.json "
             f"({str(err).splitlines()[0] if str(err) else err!r})")
        return None
    problem = shape_problem(results)
    if problem is not None:
        warn(f"warning: skipping {path}: not a results.json ({problem})")
        return None
    return results


def find_results(dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``results.json`` below ``dirs`` (sorted, each file once), parsed; missing dirs or none found is
    an
    error, an unreadable file is skipped with a warning naming it."""
    if not dirs:
        raise ReportError("give at least one directory that holds results.json files")
    found: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise ReportError(f"{d} does not exist")
        paths = [d] if d.is_file() and d.name == "results.json" else sorted(d.rglob("results.json"))
        for p in paths:
            # `report runs runs/repeat` or `report D D` reach the same file twice: count it once
            if p.resolve() in seen:
                continue
            seen.add(p.resolve())
            results = _read_results(p)
            if results is not None:
                found.append((p, results))
    if not found:
        raise ReportError(f"no results.json below {', '.join(str(d) for d in dirs)} (run biosig fit / repeat "
                          f"first)")
    return found


def unfinished_runs(dirs: list[Path]) -> list[tuple[Path, Path]]:
    """``(run directory, checkpoint to resume from)`` of every run below ``dirs`` that saved a checkpoint
    but no ``results.json`` (an interrupted fit), each once: its newest ``last*.ckpt``, else its newest
    checkpoint."""
    found: dict[Path, tuple[Path, Path]] = {}
    for d in map(Path, dirs):
        for ckpt_dir in sorted(d.rglob("checkpoints")) if d.is_dir() else []:
            run = ckpt_dir.parent
            ckpts = sorted(ckpt_dir.glob("*.ckpt"),
                           key=lambda c: (c.name.startswith("last"), c.stat().st_mtime))
            # a `biosig tune` trial (marked by tune_trial.json) is scored without results.json: not
            # interrupted
            if ckpts and not (run / RESULTS).exists() and not (run / "tune_trial.json").exists():
                found.setdefault(run.resolve(), (run, ckpts[-1]))
    return list(found.values())


def resume_command(run: Path, ckpt: Path) -> str:
    """The command that continues an interrupted run in its own directory, from the directory it was started
    in (its saved ``config.yaml`` names the run directory relative to there)."""
    config = (
        shlex.quote(str(run / "config.yaml")) if (run / "config.yaml").is_file() else "<its --config files>"
    )
    return f"biosig fit --config {config} --ckpt_path {shlex.quote(str(ckpt))}"


def warn_unfinished(dirs: list[Path]) -> list[tuple[Path, Path]]:
    """List the unfinished runs below ``dirs`` on stderr, apart from the table, each with its resume
    command."""
    runs = unfinished_runs(dirs)
    if runs:
        warn(f"{len(runs)} unfinished run{'s' if len(runs) > 1 else ''} (a checkpoint, no results.json), not "
             f"in "
             "the table; resume from the directory it was started in with:")
        for run, ckpt in runs:
            print(f"  {resume_command(run, ckpt)}", file=sys.stderr)
    return runs


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def run_variant(results: dict[str, Any]) -> str:
    """The run's variant: ``results["variant"]``, or for older results the ``+`` parts of its experiment name.

    In the fallback, parts the dataset or the model already name (``synthetic``) are left out.
    """
    if "variant" in results:
        return str(results["variant"] or "")
    model, dataset = str(results.get("model") or ""), str(results.get("dataset") or "")
    named = {_norm(t) for t in re.split(r"[-_]", dataset)} | {_norm(model)}
    parts = str(results.get("experiment") or "").split("+")[1:]
    return "+".join(p for p in parts if _norm(p) not in named)


def base_experiment(results: dict[str, Any]) -> str:
    """The experiment a run varies: its experiment name up to the first ``+`` (``bioformer_apava``)."""
    return str(results.get("experiment") or "").split("+")[0]


def group_runs(found: list[tuple[Path, dict[str, Any]]]) -> Groups:
    """``(row, dataset) -> runs`` in first-seen order; warns (stderr) about a seed counted twice in a cell."""
    def key(res: dict[str, Any]) -> tuple[str, str]:
        return str(res.get("model") or "model"), run_variant(res)

    def dataset(res: dict[str, Any]) -> str:
        return str(res.get("dataset") or "data")

    bases: dict[tuple[tuple[str, str], str], set[str]] = defaultdict(set)
    for _, res in found:
        bases[(key(res), dataset(res))].add(base_experiment(res))
    # two experiments with one model+variant on one dataset: averaging them would mix two protocols
    split = {k for (k, _), b in bases.items() if len(b) > 1}
    for k in split:
        names = sorted({b for (kk, _), bs in bases.items() if kk == k for b in bs})
        warn(f"note: {Row(*k).label!r} comes from several experiments ({', '.join(names)}) on one dataset; "
              "their rows are kept apart by experiment")
    groups: Groups = defaultdict(list)
    for path, res in found:
        k = key(res)
        row = Row(*k, base_experiment(res) if k in split else "")
        groups[(row, dataset(res))].append((path, res))
    for (row, ds), runs in groups.items():
        # keyed by split and seed: LOSO folds share a seed but test other subjects, so they are not copies
        by_seed: dict[Any, list[Path]] = defaultdict(list)
        for path, res in runs:
            by_seed[run_key(res)].append(path)
        for (_, seed), paths in by_seed.items():
            if len(paths) > 1:
                warn(f"warning: {row.label} / {ds} holds seed {seed} {len(paths)} times "
                      f"({', '.join(str(p) for p in paths)}); copies of one run would inflate n")
    return dict(groups)


def metric_key(name: str) -> str:
    """The ``results["metrics"]`` key of a metric named on the command line (``f1`` -> ``test/f1``)."""
    return name if "/" in name else f"test/{name}"


def short_name(name: str) -> str:
    """A metric key without its stage (``test/f1`` -> ``f1``), as column headers show it."""
    return name.split("/", 1)[-1]


def is_score(metric: str) -> bool:
    """Whether ``metric`` is a higher-is-better score (not ``ece``, ``loss`` or ``params``): what Tables 2
    and 3 rank."""
    return short_name(metric) not in LOWER_IS_BETTER | NOT_SCORES


def table1_groups(groups: Groups) -> Groups:
    """The runs with Table 1's columns (``table1/accuracy`` ... in %, ``table1/params``) added to their
    metrics."""
    return {k: [(p, {**r, "metrics": {**r.get("metrics", {}), **table1_metrics(r)}}) for p, r in runs]
            for k, runs in groups.items()}


def sleep_table1_groups(groups: Groups, keys: list[str]) -> Groups:
    """Runs that lack SPDTransNet Table 1's ``macro_acc`` / ``f1_n1`` asked for in ``keys`` get them from
    their saved test predictions (:func:`~biosig_lightning.analysis.run_stats.sleep_table1_metrics`), so a
    sleep baseline trained by another task shares those columns; logged values are never replaced."""
    wanted = [k for k in keys if k in SLEEP_TABLE1_DERIVED]
    if not wanted:
        return groups
    out: Groups = {}
    for k, runs in groups.items():
        out[k] = []
        for path, res in runs:
            metrics = res.get("metrics", {})
            if any(w not in metrics for w in wanted):
                try:
                    derived = sleep_table1_metrics(path, res)
                except RunStatsError as err:
                    raise ReportError(str(err)) from None
                res = {**res, "metrics": {**derived, **metrics}}
            out[k].append((path, res))
    return out


def default_metrics(groups: Groups) -> tuple[str, ...]:
    """The columns when ``--metrics`` is not given: a protocol's own (:data:`PROTOCOL_METRICS`) when every
    run has its marker key, else :data:`DEFAULT_METRICS`."""
    runs = [r for rs in groups.values() for _, r in rs]
    for marker, columns in PROTOCOL_METRICS:
        if runs and all(metric_key(marker) in r.get("metrics", {}) for r in runs):
            return columns
    return DEFAULT_METRICS

