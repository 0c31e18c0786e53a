"""The candidate pool: a large-k top-k row sampled from the logits read once.

A top-k row whose k exceeds its count of floor units (posterior.py) gets no top-k floor: its first
draw is from the whole row, and a flat row with k = 2000 of V = 151936 is then rejected ~99 % of
the time, each round one more pass over the row (1.9 ms at batch 64 x 16 rows on the H200,
docs/kernels.md "Flat top-k 2000"). The pool gives that row a floor from the stats pass alone:

1. Per block (in the stats pass, the block already in registers): a threshold key t_b found by
   POOL_STEPS bisection steps over the block's order-preserving float keys, with at most POOL
   tokens at or above it; those tokens (value and index, in index order) are stored, and e_b, the
   largest value left out (-inf if none).
2. Per row: E = max_b e_b. If at least k pooled tokens lie strictly above E, every token above E
   is pooled and the k largest are all above E (every token left out is <= E): top-k keeps
   nothing at or below E. E is then the first draw's exclusive floor (the row is "pooled"), and
   the whole rejection sampler of posterior.py runs on the pool in one program per row: every
   support of every round lies above E, so inside the pool. Otherwise the row takes the usual
   passes (no floor), exactly as before.

Both are exact; a pooled row's draws differ from an unpooled one's (another first floor), so the
reference `posterior_tokens_torch` takes the same `pool` and finds the same thresholds (integer
bisection, replayed bit for bit). Passes over the logits of a pooled row: 1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .posterior import POOL_STEPS, _above, _uniform


def check_pool(pool: int, block: int) -> int:
    """The pool per block the launchers use: `pool` (0, or a power of two) clipped to the block."""
    if pool < 0 or pool & (pool - 1):
        raise ValueError(f"pool={pool} must be 0 or a power of two")
    return min(pool, block)


def pool_eligible_torch(sampled: torch.Tensor, top_k: torch.Tensor, vocab: int, nb: int, unit: int,
                        pool: int) -> torch.Tensor:
    """Rows the pool serves (`_pool_eligible`): sampled, top-k on, no top-k floor, and k at most half the pool."""
    k_on = (top_k > 0) & (top_k < vocab)
    return sampled & k_on & (top_k > -(-vocab // unit)) & (2 * top_k <= nb * pool)


@triton.jit
def _pool_eligible(top_k, V, NB, UNIT: tl.constexpr, POOL: tl.constexpr):
    return (top_k > (V + UNIT - 1) // UNIT) & (top_k < V) & (2 * top_k <= NB * POOL)


def float_keys_torch(z: torch.Tensor) -> torch.Tensor:
    """int64 keys in [0, 2**32) ordered as the float32 values z."""
    bits = z.contiguous().view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64) + 2147483648


@triton.jit
def _float_keys(z):
    """int32 keys ordered as the float32 values z (`float_keys_torch` less 2**31)."""
    bits = z.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def pool_threshold_torch(zb: torch.Tensor, pool: int, steps: int = POOL_STEPS) -> torch.Tensor:
    """The threshold key of every block of zb [..., block] (`_pool_block`): keys >= it are pooled."""
    key = float_keys_torch(zb)
    lo = key.amin(-1)
    hi = key.amax(-1) + 1
    count = lambda t: (key >= t[..., None]).sum(-1)  # noqa: E731
    whole = count(lo) <= pool
    for _ in range(steps):
        mid = lo + ((hi - lo) >> 1)
        fits = count(mid) <= pool
        hi = torch.where(fits, mid, hi)
        lo = torch.where(fits, lo, mid)
    return torch.where(whole, lo, hi)


def pool_floor_torch(zb: torch.Tensor, eligible: torch.Tensor, top_k: torch.Tensor, pool: int,
                     steps: int = POOL_STEPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(pooled [rows], E [rows]) for zb [rows, nb, block]: E = the largest value left out of the pool,
    a pooled row has >= top_k tokens strictly above it (module docstring)."""
    key = float_keys_torch(zb)
    thr = pool_threshold_torch(zb, pool, steps)
    left_out = key < thr[..., None]
    e = torch.where(left_out, zb, float("-inf")).amax(-1).amax(-1)
    above = ((zb > e[:, None, None]) & ~left_out).sum((-1, -2))
    return eligible & (above >= top_k), e


