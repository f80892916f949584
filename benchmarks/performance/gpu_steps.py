"""Every paper model's training step on one accelerator: eager, compiled and CUDA-graphed, float32 and
bf16-mixed.

For each paper model (its experiment YAML on the YAML's synthetic stand-in, which has the real
corpus's channels, rate and window) this measures, in one run on one device:

* ``runs``: one entry per (batch, execution, precision): ``step_ms`` / ``samples_per_s``, the median
  of ``--steps`` timed training steps (fewer past ``--budget`` seconds) after ``--warmup`` untimed ones
  (the first of which compiles: ``first_step_s``), at the YAML's batch (``paper``) and at the largest
  batch that fits (``fill``, below); executions ``eager``, ``compiled`` (the task's ``compile`` option:
  ``torch.compile`` of the backbone, default mode) and ``cudagraphs`` (``compile_mode:
  reduce-overhead``, CUDA graphs); precisions ``float32`` and ``bf16-mixed``
  (``torch.autocast(dtype=torch.bfloat16)`` around forward and loss, float32 weights and
  optimiser, as Lightning's ``precision="bf16-mixed"``). ``tflops`` is the step's FLOPs
  (``torch.utils.flop_counter``, forward and backward, counted once per model in float32 eager) over
  its time, ``peak_fraction`` that over the card's dense peak for the precision (:data:`PEAK_TFLOPS`;
  float32 without TF32, which this script turns off). A step is what ``biosig fit`` runs:
  the recipe's loss (``training_loss``: SD-Former's auxiliary terms, the signed-graph pair's
  denoising objective), backward, the YAML's gradient clip, the recipe's optimiser; for STDRO
  also its inner maximisation (``ascent_steps`` input-gradient steps) before the theta step.
* ``peak_mib``: ``torch.cuda.max_memory_allocated`` over those steps (reset before each mode).
* ``max_batch``: the largest batch that fits, float32, doubling from the paper batch until an
  out-of-memory error or ``--max-batch`` (the batch repeats the real one; one step each).
* ``loader_windows_per_s``: windows/s that the DataModule's own ``train_dataloader()`` serves
  (the window cache, ``num_workers`` as configured), and its ratio to the float32 and bf16
  step rates: above 1 the loader keeps the device fed from one process.

Usage (one line on a GPU machine; CUDA is required unless ``--smoke``)::

    python benchmarks/performance/gpu_steps.py --quick --out $OUT/gpu_steps.json   # well inside 8 minutes on
    an H100
    python benchmarks/performance/gpu_steps.py --out $OUT/gpu_steps.json           # every batch x execution x
    precision
    python benchmarks/performance/gpu_steps.py --smoke --out /tmp/gpu_steps_smoke.json   # CPU, tiny models

``--quick``: 5 timed steps, compiled executions at the paper batch only (the fill batch eager), and
``--time-limit`` 420 s (``--smoke`` too: compiled runs at the paper batch only): a compiled run that would
start past it is recorded as skipped, so the script
ends in time whatever the compile times. ``--smoke`` shrinks every backbone to the catalog's test
size, the stand-ins to a few windows per subject and the batch to 4, and runs on the CPU (unless
``--device`` says otherwise) with the ``aot_eager`` compile backend (no CUDA graphs there), so the
script itself can be checked without an accelerator; its numbers mean nothing.

Needs the project's import-time dependencies; of those, ``jsonargparse`` (with ``docstring-parser`` and
``typeshed-client``, its ``[signatures]`` extra) is not in a bare PyTorch + Lightning image: the script
names whatever is missing and exits with status 2 before measuring anything.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments"
if str(REPO) not in sys.path:  # run from a plain checkout (no pip install -e) on the device machine
    sys.path.insert(0, str(REPO))

#: (name, experiment YAML) of every paper model; the batch is the YAML's
#: how the step runs: eager, torch.compile of the backbone, and that with CUDA graphs (mode reduce-overhead)
EXECUTIONS = ("eager", "compiled", "cudagraphs")
PAPER_MODELS: list[tuple[str, str]] = [
    ("BioFormer", "bioformer_apava.yaml"),
    ("SD-Former", "sdformer_sleepedf.yaml"),
    ("SPDTransNet", "spdtransnet_sleepedf.yaml"),
    ("SignedGraphPair", "signed_graph_turkish.yaml"),
    ("STDRO-DCRNN", "stdro_tusz.yaml"),
]

#: the batch of a --smoke run (the paper batches are the YAMLs')
SMOKE_BATCH = 4
#: import name -> distribution (wheel) name, for the project's imports that a bare image may lack
NEEDED = {"lightning": "lightning", "torchmetrics": "torchmetrics", "jsonargparse": "jsonargparse",
          "docstring_parser": "docstring-parser", "typeshed_client": "typeshed-client", "yaml": "pyyaml",
          "scipy": "scipy", "sklearn": "scikit-learn", "numpy": "numpy"}


def missing_packages() -> list[str]:
    """Distributions the measurement needs that are not importable here."""
    return [dist for mod, dist in NEEDED.items() if importlib.util.find_spec(mod) is None]


def _sync(device: Any) -> None:
    import torch  # noqa: PLC0415

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cli_args(yaml_name: str, smoke: bool, test_kwargs: dict[str, Any]) -> list[str]:
    args = ["--config", str(EXP / yaml_name), "--config", str(EXP / "overlays" / "synthetic.yaml"),
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu"]
    if smoke:
        args += ["--data.init_args.synthetic_options={windows_per_subject: 6}",
                 f"--data.init_args.batch_size={SMOKE_BATCH}"]
        args += [f"--model.init_args.backbone.init_args.{k}={json.dumps(v)}" for k, v in test_kwargs.items()]
    return args


def _test_kwargs(yaml_name: str) -> dict[str, Any]:
    """The catalog's test-size arguments of the YAML's backbone (for ``--smoke``)."""
    import yaml  # noqa: PLC0415

    from biosig_lightning.models import catalog  # noqa: PLC0415

    cfg = yaml.safe_load((EXP / yaml_name).read_text())
    path = cfg["model"]["init_args"]["backbone"]["class_path"]
    return dict(catalog.get(path.rsplit(".", 1)[-1]).test_kwargs)


def accelerator_order(task: Any) -> list[str]:
    """Modules that choose their order of computation by device (``lockstep: auto``: DCRNN's stacked
    layers advance together on an accelerator, layer after layer on a CPU) set to the accelerator's, so
    that a CPU run counts or rehearses the step a GPU runs; returns their class names."""
    changed = []
    for module in task.modules():
        if getattr(module, "lockstep", None) == "auto":
            module.lockstep = True
            changed.append(type(module).__name__)
    return changed


def build(yaml_name: str, smoke: bool) -> tuple[Any, Any, float | None]:
    """The task, the set-up DataModule and the YAML's gradient-clip value; a ``--smoke`` task in the order
    of computation a GPU runs (:func:`accelerator_order`)."""
    from biosig_lightning.runs.biosig_cli import BiosigCLI  # noqa: PLC0415

    cli = BiosigCLI(args=_cli_args(yaml_name, smoke, _test_kwargs(yaml_name) if smoke else {}), run=False,
                    save_config_callback=None)
    dm = cli.datamodule
    dm.setup("fit")
    if smoke:
        accelerator_order(cli.model)
    return cli.model, dm, cli.trainer.gradient_clip_val


def loader_rate(dm: Any, max_batches: int) -> dict[str, Any]:
    """Windows/s that ``dm.train_dataloader()`` serves (one pass, at most ``max_batches`` batches)."""
    n = 0
    t0 = time.perf_counter()
    for i, batch in enumerate(dm.train_dataloader()):
        n += int(batch["y"].shape[0])
        if i + 1 >= max_batches:
            break
    wall = time.perf_counter() - t0
    return {"windows": n, "seconds": round(wall, 4),
            "windows_per_s": round(n / wall, 1) if wall > 0 else None}


def training_objective(task: Any, batch: dict[str, Any]) -> Any:
    """The recipe's training loss of ``batch`` (STDRO: with its inner maximisation first)."""
    from biosig_lightning.robust.stdro import STDROTask  # noqa: PLC0415

    if isinstance(task, STDROTask) and int(task.hparams.ascent_steps) > 0:
        x_adv, _ = task.inner_maximisation(batch["x"], batch["y"])
        loss = task.training_loss({**batch, "x": x_adv})[0]
        if task.hparams.clean_weight > 0:
            loss = loss + task.hparams.clean_weight * task.training_loss(batch)[0]
        return loss
    return task.training_loss(batch)[0]


