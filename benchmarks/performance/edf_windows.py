"""Raw EDF files to training windows: the suite's window cache against MNE + braindecode.

A Sleep-EDF Expanded (Sleep Cassette) tree in its real layout and format is written with pyedflib
(``biosig_lightning/testing/sleep_edf.py``: per night a PSG with two 100 Hz EEG channels, a 100 Hz EOG and
four
1 Hz channels, and an EDF+ hypnogram with merged stage runs, a movement and an unscored epoch, and an
unscored tail past the PSG end). Then, each in a fresh Python process (so the peak resident memory
is its own), with the imports done before the clock starts:

* ``biosig``: ``SleepEDFDataModule(root=...).setup("fit")`` on an empty cache folder: reading every
  night (the two EEG channels), cutting the 30 s epochs, writing the memory-mapped window cache,
  the subject split and the normalisation statistics.
* ``mne_braindecode``: what a braindecode user writes for the same windows: per night
  ``mne.io.read_raw_edf`` (preload), the hypnogram with ``mne.read_annotations`` /
  ``set_annotations``, the two EEG channels picked, the night cropped by the suite's wake rule
  (``crop_wake_minutes`` before the first and after the last sleep epoch), then braindecode's
  ``create_windows_from_events`` (30 s windows, stride 30 s, stage texts mapped to the five classes,
  R&K 3 and 4 to N3; ``Sleep stage ?`` and ``Movement time`` unmapped, so dropped), and every
  window as its dataset serves it (``__getitem__``), stacked into one array.

The suite's Sleep-EDF reader applies no filter and no resampling (the EEG is at 100 Hz already), so
neither does the MNE side. The script then checks that both produce the same windows: the same
number, the same labels at the same epoch starts, and the same samples (MNE in volts, scaled to the
file's microvolts, to float32 tolerance). Exit status 1 when they differ.

Loader: windows/s served from the built cache through ``SleepEDFDataModule.train_dataloader()``
(batch 64, ``num_workers=0``, the median of ``--epochs`` passes), beside the train step of the
corpus's paper model (SD-Former at the Sleep-EDF shape, batch 64) on this machine's CPU, and beside
the fastest paper model's GPU training step in ``results/gpu_steps_h200.json`` (``gpu_steps.py``;
target: the loader at least 10x that rate).

    python benchmarks/performance/edf_windows.py --out benchmarks/results/edf_windows.json
    python benchmarks/performance/edf_windows.py --nights 4 --epochs-per-night 40 --no-model-step   # quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CROP_WAKE_MINUTES = 30.0
MAPPING = {"Sleep stage W": 0, "Sleep stage 1": 1, "Sleep stage 2": 2, "Sleep stage 3": 3, "Sleep stage 4": 3,
           "Sleep stage R": 4}
EEG = ["EEG Fpz-Cz", "EEG Pz-Oz"]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_biosig(root: Path, out: Path) -> dict[str, Any]:
    """Build the window cache with the suite's DataModule; save the windows for the check."""
    from biosig_lightning.data.datamodules.sleep_edf import SleepEDFDataModule  # noqa: PLC0415

    rss0 = _rss_mib()
    t0, c0 = time.perf_counter(), time.process_time()
    dm = SleepEDFDataModule(root=str(root), crop_wake_minutes=CROP_WAKE_MINUTES, batch_size=64)
    dm.setup("fit")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    cache = dm.cache
    names = np.asarray(cache.recording_names)
    np.savez(out, x=np.asarray(cache.signals), y=np.asarray(cache.labels), start=np.asarray(cache.starts),
             recording=names[np.asarray(cache.recordings)])
    return {"seconds": wall, "cpu_seconds": cpu, "peak_rss_mib": _rss_mib(), "rss_after_imports_mib": rss0,
            "windows": int(len(cache.labels))}


