"""Window cache: round trip, keys, interrupted and concurrent builds, corruption, neighbours."""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing as mp
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from biosig_lightning.data import cache as cache_mod
from biosig_lightning.data.cache import CacheError, WindowCache, cache_key, load_cache, load_or_build
from biosig_lightning.data.spec import CorpusSpec, DataError, WindowBlock

SPEC = CorpusSpec(name="fake", ch_names=("C3", "C4"), sfreq=10.0, n_times=5, classes=("a", "b", "c"))

# (subject, recording, n windows); starts are yielded out of order on purpose.
LAYOUT = [(1, "s1-n1", 4), (1, "s1-n2", 3), (2, "s2-n1", 5), (3, "s3-n1", 1),
          (4, "s4-n1", 0), (4, "s4-n2", 2)]


def _block(subject: int, recording: str, n: int) -> WindowBlock:
    rng = np.random.default_rng(sum(map(ord, recording)))
    x = rng.standard_normal((n, SPEC.n_chans, SPEC.n_times)).astype(np.float32)
    y = (np.arange(n) + subject) % SPEC.n_outputs
    start = 30.0 * rng.permutation(n)
    return WindowBlock(subject=subject, recording=recording, x=x, y=y, start=start)


class FakeReader:
    """A reader with the CorpusReader shape; counts its builds in ``log`` (one line per pass)."""

    def __init__(self, root: str = "/data/fake", layout=LAYOUT, fail_after: int | None = None,
                 log: str | None = None, delay: float = 0.0, spec: CorpusSpec = SPEC, window: float = 0.5):
        self.spec, self.root, self.layout = spec, root, layout
        self.fail_after, self.log, self.delay, self.window = fail_after, log, delay, window

    def config(self) -> dict:
        return {"root": self.root, "window": self.window, "channels": list(self.spec.ch_names)}

    def iter_blocks(self):
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()}\n")
        for i, (subject, rec, n) in enumerate(self.layout):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("reader died mid-corpus")
            time.sleep(self.delay)
            yield _block(subject, rec, n)


def _expected():
    blocks = [_block(*entry) for entry in LAYOUT if entry[2]]
    return blocks, np.concatenate([b.x for b in blocks])


def _cache_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def test_round_trip_and_reload(tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    reader = FakeReader(log=str(log))
    cache = load_or_build(reader, tmp_path / "c", progress=False)
    blocks, x = _expected()
    assert len(cache) == len(x) == 15
    assert cache.dir == tmp_path / "c" / f"fake-{cache_key(reader.config())}"
    np.testing.assert_array_equal(cache.signals, x)
    assert cache.signals.dtype == np.float32 and cache.signals.shape == (15, 2, 5)
    np.testing.assert_array_equal(cache.labels, np.concatenate([b.y for b in blocks]))
    np.testing.assert_array_equal(cache.starts, np.concatenate([b.start for b in blocks]))
    np.testing.assert_array_equal(cache.subjects,
                                  np.repeat([b.subject for b in blocks], [len(b.y) for b in blocks]))
    assert cache.recording_names == [b.recording for b in blocks]  # the empty recording is not listed
    assert [cache.recording_names[r] for r in cache.recordings[[0, 4, 7, 12, 13]]] == \
        ["s1-n1", "s1-n2", "s2-n1", "s3-n1", "s4-n2"]
    assert cache.spec == SPEC and cache.manifest["reader"] == reader.config()
    np.testing.assert_array_equal(cache.subject_ids(), [1, 2, 3, 4])
    with pytest.raises(ValueError):
        cache.signals[0, 0, 0] = 1.0  # read-only memmap
    with pytest.raises(ValueError):
        cache.labels[0] = 1

    # Second call loads, does not rebuild, and sees the same data.
    again = load_or_build(reader, tmp_path / "c", progress=False, verify="full")
    np.testing.assert_array_equal(again.signals, x)
    assert log.read_text().count("\n") == 1
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]