def make_step(task: Any, clip: float | None, device: Any, bf16: bool,
              cudagraphs: bool = False) -> tuple[Callable[[dict], None], Any]:
    """One training step of ``task`` on a batch dict (and the optimiser it updates). ``cudagraphs``: each
    step starts a new CUDA-graph generation (``torch.compile(mode="reduce-overhead")`` replays)."""
    import torch  # noqa: PLC0415

    opt = task.build_optimizer()
    params = [p for p in task.parameters() if p.requires_grad]
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(batch: dict[str, torch.Tensor]) -> None:
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = training_objective(task, batch)
        loss.backward()
        limit = clip if clip is not None else getattr(task.hparams, "grad_clip", None)
        if limit:
            torch.nn.utils.clip_grad_norm_(params, float(limit))
        opt.step()

    return step, opt


@contextlib.contextmanager
def execution(task: Any, kind: str, backend: str, device: Any) -> Any:
    """Eager, compiled (what the task compiles when a fit starts: ``compile_for_fit``) or compiled with CUDA
    graphs, for the block."""
    import torch  # noqa: PLC0415

    if kind == "eager":
        yield
        return
    torch._dynamo.reset()
    mode = task.hparams.get("compile_mode")
    task.hparams["compile_mode"] = "reduce-overhead" if kind == "cudagraphs" else None
    task.compile_for_fit(True, backend=backend)
    try:
        yield
    finally:
        task.hparams["compile_mode"] = mode
        for module in task.modules():  # back to eager: nn.Module.compile's own attribute
            module._compiled_call_impl = None
        task.backbone.__dict__.pop("forward_with_aux", None)
        torch._dynamo.reset()


