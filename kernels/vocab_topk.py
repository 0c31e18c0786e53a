"""Per-depth top-K draft log-probabilities: the only stage of the tree build that reads the vocabulary.

`lp[b, d, r] = float32(logit) - logsumexp_fp32(row)` for the K largest logits of each row,
ordered by descending logit and, among equal logits, ascending token id (-0.0 equals +0.0; NaN
logits are not supported).

CUDA path, one streaming read of the logits in their own dtype (no fp32 copy, no host sync):
1. `_scan_kernel`, several programs per row: an fp32 log-sum-exp partial per program, the max of
   every group of `GROUP` logits and of every super-group of `SUPER` groups.
2. `_select_kernel`, one program per row: merges the partials into the LSE, then narrows the
   candidates three times with `tl.topk` on packed int64 keys (fp32 bits | reversed index):
   top-KP super-groups of `SUPER` groups -> top-KP groups inside them -> top-KP logits inside
   those groups.
   Exact: a group outside the top-KP groups (ranked by their max, then index) has KP groups above
   it, each with a logit ranked above all of its own, so none of its logits is in the top KP.
KP = next power of two >= max(K, 2); K <= `STREAM_MAX_K`. Larger K falls back to torch.topk plus the
fused LSE kernel (the order among equal logits is then torch.topk's).

Every path produces the parts (`TopKParts`: raw fp32 top-K logits, their tokens, the row's LSE) and
`lp = values - lse` from them: a vocab-parallel head merges the parts of its shards
(`tp_topk.py`), which needs the logits themselves, not log-probs under a shard's own LSE.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .fast_math import fast_exp

GROUP = 32  # logits per group (the unit of the last narrowing)
SUPER = 16  # groups per super-group (the unit of the second narrowing)
SCAN_WARPS = 4  # warps per scan program
SCAN_SUPERS = 8  # super-groups per scan tile (two per warp): a tile = 8 * 16 * 32 = 4096 logits
PROGRAMS_PER_SM = 8  # scan programs per SM the row splitting aims at
TILE = SCAN_SUPERS * SUPER * GROUP
STREAM_MAX_K = 256  # KP * GROUP int64 keys must fit one program's registers
# Levels 2-3 sort at most SELECT_CAP_PER_KP x KP competing keys (`_narrow`; 0: every key). 2 cut the
# call 212 -> 154 us on the H200 (K=64, batch 64, the same tokens); its GPU unit tests and the
# off-chain GPU suite passed with it (docs/kernels.md).
SELECT_CAP_PER_KP = 2
# The scan issues its next tile's load before this tile's arithmetic (`_scan_kernel`). With 4 warps
# it took the scan 111.5 -> 97.2 us at batch 64 (H200, 2026-12-03, the same parts to the bit).
SCAN_PREFETCH = True
# Each logit's exp by fast_math.fast_exp: the scan 96.4 -> 87.6 us at batch 64 (H200, 2026-12-04,
# `python -m scripts.bench.kernels --sections scan`, the same group maxima; the LSE within float32 rounding).
SCAN_FAST_EXP = True


class TopKParts(NamedTuple):
    """Top-K of each row [bs, D, K] before normalisation, and the row's log-sum-exp [bs, D]."""

    values: torch.Tensor  # fp32 logits, descending (-0.0 stored as +0.0)
    tokens: torch.Tensor  # int64 indices into the row
    lse: torch.Tensor  # fp32

    def per_request(self, bs: int, depth: int) -> "TopKParts":
        """Parts of `bs x depth` rows (`select_stage`'s) shaped [bs, depth, K] / [bs, depth]."""
        k = self.values.shape[-1]
        return TopKParts(self.values.view(bs, depth, k), self.tokens.view(bs, depth, k), self.lse.view(bs, depth))


def log_probs(parts: TopKParts) -> tuple[torch.Tensor, torch.Tensor]:
    """(lp, tokens): the top-K log-softmax values; fp32 `values - lse`, as the kernels subtract."""
    return parts.values - parts.lse[..., None], parts.tokens


