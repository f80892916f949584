"""SPDTransNet's CPU kernels: SP-MHA with heads padded to 8 columns and its maps through numba.

Switched on by :func:`enable` (:func:`biosig_lightning.accel.enable_spdtransnet_cpu`, the task's
``cpu_kernels: true``), which turns each :class:`~biosig_lightning.models.spdtransnet.SPMultiheadAttention`
of a model into a :class:`CPUSPMultiheadAttention` (same parameters, same mathematics). Two changes,
each kept by a whole-training-step measurement (``benchmarks/results/spdtransnet_kernels.json``); the
plain model is the reference:

* **heads padded to a multiple of 8 columns**: q and k of each head get zero columns (the scores are
  the same); the CPU's products over 39-wide heads (d = 351, h = 9) run slower than over 40-wide ones.
* **SP-MHA's maps through numba** (:mod:`.map_kernels`, the ``fast`` extra): dropout, head
  combination and backward's elementwise work in one pass per chunk; when one call's maps take at
  most :data:`KEEP_MAPS_BYTES`, they are kept for backward with the masks in their sign bits instead
  of recomputed, on pooled memory (:func:`_slab`). Dropout masks are Bernoulli(1 - p) draws from SFC64
  streams (numpy) seeded by one 63-bit draw from torch's generator (so ``torch.manual_seed`` makes a
  run reproducible, and activation checkpointing, which restores torch's RNG state, redraws the same
  masks), cut into blocks of 2**20 elements, each from its own stream ``(seed, stream, block)``, drawn
  in parallel threads (numpy releases the GIL); an element is dropped when a uniform 16-bit integer
  is ``< round(p * 2**16)``, so the drop probability is ``p`` to within ``2**-17``. Without numba the
  plain :class:`~biosig_lightning.models.spdtransnet.recompute.SPAttention` runs.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import nn

from biosig_lightning.accel import map_kernels
from biosig_lightning.models.spdtransnet import recompute
from biosig_lightning.models.spdtransnet.attention import Factors, SPMultiheadAttention
from biosig_lightning.models.spdtransnet.recompute import draw_seed

__all__ = ["KEEP_MAPS_BYTES", "CPUSPMultiheadAttention", "SPAttention", "drop_mask", "enable", "mask_words",
           "release_workspaces"]

# attention-map elements per chunk: 16 MiB in float32, stays in a large L2/L3 cache
_MAP_CHUNK = 1 << 22
#: heads are padded with zero columns to a multiple of this
HEAD_ALIGN = 8


_MASK_BLOCK = 1 << 20
_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def _pool() -> ThreadPoolExecutor | None:
    """Threads for the mask draws (as many as torch's intra-op threads); rebuilt after a fork."""
    global _POOL
    workers = torch.get_num_threads()
    if workers < 2:
        return None
    if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] != workers:
        _POOL = (os.getpid(), workers, ThreadPoolExecutor(workers, thread_name_prefix="biosig-masks"))
    return _POOL[2]


def _threshold(p: float) -> np.uint16:
    """Words below this are drops: ``round(p 2^16)``."""
    return np.uint16(min(round(p * 2**16), 2**16 - 1))