def test_subject_helpers(tmp_path: Path) -> None:
    cache = load_or_build(FakeReader(), tmp_path, progress=False)
    # Subject 1: labels (1,2,0,1) + (1,2,0) -> 1. Subject 2: (2,0,1,2,0) -> 0 and 2 tie, the
    # smaller class wins. Subject 3: (0,) -> 0. Subject 4: (1,2) -> tie -> 1.
    assert cache.subject_labels() == {1: 1, 2: 0, 3: 0, 4: 1}
    np.testing.assert_array_equal(cache.indices_for_subjects([3, 4]), [12, 13, 14])
    np.testing.assert_array_equal(cache.indices_for_subjects(np.array([2])), np.arange(7, 12))
    with pytest.raises(DataError, match=r"subject\(s\) \[9\] are not in the fake cache"):
        cache.indices_for_subjects([2, 9])


def test_key_depends_on_config_and_preprocess(tmp_path: Path) -> None:
    a = FakeReader()
    assert cache_key({"b": 1, "a": [1, 2]}) == cache_key({"a": [1, 2], "b": 1})
    assert cache_key(a.config()) != cache_key(a.config(), {"notch": 50})
    c1 = load_or_build(a, tmp_path, progress=False)
    c2 = load_or_build(FakeReader(window=1.0), tmp_path, progress=False)
    c3 = load_or_build(a, tmp_path, preprocess={"notch": 50}, progress=False)
    assert len({c1.dir, c2.dir, c3.dir}) == 3
    assert _cache_dirs(tmp_path) == sorted(p.name for p in (c1.dir, c2.dir, c3.dir))
    assert c3.manifest["preprocess"] == {"notch": 50}


def test_interrupted_build_leaves_nothing_loadable(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="mid-corpus"):
        load_or_build(FakeReader(fail_after=3), tmp_path, progress=False)
    assert _cache_dirs(tmp_path) == []
    # A builder killed outright leaves its temporary directory behind, manifest and all:
    # it must be ignored, and removed once stale.
    key = cache_key(FakeReader().config())
    orphan = tmp_path / f".tmp-fake-{key}-dead"
    orphan.mkdir()
    (orphan / "manifest.json").write_text("{}")
    old = time.time() - cache_mod.STALE_TMP_SECONDS - 60
    os.utime(orphan / "manifest.json", (old, old))
    os.utime(orphan, (old, old))
    fresh = tmp_path / ".tmp-other-in-progress"
    fresh.mkdir()
    cache = load_or_build(FakeReader(), tmp_path, progress=False)
    assert len(cache) == 15
    assert not orphan.exists() and fresh.exists()
    assert _cache_dirs(tmp_path) == sorted([cache.dir.name, fresh.name])


def test_bad_reader_data_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"fake: the reader yielded no windows \(root: '/data/empty'\)"):
        load_or_build(FakeReader(root="/data/empty", layout=[(1, "r", 0)]), tmp_path, progress=False)
    with pytest.raises(DataError, match="recording 'r' was yielded twice"):
        load_or_build(FakeReader(layout=[(1, "r", 2), (2, "r", 2)]), tmp_path, progress=False)
    bad_spec = CorpusSpec(name="fake", ch_names=("C3",), sfreq=10.0, n_times=5, classes=("a", "b", "c"))
    with pytest.raises(DataError, match="fake recording 's1-n1' .*2 channels"):
        load_or_build(FakeReader(spec=bad_spec), tmp_path, progress=False)
    assert _cache_dirs(tmp_path) == []