@triton.jit
def _pool_block(z, idx, pz_ptr, pi_ptr, pn_ptr, pe_ptr, slot, POOL: tl.constexpr, STEPS: tl.constexpr):
    """Pool the block z (its tokens idx) at slot (row * NB + block): `pool_threshold_torch`'s bisection
    (on int32 keys, the int64 bounds shifted by 2**31 alike), the tokens at or above the threshold
    compacted in index order, their count, the largest value left out."""
    key = _float_keys(z)
    lo = tl.min(key, axis=0).to(tl.int64)
    hi = tl.max(key, axis=0).to(tl.int64) + 1
    whole = tl.sum((key >= lo.to(tl.int32)).to(tl.int32), axis=0) <= POOL
    for _ in tl.static_range(STEPS):
        mid = lo + ((hi - lo) >> 1)
        fits = tl.sum((key >= mid.to(tl.int32)).to(tl.int32), axis=0) <= POOL
        hi = tl.where(fits, mid, hi)
        lo = tl.where(fits, lo, mid)
    thr = tl.where(whole, lo, hi)
    kept = key.to(tl.int64) >= thr
    at = tl.cumsum(kept.to(tl.int32), axis=0) - 1
    tl.store(pz_ptr + slot * POOL + at, z, mask=kept)
    tl.store(pi_ptr + slot * POOL + at, idx, mask=kept)
    tl.store(pn_ptr + slot, tl.sum(kept.to(tl.int32), axis=0))
    tl.store(pe_ptr + slot, tl.max(tl.where(kept, float("-inf"), z), axis=0))


@triton.jit
def _pool_pass_kernel(logits_ptr, temp_ptr, topk_ptr, pz_ptr, pi_ptr, pn_ptr, pe_ptr, n, V, NB, BLOCK: tl.constexpr,
                      UNIT: tl.constexpr, POOL: tl.constexpr, STEPS: tl.constexpr, BPP: tl.constexpr):
    """Program (row, BPP blocks) of a sampled row the pool serves: pool each block (`_pool_block`);
    other rows return at once (a pass apart from the stats pass: inside it, the pool's registers
    slowed every row's stats, 2026-12-04)."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    temp = tl.load(temp_ptr + b).to(tl.float32)
    if (temp > 0.0) & _pool_eligible(tl.load(topk_ptr + b), V, NB, UNIT, POOL):
        for j in range(BPP):
            bi = tl.program_id(1) * BPP + j
            if bi < NB:
                idx = bi * BLOCK + tl.arange(0, BLOCK)
                z = tl.load(logits_ptr + row * V + idx, mask=idx < V, other=float("-inf")).to(tl.float32) / temp
                _pool_block(z, idx, pz_ptr, pi_ptr, pn_ptr, pe_ptr, row * NB + bi, POOL, STEPS)


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
def _pool_kernel(pz_ptr, pi_ptr, pn_ptr, pe_ptr, scratch_ptr, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, pos_ptr,
                 bmax_ptr, bsum_ptr, istate_ptr, out_ptr, pooled_ptr, n, V, NB, NBP: tl.constexpr, UNIT: tl.constexpr,
                 POOL: tl.constexpr, CH: tl.constexpr, INDEX_TIES: tl.constexpr):
    """Program per row: a pooled row's whole draw (posterior.py's rounds, one cut per check) on its pool,
    read CH blocks at a time (per-block masses through `scratch` [rows, NB]); its token and status
    DONE stored; pooled[row] says whether it was pooled."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    temp = tl.load(temp_ptr + b).to(tl.float32)
    top_k = tl.load(topk_ptr + b)
    pooled = tl.zeros([], tl.int32)
    if (temp > 0.0) & _pool_eligible(top_k, V, NB, UNIT, POOL):
        blocks = tl.arange(0, NBP)
        slots = row * NB + blocks
        e = tl.max(tl.load(pe_ptr + slots, mask=blocks < NB, other=float("-inf")), axis=0)
        bmax = tl.load(bmax_ptr + slots, mask=blocks < NB, other=float("-inf"))
        row_max = tl.max(bmax, axis=0)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        count = tl.zeros([], tl.int32)
        for c in range(0, NB, CH):  # the pooled tokens above E, and the first support's block masses
            z, idx, cb = _chunk(pz_ptr, pi_ptr, pn_ptr, row, NB, c, CH, POOL)
            w = tl.exp(z - row_max)
            count += tl.sum(tl.sum((z > e).to(tl.int32), axis=1), axis=0)
            tl.store(scratch_ptr + row * NB + cb, tl.sum(tl.where((z > e) & (w >= min_p), w, 0.0), axis=1),
                     mask=cb < NB)
        if count >= top_k:
            pooled = 1
            tl.debug_barrier()  # the block masses this program stored, visible to all its threads
            mass = tl.load(scratch_ptr + slots, mask=blocks < NB, other=0.0)
            bsum = tl.load(bsum_ptr + slots, mask=blocks < NB, other=0.0)
            total = tl.sum(tl.where(bmax > float("-inf"), bsum * tl.exp(bmax - row_max), 0.0), axis=0)
            top_p = tl.load(topp_ptr + b).to(tl.float32)
            seed = tl.load(seed_ptr + b)
            position = tl.load(pos_ptr + row)
            j = tl.arange(0, POOL)
            floor = e
            floor_idx = tl.zeros([], tl.int32)
            floor_mass = tl.sum(mass, axis=0)
            rnd = tl.zeros([], tl.int32)
            token = tl.zeros([], tl.int32)
            searching = tl.full([], 1, tl.int32)
            while searching > 0:
                # the inverse-CDF draw of posterior.py: the block, then the token among its pooled ones
                target = _uniform(seed, position, rnd) * floor_mass
                cum = tl.cumsum(mass, axis=0)
                last_b = tl.max(tl.where(mass > 0.0, blocks, -1), axis=0)
                pick_b = tl.maximum(tl.minimum(tl.min(tl.where(cum > target, blocks, NBP), axis=0), last_b), 0)
                before = tl.sum(tl.where(blocks < pick_b, mass, 0.0), axis=0)
                slot = row * NB + pick_b
                ok = j < tl.load(pn_ptr + slot)
                zr = tl.load(pz_ptr + slot * POOL + j, mask=ok, other=float("-inf"))
                ir = tl.load(pi_ptr + slot * POOL + j, mask=ok, other=2147483647)
                wr = tl.exp(zr - row_max)
                wr = tl.where(ok & _above(zr, ir, floor, floor_idx) & (wr >= min_p), wr, 0.0)
                cw = before + tl.cumsum(wr, axis=0)
                last_j = tl.max(tl.where(wr > 0.0, j, -1), axis=0)
                pick_j = tl.maximum(tl.minimum(tl.min(tl.where(cw > target, j, POOL), axis=0), last_j), 0)
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
            tl.store(istate_ptr + row * 3, 0)
    tl.store(pooled_ptr + row, pooled)


