"""BiosignalDataModule on the synthetic corpus: shape, splits, normalisation, samplers,
sequence context, group labels, train-only augmentation, errors and pickling."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from biosig_lightning.data.datamodules.synthetic import SyntheticDataModule
from biosig_lightning.data.module import BiosignalDataModule, collate_batch
from biosig_lightning.data.samplers import ClassBalancedSampler
from biosig_lightning.data.spec import CorpusSpec, DataError
from biosig_lightning.data.splits import split_fingerprint
from biosig_lightning.data.transforms import Augment, channel_stats

SHAPE = dict(n_chans=4, n_times=64, sfreq=64.0)


def make_dm(tmp_path: Path, **kwargs) -> SyntheticDataModule:
    options = dict(SHAPE, n_subjects=10, windows_per_subject=10, batch_size=8,
                   cache_dir=str(tmp_path / "cache"))
    options.update(kwargs)
    return SyntheticDataModule(**options)


def sleep_dm(tmp_path: Path, **kwargs) -> SyntheticDataModule:
    """Window-level 5-stage corpus with two 5-window recordings per subject."""
    return make_dm(tmp_path, kind="sleep", label_level="window", n_classes=5, n_subjects=8,
                   recordings_per_subject=2, **kwargs)


def near(t: torch.Tensor, value: float, atol: float) -> bool:
    """Every entry of ``t`` within ``atol`` of ``value``."""
    return bool((t.double() - value).abs().max() <= atol)


def collect(loader) -> dict[str, torch.Tensor]:
    batches = list(loader)
    return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}


def loaders(dm: BiosignalDataModule) -> dict[str, DataLoader]:
    return {"train": dm.train_dataloader(), "val": dm.val_dataloader(), "test": dm.test_dataloader()}


# ---------------------------------------------------------------------------------- shape


def test_shape_is_known_at_construction_without_touching_disk(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, n_classes=3, label_level="window")
    assert (dm.n_chans, dm.n_outputs, dm.n_times, dm.sfreq) == (4, 3, 64, 64.0)
    assert isinstance(dm.sfreq, float)
    assert dm.ch_names == ["Fp1", "Fp2", "F7", "F3"]
    assert dm.dataset_name == "synthetic"
    assert not (tmp_path / "cache").exists()
    assert dm.subjects == {} and dm.datasets == {}
    assert "windows" not in dm.describe()
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------------- setup / splits


def test_setup_splits_subjects_disjointly_and_batches_respect_them(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, eval_batch_size=7)
    dm.setup()
    cache = dm.cache
    subj = dm.subjects
    assert set(subj) == {"train", "val", "test"}
    assert all(subj[s] for s in subj)
    assert not set(subj["train"]) & set(subj["val"])
    assert not set(subj["train"]) & set(subj["test"])
    assert not set(subj["val"]) & set(subj["test"])
    assert sorted(subj["train"] + subj["val"] + subj["test"]) == list(range(1, 11))
    # the split datasets partition the cache's windows
    all_idx = np.concatenate([dm.datasets[s].indices for s in ("train", "val", "test")])
    assert sorted(all_idx.tolist()) == list(range(len(cache)))

    for split, loader in loaders(dm).items():
        for batch in loader:
            assert set(batch) == {"x", "y", "subject", "index"}
            b = len(batch["y"])
            assert batch["x"].shape == (b, 4, 64) and batch["x"].dtype == torch.float32
            for key in ("y", "subject", "index"):
                assert batch[key].shape == (b,) and batch[key].dtype == torch.int64
            assert set(batch["subject"].tolist()) <= set(subj[split]), split
            idx = batch["index"].numpy()
            assert np.array_equal(batch["y"].numpy(), cache.labels[idx])
            assert np.array_equal(batch["subject"].numpy(), cache.subjects[idx])
            assert b <= (8 if split == "train" else 7)
        got = collect(loader)
        # every window of the split exactly once; evaluation in cache order
        assert sorted(got["index"].tolist()) == dm.datasets[split].indices.tolist()
        if split != "train":
            assert got["index"].tolist() == dm.datasets[split].indices.tolist()
            assert loader.batch_size == 7
    # a single item (DataLoader without __getitems__ support, predict hooks) is one window
    item = dm.datasets["val"][0]
    assert item["x"].shape == (4, 64) and item["y"].ndim == 0


def test_describe_records_the_split(tmp_path: Path) -> None:
    dm = make_dm(tmp_path)
    dm.setup()
    d = dm.describe()
    assert d["dataset"] == "synthetic"
    assert d["spec"]["ch_names"] == ["Fp1", "Fp2", "F7", "F3"] and d["spec"]["n_times"] == 64
    assert d["spec"]["classes"] == ["control", "patient"]
    assert d["subjects"] == dm.subjects
    assert d["windows"] == {s: len(dm.datasets[s]) for s in ("train", "val", "test")}
    assert sum(d["windows"].values()) == 100
    assert d["split_id"] == split_fingerprint(dm.subjects)
    assert Path(d["cache"]).is_dir() and Path(d["cache"]).parent == tmp_path / "cache"
    # JSON-able as a results file needs it
    assert json.loads(json.dumps(d)) == d


def test_subject_level_split_is_stratified(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, label_level="subject", n_classes=2, n_subjects=10)
    dm.setup()
    labels = dm.cache.subject_labels()
    assert sorted(set(labels.values())) == [0, 1]
    for split in ("train", "val", "test"):
        assert {labels[s] for s in dm.subjects[split]} == {0, 1}, split
        y = np.asarray(dm.cache.labels[dm.datasets[split].indices])
        assert set(y.tolist()) == {0, 1}, split


# ---------------------------------------------------------------------------------- normalisation


def test_window_normalisation(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, normalization="window")
    x = collect(dm.val_dataloader())["x"].double()
    assert near(x.mean(-1), 0.0, 1e-5)
    assert near(x.std(-1, unbiased=False), 1.0, 1e-3)


def test_channel_normalisation_uses_training_subjects_only(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, normalization="channel")
    dm.setup()
    signals = np.asarray(dm.cache.signals, dtype=np.float64)
    train = signals[dm.datasets["train"].indices]
    mean_train, std_train = train.mean(axis=(0, 2)), train.std(axis=(0, 2))
    mean_all, std_all = signals.mean(axis=(0, 2)), signals.std(axis=(0, 2))
    stats = dm.datasets["val"].stats
    assert np.allclose(stats["mean"], mean_train, rtol=1e-4, atol=1e-5)
    assert np.allclose(stats["std"], std_train, rtol=1e-4)
    # the subjects differ (offsets, gains), so fitting on every subject would give other numbers
    assert np.abs(stats["mean"] - mean_all).max() > 1e-2 * std_all.mean()
    assert not np.allclose(stats["std"], std_all, rtol=1e-3)
    # every split is scaled with the same training statistics
    for split, loader in loaders(dm).items():
        got = collect(loader)
        raw = signals[got["index"].numpy()]
        want = (raw - mean_train[:, None]) / std_train[:, None]
        assert np.allclose(got["x"].numpy(), want, atol=1e-4), split
    # so the training windows pooled are z-scored per channel, the validation ones are not
    xt = collect(DataLoader(dm.datasets["train"], batch_size=16, collate_fn=collate_batch))["x"].double()
    assert near(xt.mean(dim=(0, 2)), 0.0, 1e-4)
    assert near(xt.std(dim=(0, 2), unbiased=False), 1.0, 1e-3)
    xv = collect(dm.val_dataloader())["x"].double()
    assert not near(xv.mean(dim=(0, 2)), 0.0, 0.05)


def test_subject_normalisation_zscores_each_subject(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, normalization="subject")
    for split, loader in loaders(dm).items():
        got = collect(loader)
        for s in dm.subjects[split]:
            xs = got["x"][got["subject"] == s].double()
            assert len(xs) == 10
            assert near(xs.mean(dim=(0, 2)), 0.0, 1e-4), (split, s)
            assert near(xs.std(dim=(0, 2), unbiased=False), 1.0, 1e-3), (split, s)
        # a single window is not z-scored on its own (that would be "window")
        assert not near(got["x"].double().std(-1), 1.0, 1e-2)


def test_no_normalisation_returns_raw_cache_values(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, normalization="none")
    for loader in loaders(dm).values():
        got = collect(loader)
        assert np.array_equal(got["x"].numpy(), np.asarray(dm.cache.signals[got["index"].numpy()]))


def test_channel_stats_streams_in_chunks() -> None:
    rng = np.random.default_rng(0)
    signals = (rng.standard_normal((30, 3, 16)) * [[[1.0], [2.0], [5.0]]] + [[[0.0], [3.0], [-1.0]]]).astype(
        np.float32)
    idx = np.array([17, 2, 29, 5, 11, 3, 20])
    mean, std = channel_stats(signals, idx, chunk=3)
    ref = signals[idx].astype(np.float64)
    assert mean.dtype == np.float32 and mean.shape == (3,)
    assert np.allclose(mean, ref.mean(axis=(0, 2)), atol=1e-5)
    assert np.allclose(std, ref.std(axis=(0, 2)), rtol=1e-5)
    with pytest.raises(ValueError, match="zero windows"):
        channel_stats(signals, np.array([], dtype=np.int64))


def test_unknown_normalisation_or_negative_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="normalization.*'zscore'"):
        make_dm(tmp_path, normalization="zscore")
    with pytest.raises(ValueError, match="context"):
        make_dm(tmp_path, context=-1)


# ---------------------------------------------------------------------------------- data order


def test_balanced_sampler_evens_out_an_imbalanced_corpus(tmp_path: Path) -> None:
    kw = dict(kind="spikes", label_level="window", n_classes=2, windows_per_subject=30, seed=4)
    dm = make_dm(tmp_path, balanced_sampler=True, **kw)
    dm.setup()
    train_labels = np.asarray(dm.cache.labels[dm.datasets["train"].indices])
    assert 0.15 < train_labels.mean() < 0.4  # the corpus really is imbalanced
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, ClassBalancedSampler)
    assert len(loader.sampler) == len(train_labels)
    epochs = []
    for epoch in range(4):
        loader.sampler.set_epoch(epoch)
        got = collect(loader)
        assert set(got["subject"].tolist()) <= set(dm.subjects["train"])
        epochs.append(got)
    y = torch.cat([e["y"] for e in epochs]).double()
    assert abs(y.mean().item() - 0.5) < 0.08, y.mean()  # 4 x 180 draws: 6 sigma = 0.11, usually < 0.04
    assert epochs[0]["index"].tolist() != epochs[1]["index"].tolist()

    # same seed, fresh DataModule: same draw per epoch
    again = make_dm(tmp_path, balanced_sampler=True, **kw).train_dataloader()
    assert collect(again)["index"].tolist() == epochs[0]["index"].tolist()
    again.sampler.set_epoch(1)
    assert collect(again)["index"].tolist() == epochs[1]["index"].tolist()
    other = make_dm(tmp_path, balanced_sampler=True, **{**kw, "seed": 5}).train_dataloader()
    assert collect(other)["index"].tolist() != epochs[0]["index"].tolist()
    # without the sampler the drawn labels keep the corpus's imbalance
    plain = collect(make_dm(tmp_path, **kw).train_dataloader())
    assert plain["y"].double().mean().item() == pytest.approx(train_labels.mean())


def test_train_order_is_fixed_by_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def order(**kw) -> list[int]:
        return collect(make_dm(tmp_path, **kw).train_dataloader())["index"].tolist()

    a = order(seed=1)
    assert a == order(seed=1)
    assert a != order(seed=2)
    assert a != sorted(a)  # shuffled
    # two epochs of one loader are two different shuffles
    loader = make_dm(tmp_path, seed=1).train_dataloader()
    assert collect(loader)["index"].tolist() == a
    assert collect(loader)["index"].tolist() != a
    # seed=None follows seed_everything's PL_GLOBAL_SEED
    monkeypatch.setenv("PL_GLOBAL_SEED", "2")
    assert order(seed=None) == order(seed=2)


# ---------------------------------------------------------------------------------- context


def _expected_neighbours(cache, i: int, context: int) -> list[int]:
    same = np.flatnonzero(cache.recordings == cache.recordings[i])
    ordered = same[np.argsort(cache.starts[same], kind="stable")]
    p = int(np.flatnonzero(ordered == i)[0])
    return [int(ordered[min(max(p + d, 0), len(ordered) - 1)]) for d in range(-context, context + 1)]


def test_sequence_context(tmp_path: Path) -> None:
    dm = sleep_dm(tmp_path, context=2, normalization="none")
    flat = sleep_dm(tmp_path, context=0, normalization="none")
    dm.setup()
    flat.setup()
    cache = dm.cache
    assert len(set(cache.recordings.tolist())) == 16  # two recordings per subject
    signals = np.asarray(cache.signals)
    edges = 0
    for split, loader in loaders(dm).items():
        got = collect(loader)
        n = len(got["y"])
        assert got["x"].shape == (n, 5, 4, 64) and got["x"].dtype == torch.float32
        assert got["y"].shape == (n,)
        ref = flat.datasets[split]
        pos = {int(i): k for k, i in enumerate(ref.indices)}
        for row, i in enumerate(got["index"].tolist()):
            assert torch.equal(got["x"][row, 2], ref[pos[i]]["x"])  # centre slot = the window itself
            nbrs = _expected_neighbours(cache, i, 2)
            assert len({int(cache.recordings[j]) for j in nbrs}) == 1
            assert np.array_equal(got["x"][row].numpy(), signals[nbrs]), (split, i)
            if nbrs[0] == i or nbrs[-1] == i:
                edges += 1
    assert edges >= 2 * 16  # first and last window of every recording were checked


def test_context_window_edges_repeat_the_edge_window(tmp_path: Path) -> None:
    dm = sleep_dm(tmp_path, context=2, normalization="none")
    dm.setup()
    cache = dm.cache
    ds = dm.datasets["train"]
    first_of_rec = np.flatnonzero(np.r_[True, cache.recordings[1:] != cache.recordings[:-1]])
    start = int(np.intersect1d(first_of_rec, ds.indices)[0])
    x = ds[int(np.flatnonzero(ds.indices == start)[0])]["x"]
    assert torch.equal(x[0], x[2]) and torch.equal(x[1], x[2])
    assert not torch.equal(x[3], x[2])
    assert torch.equal(x[3], torch.from_numpy(np.array(cache.signals[start + 1])))


@pytest.mark.parametrize("normalization", ["window", "channel", "subject"])
def test_context_centre_matches_the_flat_window_under_normalisation(
    tmp_path: Path, normalization: str
) -> None:
    ctx = collect(sleep_dm(tmp_path, context=1, normalization=normalization).val_dataloader())
    flat = collect(sleep_dm(tmp_path, context=0, normalization=normalization).val_dataloader())
    assert ctx["index"].tolist() == flat["index"].tolist()
    assert torch.allclose(ctx["x"][:, 1], flat["x"], atol=1e-6)


# ---------------------------------------------------------------------------------- groups


def test_group_by_subject(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, group_by="subject", label_level="window")
    dm.setup()
    train = dm.subjects["train"]
    assert dm.n_groups == len(train)
    got = collect(dm.train_dataloader())
    assert got["group"].dtype == torch.int64
    assert set(got["group"].tolist()) == set(range(len(train)))
    for s in train:
        groups = got["group"][got["subject"] == s].unique().tolist()
        assert groups == [train.index(s)]
    for loader in (dm.val_dataloader(), dm.test_dataloader()):
        assert set(collect(loader)["group"].tolist()) == {-1}


def test_group_by_subject_class(tmp_path: Path) -> None:
    dm = sleep_dm(tmp_path, group_by="subject_class")
    dm.setup()
    train = dm.subjects["train"]
    assert dm.n_groups == len(train) * 5
    got = collect(dm.train_dataloader())
    rows = torch.tensor([train.index(int(s)) for s in got["subject"]])
    assert torch.equal(got["group"], rows * dm.n_outputs + got["y"])
    assert len(got["group"].unique()) > len(train)  # several stages per subject
    assert set(collect(dm.val_dataloader())["group"].tolist()) == {-1}


def test_no_group_key_without_group_by(tmp_path: Path) -> None:
    dm = make_dm(tmp_path)
    assert "group" not in next(iter(dm.train_dataloader()))
    assert dm.n_groups == 0


# ---------------------------------------------------------------------------------- augmentation


def test_augmentation_applies_only_while_training(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, augment=Augment(jitter=0.5, scaling=0.5, channel_dropout=0.5))
    batch = next(iter(dm.train_dataloader()))
    x0 = batch["x"].clone()

    assert dm.trainer is None
    assert torch.equal(dm.on_after_batch_transfer(batch, 0)["x"], x0)

    dm.trainer = SimpleNamespace(training=False)
    assert torch.equal(dm.on_after_batch_transfer(batch, 0)["x"], x0)

    dm.trainer = SimpleNamespace(training=True)
    torch.manual_seed(0)
    out = dm.on_after_batch_transfer(batch, 0)
    assert out["x"].shape == x0.shape
    assert not torch.equal(out["x"], x0)
    assert torch.equal(batch["x"], x0)  # the loader's batch is not modified in place
    for key in ("y", "subject", "index"):
        assert torch.equal(out[key], batch[key])
    # the same global seed gives the same augmented batch
    torch.manual_seed(0)
    assert torch.equal(dm.on_after_batch_transfer(batch, 0)["x"], out["x"])


def test_augmentation_is_train_only_in_a_real_fit(tmp_path: Path) -> None:
    from lightning.pytorch import LightningModule, Trainer

    class Probe(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)
            self.seen: dict[str, list[dict[str, torch.Tensor]]] = {"train": [], "val": []}

        def training_step(self, batch, batch_idx):
            self.seen["train"].append({k: v.clone() for k, v in batch.items()})
            return self.lin(batch["x"].mean(dim=(1, 2))[:, None]).sum()

        def validation_step(self, batch, batch_idx):
            self.seen["val"].append({k: v.clone() for k, v in batch.items()})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    dm = make_dm(tmp_path,
                 augment=Augment(jitter=0.5, scaling=0.5, channel_dropout=0.5), normalization="none")
    probe = Probe()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=0,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu", devices=1, default_root_dir=tmp_path)
    trainer.fit(probe, datamodule=dm)
    signals = np.asarray(dm.cache.signals)
    assert len(probe.seen["train"]) == 2 and len(probe.seen["val"]) == 2
    for batch in probe.seen["train"]:
        assert not np.allclose(batch["x"].numpy(), signals[batch["index"].numpy()])
    for batch in probe.seen["val"]:
        assert np.array_equal(batch["x"].numpy(), signals[batch["index"].numpy()])


def test_augment_transforms() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 6, 32).abs() + 1.0  # away from 0, so ratios below are well defined
    x0 = x.clone()

    noop = Augment()
    assert not noop.active and noop(x) is x

    drop = Augment(channel_dropout=0.5)
    out = drop(x)
    zero = (out == 0).all(dim=-1)
    kept = (out == x).all(dim=-1)
    assert torch.all(zero | kept)  # whole channels are dropped, others untouched
    assert 0.35 < zero.double().mean().item() < 0.65
    assert torch.equal(x, x0)  # input untouched
    # sequence batches (B, L, C, T) drop per window and channel too
    out4 = drop(x.reshape(16, 4, 6, 32))
    zero4 = (out4 == 0).all(dim=-1)
    assert torch.all(zero4 | (out4 == x.reshape(16, 4, 6, 32)).all(dim=-1))

    scale = Augment(scaling=0.3)(x)
    ratio = scale / x
    assert torch.allclose(ratio, ratio[..., :1].expand_as(ratio), atol=1e-4)  # one factor per window-channel
    assert not near(ratio, 1.0, 1e-3)

    jit = Augment(jitter=0.1)(x) - x
    assert 0.05 < (jit.std() / x.std(dim=-1).mean()).item() < 0.15


@pytest.mark.parametrize("key", ["jitter", "scaling", "channel_dropout"])
def test_augment_rejects_negative_strengths(key: str) -> None:
    with pytest.raises(ValueError, match=f"augment.{key}"):
        Augment(**{key: -0.1})


def test_augment_rejects_certain_dropout() -> None:
    with pytest.raises(ValueError, match="channel_dropout"):
        Augment(channel_dropout=1.0)


# ---------------------------------------------------------------------------------- errors


class ToyDataModule(BiosignalDataModule):
    """A corpus with a shape but no reader: exercises the ``root`` checks."""

    def corpus_spec(self) -> CorpusSpec:
        return CorpusSpec(name="toy", ch_names=("C3", "C4"), sfreq=100.0, n_times=100, classes=("a", "b"))


def test_missing_root_is_an_error_at_setup_not_construction(tmp_path: Path) -> None:
    dm = ToyDataModule(cache_dir=str(tmp_path / "cache"))
    assert dm.n_chans == 2 and dm.n_outputs == 2
    with pytest.raises(DataError, match=r"data\.init_args\.root"):
        dm.prepare_data()
    with pytest.raises(DataError, match=r"data\.init_args\.root"):
        dm.setup()
    assert not (tmp_path / "cache").exists()


def test_root_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "corpus"
    dm = ToyDataModule(root=str(missing), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match="does not exist") as err:
        dm.setup()
    assert str(missing) in str(err.value)


def test_empty_root_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="empty") as err:
        ToyDataModule(root=str(empty), cache_dir=str(tmp_path / "cache")).setup()
    assert str(empty) in str(err.value)


def test_root_without_a_reader_says_to_use_synthetic(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "file.edf").write_bytes(b"0")
    with pytest.raises(DataError, match="synthetic"):
        ToyDataModule(root=str(root), cache_dir=str(tmp_path / "cache")).setup()


def test_synthetic_flag_runs_any_corpus_without_files(tmp_path: Path) -> None:
    dm = ToyDataModule(synthetic=True, synthetic_options=dict(n_subjects=6, windows_per_subject=5),
                       cache_dir=str(tmp_path / "cache"), batch_size=4)
    assert dm.dataset_name == "toy-synthetic"
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape[1:] == (2, 100)


# ---------------------------------------------------------------------------------- pickling


def test_pickle_carries_no_signals_and_rebuilds_identically(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, seed=3, normalization="channel", n_times=128, sfreq=128.0)
    dm.setup()
    train = collect(dm.train_dataloader())
    val = collect(dm.val_dataloader())
    signals = np.asarray(dm.cache.signals)

    blob = pickle.dumps(dm)
    assert len(blob) < signals.nbytes / 10, (len(blob), signals.nbytes)
    assert signals[0].tobytes()[:256] not in blob
    assert signals[-1].tobytes()[:256] not in blob

    clone = pickle.loads(blob)
    assert clone.datasets == {} and clone._cache is None
    clone.setup()
    assert clone.subjects == dm.subjects
    for a, b in ((train, collect(clone.train_dataloader())), (val, collect(clone.val_dataloader()))):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_dataset_pickles_without_signals(tmp_path: Path) -> None:
    # DataLoader workers started with 'spawn' receive the dataset by pickle
    dm = make_dm(tmp_path, n_times=128, sfreq=128.0, context=0)
    dm.setup()
    ds = dm.datasets["val"]
    blob = pickle.dumps(ds)
    assert len(blob) < np.asarray(dm.cache.signals).nbytes / 10
    again = pickle.loads(blob)
    for k, v in ds[3].items():
        assert torch.equal(again[3][k], v)


def test_worker_processes_serve_the_same_batches(tmp_path: Path) -> None:
    main = make_dm(tmp_path, seed=3)
    workers = make_dm(tmp_path, seed=3, num_workers=1)
    for split in ("train", "val"):
        a = collect(getattr(main, f"{split}_dataloader")())
        b = collect(getattr(workers, f"{split}_dataloader")())
        for key in a:
            assert torch.equal(a[key], b[key]), (split, key)


# ---------------------------------------------------------------------------------- split groups


def test_corpus_groups_are_merged_into_user_groups() -> None:
    from biosig_lightning.data.module import merge_groups

    assert merge_groups([], [[1, 21]]) == [[1, 21]]
    assert merge_groups([[3, 2]], [[1, 21]]) == [[1, 21], [2, 3]]
    # a user group touching the corpus group joins it: 1 stays with 21 and with 5
    assert merge_groups([[21, 5], [7, 8]], [[1, 21]]) == [[1, 5, 21], [7, 8]]
    assert merge_groups([[1, 2]], [[2, 3]], [[3, 4]]) == [[1, 2, 3, 4]]


def test_user_split_groups_keep_the_corpus_groups(tmp_path: Path) -> None:
    from biosig_lightning.data.splits import SplitConfig

    class Grouped(SyntheticDataModule):
        subject_groups = [[1, 10]]

    seen = set()
    for seed in range(8):
        dm = Grouped(**SHAPE, n_subjects=10, windows_per_subject=2, cache_dir=str(tmp_path / "cache"),
                     split=SplitConfig(strategy="ratio", seed=seed, groups=[[2, 3]], stratify=False))
        dm.setup()
        where = {s: name for name, subjects in dm.subjects.items() for s in subjects}
        assert where[1] == where[10] and where[2] == where[3], seed
        seen.add(where[1])
    assert len(seen) > 1  # the seeds do move the group around: the test is not vacuous