@triton.jit
def _key(value, index):
    """Packed int64 key, larger = earlier in the order (logit desc, index asc); -0.0 == +0.0."""
    bits = value.to(tl.float32).to(tl.int32, bitcast=True)
    bits = tl.where(bits == -2147483648, 0, bits)
    ordered = tl.where(bits >= 0, bits.to(tl.int64) + 2147483648, (~bits).to(tl.int64))
    return (ordered << 31) | (2147483647 - index.to(tl.int64))


@triton.jit
def _key_index(key):
    return 2147483647 - (key & 2147483647)


@triton.jit
def _key_value(key):
    ordered = key >> 31
    return tl.where(ordered >= 2147483648, ordered - 2147483648, ~ordered).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _scan_kernel(logits_ptr, gmax_ptr, smax_ptr, m_ptr, s_ptr, V, n_tiles, tiles_per_split, splits, first_split,
                 GROUP: tl.constexpr, SUPER: tl.constexpr, SPT: tl.constexpr, PREFETCH: tl.constexpr,
                 FAST_EXP: tl.constexpr):
    """Tiles [SUPER groups, SPT super-groups, GROUP logits] (super-group in the middle, so each warp
    owns whole super-groups and no maximum crosses warps): group and super-group maxima out;
    per-group running max / sum-exp kept in registers, folded into one (max, sum) at the end.
    PREFETCH: the next tile's load is issued before this tile's arithmetic (its latency hidden).
    FAST_EXP: each logit's exp by `fast_exp` (one instruction compiled) instead of tl.exp.
    `first_split`: a launch may cover only splits first_split.. (a vocabulary chunk, `launch_scan`)."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1) + first_split
    sup = tl.arange(0, SPT)
    grp = tl.arange(0, SUPER)
    cols = tl.arange(0, GROUP)
    in_tile = (sup[None, :, None] * SUPER + grp[:, None, None]) * GROUP + cols[None, None, :]
    gout = sup[None, :] * SUPER + grp[:, None]
    run_max = tl.full([SUPER, SPT], float("-inf"), tl.float32)
    run_sum = tl.zeros([SUPER, SPT], tl.float32)
    end = tl.minimum((split + 1) * tiles_per_split, n_tiles)
    if PREFETCH:
        first = split * tiles_per_split * (SPT * SUPER * GROUP) + in_tile
        nxt = tl.load(logits_ptr + row * V + first, mask=first < V, other=float("-inf"))
    for t in range(split * tiles_per_split, end):
        offs = t * (SPT * SUPER * GROUP) + in_tile
        if PREFETCH:
            x = nxt.to(tl.float32)
            ahead = offs + SPT * SUPER * GROUP
            nxt = tl.load(logits_ptr + row * V + ahead, mask=(ahead < V) & (t + 1 < end), other=float("-inf"))
        else:
            x = tl.load(logits_ptr + row * V + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        gmax = tl.max(x, axis=2)
        tl.store(gmax_ptr + (row * n_tiles + t) * (SPT * SUPER) + gout, gmax)
        tl.store(smax_ptr + (row * n_tiles + t) * SPT + sup, tl.max(gmax, axis=0))
        new_max = tl.maximum(run_max, gmax)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        if FAST_EXP:
            e = fast_exp(x - safe[:, :, None])
        else:
            e = tl.exp(x - safe[:, :, None])
        run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(e, axis=2)
        run_max = new_max
    row_max = tl.max(tl.max(run_max, axis=1), axis=0)
    safe_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    tl.store(m_ptr + row * splits + split, row_max)
    tl.store(s_ptr + row * splits + split, tl.sum(tl.sum(run_sum * tl.exp(run_max - safe_max), axis=1), axis=0))


@triton.jit
def _narrow(keys, prev, scratch_ptr, KP: tl.constexpr, CAP: tl.constexpr):
    """Top-KP of `keys` (flat; -1 = absent) given `prev`, the previous level's top-KP keys.

    CAP = 0: one `tl.topk` over all of them. CAP > 0: every top-KP key has a value >= the smallest
    value in `prev` (those KP units each hold a key at least that large), so only the keys at or
    above it compete; when at most CAP do, they are packed into the row's scratch (a prefix sum
    gives each its slot) and `tl.topk` sorts CAP keys instead of all. Same result either way."""
    if CAP > 0:
        low = tl.min(prev, axis=0)
        floor = tl.where(low < 0, 0, low >> 31)  # fewer than KP units: every present key competes
        compete = (keys >= 0) & ((keys >> 31) >= floor)
        count = tl.sum(compete.to(tl.int32), axis=0)
        if count <= CAP:
            slot = tl.cumsum(compete.to(tl.int32), axis=0) - 1
            tl.debug_barrier()  # the previous level's reads of the scratch are done
            tl.store(scratch_ptr + slot, keys, mask=compete)
            tl.debug_barrier()
            offs = tl.arange(0, CAP)
            top = tl.topk(tl.load(scratch_ptr + offs, mask=offs < count, other=-1), KP)
        else:
            top = tl.topk(keys, KP)
    else:
        top = tl.topk(keys, KP)
    return top


@triton.jit
def _select_kernel(logits_ptr, gmax_ptr, smax_ptr, m_ptr, s_ptr, vals_ptr, tok_ptr, lse_ptr, scratch_ptr, V, K,
                   gmax_stride, smax_stride, splits, GROUP: tl.constexpr, SUPER: tl.constexpr, KP: tl.constexpr,
                   NSP: tl.constexpr, SPLP: tl.constexpr, CAP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    n_groups = (V + GROUP - 1) // GROUP
    n_supers = (n_groups + SUPER - 1) // SUPER
    # log-sum-exp from the per-split partials
    soffs = tl.arange(0, SPLP)
    m = tl.load(m_ptr + row * splits + soffs, mask=soffs < splits, other=float("-inf"))
    s = tl.load(s_ptr + row * splits + soffs, mask=soffs < splits, other=0.0)
    row_max = tl.max(m, axis=0)
    safe = tl.where(row_max == float("-inf"), 0.0, row_max)
    lse = safe + tl.log(tl.sum(s * tl.exp(m - safe), axis=0))
    # 1. top-KP super-groups
    sup = tl.arange(0, NSP)
    sval = tl.load(smax_ptr + row * smax_stride + sup, mask=sup < n_supers, other=0.0)
    top = tl.topk(tl.where(sup < n_supers, _key(sval, sup), -1), KP)
    # 2. top-KP groups inside them
    gidx = _key_index(top)[:, None] * SUPER + tl.arange(0, SUPER)[None, :]
    gok = (top[:, None] >= 0) & (gidx < n_groups)
    gval = tl.load(gmax_ptr + row * gmax_stride + gidx, mask=gok, other=0.0)
    top = _narrow(tl.reshape(tl.where(gok, _key(gval, gidx), -1), [KP * SUPER]), top, scratch_ptr + row * CAP,
                  KP, CAP)
    # 3. top-KP logits inside those groups
    eidx = _key_index(top)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    eok = (top[:, None] >= 0) & (eidx < V)
    x = tl.load(logits_ptr + row * V + eidx, mask=eok, other=0.0)
    top = _narrow(tl.reshape(tl.where(eok, _key(x, eidx), -1), [KP * GROUP]), top, scratch_ptr + row * CAP, KP, CAP)
    koffs = tl.arange(0, KP)
    tl.store(vals_ptr + row * K + koffs, _key_value(top), mask=koffs < K)
    tl.store(tok_ptr + row * K + koffs, _key_index(top), mask=koffs < K)
    tl.store(lse_ptr + row, lse)


@triton.jit
def _lse_kernel(logits_ptr, lse_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        x = tl.load(logits_ptr + row * V + start + offs, mask=start + offs < V, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe) + tl.exp(x - safe)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    safe_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(run_sum * tl.exp(run_max - safe_max), axis=0)
    tl.store(lse_ptr + row, safe_max + tl.log(total))


def _check(draft_logits: torch.Tensor, k: int) -> None:
    if draft_logits.dim() != 3:
        raise ValueError(f"draft_logits must be [bs, D, V], got {tuple(draft_logits.shape)}")
    if not 1 <= k <= draft_logits.shape[-1]:
        raise ValueError(f"k={k} must be in [1, V={draft_logits.shape[-1]}]")
    if draft_logits.shape[-1] >= 2**31:
        raise ValueError(f"V={draft_logits.shape[-1]} must be below 2**31")


def check_stream_k(vocab: int, k: int) -> None:
    """The streaming top-K's bounds for a vocabulary of `vocab` (the heads that feed its select check them)."""
    if not 1 <= k <= min(vocab, STREAM_MAX_K) or vocab >= 2**31:
        raise ValueError(f"k={k} must be in [1, min(V={vocab}, {STREAM_MAX_K})] and V below 2**31")


