"""The candidate pool: a large-k top-k row sampled from the tokens above a floor ranked per block.

A top-k row whose k exceeds its count of floor units (posterior.py) gets no top-k floor: its first
draw is from the whole row, and a flat row with k = 2000 of V = 151936 is then rejected ~99 % of
the time, each round one more pass over the row (1.9 ms at batch 64 x 16 rows on the H200,
docs/kernels.md "Flat top-k 2000"). The pool gives such a row a floor without a row-wide rank:

1. Stats pass, per block of an eligible row: u_b, the c-th largest of the block's maxima of
   POOL_UNIT tokens, c = ceil(k / NF) over the NF = V // BLOCK full blocks (a [units, units]
   compare, no sort).
2. Floor: T = min of u_b over the full blocks. Each has c units whose max is >= T, so the row has
   >= c * NF >= k tokens >= T: top-k keeps nothing below T, and the exclusive floor
   F = just_below(T) holds the kept set above it. For a flat row with k = 2000, ~4,300 tokens lie
   above F.
   Only on a flat row: every full block's max holds at most 1 / POOL_FLAT of the block's mass
   (a peaked row's unfloored first draw lands in its top-k anyway), decided per block in the
   stats pass, so a peaked row pays nothing (its peaked blocks store -inf for u_b, so T = -inf).
3. Pool pass: every block's tokens above F, compacted in index order (at most POOL per block; a
   block with more leaves its row unpooled, as a row whose T is -inf).
4. In the start kernel, per row: the whole rejection sampler of posterior.py on the pool (every
   support of every round lies above F, so inside the pool), CH blocks of it at a time; the row is
   then done, and the check passes skip it. An unpooled row takes them as before (no floor).

Both paths are exact; a pooled row's draws differ from an unpooled one's (another first floor),
so the reference `posterior_tokens_torch` takes the same `pool` and finds the same floor.
Passes over the logits of a pooled row: 2 (stats, pool).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .posterior import (COMPILED, POOL_FLAT, POOL_UNIT, _above, _just_below, _pick_block, _pick_in_block, _scaled,
                        _uniform, just_below_torch)

_PU = tl.constexpr(POOL_UNIT)
_FLAT = tl.constexpr(POOL_FLAT)
POOL_CHUNK = 16  # blocks per load of a pooled row's draw ([16, POOL] tokens)
# Blocks per program of the pool pass: 16 against 32 on the H200 at batch 64 x 16 rows, flat top-k 2000
# -8 to -10 us, other cases +1-2 (2026-12-04).
POOL_BPP = 16


def check_pool(pool: int, block: int) -> int:
    """The pool per block the launchers use: `pool` (0, or a power of two) clipped to the block;
    0 when the block has fewer than two floor units of POOL_UNIT tokens."""
    if pool < 0 or pool & (pool - 1):
        raise ValueError(f"pool={pool} must be 0 or a power of two")
    return min(pool, block) if block >= 2 * POOL_UNIT else 0


def pool_eligible_torch(sampled: torch.Tensor, top_k: torch.Tensor, vocab: int, nb: int, unit: int,
                        block: int) -> torch.Tensor:
    """Rows the pool serves (`_pool_eligible`): sampled, top-k on without a top-k floor (k above the
    row's floor units), and c = ceil(k / NF) at most half a block's units (a lower c, a tighter
    floor; k <= V / 64 at units of 32)."""
    k_on = (top_k > 0) & (top_k < vocab)
    full = vocab // block
    return sampled & k_on & (top_k > -(-vocab // unit)) & (full > 0) & (top_k <= full * (block // POOL_UNIT // 2))


@triton.jit
def _pool_eligible(top_k, V, NB, UNIT: tl.constexpr, BLOCK: tl.constexpr):
    return (top_k > (V + UNIT - 1) // UNIT) & (top_k < V) & (top_k <= (V // BLOCK) * (BLOCK // _PU // 2))


def pool_floor_torch(zb: torch.Tensor, eligible: torch.Tensor, top_k: torch.Tensor, pool: int,
                     vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pooled [rows], floor F [rows]) for zb [rows, nb, block] holding V = `vocab` tokens (module
    docstring, steps 1-3)."""
    rows, nb, block = zb.shape
    nf = vocab // block
    if nf == 0:
        return torch.zeros_like(eligible), torch.full((rows,), float("-inf"), device=zb.device)
    umax = zb[:, :nf].reshape(rows, nf, block // POOL_UNIT, POOL_UNIT).amax(-1)
    c = (-(-top_k // nf)).clamp(1, umax.shape[-1])
    u = umax.sort(-1, descending=True).values.gather(-1, (c - 1)[:, None, None].expand(rows, nf, 1))[..., 0]
    t = u.amin(-1)
    floor = just_below_torch(t)
    fits = ((zb > floor[:, None, None]).sum(-1) <= pool).all(-1)
    return eligible & fits & (t > float("-inf")), floor


@triton.jit
def _block_rank(z, top_k, V, BLOCK: tl.constexpr):
    """The c-th largest (c = ceil(top_k / NF), NF = V // BLOCK full blocks) of block z's maxima of
    POOL_UNIT tokens (a [units, units] compare; `tl.sort` of the maxima was slower on the H200:
    flat top-k 2000 1300 vs 1123 us at batch 64 x 16 rows, 2026-12-04)."""
    u = tl.max(tl.reshape(z, (BLOCK // _PU, _PU)), axis=1)
    c = (top_k + V // BLOCK - 1) // (V // BLOCK)
    at_least = tl.sum((u[None, :] >= u[:, None]).to(tl.int32), axis=1)  # how many maxima are >= each
    return tl.max(tl.where(at_least >= c, u, float("-inf")), axis=0)


@triton.jit
def _row_floor(pu_ptr, row, V, NB, BLOCK: tl.constexpr, NBP: tl.constexpr):
    """(F, T) of an eligible row from its full blocks' ranked maxima (`_block_rank`, stored by the
    stats pass; -inf for a block that is not flat, so T is -inf, and the row unpooled, unless all are)."""
    blocks = tl.arange(0, NBP)
    t = tl.min(tl.load(pu_ptr + row * NB + blocks, mask=blocks < V // BLOCK, other=float("inf")), axis=0)
    return _just_below(t), t


@triton.jit
def _flat_block(block_sum):
    """A block is flat when its max holds at most 1 / POOL_FLAT of its mass (sum of exp(z - its max))."""
    return block_sum >= _FLAT


@triton.jit
def _compact(kept, BLOCK: tl.constexpr):
    """(each kept token's rank among the block's kept ones (index order), their count), by unit: a
    scan of the unit counts, then one within every unit (no scan over the whole block)."""
    k2 = tl.reshape(kept.to(tl.int32), (BLOCK // _PU, _PU))
    per_unit = tl.sum(k2, axis=1)
    before = tl.cumsum(per_unit, axis=0) - per_unit
    return tl.reshape(before[:, None] + tl.cumsum(k2, axis=1) - 1, (BLOCK,)), tl.sum(per_unit, axis=0)


@triton.jit
def _scatter(z_base, i_base, at, z, idx, keep, N: tl.constexpr):
    """z[j] to z_base[at[j]] and idx[j] to i_base[at[j]] where keep[j] ([N] tensors): predicated PTX
    st.global in the tensors' own register layout, the addresses formed inside from one 32-bit offset
    per token. A tl.store to data-dependent addresses gets a one-token-per-thread layout, and Triton
    moves the block's pointers, values and mask there through shared memory first. (Two pointer
    tensors of 64 bits a token before: the pool pass takes 72 registers with either form and its
    prefetch, 64 with this form without it, sm_90 compile; not timed side by side.)"""
    zero = tl.zeros([N], tl.int64)
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b64 o, a; setp.ne.b32 p, $6, 0; mul.wide.s32 o, $3, 4; add.s64 a, o, $1; "
        "@p st.global.b32 [a], $4; add.s64 a, o, $2; @p st.global.b32 [a], $5; mov.b32 $0, 0; }",
        "=r,l,l,r,r,r,r",
        [z_base.to(tl.int64, bitcast=True) + zero, i_base.to(tl.int64, bitcast=True) + zero, at,
         z.to(tl.int32, bitcast=True), idx, keep.to(tl.int32)],
        dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _pool_pass_kernel(logits_ptr, temp_ptr, topk_ptr, pu_ptr, pz_ptr, pi_ptr, pn_ptr, n, V, NB, BLOCK: tl.constexpr,
                      NBP: tl.constexpr, UNIT: tl.constexpr, POOL: tl.constexpr, BPP: tl.constexpr):
    """Program (row, BPP blocks) of a row the pool serves (sampled, eligible, every full block flat:
    a floor above -inf): each block's tokens above the row floor, compacted in index order (when at
    most POOL), and their count; other rows return at once. Compiled, the scatter is `_scatter`'s
    (the interpreter has no inline PTX: tl.store there)."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    temp = tl.load(temp_ptr + b).to(tl.float32)
    if (temp > 0.0) & _pool_eligible(tl.load(topk_ptr + b), V, NB, UNIT, BLOCK):
        floor, t = _row_floor(pu_ptr, row, V, NB, BLOCK, NBP)
        if t > float("-inf"):
            x_row = logits_ptr + row * V
            first = tl.program_id(1) * BPP
            ahead = tl.load(x_row + first * BLOCK + tl.arange(0, BLOCK), mask=first * BLOCK + tl.arange(0, BLOCK) < V,
                            other=float("-inf"))
            for j in range(BPP):
                bi = first + j
                idx = bi * BLOCK + tl.arange(0, BLOCK)
                z = _scaled(ahead.to(tl.float32), temp)
                # the next block's load goes out before this block's compaction (prefetch, H200
                # 2026-12-04, flat top-k 2000: 128.9 vs 141.7 us at batch 8 x 16 rows, where a few
                # programs per SM wait on their loads; 575.8 vs 575.2 at batch 64)
                ahead = tl.load(x_row + idx + BLOCK, mask=(idx + BLOCK < V) & (j + 1 < BPP), other=float("-inf"))
                if bi < NB:
                    kept = z > floor
                    at, count = _compact(kept, BLOCK)
                    slot = row * NB + bi
                    fits = kept & (count <= POOL)
                    if COMPILED:
                        _scatter(pz_ptr + slot * POOL, pi_ptr + slot * POOL, at, z, idx, fits, BLOCK)
                    else:
                        tl.store(pz_ptr + slot * POOL + at, z, mask=fits)
                        tl.store(pi_ptr + slot * POOL + at, idx, mask=fits)
                    tl.store(pn_ptr + slot, count)


@triton.jit
def _chunk(pz_ptr, pi_ptr, pn_ptr, row, NB, c, CH: tl.constexpr, POOL: tl.constexpr):
    """Pooled tokens of blocks [c, c + CH) of a row: (z [CH, POOL], idx, their blocks [CH])."""
    blocks = c + tl.arange(0, CH)
    slots = row * NB + blocks
    count = tl.load(pn_ptr + slots, mask=blocks < NB, other=0)
    j = tl.arange(0, POOL)
    ok = j[None, :] < count[:, None]
    at = slots[:, None] * POOL + j[None, :]
    return (tl.load(pz_ptr + at, mask=ok, other=float("-inf")), tl.load(pi_ptr + at, mask=ok, other=2147483647),
            blocks)


@triton.jit
def _pool_draw(pu_ptr, pz_ptr, pi_ptr, pn_ptr, scratch_ptr, out_ptr, row, top_k, top_p, min_p, seed,
               position, row_max, total, V, NB, BLOCK: tl.constexpr, NBP: tl.constexpr, UNIT: tl.constexpr,
               POOL: tl.constexpr, CH: tl.constexpr, INDEX_TIES: tl.constexpr):
    """The start kernel's work on a sampled row: when the pool serves it and every block's tokens
    above the floor fit, its whole draw (posterior.py's rounds, one cut per check) on the pool, read
    CH blocks at a time (per-block masses through the row's `scratch` [NB]), its token stored.
    -> 1 if it drew (the row is done), else 0."""
    pooled = tl.zeros([], tl.int32)
    if _pool_eligible(top_k, V, NB, UNIT, BLOCK):
        blocks = tl.arange(0, NBP)
        slots = row * NB + blocks
        floor, t = _row_floor(pu_ptr, row, V, NB, BLOCK, NBP)
        most = tl.max(tl.load(pn_ptr + slots, mask=blocks < NB, other=0), axis=0)
        if (most <= POOL) & (t > float("-inf")):
            pooled = 1
            for c in range(0, NB, CH):  # the first support's block masses
                z, idx, cb = _chunk(pz_ptr, pi_ptr, pn_ptr, row, NB, c, CH, POOL)
                w = tl.exp(z - row_max)
                tl.store(scratch_ptr + row * NB + cb, tl.sum(tl.where((z > floor) & (w >= min_p), w, 0.0), axis=1),
                         mask=cb < NB)
            tl.debug_barrier()  # the block masses this program stored, visible to all its threads
            mass = tl.load(scratch_ptr + slots, mask=blocks < NB, other=0.0)
            j = tl.arange(0, POOL)
            floor_idx = tl.zeros([], tl.int32)
            floor_mass = tl.sum(mass, axis=0)
            rnd = tl.zeros([], tl.int32)
            token = tl.zeros([], tl.int32)
            searching = tl.full([], 1, tl.int32)
            while searching > 0:
                # the inverse-CDF draw of posterior.py: the block, then the token among its pooled ones
                target = _uniform(seed, position, rnd) * floor_mass
                pick_b, before = _pick_block(mass, target, NBP)
                slot = row * NB + pick_b
                ok = j < tl.load(pn_ptr + slot)
                zr = tl.load(pz_ptr + slot * POOL + j, mask=ok, other=float("-inf"))
                ir = tl.load(pi_ptr + slot * POOL + j, mask=ok, other=2147483647)
                wr = tl.exp(zr - row_max)
                wr = tl.where(ok & _above(zr, ir, floor, floor_idx) & (wr >= min_p), wr, 0.0)
                pick_j = _pick_in_block(wr, before, target, POOL)
                token = tl.sum(tl.where(j == pick_j, ir, 0), axis=0)
                z_pick = tl.sum(tl.where(j == pick_j, zr, 0.0), axis=0)
                # the check: count and mass strictly above the drawn token (all of them pooled)
                cut_idx = tl.zeros([], tl.int32)
                if INDEX_TIES:
                    cut_idx = token
                above_n = tl.zeros([], tl.int32)
                tl.debug_barrier()  # every thread has read the block masses before they are replaced
                for c in range(0, NB, CH):
                    z, idx, cb = _chunk(pz_ptr, pi_ptr, pn_ptr, row, NB, c, CH, POOL)
                    gt = _above(z, idx, z_pick, cut_idx)
                    above_n += tl.sum(tl.sum(gt.to(tl.int32), axis=1), axis=0)
                    tl.store(scratch_ptr + row * NB + cb, tl.sum(tl.where(gt, tl.exp(z - row_max), 0.0), axis=1),
                             mask=cb < NB)
                tl.debug_barrier()
                above = tl.load(scratch_ptr + slots, mask=blocks < NB, other=0.0)
                above_mass = tl.sum(above, axis=0)
                outside = (above_n >= top_k) | ((top_p < 1.0) & (above_mass > top_p * total))
                floor = tl.where(outside, z_pick, floor)
                floor_idx = tl.where(outside, cut_idx, floor_idx)
                mass = tl.where(outside, above, mass)
                floor_mass = tl.where(outside, above_mass, floor_mass)
                searching = outside.to(tl.int32)
                rnd += 1
            tl.store(out_ptr + row, token.to(tl.int64))
    return pooled


def pool_ranks(rows: int, nb: int, pool: int, device: torch.device) -> torch.Tensor:
    """The stats pass's output for the pool: each block's ranked maximum [rows, nb] (a 1-element
    placeholder when pool is 0: the stats pass then stores none)."""
    return torch.empty((rows, nb) if pool else (1,), dtype=torch.float32, device=device)


def pool_buffers(rows: int, nb: int, pool: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The pool pass's output (tokens, indices [rows, nb, pool], counts [rows, nb]); 1-element
    placeholders when pool is 0 (nothing is pooled)."""
    shape = (rows, nb, pool) if pool else (1,)
    return (torch.empty(shape, dtype=torch.float32, device=device), torch.empty(shape, dtype=torch.int32, device=device),
            torch.empty((rows, nb) if pool else (1,), dtype=torch.int32, device=device))
