"""What the suite costs on top of the model: ``biosig fit`` against a bare loop and braindecode's classifier.

On the APAVA stand-in's cached windows (16 x 256, 2 classes, the fixed subject split), for EEGNet and
BioFormer (``experiments/bioformer_apava.yaml``, with ``bioformer/baselines/eegnet.yaml`` for EEGNet),
``--epochs`` epochs, each of training followed by one validation pass, three ways, taking turns round
by round:

* ``biosig_fit``: ``biosig fit`` in this process (``BiosigCLI(args=["fit", ...])``: config parsing,
  Trainer, sanity check, the epochs with their validation metrics, CSV logging, best and last
  checkpoints, run folder), ``--test_after_fit=false``.
* ``bare``: the same task's backbone in a plain PyTorch loop over the same windows, already
  normalised and held as tensors: shuffled batches of the same size, cross-entropy, backward,
  the YAML's gradient clip (4.0), the recipe's optimiser (Adam 1e-4), then a ``no_grad`` pass
  over the validation windows computing loss and accuracy.
* ``braindecode``: braindecode's ``EEGClassifier`` (skorch) around the same backbone, same
  windows as numpy arrays, ``train_split=predefined_split(validation windows)``, same batch,
  optimiser, learning rate and gradient clip; ``iterator_train__drop_last=False`` (braindecode's
  default drops the last incomplete training batch, which the other two train on).

Every way starts from the same initial weights and uses ``--threads`` torch threads. Each way's
wall time is split into its **start-up** (from the call to the first training batch's epoch:
for ``biosig fit`` config parsing, instantiation, Trainer set-up and the sanity check; for skorch
its initialisation), its **epochs** (one training epoch + its validation + what runs at the
epoch's end: metrics, logging, checkpoints; timed from one epoch's start to the next, the last to
the end of the fit) and its tear-down. The steady per-epoch figure is the median over epochs
after the first (the first pays one-off allocations in every way). Ratios are of medians over
``--rounds``.

Also measured: ``import_s``, a fresh interpreter importing what each way needs (the process
start-up a console command pays once); ``parser_startup``, building ``biosig fit``'s parser.
With ``--profile`` one more ``biosig fit`` of each model runs with cProfile switched on for one
steady epoch and, separately, for its start-up; own time of the functions is grouped by the
package file they are in: model compute, data loading, metrics, logging, checkpointing, config
parsing and the rest.

    python benchmarks/performance/framework_overhead.py --out benchmarks/results/framework_overhead.json
    python benchmarks/performance/framework_overhead.py --quick          # a few windows, one round
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import datetime as dt
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.nn import functional as F

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments"
MODELS = {
    "EEGNet": [EXP / "bioformer_apava.yaml", EXP / "bioformer" / "baselines" / "eegnet.yaml"],
    "BioFormer": [EXP / "bioformer_apava.yaml"],
}

#: cProfile own-time buckets: first matching substring of the function's file path wins
BUCKETS = [
    ("metrics", ("torchmetrics", "biosig_lightning/metrics.py")),
    ("checkpointing", ("checkpoint", "cloud_io", "torch/serialization.py", "atomic_io")),
    ("logging",
     ("loggers", "logger_connector", "csv_history", "lightning/pytorch/core/module.py", "result.py")),
    ("data_loading", ("torch/utils/data", "biosig_lightning/data", "numpy", "fetchers")),
    ("config_parsing", ("jsonargparse", "yaml", "docstring", "typeshed", "argparse", "inspect", "typing")),
    ("model_compute", ("torch/nn", "torch/autograd", "torch/_tensor", "torch/optim", "torch/functional",
                       "biosig_lightning/models", "built-in method torch", "<built-in method", "torch/_C",
                       "torch._C",
                       "run_backward")),
]


def _configs(name: str) -> list[str]:
    out: list[str] = []
    for cfg in MODELS[name]:
        out += ["--config", str(cfg)]
    return out + ["--config", str(EXP / "overlays" / "synthetic.yaml")]


def _data_args(windows: int) -> list[str]:
    return [f"--data.init_args.synthetic_options={{windows_per_subject: {windows}}}"]


def build_task(name: str, windows: int) -> tuple[Any, Any, float | None]:
    """The task and set-up DataModule of ``name`` as ``biosig fit`` would build them (and the YAML's clip)."""
    from biosig_lightning.runs.biosig_cli import BiosigCLI  # noqa: PLC0415

    cli = BiosigCLI(args=[*_configs(name), *_data_args(windows), "--trainer.logger=false",
                          "--trainer.enable_progress_bar=false"], run=False, save_config_callback=None)
    cli.datamodule.setup("fit")
    return cli.model, cli.datamodule, cli.trainer.gradient_clip_val


def split_tensors(dm: Any, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All windows of ``split`` as the DataModule serves them (normalised), and their labels."""
    ds = dm.datasets[split]
    batch = ds.__getitems__(list(range(len(ds))))
    return batch["x"], batch["y"]


class EpochClock(Callback):
    """Times each training epoch's start and the fit's end; optionally profiles one epoch and the start-up."""

    def __init__(self, t0: float, profile_epoch: int | None = None) -> None:
        self.t0 = t0
        self.starts: list[float] = []
        self.cpu_starts: list[float] = []
        self.end = self.cpu_end = 0.0
        self.profile_epoch = profile_epoch
        self.epoch_profile: cProfile.Profile | None = None
        self.startup_profile: cProfile.Profile | None = None
        if profile_epoch is not None:
            self.startup_profile = cProfile.Profile()
            self.startup_profile.enable()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        now = time.perf_counter()
        epoch = len(self.starts)
        if epoch == 0 and self.startup_profile is not None:
            self.startup_profile.disable()
        if self.epoch_profile is not None and epoch == (self.profile_epoch or 0) + 1:
            self.epoch_profile.disable()
        if self.profile_epoch is not None and epoch == self.profile_epoch:
            self.epoch_profile = cProfile.Profile()
            self.epoch_profile.enable()
        self.starts.append(now)
        self.cpu_starts.append(time.process_time())

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.end, self.cpu_end = time.perf_counter(), time.process_time()
        if self.epoch_profile is not None and len(self.starts) == (self.profile_epoch or 0) + 1:
            self.epoch_profile.disable()

    def epochs(self) -> list[float]:
        return _diffs([*self.starts, self.end])

    def cpu_epochs(self) -> list[float]:
        return _diffs([*self.cpu_starts, self.cpu_end])


def _diffs(marks: list[float]) -> list[float]:
    return [b - a for a, b in zip(marks[:-1], marks[1:], strict=True)]


def run_biosig_fit(name: str, windows: int, seed: int, save_dir: Path, epochs: int,
                   profile_epoch: int | None = None) -> tuple[dict[str, Any], EpochClock]:
    from biosig_lightning.runs.biosig_cli import BiosigCLI  # noqa: PLC0415

    t0 = time.perf_counter()
    clock = EpochClock(t0, profile_epoch)
    original = BiosigCLI.instantiate_trainer

    def with_clock(self: Any, **kwargs: Any) -> Any:
        trainer = original(self, **kwargs)
        trainer.callbacks.append(clock)
        return trainer

    BiosigCLI.instantiate_trainer = with_clock  # type: ignore[method-assign]
    try:
        BiosigCLI(args=["fit", *_configs(name), *_data_args(windows), f"--seed_everything={seed}",
                        f"--trainer.max_epochs={epochs}", "--trainer.enable_progress_bar=false",
                        "--trainer.enable_model_summary=false", "--test_after_fit=false",
                        f"--run.save_dir={save_dir}"])
    finally:
        BiosigCLI.instantiate_trainer = original  # type: ignore[method-assign]
    total = time.perf_counter() - t0
    return _split(total, clock.starts[0] - t0, clock.epochs(), clock.cpu_epochs()), clock


def _split(total: float, startup: float, epochs: list[float], cpu_epochs: list[float]) -> dict[str, Any]:
    return {"total_s": total, "startup_s": startup, "epoch_s": epochs,
            "teardown_s": total - startup - sum(epochs), "epoch_cpu_s": cpu_epochs}


def run_bare(backbone: nn.Module, data: dict[str, torch.Tensor], batch: int, eval_batch: int,
             clip: float | None,
             lr: float, seed: int, epochs: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    opt = torch.optim.Adam(backbone.parameters(), lr=lr)
    x, y = data["x_train"], data["y_train"]
    startup = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(epochs):
        e0, c0 = time.perf_counter(), time.process_time()
        backbone.train()
        for idx in torch.randperm(len(y)).split(batch):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(backbone(x[idx]), y[idx])
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(backbone.parameters(), clip)
            opt.step()
        backbone.eval()
        total, correct = 0.0, 0
        with torch.no_grad():
            for xb, yb in zip(data["x_val"].split(eval_batch), data["y_val"].split(eval_batch), strict=True):
                logits = backbone(xb)
                total += float(F.cross_entropy(logits, yb, reduction="sum"))
                correct += int((logits.argmax(-1) == yb).sum())
        _ = (total / len(data["y_val"]), correct / len(data["y_val"]))
        times.append(time.perf_counter() - e0)
        cpu.append(time.process_time() - c0)
    return _split(time.perf_counter() - t0, startup, times, cpu)


def run_braindecode(backbone: nn.Module, data: dict[str, torch.Tensor], batch: int, eval_batch: int,
                    clip: float | None, lr: float, seed: int, epochs: int) -> dict[str, Any]:
    from braindecode import EEGClassifier  # noqa: PLC0415
    from skorch.callbacks import Callback as SkorchCallback  # noqa: PLC0415
    from skorch.callbacks import GradientNormClipping  # noqa: PLC0415
    from skorch.dataset import Dataset  # noqa: PLC0415
    from skorch.helper import predefined_split  # noqa: PLC0415

    starts: list[float] = []
    cpu_starts: list[float] = []

    class Starts(SkorchCallback):
        def on_epoch_begin(self, net: Any, **kwargs: Any) -> None:
            starts.append(time.perf_counter())
            cpu_starts.append(time.process_time())

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    callbacks: list[Any] = [("starts", Starts())] + ([("clip", GradientNormClipping(clip))] if clip else [])
    valid = Dataset(data["x_val"].numpy(), data["y_val"].numpy())
    clf = EEGClassifier(backbone, criterion=nn.CrossEntropyLoss, optimizer=torch.optim.Adam, optimizer__lr=lr,
                        batch_size=batch, max_epochs=epochs, train_split=predefined_split(valid),
                        callbacks=callbacks,
                        iterator_train__shuffle=True, iterator_train__drop_last=False,
                        iterator_valid__batch_size=eval_batch, device="cpu",
                        classes=list(range(int(data["y_train"].max()) + 1)), verbose=0)
    clf.fit(data["x_train"].numpy(), data["y_train"].numpy())
    end, cpu_end = time.perf_counter(), time.process_time()
    return _split(end - t0, starts[0] - t0, _diffs([*starts, end]), _diffs([*cpu_starts, cpu_end]))


def import_seconds(rounds: int) -> dict[str, Any]:
    """A fresh interpreter importing what each way needs (what a console command pays before it starts)."""
    code = {
        "biosig_fit": "from biosig_lightning.runs.biosig_cli import BiosigCLI",
        "bare": "import torch",
        "braindecode": "import torch, braindecode, skorch; from braindecode import EEGClassifier",
    }
    times: dict[str, list[float]] = {k: [] for k in code}
    for _ in range(rounds):
        for way, line in code.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", line], check=True, cwd=REPO)
            times[way].append(time.perf_counter() - t0)
    return {"seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
            "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()}}


class _Parsed(Exception):
    pass


def parser_startup(name: str, rounds: int) -> dict[str, Any]:
    """Seconds to build ``biosig fit``'s parsers: the fit parser alone (now) against all four
    subcommands' parsers (LightningCLI's default, what ``biosig fit`` built before), in turns."""
    from biosig_lightning.runs.biosig_cli import BiosigCLI  # noqa: PLC0415

    def stop(self: Any, parser: Any, args: Any) -> None:
        raise _Parsed

    original_parse, original_sub = BiosigCLI.parse_arguments, BiosigCLI.subcommands
    times: dict[str, list[float]] = {"fit_parser_only": [], "all_four_parsers": []}
    BiosigCLI.parse_arguments = stop  # type: ignore[method-assign]
    try:
        for _ in range(rounds):
            for way in times:
                if way == "all_four_parsers":
                    BiosigCLI.subcommands = staticmethod(LightningCLI_subcommands())  # type: ignore[method-assign]
                t0 = time.perf_counter()
                try:
                    BiosigCLI(args=["fit", *_configs(name)])
                except _Parsed:
                    pass
                times[way].append(time.perf_counter() - t0)
                BiosigCLI.subcommands = original_sub  # type: ignore[method-assign]
    finally:
        BiosigCLI.parse_arguments, BiosigCLI.subcommands = original_parse, original_sub  # type: ignore[method-assign]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "all_over_fit_only": round(med["all_four_parsers"] / med["fit_parser_only"], 2)}


def LightningCLI_subcommands() -> Any:  # noqa: N802
    from lightning.pytorch.cli import LightningCLI  # noqa: PLC0415

    return LightningCLI.subcommands


def bucket_profile(stats: pstats.Stats) -> dict[str, float]:
    """Own time (seconds) of the profiled call, summed per bucket of :data:`BUCKETS`."""
    out = {name: 0.0 for name, _ in BUCKETS}
    out["other"] = 0.0
    for (path, _line, func), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{path} {func}"
        for name, keys in BUCKETS:
            if any(k in where for k in keys):
                out[name] += tottime
                break
        else:
            out["other"] += tottime
    return {k: round(v, 3) for k, v in out.items()}


def top_functions(stats: pstats.Stats, n: int = 12) -> list[list[Any]]:
    """The ``n`` functions with the most cumulative time: ``[file:line(function), cumulative s, own s,
    calls]``."""
    rows = []
    for (path, line, func), (_cc, nc, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = path.split("site-packages/")[-1].split("perf36/")[-1]
        rows.append([f"{short}:{line}({func})", round(cumtime, 3), round(tottime, 3), nc])
    rows.sort(key=lambda r: -r[1])
    return rows[:n]


def _steady(epochs: list[float]) -> float:
    return statistics.median(epochs[1:]) if len(epochs) > 1 else epochs[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="JSON results file")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--windows", type=int, default=30, help="stand-in windows per subject (23 subjects)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per fit (the first is not steady)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three ways, taken in turn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--import-rounds", type=int, default=1, help="fresh interpreters timed per way's imports")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--profile", action="store_true",
                    help="one more biosig fit per model, profiled over its start-up and one steady epoch")
    ap.add_argument("--quick", action="store_true", help="6 windows per subject, one round")
    ap.add_argument("--startup-only", action="store_true",
                    help="only time the imports and the parser construction")
    args = ap.parse_args(argv)
    if args.quick:
        args.windows, args.rounds = 6, 1
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="biosig_overhead_"))
    os.environ["BIOSIG_CACHE"] = str(work / "cache")  # a private window cache, built once below
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv]),
            "machine": f"{platform.machine()} {platform.processor()}",
            "cpus": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
            "python": platform.python_version(), "windows_per_subject": args.windows, "epochs": args.epochs,
            "rounds": args.rounds, "loadavg_start": os.getloadavg()[0]}
    results: dict[str, Any] = {
        **({"import_s": import_seconds(args.import_rounds)} if args.import_rounds else {}),
        "parser_startup": parser_startup(args.models[0], args.rounds),
    }
    print("import_s", results.get("import_s", {}).get("median_s"), "parser_startup",
          results["parser_startup"]["median_s"], flush=True)
    ways = ("biosig_fit", "bare", "braindecode")
    try:
        for name in ([] if args.startup_only else args.models):
            task, dm, clip = build_task(name, args.windows)
            x_tr, y_tr = split_tensors(dm, "train")
            x_va, y_va = split_tensors(dm, "val")
            data = {"x_train": x_tr, "y_train": y_tr, "x_val": x_va, "y_val": y_va}
            lr = float(task.hparams.lr)
            init = copy.deepcopy(task.backbone)
            runs: dict[str, list[dict[str, Any]]] = {w: [] for w in ways}
            for r in range(args.rounds):
                runs["biosig_fit"].append(run_biosig_fit(name, args.windows, args.seed, work / f"runs{r}",
                                                         args.epochs)[0])
                runs["bare"].append(run_bare(copy.deepcopy(init), data, dm.batch_size, dm.eval_batch_size,
                                             clip, lr, args.seed, args.epochs))
                runs["braindecode"].append(run_braindecode(copy.deepcopy(init), data, dm.batch_size,
                                                           dm.eval_batch_size, clip,
                                                           lr, args.seed, args.epochs))
                print(name, r, {w: {k: (round(v, 3) if isinstance(v, float) else [round(e, 3) for e in v])
                                    for k, v in runs[w][-1].items()} for w in ways}, flush=True)
            steady = {w: statistics.median(_steady(run["epoch_s"]) for run in runs[w]) for w in ways}
            steady_cpu = {w: statistics.median(_steady(run["epoch_cpu_s"]) for run in runs[w]) for w in ways}
            startup = {
                w: statistics.median(run["startup_s"] + run["teardown_s"] for run in runs[w]) for w in ways
            }
            total = {w: statistics.median(run["total_s"] for run in runs[w]) for w in ways}
            row: dict[str, Any] = {
                "train_windows": len(y_tr),
                "val_windows": len(y_va),
                "batch": dm.batch_size,
                "params": sum(p.numel() for p in init.parameters()),
                "runs": {
                    w: [
                        {
                            k: (round(v, 3) if isinstance(v, float) else [round(e, 3) for e in v])
                            for k, v in run.items()
                        }
                        for run in runs[w]
                    ]
                    for w in ways
                },
                "median_steady_epoch_s": {w: round(v, 3) for w, v in steady.items()},
                "median_steady_epoch_cpu_s": {w: round(v, 3) for w, v in steady_cpu.items()},
                "steady_epoch_cpu_fit_over_bare": round(steady_cpu["biosig_fit"] / steady_cpu["bare"], 3),
                "steady_epoch_cpu_fit_over_braindecode": round(
                    steady_cpu["biosig_fit"] / steady_cpu["braindecode"], 3
                ),
                "median_startup_plus_teardown_s": {w: round(v, 3) for w, v in startup.items()},
                "median_total_s": {w: round(v, 3) for w, v in total.items()},
                "steady_epoch_fit_over_bare": round(steady["biosig_fit"] / steady["bare"], 3),
                "steady_epoch_fit_over_braindecode": round(steady["biosig_fit"] / steady["braindecode"], 3),
                "fit_startup_in_steady_epochs": round(startup["biosig_fit"] / steady["biosig_fit"], 2),
                "total_fit_over_bare": round(total["biosig_fit"] / total["bare"], 3),
                "total_fit_over_braindecode": round(total["biosig_fit"] / total["braindecode"], 3),
            }
            if args.profile:
                timing, clock = run_biosig_fit(name, args.windows, args.seed, work / "runs_profiled",
                                               max(args.epochs, 2), profile_epoch=1)
                prof: dict[str, Any] = {"timing_under_profiler": {k: (round(v, 3) if isinstance(v, float) else
                                                                      [round(e, 3) for e in v])
                                                                  for k, v in timing.items()}}
                for part, p in (("startup", clock.startup_profile), ("steady_epoch", clock.epoch_profile)):
                    if p is not None:
                        stats = pstats.Stats(p)
                        prof[part] = {"own_time_s": bucket_profile(stats),
                                      "top_cumulative": top_functions(stats)}
                row["profile_biosig_fit"] = prof
            results[name] = row
            print(name, {k: row[k] for k in ("median_steady_epoch_s", "median_startup_plus_teardown_s",
                                              "steady_epoch_fit_over_bare",
                                             "steady_epoch_fit_over_braindecode",
                                              "steady_epoch_cpu_fit_over_bare",
                                              "fit_startup_in_steady_epochs")}, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["loadavg_end"] = os.getloadavg()[0]
    out = {"meta": meta, "models": results}
    if args.out:
        from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
