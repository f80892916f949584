"""SPDTransNet learns sleep stages through the whole SPD pipeline: on a MASS SS3 corpus written in the
real layout (PSG + Base EDF+) and on the MASS stand-in, clearly above the majority class on unseen subjects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score

from biosig_lightning.data.datamodules import MASSSS3DataModule
from biosig_lightning.data.splits import SplitConfig
from biosig_lightning.models.spdtransnet import SPDTransNet
from tests.mass_fixture import write_corpus

SMALL = dict(d_model=28, tokens_per_epoch=7, intra_heads=2, intra_layers=1, inter_heads=2, inter_layers=1,
             d_ff=36, fc_width=28, dropout=0.0)


def _fit_and_score(dm: MASSSS3DataModule, epochs: int = 5) -> tuple[float, float]:
    dm.setup()
    torch.manual_seed(0)
    model = SPDTransNet(n_chans=dm.n_chans, n_outputs=dm.n_outputs, n_times=dm.n_times, sfreq=dm.sfreq, **SMALL)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        model.train()
        for batch in dm.train_dataloader():
            loss = F.cross_entropy(model(batch["x"]), batch["y"], label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    ys, preds = [], []
    with torch.no_grad():
        for batch in dm.test_dataloader():
            preds.append(model(batch["x"]).argmax(-1))
            ys.append(batch["y"])
    y, p = torch.cat(ys).numpy(), torch.cat(preds).numpy()
    train_y = np.asarray(dm.cache.labels[dm.cache.indices_for_subjects(dm.subjects["train"])])
    majority = np.full_like(y, np.bincount(train_y).argmax())
    return f1_score(y, p, average="macro"), f1_score(y, majority, average="macro")


def test_learns_on_a_mass_layout_corpus(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ss3", [1, 2, 3, 4], n_epochs=30, seed=4)
    dm = MASSSS3DataModule(root=str(tmp_path / "ss3"), context=3, trim=0, test_trim=0, batch_size=16,
                           split=SplitConfig(strategy="fixed", train=[1, 2], val=[3], test=[4]),
                           cache_dir=str(tmp_path / "cache"), seed=0)
    f1, baseline = _fit_and_score(dm, epochs=10)
    assert f1 > baseline + 0.4, (f1, baseline)


def test_learns_on_the_mass_stand_in(tmp_path: Path) -> None:
    dm = MASSSS3DataModule(synthetic=True, synthetic_options={"n_subjects": 4, "windows_per_subject": 40},
                           context=3, trim=0, test_trim=0, batch_size=16,
                           split=SplitConfig(strategy="fixed", train=[1, 2], val=[3], test=[4]),
                           cache_dir=str(tmp_path / "cache"), seed=0)
    f1, baseline = _fit_and_score(dm, epochs=8)
    assert f1 > baseline + 0.3, (f1, baseline)
