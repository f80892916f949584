"""Write a Medformer-family synthetic stand-in to disk in the Medformer npy layout.

So that another code base (the BioFormer or Medformer authors' ``--root_path``) and ours
(``--data.init_args.root``) train on the very same windows::

    python benchmarks/parity/write_medformer_standin.py /tmp/apava100 --corpus apava \\
        --options '{windows_per_subject: 100}'

Writes ``<out>/Feature/feature_<ID>.npy`` (one ``(windows, T, C)`` float32 array per subject,
IDs zero-padded as the real corpus: ``%02d`` APAVA/ADFTD, ``%03d`` PTB, ``%05d`` PTB-XL) and
``<out>/Label/label.npy`` (``(subjects, 2)``: class, subject ID), the layout
:class:`~biosig_lightning.data.corpora.medformer.MedformerReader` reads. The windows are the
stand-in's own (``SYNTHETIC_DEFAULTS`` of the corpus, updated by ``--options``), untouched:
normalisation stays the loaders' job.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from biosig_lightning.data.corpora.medformer import SPECS, SYNTHETIC_DEFAULTS
from biosig_lightning.data.datamodules.medformer import synthetic_options
from biosig_lightning.data.synthetic import SyntheticReader

_ID_WIDTH = {"apava": 2, "adftd": 2, "ptb": 3, "ptbxl": 5}


def write_standin(out: Path, corpus: str, options: dict | None = None) -> dict[str, int]:
    """Write the stand-in of ``corpus`` under ``out``; returns ``{subject: class}``."""
    reader = SyntheticReader(SPECS[corpus],
                             **{**synthetic_options(SYNTHETIC_DEFAULTS[corpus]), **(options or {})})
    (out / "Feature").mkdir(parents=True, exist_ok=True)
    (out / "Label").mkdir(parents=True, exist_ok=True)
    labels: dict[int, int] = {}
    for subject in range(1, reader.n_subjects + 1):
        blocks = reader.subject_blocks(subject)
        x = np.concatenate([b.x for b in blocks]).transpose(0, 2, 1)  # (n, C, T) -> Medformer's (n, T, C)
        np.save(out / "Feature" / f"feature_{subject:0{_ID_WIDTH[corpus]}d}.npy", np.ascontiguousarray(x))
        labels[subject] = int(blocks[0].y[0])
    np.save(out / "Label" / "label.npy", np.array([[y, s] for s, y in labels.items()], dtype=np.int64))
    return labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--corpus", default="apava", choices=sorted(_ID_WIDTH))
    ap.add_argument("--options", default="{}", help="YAML mapping of SyntheticReader overrides")
    args = ap.parse_args()
    labels = write_standin(args.out, args.corpus, yaml.safe_load(args.options))
    print(f"wrote {len(labels)} subjects to {args.out}; classes {labels}")


if __name__ == "__main__":
    main()