def topk_parts_torch(draft_logits: torch.Tensor, k: int) -> TopKParts:
    """Reference: a stable descending sort (ties in token order) and torch's fp32 log-sum-exp."""
    _check(draft_logits, k)
    logits = draft_logits.float() + 0.0  # -0.0 -> +0.0, as the kernel compares them
    vals, idx = torch.sort(logits, dim=-1, descending=True, stable=True)
    return TopKParts(vals[..., :k], idx[..., :k], torch.logsumexp(logits, dim=-1))


def draft_topk_torch(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference (lp fp32, token int64), both [bs, D, k]: `topk_parts_torch` normalised."""
    return log_probs(topk_parts_torch(draft_logits, k))


def topk_parts_radix(draft_logits: torch.Tensor, k: int) -> TopKParts:
    """torch.topk (order among equal logits is torch's) + the fused Triton LSE; any K, CUDA or interpreter."""
    _check(draft_logits, k)
    bs, depth, vocab = draft_logits.shape
    logits = draft_logits.contiguous()
    vals, idx = torch.topk(logits, k, dim=-1)
    lse = torch.empty((bs, depth), dtype=torch.float32, device=logits.device)
    rows = bs * depth
    if rows:
        block = min(4096, triton.next_power_of_2(vocab))
        _lse_kernel[(rows,)](logits, lse, vocab, BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return TopKParts(vals.float() + 0.0, idx, lse)


def draft_topk_radix(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`topk_parts_radix` normalised."""
    return log_probs(topk_parts_radix(draft_logits, k))


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _default_splits(rows: int, device: torch.device, programs_per_sm: int) -> int:
    """Programs per row: enough to give every SM a few (a batch-1 round has only D rows)."""
    return triton.cdiv(programs_per_sm * _sm_count(device), max(rows, 1))


class ScanParts(NamedTuple):
    """What the scan hands the select: group / super-group maxima and per-program (max, sum-exp)."""

    gmax: torch.Tensor  # [rows, groups padded to whole tiles], the logits' dtype
    smax: torch.Tensor  # [rows, super-groups padded to whole tiles]
    part_m: torch.Tensor  # fp32 [rows, splits]
    part_s: torch.Tensor


class ScanLayout(NamedTuple):
    """How the scan cuts each row: `splits` programs of `per_split` tiles of `tile` logits."""

    n_tiles: int
    per_split: int
    splits: int
    supers: int  # super-groups per tile

    @property
    def tile(self) -> int:
        return self.supers * SUPER * GROUP


def scan_layout(rows: int, vocab: int, device: torch.device, splits: int | None = None,
                programs_per_sm: int = PROGRAMS_PER_SM, scan_supers: int | None = None) -> ScanLayout:
    """The split of each row (default: enough programs for `programs_per_sm` per SM); no split is empty."""
    spt = scan_supers or SCAN_SUPERS
    n_tiles = triton.cdiv(vocab, spt * SUPER * GROUP)
    splits = max(1, min(n_tiles, splits or _default_splits(rows, device, programs_per_sm)))
    per_split = triton.cdiv(n_tiles, splits)
    return ScanLayout(n_tiles, per_split, triton.cdiv(n_tiles, per_split), spt)


def empty_scan_parts(rows: int, layout: ScanLayout, dtype: torch.dtype, device: torch.device) -> ScanParts:
    groups = layout.n_tiles * layout.supers * SUPER
    return ScanParts(torch.empty((rows, groups), dtype=dtype, device=device),
                     torch.empty((rows, layout.n_tiles * layout.supers), dtype=dtype, device=device),
                     torch.empty((rows, layout.splits), dtype=torch.float32, device=device),
                     torch.empty((rows, layout.splits), dtype=torch.float32, device=device))


def launch_scan(logits: torch.Tensor, parts: ScanParts, layout: ScanLayout, first_split: int = 0,
                n_splits: int | None = None, scan_warps: int = SCAN_WARPS, prefetch: bool = SCAN_PREFETCH,
                fast_exp: bool = SCAN_FAST_EXP) -> None:
    """Scan splits `first_split .. first_split + n_splits` (default: the rest) of every row of the
    `[rows, V]` logits (rows V apart) into `parts`; what a split writes does not depend on the launch
    it ran in, so scanning a row's splits in several launches gives the same parts as one."""
    rows, vocab = logits.shape
    n_splits = layout.splits - first_split if n_splits is None else n_splits
    if rows and n_splits > 0:
        _scan_kernel[(rows, n_splits)](logits, *parts, vocab, layout.n_tiles, layout.per_split, layout.splits,
                                       first_split, GROUP=GROUP, SUPER=SUPER, SPT=layout.supers, PREFETCH=prefetch,
                                       FAST_EXP=fast_exp, num_warps=scan_warps)


def scan_stage(logits: torch.Tensor, splits: int | None = None, scan_warps: int = SCAN_WARPS,
               programs_per_sm: int = PROGRAMS_PER_SM, scan_supers: int | None = None,
               prefetch: bool = SCAN_PREFETCH, fast_exp: bool = SCAN_FAST_EXP) -> ScanParts:
    """The streaming read of contiguous `[rows, V]` logits (stage 1 alone, timed apart by the benchmark).
    `prefetch` (load the next tile before this one's arithmetic) only tunes the speed, as
    `topk_parts_stream`'s other knobs do; `fast_exp` (`fast_math.fast_exp` for each logit's exp)
    changes the LSE within float32 rounding."""
    rows, vocab = logits.shape
    layout = scan_layout(rows, vocab, logits.device, splits, programs_per_sm, scan_supers)
    parts = empty_scan_parts(rows, layout, logits.dtype, logits.device)
    launch_scan(logits, parts, layout, scan_warps=scan_warps, prefetch=prefetch, fast_exp=fast_exp)
    return parts


def _select_cap(k: int, select_cap: int | None) -> tuple[int, int]:
    """(KP, the cap): KP = next power of two >= max(K, 2) (tl.topk needs k >= 2)."""
    kp = max(2, triton.next_power_of_2(k))
    if select_cap is None:
        select_cap = SELECT_CAP_PER_KP * kp
    if select_cap and (select_cap < 2 * kp or select_cap & (select_cap - 1)):
        raise ValueError(f"select_cap={select_cap} must be 0 or a power of two >= 2 x {kp}")
    return kp, select_cap


def select_stage(logits: torch.Tensor, scan: ScanParts, k: int, select_cap: int | None = None) -> TopKParts:
    """Stage 2 on the `[rows, V]` logits the scan read: TopKParts of `[rows, k]` / `[rows]`."""
    rows, vocab = logits.shape
    dev = logits.device
    kp, select_cap = _select_cap(k, select_cap)
    vals = torch.empty((rows, k), dtype=torch.float32, device=dev)
    tok = torch.empty((rows, k), dtype=torch.int64, device=dev)
    lse = torch.empty((rows,), dtype=torch.float32, device=dev)
    if rows == 0:
        return TopKParts(vals, tok, lse)
    splits = scan.part_m.shape[1]
    n_supers = triton.cdiv(triton.cdiv(vocab, GROUP), SUPER)
    scratch = torch.empty((rows, max(select_cap, 1)), dtype=torch.int64, device=dev)
    _select_kernel[(rows,)](logits, *scan, vals, tok, lse, scratch, vocab, k, scan.gmax.shape[1],
                            scan.smax.shape[1], splits, GROUP=GROUP, SUPER=SUPER, KP=kp,
                            NSP=max(kp, triton.next_power_of_2(n_supers)),
                            SPLP=max(64, triton.next_power_of_2(splits)),  # one compiled variant for most shapes
                            CAP=select_cap, num_warps=4 if kp <= 64 else 8)
    return TopKParts(vals, tok, lse)


def topk_parts_stream(draft_logits: torch.Tensor, k: int, splits: int | None = None,
                      scan_warps: int = SCAN_WARPS, programs_per_sm: int = PROGRAMS_PER_SM,
                      scan_supers: int | None = None, select_cap: int | None = None) -> TopKParts:
    """Streaming top-K + LSE (module docstring), K <= STREAM_MAX_K; same results as `topk_parts_torch`.

    `splits` (programs per row; default from `programs_per_sm`), `scan_warps` (warps per scan
    program) and `scan_supers` (super-groups per scan tile, a power of two; default `SCAN_SUPERS`;
    more keep more loads in flight per thread) and `select_cap` (None: SELECT_CAP_PER_KP x
    KP; 0: sort every key; else a power of two >= 2 x KP: narrow by sorting at most that many
    competing keys, `_narrow`) only tune the speed."""
    _check(draft_logits, k)
    if k > STREAM_MAX_K:
        raise ValueError(f"k={k} exceeds the streaming kernel's {STREAM_MAX_K}")
    _select_cap(k, select_cap)  # a bad cap fails before any launch
    bs, depth, vocab = draft_logits.shape
    rows = draft_logits.contiguous().view(bs * depth, vocab)
    scan = scan_stage(rows, splits, scan_warps, programs_per_sm, scan_supers) if bs * depth else None
    parts = select_stage(rows, scan, k, select_cap)
    return parts.per_request(bs, depth)


def draft_topk_stream(draft_logits: torch.Tensor, k: int, splits: int | None = None,
                      scan_warps: int = SCAN_WARPS, programs_per_sm: int = PROGRAMS_PER_SM,
                      scan_supers: int | None = None, select_cap: int | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """`topk_parts_stream` normalised."""
    return log_probs(topk_parts_stream(draft_logits, k, splits, scan_warps, programs_per_sm, scan_supers,
                                       select_cap))


def topk_parts_triton(draft_logits: torch.Tensor, k: int) -> TopKParts:
    """The streaming kernel when K allows it, else torch.topk + the fused LSE kernel."""
    if k <= STREAM_MAX_K:
        return topk_parts_stream(draft_logits, k)
    return topk_parts_radix(draft_logits, k)


def draft_topk_triton(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`topk_parts_triton` normalised."""
    return log_probs(topk_parts_triton(draft_logits, k))


def topk_parts(draft_logits: torch.Tensor, k: int) -> TopKParts:
    """Top-`k` of every draft row and the row's LSE; Triton on CUDA, torch elsewhere."""
    _check(draft_logits, k)
    if draft_logits.is_cuda:
        return topk_parts_triton(draft_logits, k)
    return topk_parts_torch(draft_logits, k)


def draft_topk(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-`k` tokens per draft row with fp32 log-softmax values (`topk_parts` normalised)."""
    return log_probs(topk_parts(draft_logits, k))