def worker_mne(root: Path, out: Path) -> dict[str, Any]:
    """The same windows through MNE and braindecode's own preprocessing and windowing."""
    import mne  # noqa: PLC0415
    from braindecode.datasets import BaseConcatDataset, BaseDataset  # noqa: PLC0415
    from braindecode.preprocessing import create_windows_from_events  # noqa: PLC0415

    mne.set_log_level("ERROR")
    rss0 = _rss_mib()
    t0, c0 = time.perf_counter(), time.process_time()
    psgs = sorted(root.glob("SC4*-PSG.edf"))
    hyps = {p.name[:6]: p for p in root.glob("SC4*-Hypnogram.edf")}
    datasets = []
    for psg in psgs:
        raw = mne.io.read_raw_edf(psg, preload=True, include=EEG, verbose="ERROR")
        annots = mne.read_annotations(hyps[psg.name[:6]])
        raw.set_annotations(annots, emit_warning=False)
        sleep = [i for i, d in enumerate(raw.annotations.description) if d in MAPPING and MAPPING[d] != 0]
        first = raw.annotations.onset[sleep[0]] - CROP_WAKE_MINUTES * 60
        last = raw.annotations.onset[sleep[-1]] + raw.annotations.duration[sleep[-1]] + CROP_WAKE_MINUTES * 60
        raw.crop(tmin=max(first, 0.0), tmax=min(last, raw.times[-1]), include_tmax=True)
        datasets.append(BaseDataset(raw, {"subject": int(psg.name[3:5]), "recording": psg.name[:-4]}))
    concat = BaseConcatDataset(datasets)
    windows = create_windows_from_events(concat, trial_start_offset_samples=0, trial_stop_offset_samples=0,
                                         window_size_samples=3000, window_stride_samples=3000, preload=True,
                                         mapping=MAPPING, drop_last_window=True)
    xs, ys, starts, recs = [], [], [], []
    for ds in windows.datasets:  # each window as braindecode serves it (its __getitem__: float32 copy)
        xs.append(np.stack([ds[i][0] for i in range(len(ds))]))
        meta = ds.metadata
        ys.append(meta["target"].to_numpy())
        # i_start_in_trial counts samples of the cropped raw; first_samp is where the crop began
        starts.append((ds.raw.first_samp + meta["i_start_in_trial"].to_numpy()) / ds.raw.info["sfreq"])
        recs += [ds.description["recording"]] * len(meta)
    x = np.concatenate(xs) * np.float32(1e6)  # volts -> the file's microvolts
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.savez(out, x=x, y=np.concatenate(ys), start=np.concatenate(starts), recording=np.asarray(recs))
    return {"seconds": wall, "cpu_seconds": cpu, "peak_rss_mib": _rss_mib(), "rss_after_imports_mib": rss0,
            "windows": int(len(x))}


