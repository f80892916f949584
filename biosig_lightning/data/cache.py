"""The window cache: a corpus reader's windows, written once, memory-mapped ever after.

Reading EDF/WFDB files and cutting windows is slow; training reads the same windows every
epoch, in several processes (DataLoader workers, DDP ranks, Optuna trials). So the windows
of a reader are written once to flat binary files in one directory per reader
configuration, and every later run memory-maps them read-only.

Layout of ``<cache_root>/<corpus>-<key>/``::

    manifest.json     format version, key, corpus spec, reader config, array table, checksums
    signals.bin       float32 (N, C, T), C-order
    labels.bin        int64 (N,)
    subjects.bin      int64 (N,)
    recordings.bin    int32 (N,)   index into manifest["recordings"]
    starts.bin        float64 (N,) window start in seconds within its recording

Safety rules (no pickle anywhere; every file is raw little-endian binary or JSON):

* The key is a hash of the reader config, the preprocessing settings and the format
  version, so a changed config builds a new directory instead of reusing stale windows.
* A build writes into a ``.tmp-*`` sibling, writes the manifest last, fsyncs, and renames
  the directory into place atomically; an interrupted build leaves only a ``.tmp-*``
  directory, which is never loaded. The next build reclaims it as soon as its builder is gone:
  a builder holds the ``flock`` of its key's lock file for as long as it writes (and records
  its pid and host there), so a ``.tmp-*`` directory whose lock can be taken has no builder
  left. Where locks do not hold, such a directory is removed once it is hours old.
* Concurrent builders of the same key (DDP ranks, Optuna workers) serialise on an
  ``fcntl.flock`` lock file; the second one finds the finished cache and loads it. Should
  the lock not hold (some network filesystems), the atomic rename still guarantees that
  one complete cache wins and the other build is discarded.
* Loading checks sizes, shapes and dtypes always, checksums of the small arrays and of the
  head and tail of the signals by default (``verify="quick"``), and a checksum of all
  signal bytes with ``verify="full"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from biosig_lightning.atomic_io import is_storage_error, storage_message

from .spec import CorpusReader, CorpusSpec, DataError

__all__ = ["CACHE_FORMAT_VERSION", "CacheError", "WindowCache", "cache_key", "load_cache", "load_or_build"]

CACHE_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# The head and tail of the signals file checksummed for a quick verification.
EDGE_BYTES = 1 << 20
# A temporary build directory untouched for this long belongs to a dead builder.
STALE_TMP_SECONDS = 6 * 3600

Verify = Literal["quick", "full"]

# name -> (dtype, number of dimensions). Little-endian on disk whatever the host.
_ARRAYS: dict[str, tuple[np.dtype, int]] = {
    "signals": (np.dtype("<f4"), 3),
    "labels": (np.dtype("<i8"), 1),
    "subjects": (np.dtype("<i8"), 1),
    "recordings": (np.dtype("<i4"), 1),
    "starts": (np.dtype("<f8"), 1),
}


class CacheError(DataError):
    """A cache directory is unreadable, incomplete or does not match what was asked for."""


# --------------------------------------------------------------------------- hashing

try:  # xxhash is much faster on multi-GB signal files; blake2b is the portable fallback.
    import xxhash

    _HASH_ALGO = "xxh3_128"
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None  # type: ignore[assignment]  # optional dependency, checked before use
    _HASH_ALGO = "blake2b-128"


def _hasher(algo: str) -> Any:
    if algo == "xxh3_128":
        if xxhash is None:
            raise ImportError("xxhash")
        return xxhash.xxh3_128()
    if algo == "blake2b-128":
        return hashlib.blake2b(digest_size=16)
    raise ValueError(algo)


def _digest(data: bytes | memoryview, algo: str) -> str:
    h = _hasher(algo)
    h.update(data)
    return h.hexdigest()


def _file_digest(path: Path, algo: str, start: int = 0, length: int | None = None) -> str:
    h = _hasher(algo)
    with open(path, "rb") as f:
        f.seek(start)
        left = length if length is not None else -1
        while left != 0:
            chunk = f.read(1 << 24 if left < 0 else min(1 << 24, left))
            if not chunk:
                break
            h.update(chunk)
            left = left - len(chunk) if left > 0 else left
    return h.hexdigest()


def _edges(nbytes: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(offset, length) of the head and the tail checked by a quick verification."""
    head = min(EDGE_BYTES, nbytes)
    tail = min(EDGE_BYTES, nbytes)
    return (0, head), (nbytes - tail, tail)


