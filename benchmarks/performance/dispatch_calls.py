"""Dispatched aten calls per training step of every paper model, beside a base checkout's counts.

A training step on a GPU is as many kernel launches as the step dispatches operators; a step bound
by launches shows up as a high count on any machine, so the count is measured here on the CPU and
compared between two checkouts of the package in one run.

How the calls are counted: a ``TorchDispatchMode`` (``torch.utils._python_dispatch``) sees every
operator at the Python dispatch key, below autograd and after the ``CompositeImplicitAutograd``
decompositions, and it does not see the calls an operator makes itself; so each counted call is
one backend kernel (a launch on a GPU), forward, backward (the autograd engine's calls) and the
optimiser alike. ``torch.profiler`` counts every nested ``aten::`` frame as well (``aten::linear``
and the ``aten::addmm`` inside it), which double-counts and depends on the profiler's settings.
Views (``OpOverload.is_view``: ``view``, ``transpose``, ``split``, ``expand``, ``detach``...) move
no data and launch nothing; they are counted apart and left out of ``calls``.

A step is what ``biosig fit`` runs (as in ``gpu_steps.py``): the recipe's ``training_loss``
(STDRO with its inner maximisation; the denoiser pair on the class polarities its task fits at every
epoch start), backward, the YAML's gradient-norm clip (``foreach=True``), the
recipe's optimiser as the task builds it (fused where PyTorch has the kernel; a checkout whose task
builds it otherwise is set to ``foreach=True``, the implementation PyTorch picks on CUDA). Each model
runs at its paper batch on its YAML's synthetic stand-in (SPDTransNet: a random batch of its shape and
of 8 windows, :data:`RANDOM_BATCH`), in a fresh subprocess per checkout and mode.

Three measurements per model: *before* (``--base``, eager), *after* (this checkout, eager) and
*compiled* (this checkout, the backbone compiled by the tasks' ``compile`` option, TorchInductor, in
the order it runs on an accelerator, where ``compile: auto`` compiles it: :func:`_accelerator_order`).
A compiled step's launches are the operators still dispatched (loss, optimiser, Inductor's ``extern``
matmuls; the mode is an infra mode, so Dynamo runs the compiled code under it) plus every call of a
generated fused kernel (counted in the generated wrapper's globals): beside the eager counts, never in
their place. The CPU step time (median of ``--steps`` timed steps after one warm-up) of both checkouts
is measured eagerly in the same run, checkouts taking turns model by model.

Usage::

    git worktree add /tmp/base e583385
    python benchmarks/performance/dispatch_calls.py --base /tmp/base            # all five models
    python benchmarks/performance/dispatch_calls.py --only BioFormer --steps 3  # one model
    python benchmarks/performance/dispatch_calls.py --worker BioFormer          # one checkout, JSON to stdout

Writes ``benchmarks/results/dispatch_calls.json`` and ``docs/results/perf_dispatch_calls.json`` (the page).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments"

#: (name, experiment YAML) of every paper model; the batch is the YAML's
PAPER_MODELS: list[tuple[str, str]] = [
    ("BioFormer", "bioformer_apava.yaml"),
    ("SD-Former", "sdformer_sleepedf.yaml"),
    ("SPDTransNet", "spdtransnet_sleepedf.yaml"),
    ("SignedGraphPair", "signed_graph_turkish.yaml"),
    ("STDRO-DCRNN", "stdro_tusz.yaml"),
]
PHASES = ("forward", "backward", "optimizer")
#: fewer dispatched calls per step than the base commit that each model is to reach (the speed goal)
TARGETS = {"BioFormer": 5.0, "SD-Former": 3.0, "SPDTransNet": 3.0, "SignedGraphPair": 5.0, "STDRO-DCRNN": 5.0}
#: what is measured: the base checkout eager, this checkout eager, this checkout with a compiled backbone
SIDES = ("before", "after", "compiled")
#: windows per subject of the synthetic stand-in (enough for one batch at every paper batch size)
STANDIN_WINDOWS = 48
#: YAMLs whose step is counted on a random batch of the DataModule's shape, and its size: building the
#: SPD stand-in (21-epoch contexts of SPD matrices) takes more memory than a small runner has, and a
#: count does not depend on the values. SPDTransNet's step at its paper batch (32) holds about 15 GB on
#: a CPU; at 8 its attention is still cut into 4 chunks per intra-epoch layer before this change.
RANDOM_BATCH = {"spdtransnet_sleepedf.yaml": 8}


# ---------------------------------------------------------------- worker (one checkout, one model)
def _build(yaml_name: str) -> tuple[Any, dict[str, Any], float | None]:
    """The task, one training batch at the YAML's batch size, and the YAML's gradient clip."""
    from biosig_lightning.runs.biosig_cli import BiosigCLI  # noqa: PLC0415

    args = ["--config", str(EXP / yaml_name), "--config", str(EXP / "overlays" / "synthetic.yaml"),
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu",
            # a small stand-in: one batch at the YAML's batch size is all a count needs
            f"--data.init_args.synthetic_options={{windows_per_subject: {STANDIN_WINDOWS}}}"]
    cli = BiosigCLI(args=args, run=False, save_config_callback=None)
    dm = cli.datamodule
    if yaml_name in RANDOM_BATCH:
        import torch  # noqa: PLC0415

        size = RANDOM_BATCH[yaml_name]
        x = torch.randn(size, int(dm.n_chans), int(dm.n_times), generator=torch.Generator().manual_seed(0))
        return cli.model, {"x": x, "y": torch.arange(size) % int(dm.n_outputs)}, cli.trainer.gradient_clip_val
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    return cli.model, batch, cli.trainer.gradient_clip_val


def _prepare_stdro(task: Any, batch: dict[str, Any]) -> None:
    """STDRO's cost weights (built by ``setup('fit')`` under a Trainer): the identity per period."""
    import torch  # noqa: PLC0415

    try:
        from biosig_lightning.robust.stdro import STDROTask, period_bounds  # noqa: PLC0415
    except ImportError:
        return
    if not isinstance(task, STDROTask) or task.w_graph.numel() > 0:
        return
    x = batch["x"]
    bounds = period_bounds(int(x.shape[-1]), int(task.hparams.n_periods), task._step_bins())
    c = int(x.shape[-2])
    task.init_cost(torch.eye(c).expand(len(bounds), c, c).clone(), bounds)


