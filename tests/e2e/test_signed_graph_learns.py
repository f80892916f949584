"""The denoiser pair learns: on the signed-EEG stand-in and on a TUAB-layout EDF corpus, held-out subjects.

Learning here is what the recipe does: each denoiser's polarities are estimated from its class's training
windows (eq. 5) and its parameters take a few contrastive steps (eq. 23). Accuracy on subjects never seen
in training must clearly beat chance; the untrained pair (per-input polarities) must not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pyedflib import highlevel

from biosig_lightning.data.corpora.tuab import CHANNELS
from biosig_lightning.data.datamodules import TUABDataModule
from biosig_lightning.data.spec import CorpusSpec
from biosig_lightning.data.splits import SplitConfig, assert_disjoint, split_subjects
from biosig_lightning.data.synthetic_epilepsy import SignedEEGStandIn
from biosig_lightning.models.signed_graph import SignedGraphClassifier
from biosig_lightning.tasks.denoiser_pair import DenoiserPairTask

SMALL = dict(n_chunks=6, n_blocks=1, conv_layers=2, conv_width=4, feature_dim=16, n_metric_candidates=2,
             metric_rank=4, krylov_dim=8)


def _z(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)


def _train(model: SignedGraphClassifier, x: torch.Tensor, y: torch.Tensor, steps: int = 6) -> None:
    task = DenoiserPairTask(model, n_outputs=2, optimizer="adam", weight_decay=0.0, scheduler="none")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    model.fit_polarity(x, y)
    model.train()
    for _ in range(steps):
        idx = torch.randperm(len(y), generator=gen)[:8]
        loss, _, _ = task.denoising_loss(x[idx], y[idx], torch.randn(x[idx].shape, generator=gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _accuracy(model: SignedGraphClassifier, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_pair_learns_on_the_standin_across_subjects() -> None:
    spec = CorpusSpec("x", tuple(f"c{i}" for i in range(8)), 100.0, 1200, ("control", "epilepsy"), "subject")
    gen = SignedEEGStandIn(spec, n_subjects=12, windows_per_subject=6, seed=3, class1_fraction=0.5)
    blocks = list(gen.iter_blocks())
    labels = {b.subject: int(b.y[0]) for b in blocks}
    split = split_subjects(sorted(labels),
                           SplitConfig(strategy="ratio", ratios=(0.5, 0.1, 0.4), seed=0), labels)
    assert_disjoint(split)
    pick = {s: [b for b in blocks if b.subject in split[s]] for s in ("train", "test")}
    xtr = _z(torch.tensor(np.concatenate([b.x for b in pick["train"]])))
    ytr = torch.tensor(np.concatenate([b.y for b in pick["train"]]))
    xte = _z(torch.tensor(np.concatenate([b.x for b in pick["test"]])))
    yte = torch.tensor(np.concatenate([b.y for b in pick["test"]]))
    assert 0.3 < float(yte.float().mean()) < 0.7
    torch.manual_seed(0)
    model = SignedGraphClassifier(8, 2, 1200, 100.0, **SMALL).eval()
    untrained = _accuracy(model, xte, yte)
    _train(model, xtr, ytr)
    learned = _accuracy(model, xte, yte)
    assert learned >= 0.75, (untrained, learned)
    assert learned > untrained + 0.15, (untrained, learned)


def _write_tuab(root: Path, n_patients: int = 40) -> None:
    fs, seconds = 250.0, 24
    spec = CorpusSpec("tuab", tuple(CHANNELS), fs, int(fs * seconds), ("normal", "abnormal"), "window")
    gen = SignedEEGStandIn(spec, n_subjects=n_patients, windows_per_subject=1, seed=5, class1_fraction=0.5)
    for block in gen.iter_blocks():
        cls = ("normal", "abnormal")[int(block.y[0])]
        code = "aaaa" + "".join(chr(ord("a") + (block.subject // 26 ** k) % 26) for k in (3, 2, 1, 0))
        path = root / "edf" / "train" / cls / "01_tcp_ar" / f"{code}_s001_t000.edf"
        path.parent.mkdir(parents=True, exist_ok=True)
        sig = block.x[0].astype(np.float64)
        headers = [highlevel.make_signal_header(f"EEG {ch}-REF", sample_frequency=fs, physical_min=-2000,
                                                physical_max=2000) for ch in CHANNELS]
        assert highlevel.write_edf(str(path), list(sig), headers)


def test_pair_learns_on_a_tuab_layout_edf_corpus(tmp_path: Path) -> None:
    _write_tuab(tmp_path)
    dm = TUABDataModule(root=str(tmp_path), protocol="ratio", window_seconds=12.0, sfreq=100.0,
                        windows_per_recording=2, offset_seconds=0.0, cache_dir=str(tmp_path / "cache"),
                        batch_size=64, normalization="window", split_seed=1)
    dm.setup()
    assert_disjoint(dm.subjects)  # patient-disjoint
    assert not set(dm.subjects["test"]) & set(dm.subjects["train"])

    def stack(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        batches = list(dm._loader(split, train=False))
        return torch.cat([b["x"] for b in batches]), torch.cat([b["y"] for b in batches])

    xtr, ytr = stack("train")
    xte, yte = stack("test")
    assert xtr.shape[1:] == (21, 1200) and 0.25 < float(yte.float().mean()) < 0.75
    torch.manual_seed(0)
    model = SignedGraphClassifier(21, 2, 1200, 100.0, **SMALL).eval()
    untrained = _accuracy(model, xte, yte)
    _train(model, xtr, ytr, steps=15)
    learned = _accuracy(model, xte, yte)
    assert learned >= 0.75, (untrained, learned)
    assert learned > untrained + 0.15, (untrained, learned)
