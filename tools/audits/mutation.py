"""Mutation check: plant known, realistic bugs one at a time and see whether the tests catch them.

Run by hand (not collected by pytest, not run in CI)::

    .venv/bin/python tools/audits/mutation.py            # every mutant, writes docs/results/mutation.json
    .venv/bin/python tools/audits/mutation.py --only kfold_counter_reset --no-write

The repository's tracked (and untracked, not ignored) files are copied to a temporary directory; each
mutant is a small search/replace patch applied to that copy only (the working tree is never touched),
then the mutant's own list of test files is run there with ``python -m pytest -x``. A mutant is *caught*
when pytest fails, *missed* when it passes. Before the mutants run, the same test files run on the
unpatched copy: a baseline failure aborts (a red suite would "catch" everything). Every patch's search
text must occur exactly once in its file, so a refactor that moves the code fails here loudly instead
of silently testing nothing.

The result file (``docs/results/mutation.json``, written atomically) holds the date, the machine, the
command, every mutant with ``caught``/``missed`` and the kill rate, and is rendered on the docs' Testing
page.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "results" / "mutation.json"
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Mutant:
    """One planted bug: replace ``find`` (exactly once) by ``replace`` in ``path``, then run ``tests``."""

    name: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    what: str


SPLITS = ("tests/data/test_splits.py",)
# "-k EXPR" entries narrow a file to its fast tests (the long training runs are left to the suite)
STDRO = ("tests/robust/stdro/test_stdro.py", "-k", "not learns")
RUNS = ("tests/runs/test_run_dirs.py", "-k", "not two_fits")
METRICS = ("tests/test_metrics.py", "tests/test_metrics_binary_rates.py", "tests/test_metrics_paper.py")
BIOFORMER = ("tests/models/modules/test_tsam.py", "tests/models/modules/test_scln.py",
             "tests/models/modules/test_fbam.py")
SDFORMER = ("tests/models/modules/test_learned_graphs.py",)
DG = ("tests/models/modules/test_domain.py", "tests/robust/test_dg.py", "-k", "not table3")
MODULES = ("tests/models/modules/test_encodings.py", "tests/models/modules/test_attention.py",
           "tests/models/modules/test_dropout.py", "tests/models/modules/test_augment.py",
           "tests/models/modules/test_channel_graphs.py", "tests/models/modules/test_time_steps.py")
SIGNED = ("tests/features/test_signed_graph.py",)
OWN_DATA = ("tests/data/datamodules/test_own_data_subjects.py",)
WINDOWS = ("tests/data/test_subject_disjoint_windows.py",)
EDF = ("tests/data/corpora/test_edf.py", "tests/data/corpora/test_edf_annotation_first.py")
LEADERBOARD = ("tests/analysis/test_leaderboard.py", "tests/analysis/test_leaderboard_ties.py")
QUEUE = ("tests/benchmarking/test_sqlite_queue_race.py", "tests/tuning/test_sqlite_pop.py")
RESUME = ("tests/commands/test_benchmark.py", "-k", "kill_9")
TUNE = ("tests/tuning/test_grace_period_reaches_storage.py", "tests/tuning/test_coordination.py", "-k",
        "grace or heartbeat")
CHECKPOINTS = ("tests/runs/test_checkpoint_runs_no_code.py",)
SPD = ("tests/features/test_spd.py", "-k", "pyriemann or sqrt2")

MUTANTS: tuple[Mutant, ...] = (
    Mutant("kfold_counter_reset", "biosig_lightning/data/splits.py",
           "    for members in strata:\n        for i in",
           "    for members in strata:\n        k = 0\n        for i in",
           SPLITS, "stratified k-fold: the round-robin fold counter restarts for every class"),
    Mutant("tsam_std_of_magnitudes", "biosig_lightning/models/modules/alignment.py",
           "band_statistics(xt.abs(), self.eps, signed=xt)",
           "band_statistics(xt.abs(), self.eps, signed=xt.abs())",
           BIOFORMER, "TSAM: the std descriptor taken of |x| instead of the signed signal"),
    Mutant("stdro_sym_is_2a", "biosig_lightning/robust/stdro/task.py",
           "sym = a + a.transpose(-1, -2)", "sym = 2 * a",
           STDRO, "STDRO ascent: cost gradient 2 A_t delta, as if A_t were symmetric"),
    Mutant("stdro_cost_one_period", "biosig_lightning/robust/stdro/cost.py",
           'torch.einsum("bcl,cd,bdl->b", d, a[t], d)', 'torch.einsum("bcl,cd,bdl->b", d, a[0], d)',
           STDRO, "STDRO cost (eq. 2): every period weighted by the first period's A_t"),
    Mutant("results_written_in_place", "biosig_lightning/runs/rundir.py",
           "        return atomic_write_json(path, results, exclusive=True)",
           '        with open(path, "x") as f:\n'
           '            f.write(__import__("json").dumps(results, default=str))\n'
           "        return path",
           RUNS, "results.json written in place (no temporary file, no fsync, no rename)"),
    Mutant("version_claim_not_exclusive", "biosig_lightning/runs/rundir.py",
           'os.mkdir(experiment_dir / f"version_{n}")',
           'os.makedirs(experiment_dir / f"version_{n}", exist_ok=True)',
           RUNS, "version_N claim succeeds on a directory another process just created"),
    Mutant("named_claim_not_exclusive", "biosig_lightning/runs/rundir.py",
           "        os.mkdir(run_dir)\n    except FileExistsError:",
           "        os.makedirs(run_dir, exist_ok=True)\n    except FileExistsError:",
           RUNS, "--run.version claim reports it created an existing directory"),
    Mutant("best_f1_threshold_highest_tie", "biosig_lightning/metrics.py",
           "idx = int(torch.nonzero(f1 == best).flatten()[-1])",
           "idx = int(torch.nonzero(f1 == best).flatten()[0])",
           METRICS, "best-F1 threshold: ties go to the highest threshold instead of the lowest"),
    Mutant("threshold_strict", "biosig_lightning/metrics.py",
           "pred = (s >= threshold).long()", "pred = (s > threshold).long()",
           METRICS, "detection metrics: score > threshold instead of >="),
    Mutant("auroc_keeps_single_class", "biosig_lightning/metrics.py",
           "return (positives > 0) & (positives < n)", "return positives > 0",
           METRICS, "macro AUROC averages a class that every target holds (undefined AUROC)"),
    Mutant("ece_signed_gaps", "biosig_lightning/metrics.py",
           "(hit_sum - conf_sum).abs().sum() / count.sum()", "(hit_sum - conf_sum).sum().abs() / count.sum()",
           METRICS, "ECE: signed gaps summed before the absolute value"),
    Mutant("scln_drops_minus_h", "biosig_lightning/models/modules/scln.py",
           "beta.unsqueeze(1) - h_hat)", "beta.unsqueeze(1))",
           BIOFORMER, "SCLN: the interpolation loses its -h_hat term (not LayerNorm at init)"),
    Mutant("scln_first_token", "biosig_lightning/models/modules/scln.py",
           "self.mlp(h.mean(dim=1).detach())", "self.mlp(h[:, 0].detach())",
           BIOFORMER, "SCLN: conditioned on the first token instead of the token mean"),
    Mutant("fbam_no_unit_phase", "biosig_lightning/models/modules/alignment.py",
           "z_new = z * (new_mag / (abs_z + self.eps))", "z_new = z * new_mag",
           BIOFORMER, "FBAM without phase: spectrum scaled by the new magnitude, not replaced by it"),
    Mutant("notears_unsquared", "biosig_lightning/models/modules/learned_graphs.py",
           "a * a if square else a", "a if square else a",
           SDFORMER, "NOTEARS h(A): tr(exp(A)) instead of tr(exp(A o A)) for signed weights"),
    Mutant("gcn_no_self_loops", "biosig_lightning/models/modules/learned_graphs.py",
           "with_loops = adjacency + torch.eye(adjacency.shape[0], dtype=adjacency.dtype)",
           "with_loops = adjacency + 0 * torch.eye(adjacency.shape[0], dtype=adjacency.dtype)",
           SDFORMER, "GCN normalisation without the self-loops of A + I"),
    Mutant("random_dag_self_loops", "biosig_lightning/models/modules/learned_graphs.py",
           "torch.triu_indices(n_nodes, n_nodes, offset=1)", "torch.triu_indices(n_nodes, n_nodes, offset=0)",
           SDFORMER, "matched-sparsity random DAG may draw self-loops"),
    Mutant("coral_scale_d", "biosig_lightning/models/modules/domain.py",
           "/ (4 * d * d)", "/ (4 * d)",
           DG, "Deep CORAL normalised by 4 d instead of 4 d^2"),
    Mutant("mmd_cross_term_once", "biosig_lightning/models/modules/domain.py",
           "- 2 * k[:na, na:].mean()", "- k[:na, na:].mean()",
           DG, "MMD: cross term counted once"),
    Mutant("dg_aux_detached", "biosig_lightning/robust/dg.py",
           "return cls + self.dg_weight * aux, logits, extra",
           "return cls + self.dg_weight * aux.detach(), logits, extra",
           DG, "DG task: the alignment loss is logged but never trains the features"),
    Mutant("grl_no_reversal", "biosig_lightning/models/modules/domain.py",
           "return -ctx.coefficient * grad_output, None", "return ctx.coefficient * grad_output, None",
           DG, "gradient reversal passes the gradient through unreversed"),
    Mutant("positions_sine_twice", "biosig_lightning/models/modules/encodings.py",
           "table[:, 1::2] = torch.cos(", "table[:, 1::2] = torch.sin(",
           MODULES, "sinusoidal positions: odd columns sines instead of cosines"),
    Mutant("attention_scale_1_over_d", "biosig_lightning/models/modules/attention.py",
           "(q * q.shape[-1] ** -0.5)", "(q * q.shape[-1] ** -1.0)",
           MODULES, "attention scaled by 1/d_head instead of 1/sqrt(d_head)"),
    Mutant("dropout_not_inverted", "biosig_lightning/models/modules/dropout.py",
           "x * torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))",
           "x * torch.rand_like(x).ge_(self.p)",
           MODULES, "MaskDropout keeps entries unscaled (expectation shrinks by 1 - p)"),
    Mutant("scale_augment_per_sample", "biosig_lightning/models/modules/augment.py",
           "factor_shape = (*e.shape[:lead], *([1] * (e.ndim - lead)))",
           "factor_shape = (e.shape[0], *([1] * (e.ndim - 1)))",
           MODULES, "scale augmentation draws one factor per sample instead of per (sample, sequence)"),
    Mutant("scaled_laplacian_halved", "biosig_lightning/models/modules/channel_graphs.py",
           "(2.0 / lam[..., None, None] * lap - eye)", "(1.0 / lam[..., None, None] * lap - eye)",
           MODULES, "Chebyshev scaled Laplacian L / lambda_max - I (spectrum [-1, 0])"),
    Mutant("dual_random_walk_same_direction", "biosig_lightning/models/modules/channel_graphs.py",
           "random_walk(adj.transpose(-1, -2)).transpose(-1, -2)]", "random_walk(adj).transpose(-1, -2)]",
           MODULES, "DCRNN dual random walk: the backward support repeats the forward one"),
    Mutant("steps_reshaped_not_transposed", "biosig_lightning/models/modules/time_steps.py",
           "x.reshape(b, c, n // step, step).transpose(1, 2)", "x.reshape(b, n // step, c, step)",
           MODULES, "1-s steps cut by a reshape that mixes channels and steps"),
    Mutant("signed_laplacian_signed_degree", "biosig_lightning/features/signed_graph.py",
           "return torch.diag_embed(w.abs().sum(-1)) - w", "return torch.diag_embed(w.sum(-1)) - w",
           SIGNED, "signed Laplacian with the signed degree (not PSD)"),
    Mutant("gershgorin_radius_with_diag", "biosig_lightning/features/signed_graph.py",
           "radius = lap.abs().sum(-1) - diag.abs()", "radius = lap.abs().sum(-1)",
           SIGNED, "Gershgorin shift (eq. 9): the radius includes the diagonal"),
    Mutant("lanczos_last_basis_row", "biosig_lightning/features/signed_graph.py",
           "(g * z[..., 0, :]).unsqueeze(-2)", "(g * z[..., -1, :]).unsqueeze(-2)",
           SIGNED, "Lanczos filter (eq. 25): g(H_m) applied to e_m instead of e_1"),
    Mutant("lanczos_recurrence_plus_beta", "biosig_lightning/features/signed_graph.py",
           "prev, value=-1.0)", "prev, value=1.0)",
           SIGNED, "Lanczos three-term recurrence (App. B): + beta_{k-1} v_{k-1} instead of -"),
    # ---- own data: one person, one split, window by window
    Mutant("bids_subject_per_recording", "biosig_lightning/data/corpora/bids.py",
           "WindowBlock(subject=self._subject_of[p.subject],", "WindowBlock(subject=self.paths.index(p) + 1,",
           OWN_DATA, "BIDS: subjects numbered per recording (a person's two sessions become two ids)"),
    Mutant("arrays_rows_one_slice", "biosig_lightning/data/corpora/arrays.py",
           "rows = np.flatnonzero(self.subjects == sid)\n",
           "rows = np.flatnonzero(self.subjects == sid)\n            rows = np.arange(rows[0], rows[0] + "
           "len(rows))\n",
           OWN_DATA, "arrays: a subject's rows read as one contiguous slice (interleaved subjects mixed)"),
    Mutant("arrays_cache_key_without_ids", "biosig_lightning/data/corpora/arrays.py",
           "for arr in (self.x, self.y, self.subjects.astype(np.int64)):", "for arr in (self.x, self.y):",
           OWN_DATA, "arrays: the cache key ignores subject ids (corrected ids reuse the old cache)"),
    Mutant("cache_rows_by_recording", "biosig_lightning/data/cache.py",
           "return np.flatnonzero(np.isin(self.subjects, ids))",
           "return np.flatnonzero(np.isin(self.recordings, ids))",
           WINDOWS, "window cache: a split's rows selected by recording number instead of subject"),
    # ---- readers
    Mutant("edf_annotation_by_position", "biosig_lightning/data/corpora/edf.py",
           'ordinary = [k for k, lbl in enumerate(raw_labels) if lbl != "EDF Annotations"]',
           "ordinary = list(range(reader.signals_in_file))",
           EDF, "EDF record reader: the annotation signal assumed last (found by position, not by label)"),
    # ---- leaderboard
    Mutant("rank_ties_min", "biosig_lightning/analysis/leaderboard.py",
           'means.values()], method="average")', 'means.values()], method="min")',
           LEADERBOARD, "leaderboard: tied means both ranked 1 instead of 1.5 / 1.5"),
    Mutant("wins_need_rank_one", "biosig_lightning/analysis/leaderboard.py",
           "r[method] == min(r.values()))", "r[method] == 1)",
           LEADERBOARD, "leaderboard: a corpus won only at rank exactly 1 (tied leaders win nothing)"),
    Mutant("cell_std_ddof0", "biosig_lightning/analysis/leaderboard.py",
           "std = float(np.std(vals, ddof=1)) if len(vals) > 1",
           "std = float(np.std(vals, ddof=0)) if len(vals) > 1",
           LEADERBOARD, "leaderboard cell: population std (ddof 0) instead of the sample std"),
    Mutant("lower_is_better_ignored", "biosig_lightning/analysis/leaderboard.py",
           "sign = 1.0 if metric in LOWER_IS_BETTER else -1.0", "sign = -1.0",
           LEADERBOARD, "leaderboard: ECE/loss ranked as if higher were better"),
    # ---- benchmark queue and resume
    Mutant("queue_without_write_lock", "biosig_lightning/benchmarking/queue.py",
           "atomic_sqlite=True)", "atomic_sqlite=False)",
           QUEUE, "benchmark queue on SQLite without the write lock at BEGIN (two workers pop one cell)"),
    Mutant("resume_starts_fresh", "biosig_lightning/runs/resume.py",
           '        return "resume", last', '        return "fresh", None',
           RESUME, "a killed cell with a last.ckpt is refitted from epoch 0 instead of resumed"),
    # ---- tune
    Mutant("tune_storage_default_grace", "biosig_lightning/tuning/study.py",
           "store = open_storage(url, grace=grace_period)", "store = open_storage(url)",
           TUNE, "biosig tune: the study storage ignores --grace-period"),
    Mutant("heartbeat_two_beats", "biosig_lightning/tuning/coordination.py",
           "return min(MAX_HEARTBEAT_S, grace_period // MISSED_BEATS)",
           "return min(MAX_HEARTBEAT_S, grace_period // 2)",
           TUNE, "heartbeat every grace/2 s: a trial is stale after two missed beats, not three"),
    # ---- checkpoints
    Mutant("ckpt_path_unrestricted_pickle", "biosig_lightning/runs/checks.py",
           'torch.load(path, map_location="cpu", weights_only=True)',
           'torch.load(path, map_location="cpu", weights_only=False)',
           CHECKPOINTS, "--ckpt_path loaded with weights_only=False (a pickle runs its code)"),
    Mutant("load_run_unrestricted_pickle", "biosig_lightning/runs/load.py",
           'torch.load(ckpt, map_location="cpu", weights_only=True)',
           'torch.load(ckpt, map_location="cpu", weights_only=False)',
           CHECKPOINTS, "reopening a run loads its checkpoint with weights_only=False"),
    # ---- SPDTransNet (Seraphim et al., Sec. 3.3) and the DG objective
    Mutant("spd_augment_without_outer_product", "biosig_lightning/features/spd.py",
           "out[..., :n, :n] = cov + a.unsqueeze(-1) * a.unsqueeze(-2)", "out[..., :n, :n] = cov",
           SPD, "SPD augmentation [[C + a a^T, a], [a^T, 1]] loses its a a^T (no longer the Schur form)"),
    Mutant("spd_sqrt2_on_diagonal", "biosig_lightning/features/spd.py",
           "tok = tok * torch.where(r == c, 1.0, math.sqrt(2.0))",
           "tok = tok * torch.where(r == c, math.sqrt(2.0), 1.0)",
           SPD, "SPD tokens: sqrt(2) on the diagonal instead of the off-diagonal (not an isometry)"),
    Mutant("mmd_drops_a_scale", "biosig_lightning/models/modules/domain.py",
           "k = sum(torch.exp(-d2 / (s * h)) for s in scales) / len(scales)",
           "k = sum(torch.exp(-d2 / (s * h)) for s in scales[1:]) / (len(scales) - 1)",
           DG, "multi-kernel MMD without its narrowest bandwidth"),
    Mutant("dg_weight_ignored", "biosig_lightning/robust/dg.py",
           "return cls + self.dg_weight * aux, logits, extra", "return cls + aux, logits, extra",
           DG, "DG objective: the alignment term added at weight 1 whatever dg_weight says"),
)


def copy_repo(dest: Path) -> None:
    """Copy the files git knows (tracked, or untracked and not ignored) to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def patch(copy: Path, m: Mutant) -> str:
    """Apply ``m`` in ``copy``; returns the original text to restore."""
    target = copy / m.path
    text = target.read_text(encoding="utf-8")
    n = text.count(m.find)
    if n != 1:
        raise SystemExit(f"mutant {m.name}: its search text occurs {n} times in {m.path} (expected once): "
                         f"{m.find!r}")
    target.write_text(text.replace(m.find, m.replace), encoding="utf-8")
    return text


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """``("pass" | "fail" | "timeout", seconds, last output line)`` of ``pytest -x`` over ``tests`` in
    ``copy``."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if proc.returncode in (0, 1):
        return ("pass" if proc.returncode == 0 else "fail"), time.perf_counter() - t0, last
    raise SystemExit(f"pytest exited {proc.returncode} on {' '.join(tests)} (not a test result): {last}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run only these mutants (by name)")
    parser.add_argument("--no-write", action="store_true",
                        help="print the table, do not write the result file")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per pytest run (a hang counts as caught)")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if args.only is None or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        raise SystemExit(f"--only: unknown mutant(s) {sorted(unknown)}; known: {[m.name for m in MUTANTS]}")

    for m in mutants:  # every search text must still match the code before anything runs
        n = (ROOT / m.path).read_text(encoding="utf-8").count(m.find)
        if n != 1:
            raise SystemExit(f"mutant {m.name}: its search text occurs {n} times in {m.path} (expected "
                             f"once): "
                             f"{m.find!r}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="biosig-mutation-") as tmp:
        copy = Path(tmp)
        copy_repo(copy)
        where = subprocess.run([sys.executable, "-c",
                                "import biosig_lightning; print(biosig_lightning.__file__)"],
                               cwd=copy, check=True, capture_output=True, text=True).stdout.strip()
        if not Path(where).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"in the copy, biosig_lightning imports from {where}, not from the copy {copy}")
        for group in dict.fromkeys(m.tests for m in mutants):
            status, secs, last = run_tests(copy, group, args.timeout)
            print(f"baseline {' '.join(group)}: {status} in {secs:.0f} s: {last}", flush=True)
            if status != "pass":
                raise SystemExit(f"the unpatched tests fail ({' '.join(group)}): fix them before measuring "
                                 f"mutants")
        for m in mutants:
            original = patch(copy, m)
            try:
                status, secs, last = run_tests(copy, m.tests, args.timeout)
            finally:
                (copy / m.path).write_text(original, encoding="utf-8")
            verdict = "missed" if status == "pass" else "caught"
            print(f"{verdict:7s} {m.name:34s} {secs:5.0f} s  {last}", flush=True)
            rows.append({"name": m.name, "file": m.path, "bug": m.what, "tests": list(m.tests),
                         "result": verdict, "seconds": round(secs, 1)})

    caught = sum(r["result"] == "caught" for r in rows)
    rate = caught / len(rows) if rows else float("nan")
    print(f"kill rate: {caught}/{len(rows)} = {rate:.0%}")
    if not args.no_write:
        write_result(rows, caught, rate, argv)
    return 0 if caught == len(rows) else 1


def write_result(rows: list[dict], caught: int, rate: float, argv: list[str] | None) -> None:
    """``docs/results/mutation.json`` in the docs hook's format, plus the raw mutant list."""
    import torch

    from biosig_lightning.atomic_io import atomic_write_json

    torch_version = torch.__version__
    today = dt.date.today().isoformat()
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with other jobs, "
        f"Python {platform.python_version()}, torch {torch_version}"
    )
    command = "python tools/audits/mutation.py" + ("" if not argv else " " + " ".join(argv))
    table = {"columns": ["mutant", "planted bug", "file", "result"],
             "align": ["left", "left", "left", "left"],
             "rows": [[f"`{r['name']}`", r["bug"], f"`{r['file']}`", r["result"]] for r in rows]}
    doc = {
        "title": "Mutation check: planted bugs the tests must catch",
        "machine": machine,
        "dates": [today],
        "date": today,
        "command": command,
        "kill_rate": round(rate, 4),
        "caught": caught,
        "missed": len(rows) - caught,
        "items": [
            {"text": f"**Kill rate: {caught}/{len(rows)}** planted bugs caught. Each bug is applied alone to "
                     f"a "
                     "temporary copy of the repository and only its own test files run (`pytest -x`)."},
            {"table": table},
        ],
        "mutants": rows,
    }
    atomic_write_json(OUT, doc)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if len(sys.argv) > 1 else None))
