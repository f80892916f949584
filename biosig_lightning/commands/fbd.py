"""``biosig fbd RUN_DIR``: BioFormer's frequency-band discriminability of a run
(:mod:`biosig_lightning.analysis.fbd`)."""

from __future__ import annotations

from pathlib import Path

from biosig_lightning.analysis import fbd
from biosig_lightning.analysis.fbd import resolve_device
from biosig_lightning.atomic_io import atomic_write_json
from biosig_lightning.commands._shared import add_loading_options, run_dir_parser
from biosig_lightning.runs import load_run


def run(argv: list[str]) -> None:
    """``biosig fbd RUN_DIR ...``: write ``fbd.json`` and ``fbd.png`` (see
    :mod:`biosig_lightning.analysis.fbd`)."""
    parser = run_dir_parser("biosig fbd", fbd.__doc__)
    parser.add_argument("--bin-hz", type=float, default=2.0, help="frequency bin width in Hz (paper: 2)")
    parser.add_argument("--layer", default="final", choices=fbd.LAYERS,
                        help="final: last hybrid layer (forward_tokens); scln: after the final norm; input: "
                             "input only")
    parser.add_argument("--bands", default=None,
                        help="band summary, NAME:LOW-HIGH,... (default: low:0-20 + EEG bands)")
    parser.add_argument("--demean", action="store_true", help="remove each channel's mean before the FFT")
    add_loading_options(parser)
    args = parser.parse_args(argv)
    bands, device = (
        fbd.parse_bands(args.bands),
        resolve_device(args.device),
    )  # bad flags fail before any loading
    loaded = load_run(args.run_dir, checkpoint=args.checkpoint)
    report = fbd.compute_fbd(loaded, args.split, args.layer, args.bin_hz, bands,
                             args.demean, args.batch_size, device)
    out = Path(args.out) if args.out else Path(args.run_dir) / "analysis"
    atomic_write_json(out / "fbd.json", report)
    spec = getattr(loaded.datamodule, "spec", None)
    fbd.plot(out / "fbd.png", report, list(getattr(spec, "classes", ())))
    for name, cmp_ in report.get("comparison", {}).items():
        print(f"  {name:6s} FBD input {cmp_['input']:.3f} -> embedding {cmp_['embedding']:.3f}")
    print(f"fbd: {out / 'fbd.json'}")
