"""The draft head's GEMM with the top-K's scan in its epilogue: the logits are never read back.

The streaming top-K (`vocab_topk`) reads the `[rows, V]` draft logits once after cuBLAS wrote them
(its scan: ~88 us at batch 64 on the Qwen3-8B shape, above the issue-11 goal of <= 60 us for the
whole top-K, and one read at the H200's peak is 61 us). Chunking the cuBLAS GEMM to hide the scan
beside it cost more than it hid (`head_topk.py`, docs/kernels.md). Here a Triton GEMM computes each
`[BLOCK_M, BLOCK_N]` tile of logits and, before storing it, the scan's outputs for those columns
from the registers: the max of every group of `GROUP` logits and the tile's (max, sum-exp) per row.
The super-group maxima are one small reduction of the group maxima, then the select of `vocab_topk`
runs unchanged (it reads back only the logits of the KP winning groups).

Exact with respect to the stored logits: the epilogue works on the tile rounded to the output dtype,
the values the select reads, so the tokens are `topk` of the logits this kernel wrote (which may
differ from cuBLAS's in the last bit: another summation order). `python -m scripts.bench.kernels --sections gemm`
measured the per-tile kernel slower than cuBLAS + the top-K at batch 1, 8 and 64 on the H200 (the
Triton GEMM alone already is at batches 8 and 64; docs/kernels.md). `tma=True` runs the persistent
form with tensor-descriptor (TMA) loads, as Triton's persistent matmul tutorial does to approach
cuBLAS on Hopper; on an H100 it too was slower at batches 64 and 1 and 1.8 % faster at batch 8
(docs/evidence/logs/gpu-2026-12-05e.txt). Nothing in the runtime uses either.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .fast_math import COMPILED
from .vocab_topk import GROUP, SUPER, ScanParts, TopKParts, _sm_count, check_stream_k, select_stage

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64  # Hopper wgmma-sized tiles; the benchmark tries others
GROUP_M = 8  # M tiles that share one sweep of N tiles (L2 reuse of the weight)


@triton.jit
def _tile_mn(tile, n_tiles_m, n_tiles_n, GROUP_M: tl.constexpr):
    """(M tile, N tile) of a tile number: GROUP_M M tiles sweep the N tiles together (L2 reuse of the weight)."""
    per_group = GROUP_M * n_tiles_n
    first_m = (tile // per_group) * GROUP_M
    size_m = tl.minimum(n_tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % size_m, (tile % per_group) // size_m


@triton.jit
def _store_and_scan(acc, tile_m, tile_n, out_ptr, gmax_ptr, m_ptr, s_ptr, M, N, n_tiles_n,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr, SCAN: tl.constexpr):
    """Store the fp32 tile rounded to the output dtype; with SCAN, its group maxima and (max, sum-exp) per row."""
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    logits = acc.to(out_ptr.dtype.element_ty)
    row_ok = rows < M
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], logits,
             mask=row_ok[:, None] & (cols[None, :] < N))
    if SCAN:
        x = tl.where(cols[None, :] < N, logits.to(tl.float32), float("-inf"))
        gmax = tl.max(tl.reshape(x, [BLOCK_M, BLOCK_N // GROUP, GROUP]), axis=2)
        gcols = tile_n * (BLOCK_N // GROUP) + tl.arange(0, BLOCK_N // GROUP)
        tl.store(gmax_ptr + rows.to(tl.int64)[:, None] * (n_tiles_n * (BLOCK_N // GROUP)) + gcols[None, :],
                 gmax.to(gmax_ptr.dtype.element_ty), mask=row_ok[:, None])
        m = tl.max(gmax, axis=1)
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(tl.exp(x - safe[:, None]), axis=1)
        tl.store(m_ptr + rows.to(tl.int64) * n_tiles_n + tile_n, m, mask=row_ok)
        tl.store(s_ptr + rows.to(tl.int64) * n_tiles_n + tile_n, s, mask=row_ok)


@triton.jit
def _gemm_scan_kernel(x_ptr, w_ptr, out_ptr, gmax_ptr, m_ptr, s_ptr, M, N, K, n_tiles_n,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, GROUP: tl.constexpr, SCAN: tl.constexpr):
    """out[M, N] = x[M, K] @ w[N, K].T (rows contiguous), one program per tile; with SCAN, per row and tile:
    the max of each GROUP columns into gmax[M, n_tiles_n * BLOCK_N / GROUP] and (max, sum-exp) into
    m / s[M, n_tiles_n]. Columns past N count as -inf (a tile wholly past N writes -inf maxima and a zero sum)."""
    tile_m, tile_n = _tile_mn(tl.program_id(0), tl.cdiv(M, BLOCK_M), n_tiles_n, GROUP_M)
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + ks
        a = tl.load(x_ptr + rows.to(tl.int64)[:, None] * K + kk[None, :], mask=(rows[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(w_ptr + cols.to(tl.int64)[None, :] * K + kk[:, None], mask=(cols[None, :] < N) & (kk[:, None] < K),
                    other=0.0)
        if not COMPILED:  # the interpreter's dot mishandles bf16; bf16 products are exact in fp32
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    _store_and_scan(acc, tile_m, tile_n, out_ptr, gmax_ptr, m_ptr, s_ptr, M, N, n_tiles_n, BLOCK_M, BLOCK_N, GROUP,
                    SCAN)


@triton.jit
def _gemm_scan_tma_kernel(x_desc, w_desc, out_ptr, gmax_ptr, m_ptr, s_ptr, M, N, K, n_tiles_n, n_programs,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, GROUP: tl.constexpr, SCAN: tl.constexpr):
    """The same product and epilogue, persistent (`n_programs` programs walk the tiles) with both operands
    loaded through tensor descriptors (TMA on Hopper; zero fill past M, N and K), the form of Triton's
    persistent matmul tutorial that approaches cuBLAS there."""
    n_tiles_m = tl.cdiv(M, BLOCK_M)
    for tile in tl.range(tl.program_id(0), n_tiles_m * n_tiles_n, n_programs):
        tile_m, tile_n = _tile_mn(tile, n_tiles_m, n_tiles_n, GROUP_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = x_desc.load([tile_m * BLOCK_M, k0])
            b = w_desc.load([tile_n * BLOCK_N, k0])
            if not COMPILED:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        _store_and_scan(acc, tile_m, tile_n, out_ptr, gmax_ptr, m_ptr, s_ptr, M, N, n_tiles_n, BLOCK_M, BLOCK_N, GROUP,
                        SCAN)


def n_tiles_n(vocab: int, block_n: int) -> int:
    """N tiles per row, rounded up to whole super-groups so the super-group maxima are one view."""
    if block_n % GROUP or (SUPER * GROUP) % block_n:
        raise ValueError(f"block_n={block_n} must be a multiple of {GROUP} dividing {SUPER * GROUP}")
    return triton.cdiv(vocab, SUPER * GROUP) * (SUPER * GROUP // block_n)


def head_gemm_scan(x: torch.Tensor, weight: torch.Tensor, scan: bool = True, block_m: int = BLOCK_M,
                   block_n: int = BLOCK_N, block_k: int = BLOCK_K, group_m: int = GROUP_M, num_warps: int = 8,
                   num_stages: int = 3, tma: bool = False) -> tuple[torch.Tensor, ScanParts | None]:
    """(logits [rows, V] in the weight's dtype, the scan's parts or None) of `x [rows, H] @ weight [V, H].T`.

    `tma`: the persistent kernel with tensor-descriptor loads (one program per SM; H x 2 bytes must be a
    multiple of 16, TMA's stride rule), else one program per tile with pointer loads."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"x [rows, H] and weight [V, H] expected, got {tuple(x.shape)} and {tuple(weight.shape)}")
    rows, hidden = x.shape
    vocab = weight.shape[0]
    tiles = n_tiles_n(vocab, block_n)
    x, weight = x.to(weight.dtype).contiguous(), weight.contiguous()
    logits = torch.empty((rows, vocab), dtype=weight.dtype, device=weight.device)
    gmax = torch.empty((rows, tiles * (block_n // GROUP)) if scan else (1, 1), dtype=weight.dtype, device=weight.device)
    part_m, part_s = (torch.empty((rows, tiles) if scan else (1, 1), dtype=torch.float32, device=weight.device)
                      for _ in range(2))
    launch = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, GROUP=GROUP, SCAN=scan,
                  num_warps=num_warps, num_stages=num_stages)
    n_tiles = triton.cdiv(rows, block_m) * tiles
    if rows and tma:
        if (hidden * x.element_size()) % 16:
            raise ValueError(f"tma=True needs H x {x.element_size()} bytes to be a multiple of 16, got H={hidden}")
        programs = min(n_tiles, _sm_count(weight.device))
        _gemm_scan_tma_kernel[(programs,)](TensorDescriptor.from_tensor(x, [block_m, block_k]),
                                           TensorDescriptor.from_tensor(weight, [block_n, block_k]), logits, gmax,
                                           part_m, part_s, rows, vocab, hidden, tiles, programs, **launch)
    elif rows:
        _gemm_scan_kernel[(n_tiles,)](x, weight, logits, gmax, part_m, part_s, rows, vocab, hidden, tiles, **launch)
    if not scan:
        return logits, None
    smax = gmax.view(rows, -1, SUPER).amax(dim=2)
    return logits, ScanParts(gmax, smax, part_m, part_s)


def head_gemm_topk(hidden: torch.Tensor, weight: torch.Tensor, k: int, **tiles) -> tuple[TopKParts, torch.Tensor]:
    """(TopKParts [bs, D, k] / [bs, D], logits [bs, D, V]) of `hidden [bs, D, H] @ weight.T`: the GEMM with the
    scan in its epilogue, then `vocab_topk`'s select. CUDA (or the interpreter); K <= STREAM_MAX_K."""
    bs, depth, _ = hidden.shape
    vocab = weight.shape[0]
    check_stream_k(vocab, k)
    logits, scan = head_gemm_scan(hidden.reshape(bs * depth, -1), weight, **tiles)
    return select_stage(logits, scan, k).per_request(bs, depth), logits.view(bs, depth, vocab)