def _raw_words(seed: int, stream: int, start: int, m: int) -> np.ndarray:
    """The 16-bit words of elements ``start .. start + m`` (one block) of the mask ``(seed, stream)``."""
    gen = np.random.SFC64(np.random.SeedSequence([seed, stream, start // _MASK_BLOCK]))
    return gen.random_raw((m + 3) // 4).view(np.uint16)[:m]


def mask_words(n: int, seed: int, stream: int = 0) -> np.ndarray:
    """The ``n`` 16-bit words of the mask ``(seed, stream)`` (drawn by blocks in the pool threads); an
    element is dropped where its word is below :func:`_threshold` ``(p)``, as in :func:`drop_mask`."""
    out = np.empty(n, dtype=np.uint16)

    def fill(start: int) -> None:
        m = min(_MASK_BLOCK, n - start)
        out[start:start + m] = _raw_words(seed, stream, start, m)

    _blockwise(n, fill)
    return out


def _blockwise(n: int, fill: Any) -> None:
    starts = range(0, n, _MASK_BLOCK)
    pool = _pool() if len(starts) > 1 else None
    if pool is None:
        for start in starts:
            fill(start)
    else:
        list(pool.map(fill, starts))


def drop_mask(shape: tuple[int, ...], p: float, seed: int, stream: int = 0) -> torch.Tensor:
    """``bool`` mask of ``shape``, each element True (dropped) with probability ``p``: the masks that
    :class:`SPAttention` draws (module docstring), materialised (for tests)."""
    return torch.from_numpy(mask_words(math.prod(shape), seed, stream) < _threshold(p)).view(shape)


_LOCAL = threading.local()
_WORKSPACES = 16


def _workspace(name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A buffer of ``shape`` (``like``'s dtype and device) that this thread keeps under ``name`` from call
    to call, for SP-MHA's chunk temporaries, which are neither saved nor returned.

    Why: glibc serves allocations above 32 MiB by ``mmap`` and unmaps them on free, so a fresh large
    temporary costs its page faults again on every pass. Buffers are kept per thread for the last
    :data:`_WORKSPACES` (name, shape, dtype, device) keys, so the intra- and inter-epoch encoders each
    keep theirs; :func:`release_workspaces` frees them.
    """
    bufs: dict[tuple, torch.Tensor] = _LOCAL.__dict__.setdefault("bufs", {})
    key = (name, tuple(shape), like.dtype, like.device)
    buf = bufs.pop(key, None)
    if buf is None:
        buf = like.new_empty(shape)
    bufs[key] = buf  # most recently used last
    while len(bufs) > _WORKSPACES:
        bufs.pop(next(iter(bufs)))
    return buf


def release_workspaces() -> None:
    """Free this thread's workspaces (:func:`_workspace`) and the pool of :func:`_slab`."""
    _LOCAL.__dict__.pop("bufs", None)
    with _SLAB_LOCK:
        _SLABS.clear()


_SLABS: list[np.ndarray] = []
_SLAB_LOCK = threading.Lock()
_SLAB_FREE_REFS: list[int] = []  # sys.getrefcount of a slab that only the pool holds, in this interpreter
#: bytes of slabs the pool keeps referenced (slabs in use stay alive through their tensors regardless)
_SLAB_BYTES = 2 << 30


def _slab(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor of ``shape``, on memory that a pool keeps once the tensor is freed.

    For tensors saved from a forward pass to its backward (SP-MHA's signed maps): a fresh 133 MB
    tensor costs its page faults every step on glibc (see :func:`_workspace`), but unlike a
    workspace it must stay untouched until its backward has run. A slab is a numpy array; the tensor
    holds a reference to it, so a slab whose only reference is the pool's is free for the next call.
    """
    n = math.prod(shape)
    npdtype = torch.empty(0, dtype=dtype).numpy().dtype
    with _SLAB_LOCK:
        for i in range(len(_SLABS)):
            if (
                _SLABS[i].size == n
                and _SLABS[i].dtype == npdtype
                and sys.getrefcount(_SLABS[i]) == _SLAB_FREE_REFS[0]
            ):
                return torch.from_numpy(_SLABS[i]).view(shape)
        _SLABS.append(np.empty(n, dtype=npdtype))
        if not _SLAB_FREE_REFS:
            _SLAB_FREE_REFS.append(sys.getrefcount(_SLABS[-1]))
        while len(_SLABS) > 1 and sum(a.nbytes for a in _SLABS) > _SLAB_BYTES:
            _SLABS.pop(0)
        return torch.from_numpy(_SLABS[-1]).view(shape)


def _chunks(b: int, per_item: int) -> list[slice]:
    step = max(1, _MAP_CHUNK // max(per_item, 1))
    return [slice(i, min(i + step, b)) for i in range(0, b, step)]


class SPAttention(torch.autograd.Function):
    """:class:`~biosig_lightning.models.spdtransnet.recompute.SPAttention` (its docstring gives the
    formulas) on CPU float32/float64 through the numba map kernels, with this module's dropout masks.

    Dropout and combination run in one pass per chunk; when one call's maps take at most
    :data:`KEEP_MAPS_BYTES` (a batch of 4 sequences of the published model: 133 MB per intra-epoch
    layer), they are kept for backward with the masks in their sign bits instead of being recomputed,
    and backward's elementwise work is one more pass. Larger calls recompute them. Under autocast
    (``q``, ``k`` in bfloat16) the maps stay float32 and the three products with ``x`` take bfloat16
    operands, as in the plain function.
    """

    @staticmethod
    def _low(dtypes: tuple[torch.dtype, ...]) -> torch.dtype | None:
        """The half dtype of autocast's ``q`` (``dtypes[0]``), for the products with ``x``; else ``None``."""
        return dtypes[0] if dtypes[0] in (torch.bfloat16, torch.float16) else None

    @staticmethod
    def _signed_maps(q: torch.Tensor, k: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The softmax maps of ``q k^T`` written into ``out`` (in place, no temporary)."""
        torch.matmul(q, k.transpose(-1, -2), out=out)
        return torch.ops.aten._softmax.out(out, -1, False, out=out)

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor,  # noqa: PLR0913
                p: float, seed: int) -> torch.Tensor:
        ctx.dtypes = tuple(t.dtype for t in (q, k, x, w))
        compute = recompute._compute_dtype(*ctx.dtypes)
        with torch.autocast(device_type="cpu", enabled=False):
            q, k, x, w = (t.to(compute) for t in (q, k, x, w))
            low = SPAttention._low(ctx.dtypes)
            xl = x.to(low) if low else x
            b, h, t, _ = q.shape
            out = torch.empty_like(x)
            scale = 1.0 / (1.0 - p) if p > 0 else 1.0
            chunks = _chunks(b, h * t * t)
            keep = b * h * t * t * x.element_size() <= KEEP_MAPS_BYTES
            kept = _slab((b, h, t, t), x.dtype) if keep else None
            ws = (w * scale).detach().numpy()
            for c, sl in enumerate(chunks):
                maps = kept[sl] if kept is not None else _chunk_buffer("sp_maps", chunks, sl, (h, t, t), x)
                comb = _chunk_buffer("sp_comb", chunks, sl, (t, t), x)
                SPAttention._combine(SPAttention._signed_maps(q[sl], k[sl], maps), p, seed, c, ws, comb,
                                     encode=kept is not None)
                recompute._bmm(comb, xl[sl], out[sl])
        ctx.save_for_backward(q, k, x, w, *([kept] if kept is not None else []))
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def _combine(maps: torch.Tensor, p: float, seed: int, stream: int, ws: np.ndarray,  # noqa: PLR0913
                 comb: torch.Tensor, encode: bool) -> None:
        raw = mask_words(maps.numel(), seed, stream) if p > 0 else None
        map_kernels.combine(maps.numpy(), raw, int(_threshold(p)), ws, comb.numpy(), encode, _pool(),
                            torch.get_num_threads())

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        with torch.autocast(device_type="cpu", enabled=False):
            q, k, x, w, *kept_maps = ctx.saved_tensors
            kept = kept_maps[0] if kept_maps else None
            dout = dout.to(x.dtype).contiguous()
            p, seed = ctx.p, ctx.seed
            b, h, t, _ = q.shape
            scale = 1.0 / (1.0 - p) if p > 0 else 1.0
            ws = (w * scale).detach().numpy()
            dq, dk, dx = torch.empty_like(q), torch.empty_like(k), torch.empty_like(x)
            dw = torch.zeros(h, dtype=q.dtype)
            chunks = _chunks(b, h * t * t)
            low = SPAttention._low(ctx.dtypes)
            xl, dl = (x.to(low), dout.to(low)) if low else (x, dout)
            for c, sl in enumerate(chunks):
                comb = _chunk_buffer("sp_comb", chunks, sl, (t, t), x)
                if kept is not None:
                    signed = kept[sl]
                else:
                    signed = _chunk_buffer("sp_maps", chunks, sl, (h, t, t), x)
                    SPAttention._combine(SPAttention._signed_maps(q[sl], k[sl], signed), p, seed, c, ws, comb,
                                         encode=True)
                g = recompute._bmm(dl[sl], xl[sl].transpose(1, 2),
                                   _chunk_buffer("sp_g", chunks, sl, (t, t), x))
                ds = _chunk_buffer("sp_ds", chunks, sl, (h, t, t), x)
                r = map_kernels.backward(signed.numpy(), g.numpy(), ws, ds.numpy(), comb.numpy(), _pool(),
                                         torch.get_num_threads())
                dw += torch.from_numpy(r) * scale
                recompute._bmm(comb.transpose(1, 2), dl[sl], dx[sl])
                torch.matmul(ds, k[sl], out=dq[sl])
                torch.matmul(ds.transpose(-1, -2), q[sl], out=dk[sl])
        grads = (dq, dk, dx, dw)
        return (*(g.to(dt) for g, dt in zip(grads, ctx.dtypes, strict=True)), None, None)


#: the largest maps (bytes, over one call's sequences and heads) that are kept for backward
KEEP_MAPS_BYTES = 1 << 29


def _chunk_buffer(name: str, chunks: list[slice], sl: slice,
                  shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """Chunk ``sl``'s part of a per-thread workspace sized for the largest chunk of ``chunks``."""
    step = chunks[0].stop - chunks[0].start
    return _workspace(name, (step, *shape), like)[: sl.stop - sl.start]


def _numba_maps(x: torch.Tensor) -> bool:
    """Whether :class:`SPAttention` takes ``x``: on the CPU, float32/float64, numba available."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and map_kernels.available()


class CPUSPMultiheadAttention(SPMultiheadAttention):
    """:class:`~biosig_lightning.models.spdtransnet.SPMultiheadAttention` whose ``fused`` way (``auto``'s
    choice) pads each head to a multiple of :data:`HEAD_ALIGN` columns and, where numba is available,
    forms the maps through :class:`SPAttention`. Other ways, and inputs off the CPU, run as the plain
    module."""

    def forward(self, x: torch.Tensor, factors: Factors | None = None) -> torch.Tensor:
        if self.impl not in ("auto", "fused") or x.device.type != "cpu":
            return super().forward(x, factors)
        dh = x.shape[-1] // self.heads
        q, k = self._qk_heads(x, -(-dh // HEAD_ALIGN) * HEAD_ALIGN, factors)
        p = self.dropout if self.training else 0.0
        fn = SPAttention if _numba_maps(x) else recompute.SPAttention
        return fn.apply(q, k, x.contiguous(), self.weights(), p, draw_seed() if p > 0 else 0)


def enable(model: nn.Module) -> int:
    """Turn every SP-MHA module of ``model`` into a :class:`CPUSPMultiheadAttention` (in place: same
    parameters and state dict); returns how many were switched (those already switched not counted)."""
    n = 0
    for module in model.modules():
        if type(module) is SPMultiheadAttention:
            module.__class__ = CPUSPMultiheadAttention
            n += 1
    return n
