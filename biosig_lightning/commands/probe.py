"""``biosig probe RUN_DIR``: subject separability of a run's frozen features
(:mod:`biosig_lightning.analysis.subject_probe`)."""

from __future__ import annotations

from pathlib import Path

from biosig_lightning.analysis import subject_probe
from biosig_lightning.analysis.fbd import AnalysisError, resolve_device
from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.commands._shared import add_loading_options, run_dir_parser
from biosig_lightning.runs import load_run


def run(argv: list[str]) -> None:
    """``biosig probe RUN_DIR ...``: write ``probe.json`` and ``probe.png``."""
    parser = run_dir_parser("biosig probe", subject_probe.__doc__)
    parser.add_argument("--epochs", type=int, default=100, help="probe training epochs")
    parser.add_argument("--hidden", type=int, default=256, help="probe hidden width")
    parser.add_argument("--lr", type=float, default=1e-3, help="probe learning rate (AdamW)")
    parser.add_argument("--test-fraction", type=float, default=0.3,
                        help="share of each subject's windows tested")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-windows", type=int, default=3000, help="cap for k-means / silhouette / PCA")
    add_loading_options(parser, batch_help="feature extraction batch size", device=False)
    parser.add_argument("--probe-batch-size", type=int, default=64, help="probe training mini-batch size")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    if args.max_windows < 3:
        raise AnalysisError(f"--max-windows must be >= 3, got {args.max_windows}")
    loaded = load_run(args.run_dir, checkpoint=args.checkpoint)
    report, view = subject_probe.compute_probe(
        loaded, args.split, epochs=args.epochs, hidden=args.hidden, lr=args.lr,
        test_fraction=args.test_fraction,
        seed=args.seed, max_windows=args.max_windows, batch_size=args.batch_size,
        probe_batch_size=args.probe_batch_size, device=resolve_device(args.device))
    out = Path(args.out) if args.out else Path(args.run_dir) / "analysis"
    atomic_write_json(out / "probe.json", report)
    subject_probe.plot(out / "probe.png", report, view)
    p, c, s = report["probe"], report["clustering"], report["silhouette"]

    def _fmt(score: float | None) -> str:
        # a silhouette is undefined (None) when a grouping has a single group
        return "n/a" if score is None else f"{score:.4f}"

    print(f"  subject F1 {p['subject_f1']:.4f}  acc {p['subject_acc']:.4f}  NMI {c['nmi']:.4f}  AMI "
          f"{c['ami']:.4f}  "
          f"silhouette subject {_fmt(s['subject']['score'])}  label {_fmt(s['label']['score'])}")
    print(f"probe: {out / 'probe.json'}")