def _prepare_polarity(task: Any, batch: dict[str, Any]) -> None:
    """The denoiser pair's epoch-start class polarities: ``gpu_steps.py``'s own."""
    from gpu_steps import prepare_polarity  # noqa: PLC0415  (this script's folder is on sys.path)

    prepare_polarity(task, batch)


def _loss(task: Any, batch: dict[str, Any]) -> Any:
    """The recipe's training loss, STDRO's adversarial objective included: ``gpu_steps.py``'s own."""
    from gpu_steps import training_objective  # noqa: PLC0415  (this script's folder is on sys.path)

    return training_objective(task, batch)


def _foreach_optimizer(task: Any) -> Any:
    """The recipe's optimiser, set to ``foreach=True`` (what PyTorch picks on CUDA) unless it is fused."""
    opt = task.build_optimizer()
    for group in opt.param_groups:
        if not group.get("fused"):
            group["foreach"] = True
    return opt


def _accelerator_order(task: Any) -> list[str]:
    """``gpu_steps.py``'s own: the order of computation a GPU runs."""
    from gpu_steps import accelerator_order  # noqa: PLC0415  (this script's folder is on sys.path)

    return accelerator_order(task)


def _step_fn(task: Any, batch: dict[str, Any], clip: float | None, counter: Any) -> Any:
    """One training step; its phases are attributed to ``counter`` while the counter is active."""
    import torch  # noqa: PLC0415

    opt = _foreach_optimizer(task)
    params = [p for p in task.parameters() if p.requires_grad]
    limit = clip if clip is not None else getattr(task.hparams, "grad_clip", None)

    def step() -> None:
        with counter.phase("optimizer"):
            opt.zero_grad(set_to_none=True)
        with counter.phase("forward"):
            loss = _loss(task, batch)
        with counter.phase("backward"):
            loss.backward()
        with counter.phase("optimizer"):
            if limit:
                torch.nn.utils.clip_grad_norm_(params, float(limit), foreach=True)
            opt.step()

    return step


