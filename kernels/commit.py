"""After the walk: which KV slots survive, and moving accepted rows to the front.

`move_slots_triton`: the KV commit itself on raw per-slot buffers (a pool's `data_ptrs`), copying
only the entries that move (not padding, not a slot onto itself).

`commit_slots` (page size 1): `keep_loc[bs, D + 1]` = cache locations of the accepted path (root
first, -1 padded) and `free_mask[bs, n]` = True for every tree node not on the path, i.e. the slots
to hand back. Validity comes from `accept_len`, so a stale `accepted_idx` tail is ignored.
`gather_accepted` (page size > 1, hidden states): rows of the accepted path moved to the front;
padded positions are zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import triton
import triton.language as tl


@triton.jit
def _commit_kernel(acc_ptr, len_ptr, loc_ptr, keep_ptr, free_ptr, n_nodes, D1,
                   NP: tl.constexpr, DP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    dpos = tl.arange(0, DP)
    nodes = tl.arange(0, NP)
    valid = dpos <= tl.load(len_ptr + b)
    acc = tl.load(acc_ptr + b * D1 + dpos, mask=(dpos < D1) & valid, other=-1)
    loc = tl.load(loc_ptr + b * n_nodes + acc, mask=acc >= 0, other=-1)
    tl.store(keep_ptr + b * D1 + dpos, loc.to(tl.int64), mask=dpos < D1)
    kept = tl.max((nodes[:, None] == acc[None, :]).to(tl.int32), axis=1)
    tl.store(free_ptr + b * n_nodes + nodes, kept == 0, mask=nodes < n_nodes)


def _check(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor) -> None:
    bs = accepted_idx.shape[0]
    if accepted_idx.dim() != 2 or accept_len.shape != (bs,) or cache_loc.dim() != 2 or cache_loc.shape[0] != bs:
        raise ValueError("expected accepted_idx [bs, D+1], accept_len [bs], cache_loc [bs, n]")


def commit_slots_triton(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    _check(accepted_idx, accept_len, cache_loc)
    bs, d1 = accepted_idx.shape
    n = cache_loc.shape[1]
    keep = torch.empty((bs, d1), dtype=torch.int64, device=cache_loc.device)
    free = torch.empty((bs, n), dtype=torch.bool, device=cache_loc.device)
    if bs:
        _commit_kernel[(bs,)](accepted_idx.contiguous(), accept_len.contiguous(), cache_loc.contiguous(), keep, free,
                              n, d1, NP=triton.next_power_of_2(n), DP=triton.next_power_of_2(d1))
    return keep, free


def commit_slots_torch(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    _check(accepted_idx, accept_len, cache_loc)
    d1 = accepted_idx.shape[1]
    valid = torch.arange(d1, device=accepted_idx.device)[None, :] <= accept_len[:, None]
    idx = torch.where(valid, accepted_idx, 0)
    keep = torch.where(valid, cache_loc.gather(1, idx).to(torch.int64), -1)
    on_path = torch.zeros(cache_loc.shape, dtype=torch.bool, device=cache_loc.device).scatter(1, idx, True)
    return keep, ~on_path


def commit_slots(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep_loc int64[bs, D + 1] in path order, -1 padded; free_mask bool[bs, n]); Triton on CUDA."""
    if cache_loc.is_cuda:
        return commit_slots_triton(accepted_idx, accept_len, cache_loc)
    return commit_slots_torch(accepted_idx, accept_len, cache_loc)


def gather_accepted(rows: torch.Tensor, accepted_idx: torch.Tensor) -> torch.Tensor:
    """rows[bs, n, ...] -> rows[bs, D + 1, ...] along the accepted path (torch gather, any device)."""
    bs, d1 = accepted_idx.shape
    idx = accepted_idx.clamp(min=0).view(bs, d1, *([1] * (rows.dim() - 2))).expand(bs, d1, *rows.shape[2:])
    out = rows.gather(1, idx)
    pad = (accepted_idx < 0).view(bs, d1, *([1] * (rows.dim() - 2)))
    return out.masked_fill(pad, 0)


MOVE_WORDS = (8, 4, 2, 1)  # bytes per load of the move, widest first


