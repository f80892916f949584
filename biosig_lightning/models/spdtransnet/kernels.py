"""Memory- and time-lean autograd functions for SPDTransNet on CPUs: SP-MHA, dropout, the feed-forward block.

Same mathematics as the plain torch expressions they replace (each docstring gives it); what changes is
what is kept for the backward pass and how the dropout masks are drawn:

* dropout masks are Bernoulli(1 - p) draws from SFC64 streams (numpy) seeded by one 63-bit draw from
  torch's generator (so ``torch.manual_seed`` makes a run reproducible, and activation checkpointing,
  which restores torch's RNG state, redraws the same masks). A mask is cut into blocks of 2**20
  elements, each from its own stream ``(seed, stream, block)``, so the blocks are drawn in parallel
  threads (numpy releases the GIL) and the mask does not depend on the thread count. An element is
  dropped when a uniform 16-bit integer is ``< round(p * 2**16)``, so the drop probability is ``p``
  to within ``2**-17`` (0.1 -> 0.100006). torch's CPU ``bernoulli_`` (a Mersenne twister, one draw
  per element, then a float mask and two multiplications) took about a sixth of a training step at
  the published size; SFC64's raw stream is several times faster (and 40 % faster than PCG64's
  on the task machine: 0.42 against 0.73 ns per 64-bit word) and one 64-bit draw serves four
  elements. No mask is kept: :func:`apply_drop` draws and applies each block in the same thread,
  and a backward pass draws its mask again from the seed (``drop_mask`` materialises a mask, for
  tests and other devices).
* :class:`SPAttention` does not keep autograd's h ``T x T`` maps and their masks. On GPUs and without
  numba it keeps ``q``, ``k``, ``x``, the head weights and one seed, and recomputes the maps (and
  regenerates their dropout masks) chunk by chunk in backward, so its memory is that of the inputs
  whatever h and T. With numba on CPUs (:mod:`.map_kernels`), a call whose maps fit
  :data:`KEEP_MAPS_BYTES` keeps them once, with the masks in their sign bits, on pooled memory
  (:func:`_slab`), and backward recomputes nothing.
* :func:`linear` computes a linear map through zero-padded weights whose sizes are multiples of 16, so
  that every product of the forward and backward pass writes a 16-aligned number of columns. The
  widths of the published model (351, 1035) are not: one core's float32 GEMM on the task machine
  (MKL on AMD EPYC), over 17,640 tokens, ran the map 351 -> 1,035 at 54 GFLOP/s and 351 -> 1,040 at
  79, and 1,035 -> 351 at 57 against 93 for 1,035 -> 352 (``benchmarks/README.md``).
* :class:`FeedForward` is the encoder layer's ``Linear -> ReLU -> Dropout -> Linear`` as one function
  over a zero-padded hidden layer, with ReLU and dropout in place.
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

from biosig_lightning.models.spdtransnet import map_kernels

__all__ = ["AlignedLinear", "FeedForward", "SPAttention", "apply_drop", "draw_seed", "drop_mask", "dropout", "feed_forward",
           "linear", "mask_words", "release_workspaces"]

# attention-map elements per chunk. CPU: 16 MiB in float32, stays in a large L2/L3 cache. GPU: each chunk
# costs a dozen kernel launches, so chunks are as large as a bounded transient (256 MiB of maps) allows
_MAP_CHUNK = 1 << 22
_MAP_CHUNK_GPU = 1 << 26


def draw_seed() -> int:
    """One seed drawn from torch's default generator (what ``torch.manual_seed`` controls)."""
    return int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())


_MASK_BLOCK = 1 << 20
_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def _pool() -> ThreadPoolExecutor | None:
    """Threads for the mask draws (as many as torch's intra-op threads); rebuilt after a fork."""
    global _POOL
    workers = torch.get_num_threads()
    if workers < 2:
        return None
    if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] != workers:
        _POOL = (os.getpid(), workers, ThreadPoolExecutor(workers, thread_name_prefix="biosig-dropout"))
    return _POOL[2]


def _threshold(p: float) -> np.uint16:
    """Words below this are drops: ``round(p 2^16)``."""
    return np.uint16(min(round(p * 2**16), 2**16 - 1))