def _build_fresh(tmp_path: Path, **kw) -> WindowCache:
    return load_or_build(FakeReader(**kw), tmp_path, progress=False)


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_corruption_is_detected(tmp_path: Path) -> None:
    cache = _build_fresh(tmp_path)
    d = cache.dir
    with open(d / "signals.bin", "r+b") as f:
        f.truncate(d.joinpath("signals.bin").stat().st_size - 4)
    with pytest.raises(CacheError, match=rf"{re.escape(str(d))}.*signals.bin holds \d+ bytes.*rebuild=True"):
        _build_fresh(tmp_path)
    cache = load_or_build(FakeReader(), tmp_path, progress=False, rebuild=True)
    assert len(cache) == 15 and cache.dir == d

    _flip_byte(d / "labels.bin", 8)
    with pytest.raises(CacheError, match=rf"{re.escape(str(d))}.*checksum mismatch in labels.bin"):
        _build_fresh(tmp_path)
    load_or_build(FakeReader(), tmp_path, progress=False, rebuild=True)

    _flip_byte(d / "signals.bin", 100)  # inside the checked head (the whole file, here)
    with pytest.raises(CacheError, match=rf"{re.escape(str(d))}.*checksum mismatch in signals.bin"):
        _build_fresh(tmp_path)
    load_or_build(FakeReader(), tmp_path, progress=False, rebuild=True)

    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "key": "0" * 16}))
    with pytest.raises(CacheError, match=rf"{re.escape(str(d))}.*manifest key '0{{16}}' != expected key"):
        _build_fresh(tmp_path)

    (d / "manifest.json").write_text('{"format_version": 1, "key": ')
    with pytest.raises(CacheError,
                       match=rf"{re.escape(str(d))}.*manifest.json is unreadable.*Delete that directory"):
        _build_fresh(tmp_path)
    load_or_build(FakeReader(), tmp_path, progress=False, rebuild=True)

    # Same reader config, different spec: the key cannot tell, the manifest can.
    other = CorpusSpec(name="fake", ch_names=("C3", "C4"), sfreq=20.0, n_times=5, classes=("a", "b", "c"))
    with pytest.raises(CacheError,
                       match=rf"{re.escape(str(d))}.*different corpus spec \(fields sfreq differ\)"):
        _build_fresh(tmp_path, spec=other)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_quick_checks_edges_full_checks_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "EDGE_BYTES", 64)  # the signals file is 600 bytes
    d = _build_fresh(tmp_path).dir
    _flip_byte(d / "signals.bin", 300)
    quick = load_cache(d)  # the middle of a large file is only read by a full check
    assert quick.signals.shape == (15, 2, 5)
    with pytest.raises(CacheError,
                       match=rf"{re.escape(str(d))}.*checksum mismatch in signals.bin \(its contents "
                             rf"changed\)"):
        load_cache(d, verify="full")
    _flip_byte(d / "signals.bin", 590)
    with pytest.raises(CacheError, match=r"checksum mismatch in signals.bin at bytes 536..600"):
        load_cache(d)


def _child_build(root: str, log: str, barrier, out: str) -> None:
    barrier.wait(timeout=60)
    cache = load_or_build(FakeReader(log=log, delay=0.05), root, progress=False)
    Path(out).write_text(json.dumps({"dir": str(cache.dir), "created": cache.manifest["created"],
                                     "sum": float(np.asarray(cache.signals, dtype=np.float64).sum())}))