def move_word(data_ptrs: Iterable[int], data_strides: Iterable[int]) -> int:
    """The widest word (8, 4, 2 or 1 bytes) that every buffer address and slot stride is a multiple
    of: the move then loads and stores whole words, not bytes. Host ints (read once per pool)."""
    g = 0
    for v in (*data_ptrs, *data_strides):
        g = math.gcd(g, int(v))
    return next(w for w in MOVE_WORDS if g % w == 0)


@triton.jit
def _word_ptr(address, WORD: tl.constexpr):
    """A buffer's address as a pointer to WORD-byte integers."""
    if WORD == 8:
        ptr = address.to(tl.pointer_type(tl.int64))
    elif WORD == 4:
        ptr = address.to(tl.pointer_type(tl.int32))
    elif WORD == 2:
        ptr = address.to(tl.pointer_type(tl.int16))
    else:
        ptr = address.to(tl.pointer_type(tl.uint8))
    return ptr


@triton.jit
def _move_slots_kernel(ptrs_ptr, strides_ptr, dst_ptr, src_ptr, L, TILE: tl.constexpr, LP: tl.constexpr,
                       SKIP_IDENTITY: tl.constexpr, WORD: tl.constexpr):
    """Program (buffer, tile of TILE words of a slot, request): the request's moving slots' tile."""
    buf = tl.program_id(0)
    tile = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    stride = tl.load(strides_ptr + buf).to(tl.int64) // WORD  # words per slot
    base = _word_ptr(tl.load(ptrs_ptr + buf), WORD)
    pos = tl.arange(0, LP)
    src = tl.load(src_ptr + b * L + pos, mask=pos < L, other=-1)
    dst = tl.load(dst_ptr + b * L + pos, mask=pos < L, other=-1)
    live = src >= 0
    if SKIP_IDENTITY:
        live = live & (src != dst)
    if tl.max(live.to(tl.int32), axis=0) > 0:  # else nothing moves: a first-child path costs no byte-wise pass
        offs = tile * TILE + tl.arange(0, TILE)
        mask = live[:, None] & (offs[None, :] < stride)
        rows = tl.load(base + src[:, None] * stride + offs[None, :], mask=mask)
        tl.debug_barrier()  # every read of this request's tile lands before any write (a dst may be another's src)
        tl.store(base + dst[:, None] * stride + offs[None, :], rows, mask=mask)


def _check_move(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst.dim() != 2 or dst.shape != src.shape:
        raise ValueError(f"dst and src must be equal [bs, L] shapes, got {tuple(dst.shape)}, {tuple(src.shape)}")


def move_slots_triton(data_ptrs: torch.Tensor, data_strides: torch.Tensor, max_stride: int,
                      dst: torch.Tensor, src: torch.Tensor, tile: int = 512, skip_identity: bool = True,
                      word: int = 1) -> None:
    """Copy slot `src[b, i]` onto slot `dst[b, i]` in every buffer of `data_ptrs` (uint64 addresses,
    `data_strides` bytes per slot, `max_stride` their host-known maximum); entries with src < 0 or
    src == dst move nothing (`skip_identity=False` copies those too, as SGLang's move does: the
    benchmark's baseline). Reads of one request land before its writes, so a request's
    destinations may overlap its sources; different requests must not overlap. `word`: bytes per
    load and store, which every address and stride must be a multiple of (`move_word`); `tile`:
    bytes of a slot per program (a power of two, at least a word)."""
    _check_move(dst, src)
    if word not in MOVE_WORDS or tile < word or tile & (tile - 1):
        raise ValueError(f"word={word} must be one of {MOVE_WORDS} and tile={tile} a power of two >= it")
    bs, length = dst.shape
    if bs == 0 or length == 0 or data_ptrs.numel() == 0:
        return
    grid = (data_ptrs.numel(), triton.cdiv(max_stride, tile), bs)
    _move_slots_kernel[grid](data_ptrs, data_strides, dst.contiguous(), src.contiguous(), length,
                             TILE=tile // word, LP=triton.next_power_of_2(length), SKIP_IDENTITY=skip_identity,
                             WORD=word, num_warps=4)


def move_slots_torch(buffers: list[torch.Tensor], dst: torch.Tensor, src: torch.Tensor) -> None:
    """Reference on whole buffers (slot = first dimension): all reads, then the writes."""
    _check_move(dst, src)
    live = (src >= 0) & (src != dst)
    for buf in buffers:
        rows = buf[src[live]]
        buf[dst[live]] = rows