# --------------------------------------------------------------------------- key


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"reader config value {obj!r} of type {type(obj).__name__} is not JSON-able")


def cache_key(reader_config: dict[str, Any], preprocess: dict[str, Any] | None = None) -> str:
    """A 16-hex-digit hash of everything that changes the cached windows.

    The reader's ``config()`` (root, channels, resampling, window...), the caller's
    preprocessing settings and :data:`CACHE_FORMAT_VERSION`, as canonical JSON.
    """
    blob = _canonical({"reader": reader_config, "preprocess": preprocess,
                       "format_version": CACHE_FORMAT_VERSION})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- cache object


@dataclass
class WindowCache:
    """The windows of one reader configuration, memory-mapped read-only.

    Attributes:
        dir: the cache directory.
        spec: the corpus spec the windows were built for.
        manifest: the parsed ``manifest.json``.
        signals: ``(N, C, T)`` float32 memmap.
        labels, subjects: ``(N,)`` int64; ``recordings``: ``(N,)`` int32 index into
            ``recording_names``; ``starts``: ``(N,)`` float64 seconds. In memory, read-only.
        recording_names: recording ids, as the reader named them.
    """

    dir: Path
    spec: CorpusSpec
    manifest: dict[str, Any]
    signals: np.ndarray
    labels: np.ndarray
    subjects: np.ndarray
    recordings: np.ndarray
    starts: np.ndarray
    recording_names: list[str]
    _order: np.ndarray | None = field(default=None, init=False, repr=False)
    _pos: np.ndarray | None = field(default=None, init=False, repr=False)
    _first: np.ndarray | None = field(default=None, init=False, repr=False)
    _count: np.ndarray | None = field(default=None, init=False, repr=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getstate__(self) -> dict[str, Any]:
        # Pickling an np.memmap copies all its bytes; DataLoader workers started with
        # 'spawn' (and DDP spawn) would each get a private copy of the signals. Send the
        # location instead and map the file again on arrival.
        state = dict(self.__dict__)
        state["signals"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        entry = self.manifest["arrays"]["signals"]
        self.signals = np.memmap(self.dir / entry["file"], dtype=np.dtype(entry["dtype"]), mode="r",
                                 shape=tuple(entry["shape"]))

    def subject_ids(self) -> np.ndarray:
        """Sorted unique subject ids."""
        return np.unique(self.subjects)

    def subject_labels(self) -> dict[int, int]:
        """Each subject's majority class (ties go to the smaller class index).

        For subject-level corpora this is the diagnosis; it feeds stratified splits.
        """
        ids, inv = np.unique(self.subjects, return_inverse=True)
        k = self.spec.n_outputs
        counts = np.bincount(inv * k + self.labels, minlength=len(ids) * k).reshape(len(ids), k)
        return {int(s): int(c) for s, c in zip(ids, counts.argmax(axis=1), strict=True)}

    def indices_for_subjects(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Window indices (ascending) of the given subjects; unknown ids raise :class:`DataError`."""
        ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64).reshape(-1)
        known = self.subject_ids()
        missing = np.setdiff1d(ids, known)
        if missing.size:
            raise DataError(f"subject(s) {missing.tolist()} are not in the {self.spec.name} cache {self.dir} "
                            f"(it holds subjects {known.min()}..{known.max()}, {known.size} in all)")
        return np.flatnonzero(np.isin(self.subjects, ids))

    def neighbours(self, index_array: Sequence[int] | np.ndarray, context: int) -> np.ndarray:
        """Indices of each window's ``2 * context + 1`` neighbours in its recording.

        Row ``i`` lists the windows of ``index_array[i]``'s recording at positions
        ``p - context .. p + context`` in start-time order, ``p`` being the window's own
        position; positions past either end of the recording repeat the edge window.
        Sequence-to-epoch sleep stagers classify the centre epoch of such a sequence of
        ``L = 2l + 1`` epochs (SPDTransNet, Sec. 3.2).
        """
        if context < 0:
            raise ValueError(f"context must be >= 0, got {context}")
        idx = np.asarray(index_array, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"window index out of range 0..{len(self) - 1}")
        self._index_recordings()
        assert self._order is not None and self._pos is not None  # set by _index_recordings
        assert self._first is not None and self._count is not None
        rec = self.recordings[idx]
        offsets = np.arange(-context, context + 1)
        pos = np.clip(self._pos[idx, None] + offsets, 0, self._count[rec][:, None] - 1)
        return self._order[self._first[rec][:, None] + pos]

    def _index_recordings(self) -> None:
        """Position of every window within its recording, computed once."""
        if self._order is not None:
            return
        order = np.lexsort((self.starts, self.recordings))
        count = np.bincount(self.recordings, minlength=len(self.recording_names))
        first = np.concatenate([[0], np.cumsum(count)[:-1]])
        pos = np.empty(len(self), dtype=np.int64)
        pos[order] = np.arange(len(self)) - first[self.recordings[order]]
        self._order, self._pos, self._first, self._count = order, pos, first, count


# --------------------------------------------------------------------------- load


def _fail(cache_dir: Path, what: str) -> CacheError:
    return CacheError(f"window cache {cache_dir} is unusable: {what}. Delete that directory, or build it "
                      f"again: "
                      f"add --data.init_args.rebuild_cache true to the biosig command (from Python: "
                      f"load_or_build(..., rebuild=True))")


def load_cache(cache_dir: str | Path, expected_key: str | None = None, spec: CorpusSpec | None = None,
               verify: Verify = "quick") -> WindowCache:
    """Open and verify a built cache directory (see the module docstring for the checks)."""
    cache_dir = Path(cache_dir)
    if verify not in ("quick", "full"):
        raise ValueError(f"verify must be 'quick' or 'full', got {verify!r}")
    try:
        manifest = json.loads((cache_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise _fail(cache_dir, f"{MANIFEST} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(cache_dir, f"{MANIFEST} is unreadable ({e})") from None
    if not isinstance(manifest, dict):
        raise _fail(cache_dir, f"{MANIFEST} is not a JSON object")
    if manifest.get("format_version") != CACHE_FORMAT_VERSION:
        raise _fail(cache_dir, f"format version {manifest.get('format_version')!r}, this code reads "
                               f"{CACHE_FORMAT_VERSION}")
    if expected_key is not None and manifest.get("key") != expected_key:
        raise _fail(cache_dir, f"manifest key {manifest.get('key')!r} != expected key {expected_key!r}")
    try:
        spec_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                       for k, v in manifest["spec"].items()}
        stored_spec = CorpusSpec(**spec_fields)
        n = int(manifest["n_windows"])
        table = manifest["arrays"]
        names = [str(r) for r in manifest["recordings"]]
        algo = str(manifest["checksum_algorithm"])
        _hasher(algo)
    except ImportError:
        raise _fail(cache_dir, f"its checksums use {manifest.get('checksum_algorithm')}, which needs the "
                               f"'xxhash' package (install it)") from None
    except (KeyError, TypeError, ValueError) as e:
        raise _fail(cache_dir, f"{MANIFEST} lacks or mangles a field ({e!r})") from None
    if spec is not None and stored_spec != spec:
        diff = [k for k, v in spec.to_dict().items() if stored_spec.to_dict().get(k) != v]
        raise _fail(cache_dir, f"it was built for a different corpus spec (fields {', '.join(diff)} differ)")
    spec = stored_spec

    arrays: dict[str, np.ndarray] = {}
    for name, (dtype, ndim) in _ARRAYS.items():
        entry = table.get(name) if isinstance(table, dict) else None
        if not isinstance(entry, dict):
            raise _fail(cache_dir, f"the manifest lists no '{name}' array")
        shape = tuple(int(s) for s in entry.get("shape", ()))
        expected_shape = (n, spec.n_chans, spec.n_times) if ndim == 3 else (n,)
        if np.dtype(entry.get("dtype", "")) != dtype or shape != expected_shape:
            raise _fail(cache_dir, f"'{name}' is {entry.get('dtype')} {list(shape)}, expected {dtype.str} "
                                   f"{list(expected_shape)}")
        path = cache_dir / str(entry.get("file", ""))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        try:
            size = path.stat().st_size
        except OSError:
            raise _fail(cache_dir, f"array file {path.name} is missing") from None
        if size != nbytes or int(entry.get("nbytes", -1)) != nbytes:
            raise _fail(cache_dir, f"{path.name} holds {size} bytes, expected {nbytes} (truncated or "
                                   f"overwritten)")
        if name == "signals":
            if verify == "full" and _file_digest(path, algo) != entry.get("checksum"):
                raise _fail(cache_dir, f"checksum mismatch in {path.name} (its contents changed)")
            edges = entry.get("edge_checksums")
            if not isinstance(edges, list) or len(edges) != 2:
                raise _fail(cache_dir, f"the manifest lacks the edge checksums of {path.name}")
            for (off, length), want in zip(_edges(nbytes), edges, strict=True):
                if _file_digest(path, algo, off, length) != want:
                    raise _fail(cache_dir, f"checksum mismatch in {path.name} at bytes {off}..{off + length}")
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", shape=shape)
        else:
            raw = path.read_bytes()
            if _digest(raw, algo) != entry.get("checksum"):
                raise _fail(cache_dir, f"checksum mismatch in {path.name} (its contents changed)")
            arrays[name] = np.frombuffer(raw, dtype=dtype).reshape(shape)  # read-only view

    rec = arrays["recordings"]
    if n and (rec.min() < 0 or rec.max() >= len(names)):
        raise _fail(cache_dir, "recording indices point outside the manifest's recording list")
    return WindowCache(dir=cache_dir, spec=spec, manifest=manifest, recording_names=names, **arrays)


# --------------------------------------------------------------------------- build


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``lock_path`` and write this builder's pid and host into it;
    yields whether the lock is held (where the filesystem refuses locks, the build goes on without
    one: the atomic rename in :func:`load_or_build` still keeps the cache whole)."""
    with open(lock_path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except OSError:
            yield False
            return
        try:
            with contextlib.suppress(OSError):  # who builds: for the person looking at a stuck build
                f.seek(0)
                f.truncate()
                f.write(f"pid {os.getpid()} host {socket.gethostname()}\n")
                f.flush()
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _builder_gone(lock_path: Path) -> bool:
    """Whether nobody holds ``lock_path`` (taken and released at once); ``False`` where locks do not work."""
    try:
        with open(lock_path, "a+") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # held by a live builder (or locks unsupported)
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return True
    except OSError:
        return False


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_touched(path: Path) -> float:
    latest = path.stat().st_mtime
    for child in path.iterdir():
        with contextlib.suppress(OSError):
            latest = max(latest, child.stat().st_mtime)
    return latest


def _remove_stale_tmp(cache_root: Path, own: str | None = None) -> None:
    """Remove the ``.tmp-*`` build directories of builders that are gone.

    ``own``: the cache name whose lock this process holds; a ``.tmp-<own>-*`` directory was left
    by an earlier holder of that lock, which is gone. For another name, the builder is gone
    when its lock can be taken (:func:`_builder_gone`). A directory of no known lock, or seen
    where locks do not work, is removed once nobody has written to it for hours.
    """
    now = time.time()
    names = sorted((p.name[1:-len(".lock")] for p in cache_root.glob(".*.lock")), key=len, reverse=True)
    for tmp in cache_root.glob(".tmp-*"):
        if not tmp.is_dir():
            continue
        name = next((n for n in names if tmp.name.startswith(f".tmp-{n}-")), None)
        with contextlib.suppress(OSError):
            if name is not None and (name == own or _builder_gone(cache_root / f".{name}.lock")):
                shutil.rmtree(tmp, ignore_errors=True)
            elif now - _last_touched(tmp) > STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)


def _write_arrays(reader: CorpusReader, tmp: Path, progress: bool) -> tuple[int, list[str], str]:
    """Stream every block of ``reader`` into ``tmp``; return (n, recording ids, signals checksum)."""
    from tqdm.auto import tqdm

    spec = reader.spec
    sig_hash = _hasher(_HASH_ALGO)
    recordings: list[str] = []
    rec_subject: dict[str, int] = {}
    n = 0
    with contextlib.ExitStack() as stack:
        files = {name: stack.enter_context(open(tmp / f"{name}.bin", "wb")) for name in _ARRAYS}
        blocks = stack.enter_context(tqdm(reader.iter_blocks(), desc=f"caching {spec.name}", unit="rec",
                                          disable=not progress))
        for block in blocks:
            block.validate(spec, source=f"{spec.name} recording {block.recording!r}")
            name = str(block.recording)
            if name in rec_subject:
                raise DataError(f"{spec.name}: recording {name!r} was yielded twice (subjects "
                                f"{rec_subject[name]} and {block.subject}); recording ids must be unique")
            rec_subject[name] = int(block.subject)
            m = len(block.y)
            if m == 0:
                continue
            sig = np.ascontiguousarray(block.x, dtype=_ARRAYS["signals"][0]).tobytes()
            sig_hash.update(sig)
            files["signals"].write(sig)
            files["labels"].write(block.y.astype(_ARRAYS["labels"][0]).tobytes())
            files["subjects"].write(np.full(m, block.subject, dtype=_ARRAYS["subjects"][0]).tobytes())
            files["recordings"].write(np.full(m, len(recordings), dtype=_ARRAYS["recordings"][0]).tobytes())
            files["starts"].write(block.start.astype(_ARRAYS["starts"][0]).tobytes())
            recordings.append(name)
            n += m
        for f in files.values():
            f.flush()
            os.fsync(f.fileno())
    return n, recordings, sig_hash.hexdigest()


def _build(reader: CorpusReader, tmp: Path, key: str, preprocess: dict[str, Any] | None,
           progress: bool) -> None:
    spec = reader.spec
    n, recordings, signals_checksum = _write_arrays(reader, tmp, progress)
    if n == 0:
        raise DataError(f"{spec.name}: the reader yielded no windows (root: "
                        f"{reader.config().get('root')!r}); "
                        f"check that the corpus is there in its public layout")
    table: dict[str, Any] = {}
    for name, (dtype, ndim) in _ARRAYS.items():
        path = tmp / f"{name}.bin"
        shape = [n, spec.n_chans, spec.n_times] if ndim == 3 else [n]
        nbytes = int(np.prod(shape)) * dtype.itemsize
        entry: dict[str, Any] = {"file": path.name, "dtype": dtype.str, "shape": shape, "nbytes": nbytes}
        if name == "signals":
            entry["checksum"] = signals_checksum
            entry["edge_checksums"] = [_file_digest(path, _HASH_ALGO, off, ln) for off, ln in _edges(nbytes)]
        else:
            entry["checksum"] = _digest(path.read_bytes(), _HASH_ALGO)
        if path.stat().st_size != nbytes:  # a reader that lied about its shapes would land here
            raise DataError(f"{spec.name}: wrote {path.stat().st_size} bytes of {name}, expected {nbytes}")
        table[name] = entry
    manifest = {
        "format_version": CACHE_FORMAT_VERSION,
        "key": key,
        "spec": spec.to_dict(),
        "reader": reader.config(),
        "preprocess": preprocess,
        "n_windows": n,
        "checksum_algorithm": _HASH_ALGO,
        "arrays": table,
        "recordings": recordings,
        "created": time.time(),
        "created_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # The manifest goes last: a directory without one is never a cache.
    with open(tmp / MANIFEST, "w") as f:
        f.write(json.dumps(manifest, indent=1, default=_json_default))
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)


def load_or_build(reader: CorpusReader, cache_root: str | Path, preprocess: dict[str, Any] | None = None,
                  progress: bool = True, rebuild: bool = False, verify: Verify = "quick") -> WindowCache:
    """Load the cache of ``reader``'s windows under ``cache_root``, building it first if needed.

    Args:
        reader: any :class:`~biosig_lightning.data.spec.CorpusReader`.
        cache_root: directory holding one ``<corpus>-<key>`` directory per configuration.
        preprocess: settings of any processing outside the reader's ``config()`` that the
            caller wants reflected in the cache key; recorded in the manifest.
        progress: show a tqdm bar over the reader's recordings while building.
        rebuild: build again even if a valid cache exists (it is replaced atomically).
        verify: ``"quick"`` (default) or ``"full"`` checksum verification on load.

    Raises:
        CacheError: an existing cache directory is damaged or does not match ``reader``.
        DataError: the reader's data is malformed or yields no windows.
    """
    cache_root = Path(cache_root)
    _check_cache_root(cache_root)
    try:
        return _load_or_build(reader, cache_root, preprocess, progress, rebuild, verify)
    except OSError as err:
        # the disk refusing a write under the cache (full, read-only): one line naming the cache, not a
        # traceback; an unreadable corpus file (its name is elsewhere) is the reader's to report
        inside = err.filename is None or Path(err.filename).resolve().is_relative_to(cache_root.resolve())
        if not (is_storage_error(err) and inside):
            raise
        raise CacheError(storage_message(err, "the window cache", cache_root,
                                         "free space there, or point --data.init_args.cache_dir (or "
                                         "BIOSIG_CACHE) "
                                         "at a writable directory")) from err


def _check_cache_root(cache_root: Path) -> None:
    """A cache directory that is a file, or lies below one, is one line naming both (not
    ``FileExistsError``)."""
    for path in (cache_root, *cache_root.parents):
        if path.exists():
            if not path.is_dir():
                below = "" if path == cache_root else f" (it lies below {path})"
                raise CacheError(f"window cache {cache_root}: {path} is a file, not a directory{below}; "
                                 f"point "
                                 "BIOSIG_CACHE (or --data.init_args.cache_dir) at a directory")
            return


def _load_or_build(reader: CorpusReader, cache_root: Path, preprocess: dict[str, Any] | None, progress: bool,
                   rebuild: bool, verify: Verify) -> WindowCache:
    cache_root.mkdir(parents=True, exist_ok=True)
    spec = reader.spec
    key = cache_key(reader.config(), preprocess)
    final = cache_root / f"{spec.name}-{key}"
    called = time.time()

    if not rebuild and final.exists():
        try:
            return load_cache(final, key, spec, verify)
        except CacheError:
            pass  # maybe caught mid-swap by a concurrent rebuild: look again under the lock

    with _locked(cache_root / f".{final.name}.lock") as held:
        if final.exists():
            if not rebuild:  # another process built it while we waited for the lock
                return load_cache(final, key, spec, verify)
            with contextlib.suppress(Exception):  # a rebuild someone finished after our call started
                cache = load_cache(final, key, spec, verify)
                if float(cache.manifest.get("created", 0)) >= called:
                    return cache
        _remove_stale_tmp(cache_root, own=final.name if held else None)
        tmp = Path(tempfile.mkdtemp(dir=cache_root, prefix=f".tmp-{final.name}-"))
        try:
            _build(reader, tmp, key, preprocess, progress)
            if final.exists() and rebuild:
                # Move the old cache aside first: a directory cannot be renamed onto a full one.
                # Processes that memory-mapped it keep reading the unlinked files safely.
                old = Path(tempfile.mkdtemp(dir=cache_root, prefix=f".tmp-{final.name}-old-"))
                os.replace(final, old / "cache")
                shutil.rmtree(old, ignore_errors=True)
            try:
                os.replace(tmp, final)
            except OSError:
                if not final.exists():
                    raise
                # A concurrent builder won the rename (the lock did not hold): use its cache.
                shutil.rmtree(tmp, ignore_errors=True)
            _fsync_dir(cache_root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return load_cache(final, key, spec, verify)
