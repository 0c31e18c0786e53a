"""The runtime's posterior kernel: the exact sampler of `posterior.py` split over the row's blocks.

`posterior_tokens` (posterior.py) launches it for CUDA tensors. On the H200 (docs/kernels.md, "Split
posterior kernel") it equals the reference and the per-node kernel at batch 8 x 16 rows, replays
from a CUDA graph as eagerly, leaves the reference at batch 64 only where a float32 summation order
flips a CDF step (as the per-node kernel does, at the same rate), and samples 1.25-3.9x faster
(1.7-5.0x at batch 64 since the check pass skips blocks, 2026-12-03).

Same algorithm, blocks, units, cuts and random numbers as posterior.py (whose docstring states
the sampling rule), so the same draws as `posterior_tokens_torch`, the reference both are tested
against. What differs is the parallelism. Nothing is sorted; every pass over the logits is split
over the row's blocks of BLOCK tokens (one program per (row, block) for the stats pass, per (row,
BLOCKS_PER_PROGRAM blocks) for the others: a pass of ~77k programs that all return at once still
cost ~50 us at batch 64); the per-row programs in between read only the block partials and at
most one block:
1. Stats pass: per-block max, and the first index of the max (greedy rows) or the sum of exp
   (sampled rows; and, on a row with a top-k floor, the max of every UNIT tokens). Greedy rows take
   the argmax from these; sampled rows get the row max M, the total mass S and the block masses
   (the start kernel's, `_plain_mass`, unless a mass pass below sums a smaller support). The floor
   program ranks a floored row's unit maxima (the top_k-th largest, bit by bit); a mass pass with
   min_p or that floor sums the first draw's support per block, reading only the spans (SPAN
   tokens, whole units) that reach above the floor.
2. Inverse-CDF draw (per row): a uniform u picks the block whose cumulative mass crosses
   u * mass, then the token inside that one block.
3. With top-k / top-p, a check pass counts the tokens and the mass strictly above the drawn
   token X (and above the higher cut candidates, if more than one: posterior.py), per block; a per-row
   step sums them. X is kept -> done. Otherwise every token <= X is outside the kept set (it is
   an upper set), and so is every token <= a candidate with >= top_k tokens or > top_p of the
   mass above it: the next draw is from the tokens above the highest such cut, whose block
   masses that same pass produced. Rejection from nested supports that all contain the kept set
   gives an exact sample of the kept set; each round strictly raises the floor, so it ends
   (usually after 1-2 rounds). PAR_ROUNDS rounds run split; a row still drawing after them
   finishes its rounds in one program (the same code, its blocks in a loop). The launch
   sequence is fixed (CUDA-graph capturable); programs of finished rows return at once (rounds
   from LISTED_FROM on run over the list of rows still drawing instead), and a
   block whose max is not above the lowest cut is not read (it holds no token above any cut:
   most blocks of a peaked row). Counts are made only for rows with top-k.
   Passes over the logits: 1 (greedy, no filter), 2 with min-p, 1 + rounds with top-k / top-p
   (a check round reads only the blocks that reach above the drawn token; the floor's mass pass
   only the units above the floor).
4. A flat row whose top-k exceeds its floor units (k > V / UNIT, e.g. top-k 2000) gets a floor ranked
   per block in the stats pass; a pass of its own pools the tokens above it (posterior_pool.py: up
   to POOL per block) and the start kernel makes the row's whole draw on the pool (2 passes over
   the logits); the check passes skip it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fast_math import fast_exp
from .posterior import (BLOCK, CUTS, POOL, TOP_K_CUTS, TOP_P_CUTS, UNIT, _above, _clipped_block,
                        _cut_candidates, _floored, _pick_block, _pick_in_block, _prepare, _scaled, _support_bounded,
                        _support_mass, _top_k_floor, _uniform, check_cuts, floor_unit, mass_span)
from .posterior_pool import (POOL_BPP, POOL_CHUNK, _block_rank, _flat_block, _pool_draw, _pool_eligible,
                             _pool_pass_kernel, check_pool, pool_buffers, pool_ranks)

_CHECK = tl.constexpr(1)  # row status: the drawn token awaits its top-k / top-p check
_DONE = tl.constexpr(0)  # the row's token is final
PAR_ROUNDS = 3  # check rounds run split over the row's blocks; a row still drawing then finishes alone
# Blocks per program of the mass and check passes: a pass of one program per (row, block) spent
# ~50 us at batch 64 x 16 rows on the H200 even when every program returned at once (2026-12-03).
BLOCKS_PER_PROGRAM = 8
# Registers of a start-kernel thread: 64 (the compiler takes 72; an 8-byte spill) fit 8 programs of 4
# warps on an SM, so a batch of 64 x 16 rows (1024 programs) runs in one wave on the H200's 132
# SMs: flat top-k 2000 568.3 vs 576.9 us, T=1 224.5 vs 225.9 (2026-12-04).
START_MAXNREG = 64
# Blocks per stats program (the next block's load before this one's reductions): 8 against 1, H200,
# batch 64 x 16 rows: flat top-k 2000 -10 us (its block rank then overlaps the loads), others +2-4.
STATS_BPP = 8
# The first check round run over the list of rows still drawing. H200, batch 64 x 16 rows
# (2026-12-04, tune): from round 1, T=1 185.4 / flat top-p 404.1 / flat top-k 2000 499.1 us; from
# round 2, 191.2 / 395.8 / 502.1; none listed, 195.7 / 394.5 / 508.0.
LISTED_FROM = 2
# Programs of a listed check round per SM: as many as stay resident (~70 registers a thread, 4 warps: 7 on
# sm_90); they claim the round's items one at a time. 4 per SM timed the same (2026-12-04).
CHECK_PROGRAMS_PER_SM = 7


@triton.jit
def _row_params(temp_ptr, topk_ptr, b):
    """(divisor of the logits, sampled?) of request b: greedy rows keep the raw logits."""
    temp = tl.load(temp_ptr + b).to(tl.float32)
    sampled = (temp > 0.0) & (tl.load(topk_ptr + b) != 1)
    return tl.where(sampled, temp, 1.0), sampled


@triton.jit
def _top_k_cuts(top_k, V):
    """Whether a top-k of `top_k` keeps fewer than all V tokens (else it is off: no counts, no cut)."""
    return (top_k > 0) & (top_k < V)


@triton.jit
def _block_logits(x_row, bi, V, BLOCK: tl.constexpr):
    """Block bi's raw logits, -inf past V: a full block loads without a mask (no -inf fill)."""
    idx = bi * BLOCK + tl.arange(0, BLOCK)
    if (bi + 1) * BLOCK <= V:
        x = tl.load(x_row + idx)
    else:
        x = tl.load(x_row + idx, mask=idx < V, other=float("-inf"))
    return x