def step_flops(task: Any, batch: dict[str, Any]) -> int | None:
    """FLOPs of one training step's forward and backward (``torch.utils.flop_counter``; attention through
    the math SDPA kernel, which the counter sees), float32 eager."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
    from torch.utils.flop_counter import FlopCounterMode  # noqa: PLC0415

    try:
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            training_objective(task, batch).backward()
    finally:
        task.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


# : dense peak TFLOP/s (NVIDIA datasheets): float32 on the CUDA cores (TF32 is off here), bf16 on the tensor
# cores;
#: the first name contained in the device's name applies
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100 PCIe": {"float32": 51.2, "bf16-mixed": 756.0},
    "H100 NVL": {"float32": 60.0, "bf16-mixed": 835.0},
    "H100": {"float32": 66.9, "bf16-mixed": 989.4},
    "H200": {"float32": 66.9, "bf16-mixed": 989.4},
    "A100": {"float32": 19.5, "bf16-mixed": 312.0},
}


def peak_tflops(device_name: str, precision: str) -> float | None:
    """The card's dense peak for ``precision``, or None for a card not in :data:`PEAK_TFLOPS`."""
    for name, peaks in PEAK_TFLOPS.items():
        if name in device_name:
            return peaks[precision]
    return None


def prepare_stdro(task: Any, batch: dict[str, Any]) -> None:
    """STDRO's cost weights, which ``setup('fit')`` builds from the training windows under a Trainer:
    here the identity per period (the cost's shape and arithmetic are what the step pays for)."""
    import torch  # noqa: PLC0415

    from biosig_lightning.robust.stdro import STDROTask, period_bounds  # noqa: PLC0415

    if not isinstance(task, STDROTask) or task.w_graph.numel() > 0:
        return
    x = batch["x"]
    bounds = period_bounds(int(x.shape[-1]), int(task.hparams.n_periods), task._step_bins())
    c = int(x.shape[-2])
    task.init_cost(torch.eye(c, device=x.device).expand(len(bounds), c, c).clone(), bounds)


def prepare_polarity(task: Any, batch: dict[str, Any]) -> None:
    """The denoiser pair's class polarities (eq. 5), which ``DenoiserPairTask`` re-estimates from its
    classes' training windows at every epoch start, so that the steps of ``biosig fit`` filter on fixed
    signs; here from the batch's windows (without them each step would refine signs per input, a path
    training does not take)."""
    fit = getattr(task.backbone, "fit_polarity", None)
    if fit is not None and int(getattr(task, "polarity_windows", 0) or 0) > 0:
        fit(batch["x"], batch["y"])


def time_steps(step: Callable[[dict], None], batch: dict[str, Any], device: Any, warmup: int, steps: int,
               budget_s: float) -> tuple[list[float], float]:
    """Wall seconds of ``steps`` steps after ``warmup`` untimed ones (fewer, at least one, past ``budget_s``),
    and of the first step (which compiles, for a compiled backbone)."""
    out: list[float] = []
    first = 0.0
    start = time.perf_counter()
    for i in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        step(batch)
        _sync(device)
        if i == 0:
            first = time.perf_counter() - t0
        if i >= warmup:
            out.append(time.perf_counter() - t0)
            if time.perf_counter() - start - first > budget_s:
                break
    return out, first


def _is_oom(err: BaseException) -> bool:
    import torch  # noqa: PLC0415

    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