def _counting_mode() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    class CountCalls(TorchDispatchMode):
        """Counts every dispatched operator, by phase, views apart."""

        @classmethod
        def is_infra_mode(cls) -> bool:
            # Dynamo runs a compiled function eagerly under a user's dispatch mode; as an "infra" mode
            # (as profiling and fake-tensor modes are) this one sees the compiled code's own calls
            return True

        def __init__(self) -> None:
            super().__init__()
            self.current = "forward"
            self.calls: Counter[str] = Counter()
            self.views: Counter[str] = Counter()
            self.ops: Counter[str] = Counter()
            self.kernels: Counter[str] = Counter()  # generated kernels (compiled mode), by phase

        @contextlib.contextmanager
        def phase(self, name: str) -> Any:
            before, self.current = self.current, name
            try:
                yield
            finally:
                self.current = before

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "is_view", False):
                self.views[self.current] += 1
            else:
                self.calls[self.current] += 1
                self.ops[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    return CountCalls()


@contextlib.contextmanager
def _generated_kernel_calls(counter: Any) -> Any:
    """Counts, by ``counter``'s phase, every call of a kernel that TorchInductor generated and loaded
    so far (``cpp_fused_*`` on a CPU, ``triton_*`` on CUDA): the generated wrapper looks its kernels up
    in its module's globals at each call, so each is wrapped there while the context is active. These
    calls never pass through the dispatcher; everything else the compiled code runs (the ``extern``
    matmuls and convolutions, allocations, fallback operators) is dispatched and counted as calls."""
    from torch._inductor.codecache import PyCodeCache  # noqa: PLC0415

    modules = list(PyCodeCache.modules)
    modules += [m for m in getattr(PyCodeCache, "modules_no_attr", {}).values() if m not in modules]
    wrapped: list[tuple[Any, str, Any]] = []

    def counted(fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counter.kernels[counter.current] += 1
            return fn(*args, **kwargs)
        return call

    for module in modules:
        for attr, fn in list(vars(module).items()):
            if attr.startswith(("cpp_fused", "triton_")):
                if callable(fn):
                    wrapped.append((module, attr, fn))
                    setattr(module, attr, counted(fn))
                elif callable(getattr(fn, "run", None)):  # a Triton kernel is launched by its .run
                    wrapped.append((fn, "run", fn.run))
                    fn.run = counted(fn.run)
    try:
        yield len(wrapped)
    finally:
        for owner, attr, fn in wrapped:
            setattr(owner, attr, fn)


def worker(name: str, steps: int, threads: int, mode: str = "eager") -> dict[str, Any]:
    """Counts and CPU step times of ``name`` in the checkout that ``biosig_lightning`` imports from;
    ``mode="compiled"``: with the backbone compiled by the tasks' ``compile`` option (Inductor)."""
    import torch  # noqa: PLC0415
    from lightning.pytorch import seed_everything  # noqa: PLC0415

    import biosig_lightning  # noqa: PLC0415

    torch.set_num_threads(threads)
    yaml_name = dict(PAPER_MODELS)[name]
    seed_everything(0, verbose=False)
    task, batch, clip = _build(yaml_name)
    task.train()
    _prepare_stdro(task, batch)
    _prepare_polarity(task, batch)
    counter = _counting_mode()
    step = _step_fn(task, batch, clip, counter)
    extra: dict[str, Any] = {}
    if mode == "compiled":
        extra["accelerator_order"] = _accelerator_order(task)
        t0 = time.perf_counter()
        task.compile_for_fit(True)  # what the task compiles when a fit starts
        step()  # compiles the forward graph(s), then the backward graph(s) when they first run
        extra["compile_s"] = round(time.perf_counter() - t0, 1)
    step()  # uncounted: lazily built state (optimiser moments, caches) is not the steady state
    with contextlib.ExitStack() as stack:
        if mode == "compiled":
            extra["kernels_loaded"] = stack.enter_context(_generated_kernel_calls(counter))
        stack.enter_context(counter)
        step()
    if mode == "compiled":
        kernels = {p: counter.kernels[p] for p in PHASES}
        extra |= {"fused_kernels": sum(kernels.values()), "fused_kernels_by_phase": kernels}
        if sum(kernels.values()):
            extra |= {"launches": sum(counter.calls.values()) + sum(kernels.values()),
                      "launches_by_phase": {p: counter.calls[p] + kernels[p] for p in PHASES}}
        else:  # the step ran none of the compiled code: its count is the eager one, not a compiled one
            extra["error"] = "not reached: the step runs no compiled code"
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {
        "package": str(Path(biosig_lightning.__file__).resolve().parents[1]), "mode": mode,
        "batch": int(batch["y"].shape[0]), "input_shape": list(batch["x"].shape[1:]),
        "params": sum(p.numel() for p in task.parameters() if p.requires_grad),
        "param_tensors": sum(1 for p in task.parameters() if p.requires_grad),
        "calls": sum(counter.calls.values()), "views": sum(counter.views.values()),
        "calls_by_phase": {p: counter.calls[p] for p in PHASES},
        "views_by_phase": {p: counter.views[p] for p in PHASES},
        "top_ops": dict(counter.ops.most_common(12)),
        **extra,
        "step_ms": [round(t * 1000, 2) for t in times],
        "step_ms_median": round(statistics.median(times) * 1000, 2) if times else None,
    }


# ---------------------------------------------------------------- driver (both checkouts, all models)
def run_worker(root: Path, name: str, steps: int, threads: int, timeout: float,
               mode: str = "eager") -> dict[str, Any]:
    """``worker`` in a subprocess that imports the package from ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--steps", str(steps),
           "--threads", str(threads), "--mode", mode]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=root, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_rounds(base: Path, name: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--rounds`` turns of the two checkouts (eager; the base first in even turns, this one first in odd
    ones), their step times pooled per side: on a shared machine the load drifts, and alternating lets
    both sides meet the same drift."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    roots = {"before": base, "after": REPO}
    for turn in range(args.rounds):
        for side in ("before", "after") if turn % 2 == 0 else ("after", "before"):
            runs[side].append(run_worker(roots[side], name, args.steps, args.threads, args.timeout))
    pooled = []
    for side in ("before", "after"):
        failed = [r for r in runs[side] if "error" in r]
        if failed:
            pooled.append(failed[0])
            continue
        times = [t for r in runs[side] for t in r["step_ms"]]
        pooled.append({**runs[side][0], "step_ms": times, "rounds": args.rounds,
                       "step_ms_median": round(statistics.median(times), 2) if times else None})
    return pooled[0], pooled[1]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def compare(row: dict[str, Any]) -> dict[str, Any]:
    """The ratios of one model (higher is better for the counts): eager calls before / after, eager
    calls before / compiled launches after (calls still dispatched + generated-kernel calls), the CPU
    step time after / before (eager both), and whether each mode reaches the model's target."""
    before, after, compiled = (row.get(side, {}) for side in SIDES)
    if not before or "error" in before:
        return {}
    out: dict[str, Any] = {}
    target = TARGETS.get(row["model"])
    if after and "error" not in after:
        out |= {"calls_ratio": _ratio(before["calls"], after["calls"]),
                "calls_ratio_by_phase": {p: _ratio(before["calls_by_phase"][p],
                                                   after["calls_by_phase"][p]) for p in PHASES},
                "cpu_step_time_ratio": _ratio(after["step_ms_median"], before["step_ms_median"])}
    if compiled and "error" not in compiled and compiled.get("launches"):
        out |= {"compiled_launches_ratio": _ratio(before["calls"], compiled["launches"]),
                "compiled_launches_ratio_by_phase": {p: _ratio(before["calls_by_phase"][p],
                                                               compiled["launches_by_phase"][p])
                                                     for p in PHASES}}
    if target is not None:
        out["target_ratio"] = target
        for key, met in (("calls_ratio", "target_met_eager"),
                         ("compiled_launches_ratio", "target_met_compiled")):
            if out.get(key) is not None:
                out[met] = out[key] >= target
    return out


def _met(value: bool | None) -> str:
    return "" if value is None else ("yes" if value else "no")


def _shown(argv: list[str]) -> list[str]:
    """The command line as the results show it: the note, which they print in full, named only."""
    return [("NOTE (the note below)" if i and argv[i - 1] == "--note" else a) for i, a in enumerate(argv)]


def docs_page(result: dict[str, Any]) -> dict[str, Any]:
    """The Performance page's rendering of ``result`` (the docs hook's results-file format)."""
    meta = result["meta"]
    rows = []
    for row in result["models"]:
        b, a, c, r = (row.get(side, {}) for side in (*SIDES, "ratios"))
        rows.append([
            row["model"], a.get("batch", b.get("batch", "")), b.get("calls", b.get("error", "")),
            a.get("calls", a.get("error", "")), c.get("launches", c.get("error", "")),
            r.get("calls_ratio", ""), r.get("compiled_launches_ratio", ""), r.get("target_ratio", ""),
            _met(r.get("target_met_eager")), _met(r.get("target_met_compiled")),
            b.get("step_ms_median"), a.get("step_ms_median"), r.get("cpu_step_time_ratio"),
        ])
        rows[-1] = ["" if v is None else v for v in rows[-1]]  # not measured
    columns = ["model", "batch", "calls before (eager)", "calls after (eager)", "launches after (compiled)",
               "fewer, eager (x)", "fewer, compiled (x)", "target (x)", "met eager", "met compiled",
               "CPU ms before", "CPU ms after", "CPU time after / before"]
    return {
        "title": "Dispatched aten calls per training step (device-independent)",
        "machine": meta["machine"],
        "dates": [meta["date"][:10]],
        "command": meta["command"],
        "source": "`benchmarks/results/dispatch_calls.json` (per phase, top operators, every step time)",
        "page": "performance",
        "items": [
            {"text": (
                "Operators one training step dispatches (forward + loss, backward, gradient clip + optimiser "
                "as the task builds it: fused where PyTorch has the kernel), counted with a "
                "`TorchDispatchMode` below autograd, views apart, at each model's paper batch on its YAML's "
                f"stand-in. *before*: the package at `{meta['base']}`, eager; *after*: this checkout "
                f"(`{meta['head']}`), eager; *compiled*: this checkout with the backbone compiled by the "
                "tasks' `compile` option (TorchInductor, on this CPU) in the order it runs on an accelerator "
                "(DCRNN's layers in lockstep), counting the calls still dispatched "
                "plus every call of a generated fused kernel, i.e. the launches of a step. The targets are "
                "met where the ratio to *before* reaches them, per mode; a compiled count is never the "
                "eager one. CPU step times: eager, median ms of "
                f"{meta['steps']} steps x {meta.get('rounds', 1)} turns of the two checkouts, model by "
                f"model, {meta['threads']} thread(s)."
            )},
            {"table": {"columns": columns, "align": ["left"] + ["right"] * (len(columns) - 1), "rows": rows}},
            *([{"text": meta["note"]}] if meta.get("note") else []),
        ],
    }


def _git_head(root: Path) -> str:
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True,
                          check=False)
    return proc.stdout.strip() or "unknown"


def add_rows(args: argparse.Namespace) -> int:
    """``--add``: worker outputs measured separately (one side at a time) merged into ``--out``."""
    from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

    result = json.loads(args.out.read_text()) if args.out.is_file() else {"meta": {}, "models": []}
    rows = {r["model"]: r for r in result["models"]}
    for name, side, path in args.add:
        if name not in dict(PAPER_MODELS) or side not in SIDES:
            print(f"dispatch_calls: --add {name} {side}: unknown model or side", file=sys.stderr)
            return 2
        text = Path(path).read_text().strip().splitlines()
        row = rows.setdefault(name, {"model": name, "config": f"experiments/{dict(PAPER_MODELS)[name]}"})
        row[side] = json.loads(text[-1]) if text else {"error": f"no output in {path}"}
        row["ratios"] = compare(row)
    result["models"] = [rows[n] for n, _ in PAPER_MODELS if n in rows]
    if args.note:
        result["meta"]["note"] = args.note
    atomic_write_json(args.out, result)
    if str(args.docs_out):
        atomic_write_json(args.docs_out, docs_page(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, default=None,
                    help="a checkout of the base commit (its 'before' counts)")
    ap.add_argument("--only", nargs="*", default=None, help="model names (default: all five)")
    ap.add_argument("--steps", type=int, default=5, help="timed CPU steps per model and checkout (default 5)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="turns of the two checkouts per model, step times pooled (default 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per model and checkout")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "dispatch_calls.json")
    ap.add_argument("--docs-out", type=Path, default=REPO / "docs" / "results" / "perf_dispatch_calls.json",
                    help="the Performance page's rendering ('' to skip)")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                    help="what to measure now: 'before' (--base, eager), 'after' (this checkout, eager), "
                         "'compiled' (this checkout, backbone compiled); default all; a side not measured "
                         "keeps its earlier row")
    ap.add_argument("--add", nargs=3, action="append", metavar=("MODEL", "SIDE", "WORKER_JSON"), default=[],
                    help="put a worker's JSON output (--worker MODEL > FILE) into --out as MODEL's SIDE, "
                         "measure nothing")
    ap.add_argument("--note", default="", help="a sentence for the results page (how the run was made)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compiled"), default="eager", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.threads, args.mode)))
        return 0
    if args.add:
        return add_rows(args)
    names = [n for n, _ in PAPER_MODELS if not args.only or n in args.only]
    unknown = sorted(set(args.only or []) - {n for n, _ in PAPER_MODELS})
    if unknown:
        print(f"dispatch_calls: unknown model(s) {unknown}; choose from {[n for n, _ in PAPER_MODELS]}",
              file=sys.stderr)
        return 2
    if args.base is not None and not (args.base / "biosig_lightning").is_dir():
        print(f"dispatch_calls: --base {args.base} holds no biosig_lightning package", file=sys.stderr)
        return 2
    # keep the earlier rows of models not run now
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {"models": []}
    rows = {r["model"]: r for r in previous.get("models", [])}
    t0 = time.perf_counter()
    for name in names:
        row: dict[str, Any] = {**rows.get(name, {}), "model": name,
                               "config": f"experiments/{dict(PAPER_MODELS)[name]}"}
        if args.base is not None and {"before", "after"} <= set(args.sides):
            row["before"], row["after"] = run_rounds(args.base, name, args)
        elif args.base is not None and "before" in args.sides:
            row["before"] = run_worker(args.base, name, args.steps, args.threads, args.timeout)
        elif "after" in args.sides:
            row["after"] = run_worker(REPO, name, args.steps, args.threads, args.timeout)
        if "compiled" in args.sides:  # counts only: a CPU compile takes minutes; its step time is no goal
            row["compiled"] = run_worker(REPO, name, 0, args.threads, args.timeout, mode="compiled")
        row["ratios"] = compare(row)
        rows[name] = row
        print(f"[{time.perf_counter() - t0:7.1f} s] {name}: "
              + json.dumps({k: row.get(k) for k in ("ratios",)} | {
                  side: {k: row[side].get(k) for k in ("calls", "launches", "views",
                                                       "step_ms_median", "error") if k in row[side]}
                  for side in SIDES if side in row}), flush=True)
    import torch  # noqa: PLC0415

    from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "benchmarks/performance/dispatch_calls.py",
                                 *_shown(argv or sys.argv[1:])]),
            "machine": f"cpu ({platform.processor() or platform.machine()}), torch {torch.__version__}, "
                       f"Python {platform.python_version()}",
            "threads": args.threads, "steps": args.steps, "rounds": args.rounds, "head": _git_head(REPO),
            "sides_measured": args.sides,
            "base": _git_head(args.base) if args.base is not None else previous.get("meta", {}).get("base"),
            "loadavg": os.getloadavg()[0], **({"note": args.note} if args.note else {})}
    result = {"meta": meta, "models": [rows[n] for n, _ in PAPER_MODELS if n in rows]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, result)
    if str(args.docs_out):
        atomic_write_json(args.docs_out, docs_page(result))
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")
    return 1 if any("error" in r.get(s, {}) for r in result["models"] for s in SIDES) else 0


if __name__ == "__main__":
    raise SystemExit(main())