def run_worker(kind: str, root: Path, out: Path) -> dict[str, Any]:
    """``kind`` in a fresh interpreter; its JSON line back."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--root",
                           str(root), "--npz", str(out)],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"edf_windows: the {kind} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(ours: Path, theirs: Path) -> dict[str, Any]:
    """Same windows? Match by (recording, start); labels equal; samples to float32 tolerance."""
    a, b = np.load(ours), np.load(theirs)
    out: dict[str, Any] = {"windows_biosig": int(len(a["y"])), "windows_mne": int(len(b["y"]))}
    key_a = {(str(r), round(float(s), 3)): i for i,
             (r, s) in enumerate(zip(a["recording"], a["start"], strict=True))}
    key_b = {(str(r), round(float(s), 3)): i for i,
             (r, s) in enumerate(zip(b["recording"], b["start"], strict=True))}
    out["same_epoch_starts"] = set(key_a) == set(key_b)
    common = sorted(set(key_a) & set(key_b))
    ia = np.array([key_a[k] for k in common], dtype=np.int64)
    ib = np.array([key_b[k] for k in common], dtype=np.int64)
    out["labels_equal"] = bool(len(common) and np.array_equal(a["y"][ia], b["y"][ib]))
    xa, xb = a["x"][ia].astype(np.float64), b["x"][ib].astype(np.float64)
    diff = np.abs(xa - xb)
    out["max_abs_diff_uv"] = float(diff.max()) if diff.size else None
    out["max_rel_diff"] = float((diff / np.maximum(np.abs(xa), 1.0)).max()) if diff.size else None
    out["samples_equal_to_float32"] = bool(diff.size and np.allclose(xa, xb, rtol=1e-5, atol=1e-3))
    out["same_windows"] = bool(
        out["same_epoch_starts"]
        and out["labels_equal"]
        and out["samples_equal_to_float32"]
        and out["windows_biosig"] == out["windows_mne"]
    )
    return out


def loader_and_step(root: Path, cache: Path, epochs: int, model_step: bool) -> dict[str, Any]:
    """Windows/s from the built cache through the DataModule's loader; SD-Former's CPU step beside it."""
    import torch  # noqa: PLC0415

    from biosig_lightning.data.datamodules.sleep_edf import SleepEDFDataModule  # noqa: PLC0415

    os.environ["BIOSIG_CACHE"] = str(cache)
    dm = SleepEDFDataModule(root=str(root), crop_wake_minutes=CROP_WAKE_MINUTES, batch_size=64)
    dm.setup("fit")
    rates = []
    for _ in range(epochs):
        n, t0 = 0, time.perf_counter()
        for batch in dm.train_dataloader():
            n += int(batch["y"].shape[0])
        rates.append(n / (time.perf_counter() - t0))
    out: dict[str, Any] = {"loader_windows_per_s": round(statistics.median(rates), 1),
                           "loader_epochs": epochs,
                           "train_windows_per_epoch": n}
    if model_step:
        from biosig_lightning.models.sdformer import SDFormer  # noqa: PLC0415

        torch.manual_seed(0)
        model = SDFormer(n_chans=2, n_outputs=5, n_times=3000, sfreq=100.0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        batch = next(iter(dm.train_dataloader()))
        times = []
        for i in range(3):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
            opt.step()
            if i:
                times.append(time.perf_counter() - t0)
        sps = int(batch["y"].shape[0]) / statistics.median(times)
        out["sdformer_cpu_step"] = {"batch": int(batch["y"].shape[0]), "samples_per_s": round(sps, 2),
                                    "threads": torch.get_num_threads(),
                                    "device": "cpu (no GPU step measured here)"}
        out["loader_over_cpu_step"] = round(out["loader_windows_per_s"] / sps, 1)
    out["gpu_reference"] = fastest_gpu_step(out["loader_windows_per_s"])
    return out


def fastest_gpu_step(loader_rate: float, path: Path = REPO / "benchmarks" / "results" / "gpu_steps_h200.json"
                     ) -> dict[str, Any] | None:
    """The fastest paper model's GPU training step in ``path`` (``gpu_steps.py``'s committed file), and this
    machine's loader rate over it; None when no GPU step has been measured."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    best: tuple[float, dict[str, Any], str] | None = None
    for row in data.get("models", []):
        for precision in ("float32", "bf16-mixed"):
            rate = (row.get(precision) or {}).get("samples_per_s")
            if rate and (best is None or rate > best[0]):
                best = (float(rate), row, precision)
    if best is None:
        return None
    rate, row, precision = best
    return {"file": str(path.relative_to(REPO)), "device": data.get("meta", {}).get("device"),
            "model": row["model"], "precision": precision, "gpu_samples_per_s": rate,
            "loader_over_gpu_step": round(loader_rate / rate, 1), "target": 10.0,
            # the same comparison on the GPU's own host, whose CPU served that model's windows in the same
            # file
            "gpu_host_loader_windows_per_s": (row.get("loader") or {}).get("windows_per_s"),
            "gpu_host_loader_over_step": row[precision].get("loader_over_step"),
            "note": "loader_over_gpu_step: this machine's CPU (num_workers=0, shared) serving Sleep-EDF "
                    "windows "
                    "(2 x 3000, SD-Former's input) over the GPU file's step rate; gpu_host_loader_over_step: "
                    "the "
                    "loader on the GPU's own host over the same step, from the GPU file"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--nights", type=int, default=20, help="recordings (two nights per subject)")
    ap.add_argument("--epochs-per-night", type=int, default=120, help="30 s scored epochs per night")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the two pipelines, taken in turn")
    ap.add_argument("--loader-epochs", type=int, default=5)
    ap.add_argument("--no-model-step", action="store_true")
    ap.add_argument("--worker", choices=["biosig", "mne"], help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--npz", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = (worker_biosig if args.worker == "biosig" else worker_mne)(args.root, args.npz)
        print(json.dumps(res))
        return 0

    from biosig_lightning.testing.sleep_edf import write_corpus  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="biosig_edf_"))
    try:
        root = work / "sleep-cassette"
        nights = [(s, n) for s in range((args.nights + 1) // 2) for n in (1, 2)][: args.nights]
        t0 = time.perf_counter()
        write_corpus(root, nights, args.epochs_per_night, seed=0)
        write_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in root.iterdir())
        meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(["python", *sys.argv]),
                "machine": f"{platform.machine()} {platform.processor()}", "cpus": os.cpu_count(),
                "python": platform.python_version(), "nights": len(nights),
                "epochs_per_night": args.epochs_per_night,
                "corpus_mib": round(size / 2**20, 1), "write_s": round(write_s, 2),
                "loadavg_start": os.getloadavg()[0]}
        runs: dict[str, list[dict[str, Any]]] = {"biosig": [], "mne": []}
        for r in range(args.rounds):
            for kind in ("biosig", "mne"):
                cache = work / f"cache_{kind}_{r}"
                os.environ["BIOSIG_CACHE"] = str(cache)  # an empty cache folder: biosig builds from the EDFs
                runs[kind].append(run_worker(kind, root, work / f"{kind}_{r}.npz"))
                print(kind, r, runs[kind][-1], flush=True)
        check = compare(work / "biosig_0.npz", work / "mne_0.npz")
        print("check", check, flush=True)
        med = {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()}
        result: dict[str, Any] = {
            "meta": meta,
            "runs": runs,
            "check": check,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "speedup_biosig_over_mne_braindecode": round(med["mne"] / med["biosig"], 2),
            # process CPU time: on a shared machine the wall clock also counts waiting for a core
            "median_cpu_s": {
                k: round(statistics.median(x["cpu_seconds"] for x in v), 3) for k, v in runs.items()
            },
            "peak_rss_mib": {k: max(x["peak_rss_mib"] for x in v) for k, v in runs.items()},
            "rss_after_imports_mib": {k: min(x["rss_after_imports_mib"] for x in v) for k, v in runs.items()},
            # what the work itself added to the process's peak (imports differ: torch + lightning vs mne +
            # braindecode)
            "peak_rss_over_imports_mib": {
                k: round(max(x["peak_rss_mib"] - x["rss_after_imports_mib"] for x in v), 1)
                for k, v in runs.items()
            },
        }
        result["loader"] = loader_and_step(root, work / "cache_biosig_0",
                                           args.loader_epochs, not args.no_model_step)
        meta["loadavg_end"] = os.getloadavg()[0]
        result["cpu_speedup_biosig_over_mne_braindecode"] = round(
            result["median_cpu_s"]["mne"] / result["median_cpu_s"]["biosig"], 2)
        print(json.dumps({k: result[k] for k in ("median_s", "speedup_biosig_over_mne_braindecode",
                                                 "median_cpu_s",
                                                 "cpu_speedup_biosig_over_mne_braindecode", "peak_rss_mib",
                                                 "peak_rss_over_imports_mib", "loader")}, indent=1))
        if args.out:
            from biosig_lightning.atomic_io import atomic_write_json  # noqa: PLC0415

            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(args.out, result)
            print(f"wrote {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if check["same_windows"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