POOL_CHUNK = 16  # blocks per load of a pooled row's program ([16, POOL] tokens)


def launch_pool(logits: torch.Tensor, params: tuple, bmax: torch.Tensor, bsum: torch.Tensor, istate: torch.Tensor,
                out: torch.Tensor, n: int, nb: int, block: int, unit: int, pool: int, blocks_per_program: int,
                index_ties: bool, warps: int) -> torch.Tensor:
    """The pool pass and the per-row pooled draw (after the stats pass, before the first draw of the
    others): int32 pooled [rows], all 0 when pool is 0 (nothing launched)."""
    rows, dev = logits.shape[0] * n, logits.device
    pooled = torch.zeros(rows, dtype=torch.int32, device=dev)
    if not pool:
        return pooled
    temp, top_k = params[0], params[1]
    pz = torch.empty((rows, nb, pool), dtype=torch.float32, device=dev)
    pi = torch.empty((rows, nb, pool), dtype=torch.int32, device=dev)
    pn = torch.empty((rows, nb), dtype=torch.int32, device=dev)
    pe, scratch = (torch.empty((rows, nb), dtype=torch.float32, device=dev) for _ in range(2))
    _pool_pass_kernel[(rows, triton.cdiv(nb, blocks_per_program))](
        logits, temp, top_k, pz, pi, pn, pe, n, logits.shape[-1], nb, BLOCK=block, UNIT=unit, POOL=pool,
        STEPS=POOL_STEPS, BPP=blocks_per_program, num_warps=warps)
    _pool_kernel[(rows,)](pz, pi, pn, pe, scratch, *params, bmax, bsum, istate, out, pooled, n, logits.shape[-1], nb,
                          NBP=max(2, triton.next_power_of_2(nb)), UNIT=unit, POOL=pool,
                          CH=min(POOL_CHUNK, max(2, triton.next_power_of_2(nb))), INDEX_TIES=index_ties, num_warps=4)
    return pooled