def test_concurrent_processes_share_one_build(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    log = tmp_path / "builds.log"
    procs = [ctx.Process(target=_child_build, args=(str(tmp_path / "c"), str(log), barrier,
                                                    str(tmp_path / f"out{i}.json"))) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    out = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert out[0] == out[1]
    assert log.read_text().count("\n") == 1  # the second process waited and loaded
    assert _cache_dirs(tmp_path / "c") == [Path(out[0]["dir"]).name]
    np.testing.assert_array_equal(load_cache(out[0]["dir"], verify="full").signals, _expected()[1])


def test_concurrent_builders_without_lock_keep_one_cache(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Where flock does not hold (some network filesystems) both build; the rename decides.
    monkeypatch.setattr(cache_mod, "_locked", lambda path: contextlib.nullcontext())
    log = tmp_path / "builds.log"
    barrier = threading.Barrier(2)
    results: list[WindowCache | BaseException] = []

    def run() -> None:
        barrier.wait(timeout=30)
        try:
            results.append(load_or_build(FakeReader(log=str(log), delay=0.02), tmp_path, progress=False))
        except BaseException as e:  # surfaced by the assertion below
            results.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(r, WindowCache) for r in results), results
    assert log.read_text().count("\n") == 2
    assert results[0].manifest == results[1].manifest
    assert _cache_dirs(tmp_path) == [results[0].dir.name]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def _reference_neighbours(cache: WindowCache, i: int, context: int) -> list[int]:
    same = np.flatnonzero(cache.recordings == cache.recordings[i])
    ordered = same[np.argsort(cache.starts[same])]
    p = int(np.flatnonzero(ordered == i)[0])
    return [int(ordered[min(max(p + k, 0), len(ordered) - 1)]) for k in range(-context, context + 1)]


def test_neighbours_follow_start_time_and_clamp_at_edges(tmp_path: Path) -> None:
    cache = load_or_build(FakeReader(), tmp_path, progress=False)
    for context in (0, 1, 2, 6):
        got = cache.neighbours(np.arange(len(cache)), context)
        assert got.shape == (len(cache), 2 * context + 1)
        for i in range(len(cache)):
            assert got[i].tolist() == _reference_neighbours(cache, i, context)
    # Recording s2-n1 holds windows 7..11; spell one row out: the first window in time
    # sees itself repeated on the left and the next two windows on the right.
    rec = np.arange(7, 12)
    by_time = rec[np.argsort(cache.starts[rec])]
    row = cache.neighbours([by_time[0]], 2)[0]
    assert row.tolist() == [by_time[0], by_time[0], by_time[0], by_time[1], by_time[2]]
    assert cache.neighbours([12], 3)[0].tolist() == [12] * 7  # a one-window recording
    assert set(cache.recordings[cache.neighbours([13, 14], 4)].ravel()) == {cache.recordings[13]}
    with pytest.raises(IndexError):
        cache.neighbours([15], 1)


def test_pickling_remaps_signals_instead_of_copying(tmp_path: Path) -> None:
    # What DataLoader workers started with 'spawn' receive.
    import pickle

    cache = load_or_build(FakeReader(), tmp_path, progress=False)
    blob = pickle.dumps(cache)
    assert cache.signals.tobytes()[:64] not in blob  # no copy of the signal bytes inside
    clone = pickle.loads(blob)
    assert isinstance(clone.signals, np.memmap) and Path(clone.signals.filename) == cache.dir / "signals.bin"
    np.testing.assert_array_equal(clone.signals, cache.signals)
    np.testing.assert_array_equal(clone.neighbours([3], 1), cache.neighbours([3], 1))
    assert len(clone) == len(cache) and clone.recording_names == cache.recording_names


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_a_cache_the_disk_refuses_is_named_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       code: int) -> None:
    def refused(*_: object, **__: object) -> str:
        raise OSError(code, os.strerror(code), str(tmp_path / ".tmp-fake-x"))

    monkeypatch.setattr(cache_mod.tempfile, "mkdtemp", refused)
    with pytest.raises(CacheError) as err:
        load_or_build(FakeReader(), tmp_path, progress=False)
    message = str(err.value)
    assert (
        message.startswith(f"cannot write the window cache in {tmp_path}: {os.strerror(code)}; ")
        and "\n" not in message
    )
    assert "--data.init_args.cache_dir" in message


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (mount -t tmpfs); the injected-error test covers the "
                    "rest")
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize(("options", "reason"), [("size=16k", "No space left on device"),
                                                 ("ro,size=16k", "Read-only file system")])
def test_a_full_or_read_only_cache_disk_is_named(tmp_path: Path, options: str, reason: str) -> None:
    with _tmpfs(tmp_path / "cache", options) as root:
        big = FakeReader(layout=[(1, "r1", 2000), (2, "r2", 2000)])  # 160 kB of windows for a 16 kB disk
        with pytest.raises(CacheError, match=rf"^cannot write the window cache in {root}: {reason}; "):
            load_or_build(big, root, progress=False)
        assert [
            p.name for p in root.iterdir() if p.name.startswith(".tmp-")
        ] == []  # no half-built cache left