def _raw_words(seed: int, stream: int, start: int, m: int) -> np.ndarray:
    """The 16-bit words of elements ``start .. start + m`` (one block) of the mask ``(seed, stream)``."""
    gen = np.random.SFC64(np.random.SeedSequence([seed, stream, start // _MASK_BLOCK]))
    return gen.random_raw((m + 3) // 4).view(np.uint16)[:m]


def _drop_words(seed: int, stream: int, start: int, m: int, p: float) -> np.ndarray:
    """``bool`` drops of elements ``start .. start + m`` (one block) of the mask ``(seed, stream)``."""
    return _raw_words(seed, stream, start, m) < _threshold(p)


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


def drop_mask(shape: tuple[int, ...], p: float, seed: int, stream: int = 0,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """``bool`` mask of ``shape``, each element True (dropped) with probability ``p`` (module docstring).

    ``(seed, stream)`` fixes the draw; different streams are independent (numpy ``SeedSequence``).
    """
    n = int(np.prod(shape))
    if torch.device(device).type != "cpu":
        gen = torch.Generator(device=device).manual_seed((seed + 0x9E3779B97F4A7C15 * stream) % 2**63)
        return torch.rand(shape, generator=gen, device=device) < p
    out = np.empty(n, dtype=bool)

    def fill(start: int) -> None:
        m = min(_MASK_BLOCK, n - start)
        out[start:start + m] = _drop_words(seed, stream, start, m, p)

    _blockwise(n, fill)
    return torch.from_numpy(out).view(shape)


def apply_drop(x: torch.Tensor, p: float, seed: int, stream: int = 0, scale: float = 1.0,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """``out = x * ~drop_mask(x.shape, p, seed, stream) * scale`` (``out`` defaults to ``x``: in place).

    On the CPU the mask is never materialised: each block of elements is drawn and applied in the same
    pool thread while it is in cache (a ``bool`` ``masked_fill_`` of a ``17,640 x 1,040`` tensor took
    20-40 ms on the task machine; drawing and applying by blocks in two threads, 12 ms).
    """
    out = x if out is None else out
    # half precision without a scale: numpy has no bfloat16, but zeroing a 16-bit float is zeroing its bits
    half = x.dtype in (torch.bfloat16, torch.float16) and out.dtype == x.dtype and scale == 1.0
    if x.device.type != "cpu" or (x.dtype not in (torch.float32, torch.float64) and not half) or not (
            x.is_contiguous() and out.is_contiguous()):
        drop = drop_mask(tuple(x.shape), p, seed, stream, x.device)
        return torch.mul(x.masked_fill(drop, 0.0), scale, out=out)
    if half:
        src, dst = (t.detach().reshape(-1).view(torch.int16).numpy() for t in (x, out))
    else:
        src, dst = x.detach().reshape(-1).numpy(), out.detach().reshape(-1).numpy()
    factor = dst.dtype.type(scale)

    def fill(start: int) -> None:
        m = min(_MASK_BLOCK, src.size - start)
        block = dst[start:start + m]
        np.multiply(src[start:start + m], ~_drop_words(seed, stream, start, m, p), out=block)
        if scale != 1.0:
            np.multiply(block, factor, out=block)

    _blockwise(src.size, fill)
    return out


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:
        ctx.seed, ctx.p, ctx.scale = draw_seed(), p, 1.0 / (1.0 - p)
        return apply_drop(x.contiguous(), p, ctx.seed, scale=ctx.scale, out=torch.empty_like(x))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # the mask is drawn again from its seed rather than kept
        return apply_drop(grad.contiguous(), ctx.p, ctx.seed, scale=ctx.scale, out=torch.empty_like(grad)), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout ``x * m / (1 - p)``, ``m ~ Bernoulli(1 - p)``; keeps only a seed for backward."""
    if not training or p == 0.0:
        return x
    return _Dropout.apply(x, p)


_ALIGN = 16  # float32 elements: one 64-byte cache line, an AVX-512 register


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 had no device argument
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


_LOCAL = threading.local()
_WORKSPACES = 16


def _workspace(name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A buffer of ``shape`` (``like``'s dtype and device) that this thread keeps under ``name`` from call
    to call, for the large temporaries of a backward pass that are neither saved nor returned.

    Why: glibc serves allocations above 32 MiB by ``mmap`` and unmaps them on free, so a fresh
    ``17,640 x 1,040`` float32 temporary costs about 18,000 page faults on every backward pass; the
    product that first writes it ran at 95 GFLOP/s against 150-170 into warm memory (two threads,
    task machine). Buffers are kept per thread for the last :data:`_WORKSPACES` (name, shape, dtype,
    device) keys, so the intra- and inter-epoch encoders (17,640 and 840 tokens at batch 4) each keep
    theirs (SP-MHA's chunk buffers included); :func:`release_workspaces` frees them.
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
    """Free this thread's backward-pass workspaces (:func:`_workspace`) and the pool of :func:`_slab`."""
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
    tensor costs some 32,000 page faults every step on glibc (see :func:`_workspace`), but unlike a
    workspace it must stay untouched until its backward has run. A slab is a numpy array; the tensor
    holds a reference to it, so a slab whose only reference is the pool's is free for the next call.
    """
    n = math.prod(shape)
    npdtype = torch.empty(0, dtype=dtype).numpy().dtype
    with _SLAB_LOCK:
        for i in range(len(_SLABS)):
            if _SLABS[i].size == n and _SLABS[i].dtype == npdtype and sys.getrefcount(_SLABS[i]) == _SLAB_FREE_REFS[0]:
                return torch.from_numpy(_SLABS[i]).view(shape)
        _SLABS.append(np.empty(n, dtype=npdtype))
        if not _SLAB_FREE_REFS:
            _SLAB_FREE_REFS.append(sys.getrefcount(_SLABS[-1]))
        while len(_SLABS) > 1 and sum(a.nbytes for a in _SLABS) > _SLAB_BYTES:
            _SLABS.pop(0)
        return torch.from_numpy(_SLABS[-1]).view(shape)


def _padded_grad(name: str, g: torch.Tensor, width: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``g`` (2-D) with zero columns up to ``width``, in the workspace ``name`` (its contents are
    overwritten: use it before the next call with the same name on this thread); cast to ``dtype``."""
    out = _workspace(name, (g.shape[0], width), g if dtype in (None, g.dtype) else g.new_empty(0, dtype=dtype))
    out[:, :g.shape[1]] = g
    out[:, g.shape[1]:] = 0.0
    return out


class AlignedLinear(torch.autograd.Function):
    """``y = x W^T + b`` (``W`` of shape ``(n, k)``), each product run with a 16-aligned output width.

    ``W`` is copied once per call into a zero ``(n', k')`` matrix (``n'``, ``k'``: ``n``, ``k`` rounded
    up to multiples of 16) and ``b`` into a zero ``n'`` vector. Forward: ``x W'^T + b'`` has ``n'``
    columns, the last ``n' - n`` of them zero, and the output is its first ``n`` columns (a view).
    Backward, with ``G'`` the incoming gradient padded with zero columns to ``n'``: ``dx`` is the first
    ``k`` columns of ``G' W'`` (``k'`` columns), ``dW`` the transpose of ``x^T G'`` (``n'`` columns)
    cut to ``(n, k)``, ``db`` the column sums of ``G``. The zero padding adds nothing to any sum,
    so the results are those of ``F.linear`` up to float round-off (the products are blocked
    differently).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        n, k = weight.shape
        w = weight.new_zeros(_aligned(n), _aligned(k))
        w[:n, :k] = weight
        x2 = x.reshape(-1, k)
        if bias is None:
            out = x2 @ w[:, :k].t()
        else:
            b = bias.new_zeros(w.shape[0])
            b[:n] = bias
            out = torch.addmm(b, x2, w[:, :k].t())
        ctx.save_for_backward(x2, w)
        ctx.lead, ctx.n, ctx.has_bias = x.shape[:-1], n, bias is not None
        return out[:, :n].unflatten(0, ctx.lead)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, w = ctx.saved_tensors
        n, k = ctx.n, x2.shape[1]
        g = grad.reshape(-1, n)
        g_pad = _padded_grad("linear_grad", g, w.shape[0])
        dx = (g_pad @ w)[:, :k].unflatten(0, ctx.lead) if ctx.needs_input_grad[0] else None
        dw = (x2.t() @ g_pad)[:, :n].t() if ctx.needs_input_grad[1] else None
        db = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


def _padded(weight: torch.Tensor, rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
    out = weight.new_zeros(rows, cols)
    out[:weight.shape[0], :weight.shape[1]] = weight if scale == 1.0 else weight * scale
    return out


class FeedForward(torch.autograd.Function):
    """``y = D(ReLU(x W1^T + b1)) W2^T + b2``, the encoder layer's feed-forward block, in one function.

    ``D`` is inverted dropout with rate ``p`` (``p = 0``: none). The hidden layer is kept only as
    ``H = ReLU(x W1^T + b1) * M`` (``M`` the keep mask), ``d_ff`` rounded up to a multiple of 16 with
    zero columns (zero rows of ``W1`` and zero bias), so each of the six products writes a 16-aligned
    number of columns (see :class:`AlignedLinear`) and ReLU and dropout run in place on it; the
    ``1 / (1 - p)`` scale rides on ``W2``. Backward, with ``G`` the incoming gradient padded to a
    16-aligned width and ``W2' = W2 / (1 - p)`` (padded): ``dW2 = (G^T H)/(1 - p)``,
    ``dH = (G W2') * [H > 0]`` (``H > 0`` exactly where the unit passed ReLU and was kept),
    ``dW1 = dH^T x``, ``db1 = sum dH``, ``dx = dH W1``. Compared with a ``Linear -> ReLU -> Dropout ->
    Linear`` chain this makes no padded copy of the hidden gradient, no separate ReLU output and no
    out-of-place masked copy: three fewer ``tokens x d_ff`` tensors per layer and pass, each of which
    costs fresh pages on a CPU.

    ``low`` (``None`` or ``torch.bfloat16``): the dtype of the six products, as CPU autocast would run
    the two ``Linear`` maps (``x``, ``W1``, ``W2``, ``H`` and the padded ``G`` in bfloat16, each product
    rounded to bfloat16), so under ``bf16-mixed`` the block keeps ``H`` in bfloat16 and still runs
    ReLU and dropout in place. ``y``, ``dx`` and the parameter gradients come back in the dtypes of
    ``x`` and the parameters; ``db1`` and ``db2`` are summed in float32.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,  # noqa: PLR0913
                b2: torch.Tensor, p: float, seed: int, low: torch.dtype | None = None) -> torch.Tensor:
        f, d = w1.shape
        fp, dp = _aligned(f), _aligned(d)
        scale = 1.0 / (1.0 - p) if p > 0 else 1.0
        dtype = low or x.dtype
        with torch.autocast("cpu", enabled=False):
            w1p, w2p = _padded(w1, fp, dp).to(dtype), _padded(w2, dp, fp, scale).to(dtype)
            b1p = b1.new_zeros(fp, dtype=dtype)
            b1p[:f] = b1
            b2p = b2.new_zeros(dp, dtype=dtype)
            b2p[:d] = b2
            x2 = x.reshape(-1, d).to(dtype)
            h = torch.addmm(b1p, x2, w1p[:, :d].t()).clamp_min_(0.0)
            if p > 0:
                apply_drop(h, p, seed)
            y = torch.addmm(b2p, h, w2p.t())
        ctx.save_for_backward(x2, h, w1p, w2p)
        ctx.lead, ctx.scale, ctx.f, ctx.dtypes = x.shape[:-1], scale, f, (x.dtype, w1.dtype, b1.dtype, w2.dtype, b2.dtype)
        return y[:, :d].to(x.dtype).unflatten(0, ctx.lead)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, h, w1p, w2p = ctx.saved_tensors
        d, f = x2.shape[1], ctx.f
        tx, tw1, tb1, tw2, tb2 = ctx.dtypes
        g = grad.reshape(-1, d)
        with torch.autocast("cpu", enabled=False):
            gp = _padded_grad("ff_grad", g, w2p.shape[0], h.dtype)
            dw2 = (gp.t() @ h)[:d] if ctx.needs_input_grad[3] else None
            db2 = g.sum(0, dtype=torch.promote_types(g.dtype, torch.float32)).to(tb2) if ctx.needs_input_grad[4] else None
            dh = torch.mm(gp, w2p, out=_workspace("ff_hidden_grad", tuple(h.shape), h))
            torch.ops.aten.threshold_backward.grad_input(dh, h, 0.0, grad_input=dh)  # dh * [h > 0], in place
            dw1 = (x2.t() @ dh).t()[:f].to(tw1) if ctx.needs_input_grad[1] else None
            db1 = dh.sum(0, dtype=torch.promote_types(dh.dtype, torch.float32))[:f].to(tb1) \
                if ctx.needs_input_grad[2] else None
            dx = (dh @ w1p)[:, :d].to(tx).unflatten(0, ctx.lead) if ctx.needs_input_grad[0] else None
            dw2 = (dw2[:, :f].to(tw2) * ctx.scale) if dw2 is not None else None
        return dx, dw1, db1, dw2, db2, None, None, None


def _autocast_dtype(device_type: str) -> torch.dtype:
    try:
        return torch.get_autocast_dtype(device_type)
    except AttributeError:  # torch < 2.4
        return torch.get_autocast_cpu_dtype()


def feed_forward(x: torch.Tensor, lin1: torch.nn.Linear, lin2: torch.nn.Linear, p: float,
                 training: bool) -> torch.Tensor:
    """``lin2(dropout(relu(lin1(x))))`` through :class:`FeedForward` on the CPU for float32/float64 ``x``
    (its products in bfloat16 under bfloat16 autocast); the plain chain otherwise."""
    p = p if training else 0.0
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return lin2(dropout(torch.relu(lin1(x)), p, training))
    low = None
    if _autocast_on("cpu"):
        if _autocast_dtype("cpu") != torch.bfloat16:
            return lin2(dropout(torch.relu(lin1(x)), p, training))
        low = torch.bfloat16
    return FeedForward.apply(x, lin1.weight, lin1.bias, lin2.weight, lin2.bias, p, draw_seed() if p > 0 else 0, low)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` on the CPU through :class:`AlignedLinear` when a width is not a multiple of 16 (float32
    or float64, outside autocast); plain ``F.linear`` otherwise (GPUs, autocast, aligned widths)."""
    n, k = weight.shape
    if (x.device.type != "cpu" or x.dim() < 2 or (n % _ALIGN == 0 and k % _ALIGN == 0) or _autocast_on("cpu")
            or x.dtype not in (torch.float32, torch.float64)):
        return torch.nn.functional.linear(x, weight, bias)
    return AlignedLinear.apply(x, weight, bias)


def _chunks(b: int, per_item: int, device: torch.device | None = None) -> list[slice]:
    limit = _MAP_CHUNK if device is None or device.type == "cpu" else _MAP_CHUNK_GPU
    step = max(1, limit // max(per_item, 1))
    return [slice(i, min(i + step, b)) for i in range(0, b, step)]


def _compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The promoted dtype of the inputs, at least float32 (half-precision inputs come from autocast)."""
    dtype = dtypes[0]
    for d in dtypes[1:]:
        dtype = torch.promote_types(dtype, d)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class SPAttention(torch.autograd.Function):
    """``out = sum_h w_h D_h(softmax(q_h k_h^T)) x`` (SP-MHA, eq. 2), without autograd's h stored maps.

    ``q`` and ``k`` are ``(B, h, T, d/h)`` with ``q`` already scaled by ``sqrt(d/h)^-1``; ``x`` is
    ``(B, T, d)`` (the unprojected values); ``w`` the h combination weights; ``D_h`` inverted dropout
    with rate ``p`` on each head's probabilities (masks from ``seed``, chunk by chunk).

    Backward, per chunk, with ``P_h`` the maps, ``M_h`` the masks, ``s = 1 / (1 - p)``,
    ``A = sum_h w_h s M_h P_h`` and ``G = dout x^T``: ``dx = A^T dout``,
    ``dw_h = s <M_h P_h, G>``, ``dP_h = w_h s M_h G``, ``dS_h = P_h (dP_h - rowsum(dP_h P_h))``
    ``= w_h s (E_h - P_h rowsum(E_h))`` with ``E_h = M_h P_h G`` (one product serves ``dw`` and ``dS``),
    ``dq_h = dS_h k_h``, ``dk_h = dS_h^T q_h``.

    Two ways, equal up to round-off and with the same masks:

    * torch (GPUs, and CPUs without numba): backward recomputes the maps and draws their masks again,
      so only ``q, k, x, w`` and the seed are kept, whatever h and T;
    * numba on CPUs (:mod:`.map_kernels`): dropout and combination in one pass per chunk; when one
      call's maps take at most :data:`KEEP_MAPS_BYTES` (a batch of 4 sequences of the published model:
      133 MB per intra-epoch layer), they are kept for backward with the masks in their sign bits
      instead of being recomputed, and backward's elementwise work is one more pass. Larger calls
      recompute them as the torch way does.

    Under autocast, ``q`` and ``k`` arrive in half precision: the scores ``q k^T``, the softmax, the
    dropout and the combination (and backward's elementwise work) stay in float32, while the three
    products with ``x`` (``A x``, ``dout x^T``, ``A^T dout``) take half-precision operands, as autocast
    runs ``bmm``; ``dq`` and ``dk`` come from float32 ``dS``. The output and ``dx`` are float32.
    """

    @staticmethod
    def _low(dtypes: tuple[torch.dtype, ...]) -> torch.dtype | None:
        """The half dtype of autocast's ``q`` (``dtypes[0]``), for the products with ``x``; else ``None``."""
        return dtypes[0] if dtypes[0] in (torch.bfloat16, torch.float16) else None

    @staticmethod
    def _bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = a @ b`` with ``a`` cast to ``b``'s dtype (``out`` float32 when ``b`` is half)."""
        if a.dtype == b.dtype == out.dtype:
            return torch.bmm(a, b, out=out)
        return out.copy_(torch.bmm(a.to(b.dtype), b))

    @staticmethod
    def _maps(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1)

    @staticmethod
    def _fast(x: torch.Tensor) -> bool:
        return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and map_kernels.available()

    @staticmethod
    def _signed_maps(q: torch.Tensor, k: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The softmax maps of ``q k^T`` written into ``out`` (in place, no temporary)."""
        torch.matmul(q, k.transpose(-1, -2), out=out)
        return torch.ops.aten._softmax.out(out, -1, False, out=out)

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor,  # noqa: PLR0913
                p: float, seed: int) -> torch.Tensor:
        # under bf16/fp16 autocast (any device) q and k arrive in half precision and x in float32: the
        # maps, softmax and combination run in float32 with autocast off, and so does backward
        ctx.dtypes = tuple(t.dtype for t in (q, k, x, w))
        compute = _compute_dtype(*ctx.dtypes)
        with torch.autocast(device_type=q.device.type, enabled=False):
            q, k, x, w = (t.to(compute) for t in (q, k, x, w))
            low = SPAttention._low(ctx.dtypes)
            xl = x.to(low) if low else x
            b, h, t, _ = q.shape
            out = torch.empty_like(x)
            scale = 1.0 / (1.0 - p) if p > 0 else 1.0
            chunks = _chunks(b, h * t * t, q.device)
            ctx.keep = SPAttention._fast(x) and b * h * t * t * x.element_size() <= KEEP_MAPS_BYTES
            if SPAttention._fast(x):
                kept = _slab((b, h, t, t), x.dtype) if ctx.keep else None
                ws = (w * scale).detach().numpy()
                for c, sl in enumerate(chunks):
                    maps = kept[sl] if kept is not None else _chunk_buffer("sp_maps", chunks, sl, (h, t, t), x)
                    comb = _chunk_buffer("sp_comb", chunks, sl, (t, t), x)
                    SPAttention._combine(SPAttention._signed_maps(q[sl], k[sl], maps), p, seed, c, ws, comb,
                                         encode=kept is not None)
                    SPAttention._bmm(comb, xl[sl], out[sl])
            else:
                kept = None
                ws = (w * scale).view(1, 1, h)
                for c, sl in enumerate(chunks):
                    maps = SPAttention._maps(q[sl], k[sl])
                    if p > 0:
                        apply_drop(maps, p, seed, c)
                    comb = (ws @ maps.view(maps.shape[0], h, t * t)).view(-1, t, t)
                    SPAttention._bmm(comb, xl[sl], out[sl])
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
        with torch.autocast(device_type=dout.device.type, enabled=False):
            q, k, x, w, *kept = ctx.saved_tensors
            dout = dout.to(x.dtype).contiguous()
            grads = (SPAttention._backward_fast if SPAttention._fast(x) else SPAttention._backward)(
                ctx, q, k, x, w, kept[0] if kept else None, dout)
            return (*(g.to(dt) for g, dt in zip(grads, ctx.dtypes, strict=True)), None, None)

    @staticmethod
    def _backward_fast(ctx: Any, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor,  # noqa: PLR0913
                       kept: torch.Tensor | None, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p, seed = ctx.p, ctx.seed
        b, h, t, _ = q.shape
        scale = 1.0 / (1.0 - p) if p > 0 else 1.0
        ws = (w * scale).detach().numpy()
        dq, dk, dx = torch.empty_like(q), torch.empty_like(k), torch.empty_like(x)
        dw = torch.zeros(h, dtype=q.dtype)
        chunks = _chunks(b, h * t * t, q.device)
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
            g = SPAttention._bmm(dl[sl], xl[sl].transpose(1, 2), _chunk_buffer("sp_g", chunks, sl, (t, t), x))
            ds = _chunk_buffer("sp_ds", chunks, sl, (h, t, t), x)
            r = map_kernels.backward(signed.numpy(), g.numpy(), ws, ds.numpy(), comb.numpy(), _pool(),
                                     torch.get_num_threads())
            dw += torch.from_numpy(r) * scale
            SPAttention._bmm(comb.transpose(1, 2), dl[sl], dx[sl])
            torch.matmul(ds, k[sl], out=dq[sl])
            torch.matmul(ds.transpose(-1, -2), q[sl], out=dk[sl])
        return dq, dk, dx, dw

    @staticmethod
    def _backward(ctx: Any, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w: torch.Tensor,  # noqa: PLR0913
                  _kept: None, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p, seed = ctx.p, ctx.seed
        b, h, t, _ = q.shape
        scale = 1.0 / (1.0 - p) if p > 0 else 1.0
        ws = w * scale
        dq, dk, dx = torch.empty_like(q), torch.empty_like(k), torch.empty_like(x)
        dw = torch.zeros(h, dtype=q.dtype, device=q.device)
        low = SPAttention._low(ctx.dtypes)
        xl, dl = (x.to(low), dout.to(low)) if low else (x, dout)
        for c, sl in enumerate(_chunks(b, h * t * t, q.device)):
            n = dout[sl].shape[0]
            probs = SPAttention._maps(q[sl], k[sl])  # (n, h, t, t)
            kept = apply_drop(probs, p, seed, c, out=torch.empty_like(probs)) if p > 0 else probs
            comb = (ws.view(1, 1, h) @ kept.view(n, h, t * t)).view(n, t, t)
            SPAttention._bmm(comb.transpose(1, 2), dl[sl], dx[sl])
            g = torch.bmm(dl[sl], xl[sl].transpose(1, 2)).to(x.dtype)  # (n, t, t)
            # e_h = M_h P_h G, r_h = rowsum(e_h): dw_h = s sum(r_h), dS_h = w_h s (e_h - P_h r_h)
            e = kept * g.unsqueeze(1)
            r = e.sum(-1, keepdim=True)
            dw += r.sum((0, 2, 3)) * scale
            ds = e.sub_(probs.mul_(r)).mul_(ws.view(1, h, 1, 1))
            torch.matmul(ds, k[sl], out=dq[sl])
            torch.matmul(ds.transpose(-1, -2), q[sl], out=dk[sl])
        return dq, dk, dx, dw


#: the largest maps (bytes, over one call's sequences and heads) that the numba path keeps for backward
KEEP_MAPS_BYTES = 1 << 29


def _chunk_buffer(name: str, chunks: list[slice], sl: slice, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """Chunk ``sl``'s part of a per-thread workspace sized for the largest chunk of ``chunks``."""
    step = chunks[0].stop - chunks[0].start
    return _workspace(name, (step, *shape), like)[: sl.stop - sl.start]