def _repeat(batch: dict[str, Any], size: int) -> dict[str, Any]:
    n = int(batch["y"].shape[0])
    reps = -(-size // n)
    return {k: (v.repeat(reps, *([1] * (v.ndim - 1)))[:size] if v.ndim else v) for k, v in batch.items()}


def largest_batch(task: Any, clip: float | None, batch: dict[str, Any], device: Any, cap: int,
                  budget_s: float) -> dict[str, Any]:
    """Doubling from the paper batch: the largest batch whose float32 step ran, and why it stopped."""
    import torch  # noqa: PLC0415

    step, _ = make_step(task, clip, device, bf16=False)
    size, fits, reason = int(batch["y"].shape[0]), None, "cap"
    start = time.perf_counter()
    while size <= cap:
        t_step = time.perf_counter()
        try:
            step(_repeat(batch, size))
            _sync(device)
            fits = size
            last = time.perf_counter() - t_step
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError is one
            if not _is_oom(err):
                raise
            reason = "out of memory"
            break
        finally:
            task.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        # the next step (twice the batch) takes about twice as long: stop before it would overrun the budget
        if time.perf_counter() - start + 2.2 * last > budget_s:
            reason = f"time budget ({budget_s:.0f} s)"
            break
        size *= 2
    return {"max_batch": fits, "stopped_by": reason}


def _run(task: Any, clip: float | None, batch: dict[str, Any], device: Any, args: argparse.Namespace,
         which: str,
         kind: str, precision: str, flops: int | None, init: dict[str, Any]) -> dict[str, Any]:
    """One (batch, execution, precision) measurement."""
    import torch  # noqa: PLC0415

    size = int(batch["y"].shape[0])
    entry: dict[str, Any] = {"batch_kind": which, "batch": size, "execution": kind, "precision": precision}
    task.load_state_dict(init)  # every run starts from the same weights
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with execution(task, kind, args.backend, device):
            step, _ = make_step(task, clip, device, bf16=precision != "float32",
                                cudagraphs=kind == "cudagraphs")
            times, first = time_steps(step, batch, device, args.warmup, args.steps, args.budget)
    except RuntimeError as err:
        if not _is_oom(err):
            raise
        return {**entry, "error": "out of memory"}
    finally:
        task.zero_grad(set_to_none=True)
    med = statistics.median(times)
    entry.update(step_ms=round(med * 1000, 3), samples_per_s=round(size / med, 1), steps_timed=len(times),
                 first_step_s=round(first, 2))
    if flops:
        achieved = flops * size / med
        entry["tflops"] = round(achieved / 1e12, 6)
        peak = peak_tflops(args.device_name, precision)
        entry["peak_fraction"] = round(achieved / (peak * 1e12), 5) if peak else None
    if device.type == "cuda":
        entry["peak_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return entry


def measure(name: str, yaml_name: str, args: argparse.Namespace, device: Any) -> dict[str, Any]:
    t_build = time.perf_counter()
    task, dm, clip = build(yaml_name, args.smoke)
    row: dict[str, Any] = {"model": name, "config": f"experiments/{yaml_name}",
                           "backbone": type(task.backbone).__name__,
                           "params": sum(p.numel() for p in task.parameters() if p.requires_grad),
                           "setup_s": round(time.perf_counter() - t_build, 2)}
    row["loader"] = loader_rate(dm, args.loader_batches)
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.to(device) for k, v in batch.items()}
    row["batch"] = int(batch["y"].shape[0])
    row["input_shape"] = list(batch["x"].shape[1:])
    task.to(device).train()
    prepare_stdro(task, batch)
    prepare_polarity(task, batch)
    init = {k: v.detach().clone() for k, v in task.state_dict().items()}
    try:
        flops = step_flops(task, batch)
    except RuntimeError as err:  # the counter's module hooks refuse STDRO's autograd.grad on the input
        flops, row["flops_error"] = None, str(err).splitlines()[0][:300]
    row["gflop_per_sample"] = round(flops / row["batch"] / 1e9, 4) if flops else None
    task.load_state_dict(init)
    row.update(largest_batch(task, clip, batch, device, args.max_batch, args.budget))
    batches = [("paper", batch)]
    if row["max_batch"] and row["max_batch"] > row["batch"]:
        batches.append(("fill", _repeat(batch, row["max_batch"])))
    runs = []
    for which, b in batches:
        for kind in args.executions:
            if which == "fill" and kind != "eager" and (args.quick or args.smoke):
                continue
            for precision in ("float32", "bf16-mixed"):
                entry = {"batch_kind": which, "batch": int(b["y"].shape[0]),
                         "execution": kind, "precision": precision}
                if kind == "cudagraphs" and device.type != "cuda":
                    runs.append({**entry, "skipped": "CUDA graphs need a CUDA device"})
                elif kind != "eager" and time.perf_counter() - args.t0 > args.time_limit:
                    runs.append({**entry, "skipped": f"past --time-limit {args.time_limit:.0f} s"})
                else:
                    try:
                        runs.append(_run(task, clip, b, device, args, which, kind, precision, flops, init))
                    except (
                        Exception
                    ) as err:  # one execution failing (a compile error) keeps the others' numbers
                        runs.append(
                            {**entry, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
                        )
                print("   " + json.dumps(runs[-1]), flush=True)
                rate = row["loader"]["windows_per_s"]
                if which == "paper" and kind == "eager" and "samples_per_s" in runs[-1]:
                    runs[-1]["loader_over_step"] = (
                        round(rate / runs[-1]["samples_per_s"], 2) if rate else None
                    )
                    row[precision] = runs[-1]  # the earlier files' keys: eager at the paper batch
    row["runs"] = runs
    task.load_state_dict(init)
    row["total_s"] = round(time.perf_counter() - t_build, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON results file")
    ap.add_argument("--smoke", action="store_true", help="tiny models and stand-ins, CPU unless --device")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    ap.add_argument("--only", nargs="*", default=None, help="model names to run (default: all)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per mode (default 10; smoke 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; smoke 0)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per timed mode and per batch search (default 15; smoke 30)")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="cap of the batch doubling (default 4096; smoke 8)")
    ap.add_argument("--loader-batches", type=int, default=None,
                    help="batches read for the loader rate (default 200)")
    ap.add_argument("--quick", action="store_true",
                    help="5 timed steps, compiled runs at the paper batch only, --time-limit 420 s")
    ap.add_argument("--executions", nargs="+", choices=EXECUTIONS, default=list(EXECUTIONS),
                    help="eager, compiled (torch.compile), cudagraphs (mode reduce-overhead); default all")
    ap.add_argument("--backend", default=None,
                    help="torch.compile backend (default inductor; smoke aot_eager)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds after which no further compiled run starts (default: none; quick 420)")
    args = ap.parse_args(argv)
    args.steps = args.steps or (1 if args.smoke else 5 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 2 if args.quick else 3)
    args.budget = args.budget or (30.0 if args.smoke else 8.0 if args.quick else 15.0)
    args.backend = args.backend or ("aot_eager" if args.smoke else "inductor")
    args.time_limit = args.time_limit or (420.0 if args.quick else float("inf"))
    args.max_batch = args.max_batch or (2 * SMOKE_BATCH if args.smoke else 4096)
    args.loader_batches = args.loader_batches or (2 if args.smoke else 200)

    missing = missing_packages()
    if missing:
        print(
            f"gpu_steps: missing Python packages: {', '.join(missing)}; carry their wheels "
            "(see /work/.library/device/README.md or pip download) and put them on PYTHONPATH",
            file=sys.stderr,
        )
        return 2
    import torch  # noqa: PLC0415

    device = torch.device(args.device or ("cpu" if args.smoke else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_steps: no CUDA device visible (torch.cuda.is_available() is False); use --smoke for a CPU "
              "check",
              file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
    torch.backends.cudnn.allow_tf32 = False
    args.device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    args.t0 = time.perf_counter()
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
            f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
            "torch": torch.__version__, "python": platform.python_version(), "host": platform.node(),
            "smoke": args.smoke, "quick": args.quick, "steps": args.steps, "warmup": args.warmup,
            "tf32": False,
            "executions": args.executions, "backend": args.backend, "peak_tflops": PEAK_TFLOPS,
            "loadavg_start": os.getloadavg()[0]}
    rows, t0 = [], time.perf_counter()
    for name, yaml_name in PAPER_MODELS:
        if args.only and name not in args.only:
            continue
        print(f"[{time.perf_counter() - t0:6.1f} s] {name} ({yaml_name})", flush=True)
        try:
            row = measure(name, yaml_name, args, device)
        except Exception as err:  # one model failing must not lose the others' numbers
            row = {"model": name, "config": f"experiments/{yaml_name}",
                   "error": f"{type(err).__name__}: {err}"}
        print("   " + json.dumps({k: row.get(k) for k in ("batch", "max_batch", "gflop_per_sample", "error")
                                  if k in row}), flush=True)
        rows.append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    meta["total_s"] = round(time.perf_counter() - t0, 1)
    meta["loadavg_end"] = os.getloadavg()[0]
    from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, {"meta": meta, "models": rows})
    print(f"wrote {args.out} ({meta['total_s']} s)")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