@triton.jit
def _load_z(x_row, bi, temp, V, BLOCK: tl.constexpr):
    """Block bi's z = logits / T (-inf past V) and token indices."""
    return _scaled(_block_logits(x_row, bi, V, BLOCK).to(tl.float32), temp), bi * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _block_stats(z, row, bi, sampled, top_k, bmax_ptr, bsum_ptr, barg_ptr, unit_ptr, pu_ptr, V, NB,
                 BLOCK: tl.constexpr, UNIT: tl.constexpr, POOL: tl.constexpr):
    """Block bi's max; a greedy row's first index of it, a sampled row's sum of exp relative to it;
    for a row the top-k floor applies to, with units inside the block, the max of every UNIT tokens;
    for a row the candidate pool may serve (POOL > 0), its ranked unit maximum (posterior_pool.py)."""
    m = tl.max(z, axis=0)
    tl.store(bmax_ptr + row * NB + bi, m)
    if UNIT < BLOCK:
        if sampled & _floored(top_k, V, UNIT):
            tl.store(unit_ptr + (row * NB + bi) * (BLOCK // UNIT) + tl.arange(0, BLOCK // UNIT),
                     tl.max(tl.reshape(z, (BLOCK // UNIT, UNIT)), axis=1))
    if sampled:
        block_sum = tl.sum(fast_exp(z - tl.where(m == float("-inf"), 0.0, m)), axis=0)
        tl.store(bsum_ptr + row * NB + bi, block_sum)
        if POOL > 0:
            if _pool_eligible(top_k, V, NB, UNIT, BLOCK):
                rank = tl.full([], float("-inf"), tl.float32)  # a peaked block: no floor, its row not pooled
                if _flat_block(block_sum):
                    rank = _block_rank(z, top_k, V, BLOCK)
                tl.store(pu_ptr + row * NB + bi, rank)
    else:
        idx = bi * BLOCK + tl.arange(0, BLOCK)
        tl.store(barg_ptr + row * NB + bi, tl.min(tl.where(z == m, idx, 2147483647), axis=0))


@triton.jit
def _stats_kernel(logits_ptr, temp_ptr, topk_ptr, bmax_ptr, bsum_ptr, barg_ptr, unit_ptr, pu_ptr, n, V, NB,
                  BLOCK: tl.constexpr, UNIT: tl.constexpr, POOL: tl.constexpr, BPP: tl.constexpr):
    """Program (request, node, BPP blocks): each block's `_block_stats` (the request from the grid: no
    64-bit division per program). With BPP > 1 the next block's load goes out before this block's
    reductions."""
    b = tl.program_id(0)
    row = b.to(tl.int64) * n + tl.program_id(1)
    temp, sampled = _row_params(temp_ptr, topk_ptr, b)
    top_k = tl.load(topk_ptr + b)
    x_row = logits_ptr + row * V
    if BPP == 1:
        bi = tl.program_id(2)
        _block_stats(_load_z(x_row, bi, temp, V, BLOCK)[0], row, bi, sampled, top_k, bmax_ptr, bsum_ptr, barg_ptr,
                     unit_ptr, pu_ptr, V, NB, BLOCK, UNIT, POOL)
    else:
        first = tl.program_id(2) * BPP
        ahead = _block_logits(x_row, first, V, BLOCK)
        for j in range(BPP):
            bi = first + j
            z = _scaled(ahead.to(tl.float32), temp)
            if j + 1 < BPP:
                ahead = _block_logits(x_row, bi + 1, V, BLOCK)
            if bi < NB:
                _block_stats(z, row, bi, sampled, top_k, bmax_ptr, bsum_ptr, barg_ptr, unit_ptr, pu_ptr, V, NB, BLOCK,
                             UNIT, POOL)


@triton.jit
def _row_max(bmax_ptr, row, NB, NBP: tl.constexpr):
    blocks = tl.arange(0, NBP)
    bmax = tl.load(bmax_ptr + row * NB + blocks, mask=blocks < NB, other=float("-inf"))
    return bmax, tl.max(bmax, axis=0)


@triton.jit
def _floor_kernel(temp_ptr, topk_ptr, units_ptr, fstate_ptr, n, V, U, UNIT: tl.constexpr, UP: tl.constexpr):
    """Program per row: the exclusive floor of its first draw, under the top_k-th largest of its U
    unit maxima (posterior.py's top-k floor), or -inf."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    top_k = tl.load(topk_ptr + b)
    floor = tl.full([], float("-inf"), tl.float32)
    if _row_params(temp_ptr, topk_ptr, b)[1] & _floored(top_k, V, UNIT):
        floor = _top_k_floor(units_ptr + row * U, U, top_k, UP)
    tl.store(fstate_ptr + row * 5 + 2, floor)


@triton.jit
def _mass_kernel(logits_ptr, temp_ptr, topk_ptr, minp_ptr, bmax_ptr, bsum_ptr, unit_ptr, fstate_ptr, mass_ptr, n, V, NB,
                 BLOCK: tl.constexpr, NBP: tl.constexpr, UNIT: tl.constexpr, SPAN: tl.constexpr, BPP: tl.constexpr):
    """Program (row, BPP blocks) of a sampled row with min-p or a top-k floor: each block's mass in
    the first draw's support (relative to the row max), its tokens above the floor with
    exp(z - max) >= min_p (`_support_mass`: reads only what reaches above the floor). Other rows
    return at once: the start kernel takes their masses from the stats (`_plain_mass`)."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    temp, sampled = _row_params(temp_ptr, topk_ptr, b)
    if sampled:
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        floor = tl.load(fstate_ptr + row * 5 + 2)
        if _support_bounded(min_p, floor):
            row_max = _row_max(bmax_ptr, row, NB, NBP)[1]
            for j in range(BPP):
                bi = tl.program_id(1) * BPP + j
                if bi < NB:
                    mass = _support_mass(logits_ptr + row * V, unit_ptr + (row * NB + bi) * (BLOCK // UNIT), bi,
                                         temp, row_max, floor, min_p, V, BLOCK, UNIT, SPAN)
                    tl.store(mass_ptr + row * NB + bi, mass)


@triton.jit
def _plain_mass(bmax, bsum, row_max):
    """Each block's mass relative to the row max, from its max and its sum of exp relative to it."""
    return tl.where(bmax > float("-inf"), bsum * tl.exp(bmax - row_max), 0.0)


@triton.jit
def _draw(x_row, mass, floor, floor_idx, floor_mass, row_max, temp, min_p, seed, position, rnd, V,
          BLOCK: tl.constexpr, NBP: tl.constexpr):
    """Inverse CDF of u(seed, position, rnd) over the tokens above the floor (floor, floor_idx)
    (and min-p), given the block masses [NBP] of that support: the block whose cumulative mass
    crosses u * floor_mass, then the token inside it. -> (token, its z)."""
    target = _uniform(seed, position, rnd) * floor_mass
    pick_b, before = _pick_block(mass, target, NBP)
    z, idx = _load_z(x_row, pick_b, temp, V, BLOCK)
    w = tl.exp(z - row_max)
    w = tl.where(_above(z, idx, floor, floor_idx) & (w >= min_p), w, 0.0)
    pick_j = _pick_in_block(w, before, target, BLOCK)
    return pick_b * BLOCK + pick_j, tl.sum(tl.where(tl.arange(0, BLOCK) == pick_j, z, 0.0), axis=0)


@triton.jit
def _start_kernel(logits_ptr, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, pos_ptr, bmax_ptr, bsum_ptr,
                  barg_ptr, mass_ptr, fstate_ptr, istate_ptr, out_ptr, pu_ptr, pz_ptr, pi_ptr, pn_ptr, n, V, NB,
                  BLOCK: tl.constexpr, NBP: tl.constexpr, UNIT: tl.constexpr, POOL: tl.constexpr, CH: tl.constexpr,
                  INDEX_TIES: tl.constexpr):
    """Program per row: greedy -> the argmax from the block stats; sampled -> the whole draw on the
    row's candidate pool when it has one (`_pool_draw`), else the first draw.

    State per row: fstate = (row max, total mass, floor, floor mass, z of the drawn token),
    istate = (status, round, floor index); `out` holds the latest draw."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    temp, sampled = _row_params(temp_ptr, topk_ptr, b)
    bmax, row_max = _row_max(bmax_ptr, row, NB, NBP)
    blocks = tl.arange(0, NBP)
    if sampled:
        plain = _plain_mass(bmax, tl.load(bsum_ptr + row * NB + blocks, mask=blocks < NB, other=0.0), row_max)
        total = tl.sum(plain, axis=0)
        top_k = tl.load(topk_ptr + b)
        top_p = tl.load(topp_ptr + b).to(tl.float32)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        seed = tl.load(seed_ptr + b)
        position = tl.load(pos_ptr + row)
        pooled = tl.zeros([], tl.int32)
        if POOL > 0:
            pooled = _pool_draw(pu_ptr, pz_ptr, pi_ptr, pn_ptr, mass_ptr, out_ptr, row, top_k, top_p, min_p,
                                seed, position, row_max, total, V, NB, BLOCK, NBP, UNIT, POOL, CH, INDEX_TIES)
        if pooled == 0:
            floor = tl.load(fstate_ptr + row * 5 + 2)
            mass = plain
            if _support_bounded(min_p, floor):  # the mass pass's support masses
                mass = tl.load(mass_ptr + row * NB + blocks, mask=blocks < NB, other=0.0)
            floor_mass = tl.sum(mass, axis=0)
            rnd = tl.zeros([], tl.int32)
            token, z_pick = _draw(logits_ptr + row * V, mass, floor, 0, floor_mass, row_max, temp, min_p, seed,
                                  position, rnd, V, BLOCK, NBP)
            filtered = _top_k_cuts(top_k, V) | (top_p < 1.0)
            tl.store(out_ptr + row, token.to(tl.int64))
            _store_state(fstate_ptr, istate_ptr, row, row_max, total, floor, 0, floor_mass, z_pick,
                         tl.where(filtered, _CHECK, _DONE), rnd)
        else:
            tl.store(istate_ptr + row * 3, _DONE)
    else:
        first_b = tl.min(tl.where(bmax == row_max, blocks, NBP), axis=0)
        tl.store(out_ptr + row, tl.load(barg_ptr + row * NB + first_b).to(tl.int64))
        tl.store(istate_ptr + row * 3, _DONE)


@triton.jit
def _enlist(list_ptr, count_ptr, row):
    """Add a row to a check round's list of rows still drawing (count_ptr: its length). The order
    is the atomics' (any): each row's check is computed alike wherever it stands."""
    tl.store(list_ptr + tl.atomic_add(count_ptr, 1), row.to(tl.int32))


@triton.jit
def _store_state(fstate_ptr, istate_ptr, row, row_max, total, floor, floor_idx, floor_mass, z_pick, status, rnd):
    tl.store(fstate_ptr + row * 5 + 0, row_max)
    tl.store(fstate_ptr + row * 5 + 1, total)
    tl.store(fstate_ptr + row * 5 + 2, floor)
    tl.store(fstate_ptr + row * 5 + 3, floor_mass)
    tl.store(fstate_ptr + row * 5 + 4, z_pick)
    tl.store(istate_ptr + row * 3 + 0, status)
    tl.store(istate_ptr + row * 3 + 1, rnd)
    tl.store(istate_ptr + row * 3 + 2, floor_idx)


@triton.jit
def _cuts(fstate_ptr, out_ptr, row, count, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr,
          INDEX_TIES: tl.constexpr):
    """A row's cut candidates (`_cut_candidates`, KC on a row with top-k: `count`), its row max and
    the index of cut 0 (`_above`): the drawn token's with INDEX_TIES, else 0. The other cuts fall
    between values (index 0)."""
    row_max = tl.load(fstate_ptr + row * 5 + 0)
    z_pick = tl.load(fstate_ptr + row * 5 + 4)
    tok = tl.zeros([], tl.int32)
    if INDEX_TIES:
        tok = tl.load(out_ptr + row).to(tl.int32)
    return _cut_candidates(z_pick, row_max, count, NC, KC, PC), row_max, tok


@triton.jit
def _cut_mask(z, idx, cand, tok, c: tl.constexpr, NC: tl.constexpr, INDEX_TIES: tl.constexpr):
    """Tokens above cut c: with INDEX_TIES cut 0 is the drawn token itself (`_above`), every other
    cut a value (a plain compare: the check is compute-bound on flat rows)."""
    cut = tl.sum(tl.where(tl.arange(0, NC) == c, cand, 0.0), axis=0)
    if INDEX_TIES and c == 0:
        gt = _above(z, idx, cut, tok)
    else:
        gt = z > cut
    return gt


@triton.jit
def _check_block(logits_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr, row, bi, temp, count, V, NB,
                 BLOCK: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr, INDEX_TIES: tl.constexpr):
    """The count and mass (relative to the row max) of block bi's tokens strictly above every cut.

    A block whose max (the stats pass's) is not above the lowest cut, the drawn token (nor, with
    INDEX_TIES, equal to it before the drawn index), holds no token above any cut: its zeros are
    stored without reading it (most blocks of a peaked row). Counts are made only for a row with
    top-k (`count`): top-p and the redraw need the masses (KC cuts on a row with top-k, PC on the
    others: `_cuts`)."""
    cand, row_max, tok = _cuts(fstate_ptr, out_ptr, row, count, NC, KC, PC, INDEX_TIES)
    ci = tl.arange(0, NC)
    cnt = tl.zeros([NC], tl.int32)
    above = tl.zeros([NC], tl.float32)
    bmax = tl.load(bmax_ptr + row * NB + bi)
    lowest = tl.min(cand, axis=0)
    reach = bmax > lowest
    if INDEX_TIES:
        reach = reach | ((bmax == lowest) & (bi * BLOCK < tok))
    if reach:
        z, idx = _load_z(logits_ptr + row * V, bi, temp, V, BLOCK)
        w = tl.exp(z - row_max)
        if count:
            for c in tl.static_range(KC):  # one cut at a time: no [NC, BLOCK] tile in registers
                gt = _cut_mask(z, idx, cand, tok, c, NC, INDEX_TIES)
                cnt = tl.where(ci == c, tl.sum(gt.to(tl.int32), axis=0), cnt)
                above = tl.where(ci == c, tl.sum(tl.where(gt, w, 0.0), axis=0), above)
        else:
            for c in tl.static_range(PC):
                gt = _cut_mask(z, idx, cand, tok, c, NC, INDEX_TIES)
                above = tl.where(ci == c, tl.sum(tl.where(gt, w, 0.0), axis=0), above)
    tl.store(cnt_ptr + (row * NC + ci) * NB + bi, cnt)
    tl.store(above_ptr + (row * NC + ci) * NB + bi, above)


@triton.jit
def _check_items(logits_ptr, temp_ptr, topk_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr, row, group, n, V,
                 NB, BLOCK: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr, BPP: tl.constexpr,
                 INDEX_TIES: tl.constexpr):
    """`_check_block` on blocks [group * BPP, (group + 1) * BPP) of a row whose draw awaits its check."""
    b = row // n
    temp = _row_params(temp_ptr, topk_ptr, b)[0]
    count = _top_k_cuts(tl.load(topk_ptr + b), V)
    for j in range(BPP):
        bi = group * BPP + j
        if bi < NB:
            _check_block(logits_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr, row, bi, temp, count, V, NB,
                         BLOCK, NC, KC, PC, INDEX_TIES)


@triton.jit
def _check_kernel(logits_ptr, temp_ptr, topk_ptr, bmax_ptr, fstate_ptr, istate_ptr, cnt_ptr, above_ptr, out_ptr,
                  list_ptr, count_ptr, n, V, NB, BLOCK: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr,
                  PC: tl.constexpr, BPP: tl.constexpr, LISTED: tl.constexpr, INDEX_TIES: tl.constexpr):
    """A check round over items (row, BPP of its blocks) of the rows whose draw awaits its check.

    Early rounds (LISTED off; most sampled rows of a top-k / top-p batch check there): a program per
    item of every row, rows not checking return at once; the hardware hands out the programs, and
    items differ in cost (a block below every cut is not read). Later rounds (LISTED): a fixed number
    of programs over the round's list of rows still drawing (`_enlist`), each claiming its next item
    from a counter (count_ptr + 1): a round with no row left costs a load per program instead of ~7 us
    of programs that return at once (batch 64 x 16 rows, H200). A listed round with many rows is
    slower than the grid (LISTED_FROM)."""
    if LISTED:
        groups = tl.cdiv(NB, BPP)
        total = tl.load(count_ptr) * groups
        if total > 0:
            item = tl.atomic_add(count_ptr + 1, 1, sem="relaxed")
            while item < total:
                claimed = tl.atomic_add(count_ptr + 1, 1, sem="relaxed")  # the next claim goes out before this work
                _check_items(logits_ptr, temp_ptr, topk_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr,
                             tl.load(list_ptr + item // groups).to(tl.int64), item % groups, n, V, NB, BLOCK, NC, KC,
                             PC, BPP, INDEX_TIES)
                item = claimed
    else:
        row = tl.program_id(0).to(tl.int64)
        if tl.load(istate_ptr + row * 3) == _CHECK:
            _check_items(logits_ptr, temp_ptr, topk_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr, row,
                         tl.program_id(1), n, V, NB, BLOCK, NC, KC, PC, BPP, INDEX_TIES)


@triton.jit
def _step(logits_ptr, temp, top_k, top_p, min_p, seed, position, fstate_ptr, istate_ptr, cnt_ptr, above_ptr,
          out_ptr, row, V, NB, BLOCK: tl.constexpr, NBP: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr,
          INDEX_TIES: tl.constexpr):
    """Decide a row's draw from its block partials: kept -> done. Else every token <= the highest
    cut with >= top_k tokens or > top_p of the mass above it is outside the kept set (an upper
    set): that cut becomes the floor, its block masses the support, and the next round draws."""
    ci = tl.arange(0, NC)
    blocks = tl.arange(0, NBP)
    part = (row * NC + ci[:, None]) * NB + blocks[None, :]
    ok = (blocks < NB)[None, :]
    above = tl.load(above_ptr + part, mask=ok, other=0.0)
    above_n = tl.sum(tl.load(cnt_ptr + part, mask=ok, other=0), axis=1)
    above_mass = tl.sum(above, axis=1)
    cand, row_max, tok = _cuts(fstate_ptr, out_ptr, row, _top_k_cuts(top_k, V), NC, KC, PC, INDEX_TIES)
    by_k = tl.where(_top_k_cuts(top_k, V), (above_n >= top_k).to(tl.int32), 0)
    by_p = tl.where(top_p < 1.0, (above_mass > top_p * tl.load(fstate_ptr + row * 5 + 1)).to(tl.int32), 0)
    best = tl.max(tl.where(by_k + by_p > 0, ci, -1), axis=0)
    status = tl.where(best >= 0, _CHECK, _DONE)
    if best >= 0:
        pick = ci == best
        floor = tl.sum(tl.where(pick, cand, 0.0), axis=0)
        floor_idx = tl.where(best == 0, tok, 0)
        floor_mass = tl.sum(tl.where(pick, above_mass, 0.0), axis=0)
        mass = tl.sum(tl.where(pick[:, None], above, 0.0), axis=0)
        rnd = tl.load(istate_ptr + row * 3 + 1) + 1
        token, z_pick = _draw(logits_ptr + row * V, mass, floor, floor_idx, floor_mass, row_max, temp, min_p,
                              seed, position, rnd, V, BLOCK, NBP)
        tl.debug_barrier()  # every thread has read the previous draw (the cut index) before it is replaced
        tl.store(out_ptr + row, token.to(tl.int64))
        _store_state(fstate_ptr, istate_ptr, row, row_max, tl.load(fstate_ptr + row * 5 + 1), floor, floor_idx,
                     floor_mass, z_pick, status, rnd)
    else:
        tl.store(istate_ptr + row * 3, status)
    return status


@triton.jit
def _finish_kernel(logits_ptr, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, pos_ptr, bmax_ptr, fstate_ptr,
                   istate_ptr, cnt_ptr, above_ptr, out_ptr, list_ptr, count_ptr, n, V, NB, BLOCK: tl.constexpr,
                   NBP: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr, SEQUENTIAL: tl.constexpr,
                   INDEX_TIES: tl.constexpr):
    """Program per row: one round's decision (and redraw) after the split check pass, a row still
    drawing joining the next round's list (when `count_ptr` is not null); with SEQUENTIAL, every
    remaining round of the row, its check pass included (the rare tail)."""
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    status = tl.load(istate_ptr + row * 3)
    if status == _CHECK:
        temp = _row_params(temp_ptr, topk_ptr, b)[0]
        top_k = tl.load(topk_ptr + b)
        top_p = tl.load(topp_ptr + b).to(tl.float32)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        seed = tl.load(seed_ptr + b)
        position = tl.load(pos_ptr + row)
        if SEQUENTIAL:
            count = _top_k_cuts(top_k, V)
            while status == _CHECK:
                for bi in range(0, NB):
                    _check_block(logits_ptr, bmax_ptr, fstate_ptr, cnt_ptr, above_ptr, out_ptr, row, bi, temp, count, V,
                                 NB, BLOCK, NC, KC, PC, INDEX_TIES)
                tl.debug_barrier()  # the partials this program wrote, visible to all its threads
                status = _step(logits_ptr, temp, top_k, top_p, min_p, seed, position, fstate_ptr, istate_ptr,
                               cnt_ptr, above_ptr, out_ptr, row, V, NB, BLOCK, NBP, NC, KC, PC, INDEX_TIES)
                tl.debug_barrier()
        else:
            status = _step(logits_ptr, temp, top_k, top_p, min_p, seed, position, fstate_ptr, istate_ptr, cnt_ptr,
                           above_ptr, out_ptr, row, V, NB, BLOCK, NBP, NC, KC, PC, INDEX_TIES)
            if count_ptr is not None:
                if status == _CHECK:
                    _enlist(list_ptr, count_ptr, row)


def _check_programs(device: torch.device) -> int:
    """Programs of a listed check round: CHECK_PROGRAMS_PER_SM per SM on CUDA (one wave), a few under the
    interpreter (each then takes several items, as on a GPU with more of them)."""
    if device.type != "cuda":
        return 3
    return torch.cuda.get_device_properties(device).multi_processor_count * CHECK_PROGRAMS_PER_SM


def posterior_tokens_split(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *,
                           min_p: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                           block: int = BLOCK, par_rounds: int = PAR_ROUNDS, warps: int | None = None,
                           unit: int = UNIT, blocks_per_program: int = BLOCKS_PER_PROGRAM,
                           index_ties: bool = False, top_k_cuts: int = TOP_K_CUTS,
                           top_p_cuts: int = TOP_P_CUTS, pool: int = POOL,
                           pool_bpp: int = POOL_BPP, stats_bpp: int = STATS_BPP,
                           listed_from: int = LISTED_FROM, check_programs: int | None = None,
                           start_maxnreg: int | None = START_MAXNREG) -> torch.Tensor:
    """Triton, every pass split over the row's blocks (module docstring); the same arguments and
    the same draws as `posterior.posterior_tokens_triton` and the reference
    `posterior_reference.posterior_tokens_torch`. `par_rounds` (check rounds before the per-row tail) only
    tunes the speed, as do `warps` (per program; default by block) and `blocks_per_program` (of the
    mass and check passes). `block` and `unit` (the top-k floor's unit; finer units, a tighter floor;
    the mass pass skips by spans of max(unit, SPAN) tokens) are the reference's: other values, other (equally exact) draws. `index_ties`: the tie
    order (posterior.py's docstring). `top_k_cuts` / `top_p_cuts` (1..CUTS): cut candidates of a
    check on a row with / without top-k, the reference's too (fewer: fewer reductions per block,
    more rounds after a rejection; with a tight top-k floor, `unit`, rejections are rare). `pool`:
    tokens per block of the candidate pool of a large-k top-k row (posterior_pool.py; 0: none; with
    one top-k cut only), the reference's too; `pool_bpp`: blocks per program of its pool pass,
    `stats_bpp`: blocks per program of the stats pass,
    `listed_from`: the first check round run over the list of rows still drawing (rounds before it
    over every row's programs; >= `par_rounds`: none), `check_programs`: programs of a listed round
    (None: `_check_programs`), and
    `start_maxnreg`: a register cap for the start kernel (None: the compiler's choice; both speed
    only).
    CUDA tensors, or CPU tensors under TRITON_INTERPRET=1."""
    bs, n, vocab = target_logits.shape
    seed, min_p, positions = _prepare(target_logits, temperature, top_k, top_p, seed, min_p, positions)
    logits = target_logits.contiguous()
    dev = logits.device
    out = torch.empty((bs, n), dtype=torch.int64, device=dev)
    rows = bs * n
    if rows == 0:
        return out
    unit = floor_unit(block, unit, vocab)
    check_cuts(top_k_cuts, top_p_cuts)
    # listed_from >= 1: the first round has no list (no kernel before it fills one)
    for knob, value in (("pool_bpp", pool_bpp), ("stats_bpp", stats_bpp), ("blocks_per_program", blocks_per_program),
                        ("listed_from", listed_from), ("check_programs", check_programs)):
        if value is not None and value < 1:
            raise ValueError(f"{knob}={value} must be >= 1")
    block = _clipped_block(block, vocab)
    nb = triton.cdiv(vocab, block)
    nbp = max(2, triton.next_power_of_2(nb))
    groups = triton.cdiv(nb, blocks_per_program)
    params = (temperature.float().contiguous(), top_k.contiguous(), top_p.float().contiguous(),
              min_p.float().contiguous(), seed.contiguous(), positions.contiguous())
    temp, k, _, mp, _, _ = params
    bmax, bsum, mass = (torch.empty((rows, nb), dtype=torch.float32, device=dev) for _ in range(3))
    barg = torch.empty((rows, nb), dtype=torch.int32, device=dev)
    n_units = nb * (block // unit)
    units = torch.empty((rows, n_units), dtype=torch.float32, device=dev) if unit < block else bmax
    fstate = torch.empty((rows, 5), dtype=torch.float32, device=dev)
    istate = torch.empty((rows, 3), dtype=torch.int32, device=dev)
    cnt = torch.empty((rows, CUTS, nb), dtype=torch.int32, device=dev)
    above = torch.empty((rows, CUTS, nb), dtype=torch.float32, device=dev)
    warps = warps or (4 if block >= 1024 else 2)
    pool = check_pool(pool, block) if top_k_cuts == 1 else 0
    ranks = pool_ranks(rows, nb, pool, dev)
    _stats_kernel[(bs, n, triton.cdiv(nb, stats_bpp))](logits, temp, k, bmax, bsum, barg, units, ranks, n, vocab,
                                                       nb, BLOCK=block, UNIT=unit, POOL=pool, BPP=stats_bpp,
                                                       num_warps=warps)
    pz, pi, pn = pool_buffers(rows, nb, pool, dev)
    if pool:
        _pool_pass_kernel[(rows, triton.cdiv(nb, pool_bpp))](logits, temp, k, ranks, pz, pi, pn, n, vocab, nb,
                                                             BLOCK=block, NBP=nbp, UNIT=unit, POOL=pool, BPP=pool_bpp,
                                                             num_warps=warps)
    _floor_kernel[(rows,)](temp, k, units, fstate, n, vocab, n_units, UNIT=unit,
                           UP=max(2, triton.next_power_of_2(n_units)), num_warps=warps)
    _mass_kernel[(rows, groups)](logits, temp, k, mp, bmax, bsum, units, fstate, mass, n, vocab, nb, BLOCK=block,
                                 NBP=nbp, UNIT=unit, SPAN=mass_span(block, unit, vocab), BPP=blocks_per_program,
                                 num_warps=warps)
    # rounds from `listed_from` on run over the list of rows still drawing (filled by the finish kernel
    # of the round before) with its (length, next item to claim); earlier rounds over the grid
    listed = [(None, None)] * (par_rounds + 1)
    if listed_from < par_rounds:
        lists = torch.empty((par_rounds, rows), dtype=torch.int32, device=dev)
        counts = torch.zeros((par_rounds, 2), dtype=torch.int32, device=dev)
        listed[listed_from:par_rounds] = [(lists[r], counts[r]) for r in range(listed_from, par_rounds)]
    _start_kernel[(rows,)](logits, *params, bmax, bsum, barg, mass, fstate, istate, out, ranks, pz, pi, pn, n, vocab,
                           nb, BLOCK=block, NBP=nbp, UNIT=unit, POOL=pool, CH=min(POOL_CHUNK, nbp),
                           INDEX_TIES=index_ties, num_warps=warps, maxnreg=start_maxnreg)
    finish = (logits, *params, bmax, fstate, istate, cnt, above, out)
    programs = min(rows * groups, check_programs or _check_programs(dev))
    for r in range(par_rounds):
        _check_kernel[(programs,) if r >= listed_from else (rows, groups)](
            logits, temp, k, bmax, fstate, istate, cnt, above, out, *listed[r], n, vocab, nb, BLOCK=block, NC=CUTS,
            KC=top_k_cuts, PC=top_p_cuts, BPP=blocks_per_program, LISTED=r >= listed_from, INDEX_TIES=index_ties,
            num_warps=warps)
        _finish_kernel[(rows,)](*finish, *listed[r + 1], n, vocab, nb, BLOCK=block, NBP=nbp, NC=CUTS, KC=top_k_cuts,
                                PC=top_p_cuts, SEQUENTIAL=False, INDEX_TIES=index_ties, num_warps=warps)
    _finish_kernel[(rows,)](*finish, None, None, n, vocab, nb, BLOCK=block, NBP=nbp, NC=CUTS, KC=top_k_cuts,
                            PC=top_p_cuts, SEQUENTIAL=True, INDEX_TIES=index_ties, num_warps=warps)
    return out

