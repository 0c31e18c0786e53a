"""Posterior token at every tree node: what the target itself would emit there.

Greedy rows (temperature <= 0, or top_k = 1: SGLang's encoding of greedy requests): argmax of the
logits (lowest index on ties). Sampled rows: an exact
draw from SGLang's sampling distribution of that row, with no vocabulary truncation:

    probs = softmax(logits / T); keep token v iff
        rank(v) < top_k                       (top_k <= 0 or >= V: off)
        and mass of the tokens above v <= top_p   (probabilities of the full softmax)
        and probs[v] >= min_p * max(probs)    (min_p <= 0: off)

which is SGLang's "joint" order (torch sampler, and FlashInfer's top_k_top_p without min-p).
"Above" is an order of the tokens, and the two samplers order tied logits differently, which on
bf16 logits changes a top-k 20 row's kept set often (a tie at the cut):
- `index_ties=False` (FlashInfer): tokens by logit only; tokens tied with the last kept one are
  kept too (FlashInfer's pivots compare probabilities: a tie is above the pivot or not, all of it).
- `index_ties=True` (SGLang's pytorch sampler): tokens by logit, ties by index, lowest first, as
  its descending `torch.sort` orders them on CUDA (a stable radix sort): top-k keeps exactly k
  tokens, and top-p counts the mass of the tied tokens sorted before v.

How (streaming the row, nothing sorted; as written here one program per node,
`posterior_tokens_triton`; the runtime launches the same passes split over the row's blocks,
`posterior_split.py`):
1. One pass: per-block max and sum of exp -> the row max M, the total mass S and the mass of every
   block; and the max of every UNIT tokens. With top-k (k at most the number of units), the k-th
   largest unit max has k tokens at or above it, so top-k keeps nothing below it: just under it
   is the first draw's floor (a flat row's top-50 then starts among ~70 tokens, not 152k). A
   second pass, with min_p or that floor, sums the block masses of the first draw's support.
2. Inverse-CDF draw: a uniform u picks the block whose cumulative mass crosses u * mass, then the
   token inside that one block.
3. With top-k / top-p, one more pass counts the tokens and the mass strictly above the drawn
   token X (and, with TOP_K_CUTS / TOP_P_CUTS > 1, above higher cut candidates evenly spaced between
   X and the row max; by default X alone). X is kept -> done.
   Otherwise every token <= X is outside the kept set (it is an upper set), and so is every token
   <= a candidate with >= top_k tokens or > top_p of the mass above it: the next draw is from the
   tokens above the highest such cut, whose block masses that same pass produced. Rejection from
   nested supports that all contain the kept set gives an exact sample of the kept set; each
   round strictly raises the floor, so it ends (usually after 1-2 rounds). A floor is a cut in
   the token order: a value and an index (`_above`); the candidates above X cut between values
   (index 0), X's own cut is X itself (index X with `index_ties`, else 0: above all its ties).

Randomness: u = hash(seed[b], position[b, j], round) in (0, 1) with 24 random bits. Nodes are keyed
by their position, not their index: the emitted token at position q is then F_ctx(q)^-1(u_q), the
same function of (seed, position, context) whatever the tree looks like, so with a fixed seed a
DDTree run emits exactly what sequential sampling with this sampler would emit. Unseeded requests
pass a fresh random seed per round.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fast_math import COMPILED

_M32 = 0xFFFFFFFF
_C_HI, _C_POS, _C_RND = 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35
BLOCK = 2048
CUTS = 8  # the most cut candidates a check pass takes (the drawn token and up to 7 above it)
# Cut candidates per check on a row with / without top-k: one (the drawn token) was the fastest of
# 1, 2, 4 and 8 in every case of the H200 tune at batch 64 x 16 rows, V=151936, but flat top-k 2000
# (4 cuts: 1747 vs 1799 us; docs/kernels.md "Cut counts timed"): fewer reductions per block outweigh
# the extra rounds after a rejection.
TOP_K_CUTS = 1
TOP_P_CUTS = 1
UNIT = 256  # tokens per unit of the top-k floor (`_top_k_floor`): a row's maxima per UNIT tokens rank it
# Tokens per span that the mass pass of a floored row reads or skips (at least a unit): finer units
# tighten the floor without turning that pass into a loop of tiny loads.
SPAN = 256
# The candidate pool of a large-k top-k row (posterior_pool.py): at most POOL tokens per block
# (0: none) above a row floor ranked from the maxima of POOL_UNIT tokens.
POOL = 128
POOL_UNIT = 32
# ... only on flat rows: in every full block the max's mass at most 1 / POOL_FLAT of the block's (a
# peaked row's first unfloored draw lands in its top-k: the pool would only add its work).
POOL_FLAT = 64.0
_FLT_MIN = 1.1754943508222875e-38


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for int64 x in [0, 2**32) without int64 overflow."""
    return ((x & 0xFFFF) * c + ((((x >> 16) * c) & 0xFFFF) << 16)) & _M32


def _mix32_torch(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_torch(seed: torch.Tensor, position: torch.Tensor, rnd: int) -> torch.Tensor:
    """fp32 uniform in (0, 1) keyed by (seed, position, round); seed/position broadcast int64."""
    seed, position = seed.to(torch.int64), position.to(torch.int64)
    h = _mix32_torch((seed & _M32) ^ _mix32_torch(((seed >> 32) & _M32) ^ _C_HI))
    h = _mix32_torch(h ^ _mix32_torch((position & _M32) ^ _C_POS))
    h = _mix32_torch(h ^ _mix32_torch(torch.full_like(h, rnd & _M32) ^ _C_RND))
    return ((h >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _uniform(seed, position, rnd):
    h = _mix32((seed & 0xFFFFFFFF).to(tl.uint32) ^ _mix32(((seed >> 32) & 0xFFFFFFFF).to(tl.uint32) ^ 0x9E3779B9))
    h = _mix32(h ^ _mix32((position & 0xFFFFFFFF).to(tl.uint32) ^ 0x85EBCA6B))
    h = _mix32(h ^ _mix32(rnd.to(tl.uint32) ^ 0xC2B2AE35))
    return ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)


@triton.jit
def _scaled(x, temp):
    """x / temp for a row's float32 logits; every pass over them takes its z from here, so all see the
    same z. Compiled: x times one reciprocal of temp, a multiply a token (Triton's float32 division
    is three: it scales the operands for divisors outside [FLT_MIN, 2**126]); interpreted: the division,
    the torch reference's bits (the CPU tests compare them)."""
    if COMPILED:
        y = x * (1.0 / temp)
    else:
        y = x / temp
    return y


@triton.jit
def _support_bounded(min_p, floor):
    """Whether a row's first support is smaller than the whole row (min-p, or a floor under it): its
    block masses are then summed from the logits, not taken from the block stats."""
    return (min_p > 0.0) | (floor > float("-inf"))


@triton.jit
def _floored(top_k, V, UNIT: tl.constexpr):
    """Whether the top-k floor applies: top-k on, and k at most the row's number of units."""
    return (top_k > 0) & (top_k < V) & (top_k <= (V + UNIT - 1) // UNIT)


@triton.jit
def _top_k_floor(units_row, U, top_k, UP: tl.constexpr):
    """Exclusive floor under the top_k-th largest of a row's U unit maxima (-inf when that is -inf):
    the top_k units reaching it hold top_k tokens at or above it, so top-k keeps nothing below it.
    The top_k-th largest is found bit by bit (the largest key t with top_k keys >= t; keys order
    as the floats do), 32 counts instead of a sort."""
    u = tl.arange(0, UP)
    bits = tl.load(units_row + u, mask=u < U, other=float("-inf")).to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64) + 2147483648  # in [0, 2**32)
    kth = tl.zeros([], tl.int64)
    for i in tl.static_range(32):
        cand = kth + (1 << (31 - i))
        kth = tl.where(tl.sum((key >= cand).to(tl.int32), axis=0) >= top_k, cand, kth)
    kbits = (kth - 2147483648).to(tl.int32)
    value = tl.where(kbits < 0, kbits ^ 0x7FFFFFFF, kbits).to(tl.float32, bitcast=True)
    return tl.where(value > float("-inf"), _just_below(value), float("-inf"))


@triton.jit
def _above(z, idx, cut, cut_idx):
    """Tokens strictly above the cut (cut, cut_idx) in the order (logit descending, index ascending):
    z > cut, or z == cut at an index below cut_idx (0: a cut between values, above all of z == cut)."""
    return (z > cut) | ((z == cut) & (idx < cut_idx))


@triton.jit
def _span_mass(x_row, start, temp, row_max, floor, min_p, V, SPAN: tl.constexpr):
    """The mass (relative to the row max) of tokens [start, start + SPAN) above the floor with
    w >= min_p."""
    idx = start + tl.arange(0, SPAN)
    z = _scaled(tl.load(x_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32), temp)
    w = tl.exp(z - row_max)
    return tl.sum(tl.where((z > floor) & (w >= min_p), w, 0.0), axis=0)


@triton.jit
def _block_mass(x_row, bi, temp, row_max, floor, min_p, V, BLOCK: tl.constexpr):
    """Block bi's `_span_mass`."""
    return _span_mass(x_row, bi * BLOCK, temp, row_max, floor, min_p, V, BLOCK)


@triton.jit
def _unit_mass(x_row, units_block, bi, temp, row_max, floor, min_p, V, BLOCK: tl.constexpr, UNIT: tl.constexpr,
               SPAN: tl.constexpr):
    """`_block_mass` summed span by span (SPAN tokens: whole units) in order, reading only the spans
    whose max (of their unit maxima, `units_block`: the block's) is above the floor: a floored flat
    row reads ~1/8 of its logits."""
    acc = tl.zeros([], tl.float32)
    for u in range(BLOCK // SPAN):
        if SPAN == UNIT:
            span_max = tl.load(units_block + u)
        else:
            span_max = tl.max(tl.load(units_block + u * (SPAN // UNIT) + tl.arange(0, SPAN // UNIT)), axis=0)
        if span_max > floor:
            acc += _span_mass(x_row, bi * BLOCK + u * SPAN, temp, row_max, floor, min_p, V, SPAN)
    return acc


@triton.jit
def _support_mass(x_row, units_block, bi, temp, row_max, floor, min_p, V, BLOCK: tl.constexpr, UNIT: tl.constexpr,
                  SPAN: tl.constexpr):
    """Block bi's mass in the first draw's support: by span on a floored row with units inside the
    block (only such rows have unit maxima), else the whole block."""
    if UNIT < BLOCK:
        if floor > float("-inf"):
            mass = _unit_mass(x_row, units_block, bi, temp, row_max, floor, min_p, V, BLOCK, UNIT, SPAN)
        else:
            mass = _block_mass(x_row, bi, temp, row_max, floor, min_p, V, BLOCK)
    else:
        mass = _block_mass(x_row, bi, temp, row_max, floor, min_p, V, BLOCK)
    return mass


@triton.jit
def _pick_block(mass, target, NBP: tl.constexpr):
    """Inverse CDF over blocks: the block whose cumulative mass [NBP] crosses target (no further
    than the last block with mass), and the mass before it."""
    blocks = tl.arange(0, NBP)
    cum = tl.cumsum(mass, axis=0)
    last_b = tl.max(tl.where(mass > 0.0, blocks, -1), axis=0)
    pick_b = tl.maximum(tl.minimum(tl.min(tl.where(cum > target, blocks, NBP), axis=0), last_b), 0)
    return pick_b, tl.sum(tl.where(blocks < pick_b, mass, 0.0), axis=0)


@triton.jit
def _pick_in_block(w, before, target, N: tl.constexpr):
    """Inverse CDF inside the picked block: the position where before + cumsum(w [N]) crosses target
    (no further than the last w > 0)."""
    offs = tl.arange(0, N)
    cw = before + tl.cumsum(w, axis=0)
    last_j = tl.max(tl.where(w > 0.0, offs, -1), axis=0)
    return tl.maximum(tl.minimum(tl.min(tl.where(cw > target, offs, N), axis=0), last_j), 0)


@triton.jit
def _cut_candidates(z_pick, row_max, k_on, NC: tl.constexpr, KC: tl.constexpr, PC: tl.constexpr):
    """The drawn token's z and the cut candidates above it, evenly spaced to the row max: KC on a
    row with top-k (`k_on`), PC on the others; the rest of the NC are +inf (never above a token,
    never picked). IEEE division, as the reference's torch division."""
    ci = tl.arange(0, NC)
    ncut = tl.where(k_on, KC, PC)
    frac = tl.math.div_rn(ci.to(tl.float32), ncut.to(tl.float32))
    return tl.where(ci < ncut, z_pick + (row_max - z_pick) * frac, float("inf"))


@triton.jit
def _posterior_kernel(logits_ptr, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, pos_ptr, out_ptr, units_ptr,
                      n, V, NB, BLOCK: tl.constexpr, NBP: tl.constexpr, NC: tl.constexpr, KC: tl.constexpr,
                      PC: tl.constexpr, UNIT: tl.constexpr, SPAN: tl.constexpr, UP: tl.constexpr,
                      INDEX_TIES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    x_row = logits_ptr + row * V
    offs = tl.arange(0, BLOCK)
    blocks = tl.arange(0, NBP)
    temp = tl.load(temp_ptr + b).to(tl.float32)
    top_k = tl.load(topk_ptr + b).to(tl.int64)
    if (temp <= 0.0) | (top_k == 1):
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        best_idx = tl.full([BLOCK], 2147483647, tl.int32)
        for start in range(0, V, BLOCK):
            x = tl.load(x_row + start + offs, mask=start + offs < V, other=float("-inf")).to(tl.float32)
            better = x > best
            best_idx = tl.where(better, start + offs, best_idx)
            best = tl.where(better, x, best)
        top = tl.max(best, axis=0)
        tl.store(out_ptr + row, tl.min(tl.where(best == top, best_idx, 2147483647), axis=0).to(tl.int64))
    else:
        top_p = tl.load(topp_ptr + b).to(tl.float32)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        seed = tl.load(seed_ptr + b)
        position = tl.load(pos_ptr + row)
        k_on = (top_k > 0) & (top_k < V)
        floored = _floored(top_k, V, UNIT)
        p_on = top_p < 1.0
        # 1. per-block max and sum of exp (relative to the block max)
        bmax = tl.full([NBP], float("-inf"), tl.float32)
        bsum = tl.zeros([NBP], tl.float32)
        for bi in range(0, NB):
            idx = bi * BLOCK + offs
            z = _scaled(tl.load(x_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32), temp)
            m = tl.max(z, axis=0)
            m_safe = tl.where(m == float("-inf"), 0.0, m)
            s = tl.sum(tl.exp(z - m_safe), axis=0)
            bmax = tl.where(blocks == bi, m, bmax)
            bsum = tl.where(blocks == bi, s, bsum)
            if floored:
                tl.store(units_ptr + row * UP + bi * (BLOCK // UNIT) + tl.arange(0, BLOCK // UNIT),
                         tl.max(tl.reshape(z, (BLOCK // UNIT, UNIT)), axis=1))
        row_max = tl.max(bmax, axis=0)
        mass = tl.where(bmax > float("-inf"), bsum * tl.exp(bmax - row_max), 0.0)
        total = tl.sum(mass, axis=0)
        floor = tl.full([], float("-inf"), tl.float32)
        if floored:
            tl.debug_barrier()  # the unit maxima this program stored, visible to all its threads
            floor = _top_k_floor(units_ptr + row * UP, NB * (BLOCK // UNIT), top_k, UP)
        if _support_bounded(min_p, floor):
            for bi in range(0, NB):
                s = _support_mass(x_row, units_ptr + row * UP + bi * (BLOCK // UNIT), bi, temp, row_max, floor, min_p,
                                  V, BLOCK, UNIT, SPAN)
                mass = tl.where(blocks == bi, s, mass)
        floor_mass = tl.sum(mass, axis=0)
        floor_idx = tl.zeros([], tl.int32)
        rnd = tl.zeros([], tl.int32)
        token = tl.zeros([], tl.int32)
        searching = tl.full([], 1, tl.int32)
        while searching > 0:
            # 2. inverse-CDF draw among the tokens above the floor
            target = _uniform(seed, position, rnd) * floor_mass
            cum = tl.cumsum(mass, axis=0)
            last_b = tl.max(tl.where(mass > 0.0, blocks, -1), axis=0)
            pick_b = tl.minimum(tl.min(tl.where(cum > target, blocks, NBP), axis=0), last_b)
            before = tl.sum(tl.where(blocks < pick_b, mass, 0.0), axis=0)
            idx = pick_b * BLOCK + offs
            z = _scaled(tl.load(x_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32), temp)
            w = tl.exp(z - row_max)
            w = tl.where(_above(z, idx, floor, floor_idx) & (w >= min_p), w, 0.0)
            cw = before + tl.cumsum(w, axis=0)
            last_j = tl.max(tl.where(w > 0.0, offs, -1), axis=0)
            pick_j = tl.minimum(tl.min(tl.where(cw > target, offs, BLOCK), axis=0), last_j)
            token = pick_b * BLOCK + pick_j
            z_pick = tl.sum(tl.where(offs == pick_j, z, 0.0), axis=0)
            searching = 0
            if k_on | p_on:
                # 3. is the draw in the kept set? Count and mass strictly above it, and above KC - 1
                # (top-k rows) or PC - 1 higher cut candidates: a rejected draw moves the floor to the
                # highest candidate that still has every kept token above it (at least top_k tokens or
                # more than top_p of the mass strictly above it); unused candidates are +inf.
                ci = tl.arange(0, NC)
                cand = _cut_candidates(z_pick, row_max, k_on, NC, KC, PC)
                cand_idx = tl.zeros([NC], tl.int32)
                if INDEX_TIES:
                    cand_idx = tl.where(ci == 0, token, 0)
                above_n = tl.zeros([NC], tl.int32)
                above = tl.zeros([NC, NBP], tl.float32)
                for bi in range(0, NB):
                    idx = bi * BLOCK + offs
                    z = _scaled(tl.load(x_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32), temp)
                    w = tl.exp(z - row_max)
                    if INDEX_TIES:
                        gt = _above(z[None, :], idx[None, :], cand[:, None], cand_idx[:, None])
                    else:
                        gt = z[None, :] > cand[:, None]
                    above_n += tl.sum(gt.to(tl.int32), axis=1)
                    s = tl.sum(tl.where(gt, w[None, :], 0.0), axis=1)
                    above = tl.where(blocks[None, :] == bi, s[:, None], above)
                above_mass = tl.sum(above, axis=1)
                by_k = tl.where(k_on, (above_n >= top_k).to(tl.int32), 0)
                by_p = tl.where(p_on, (above_mass > top_p * total).to(tl.int32), 0)
                outside = (by_k + by_p) > 0
                best = tl.max(tl.where(outside, ci, -1), axis=0)
                kept = best < 0
                pick = ci == best
                floor = tl.where(kept, floor, tl.sum(tl.where(pick, cand, 0.0), axis=0))
                floor_idx = tl.where(kept, floor_idx, tl.sum(tl.where(pick, cand_idx, 0), axis=0))
                mass = tl.where(kept, mass, tl.sum(tl.where(pick[:, None], above, 0.0), axis=0))
                floor_mass = tl.where(kept, floor_mass, tl.sum(tl.where(pick, above_mass, 0.0), axis=0))
                searching = tl.where(kept, 0, 1)
            rnd += 1
        tl.store(out_ptr + row, token.to(tl.int64))


def _check(target_logits: torch.Tensor, per_request: dict[str, torch.Tensor]) -> None:
    if target_logits.dim() != 3:
        raise ValueError(f"target_logits must be [bs, n, V], got {tuple(target_logits.shape)}")
    for name, t in per_request.items():
        if t.shape != (target_logits.shape[0],):
            raise ValueError(f"{name} must be [bs] = [{target_logits.shape[0]}], got {tuple(t.shape)}")


def request_seeds(seed: torch.Tensor | torch.Generator, bs: int, device: torch.device) -> torch.Tensor:
    """int64 [bs]: each request's seed (given, or drawn fresh from the generator for this round)."""
    if isinstance(seed, torch.Generator):
        return torch.randint(0, 2**62, (bs,), generator=seed, device=seed.device).to(device)
    return seed.to(device=device, dtype=torch.int64)


def _prepare(target_logits, temperature, top_k, top_p, seed, min_p, positions):
    bs, n, _ = target_logits.shape
    dev = target_logits.device
    seed = request_seeds(seed, bs, dev)
    min_p = torch.zeros(bs, device=dev) if min_p is None else min_p
    _check(target_logits, {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed, "min_p": min_p})
    if positions is None:
        positions = torch.arange(n, device=dev, dtype=torch.int64).expand(bs, n)
    if positions.shape != (bs, n):
        raise ValueError(f"positions must be [bs, n] = [{bs}, {n}], got {tuple(positions.shape)}")
    return seed, min_p, positions.to(torch.int64)


def _clipped_block(block: int, vocab: int) -> int:
    """The block the launchers use: no wider than the vocabulary's power of two."""
    return min(block, triton.next_power_of_2(vocab))


def floor_unit(block: int, unit: int, vocab: int) -> int:
    """Tokens per unit of the top-k floor: `unit` when it splits the (vocabulary-clipped) block, else
    the block itself. Raises on a unit that is not a power of two."""
    if unit < 1 or unit & (unit - 1):
        raise ValueError(f"unit={unit} must be a power of two")
    return min(unit, _clipped_block(block, vocab))


def mass_span(block: int, unit: int, vocab: int) -> int:
    """Tokens per span the mass pass of a floored row reads or skips: SPAN, or the unit when larger,
    within the (vocabulary-clipped) block."""
    return min(max(floor_unit(block, unit, vocab), SPAN), _clipped_block(block, vocab))


def check_cuts(top_k_cuts: int, top_p_cuts: int) -> None:
    """Raise on a cut count outside 1..CUTS (the check pass's candidates per row)."""
    for name, cuts in (("top_k_cuts", top_k_cuts), ("top_p_cuts", top_p_cuts)):
        if not 1 <= cuts <= CUTS:
            raise ValueError(f"{name}={cuts} must be in 1..{CUTS}")


def just_below_torch(x: torch.Tensor) -> torch.Tensor:
    """A float32 strictly below x (its predecessor; -FLT_MIN below zero), so `z > just_below(x)`
    keeps x itself: the exclusive floor under a kept value."""
    bits = x.view(torch.int32)
    down = torch.where(x > 0, bits - 1, bits + 1).view(torch.float32)
    return torch.where(x == 0, -_FLT_MIN, down)


@triton.jit
def _just_below(x):
    bits = x.to(tl.int32, bitcast=True)
    down = tl.where(x > 0, bits - 1, bits + 1).to(tl.float32, bitcast=True)
    return tl.where(x == 0, -1.1754943508222875e-38, down)


def posterior_tokens_triton(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                            top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *,
                            min_p: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                            block: int = BLOCK, unit: int = UNIT, index_ties: bool = False,
                            top_k_cuts: int = TOP_K_CUTS, top_p_cuts: int = TOP_P_CUTS) -> torch.Tensor:
    """Triton, one program per node (the module docstring's passes): the runtime's kernel before
    `posterior_split` (same draws), kept as its benchmark baseline and chi-square subject."""
    bs, n, vocab = target_logits.shape
    seed, min_p, positions = _prepare(target_logits, temperature, top_k, top_p, seed, min_p, positions)
    logits = target_logits.contiguous()
    out = torch.empty((bs, n), dtype=torch.int64, device=logits.device)
    if bs * n:
        unit = floor_unit(block, unit, vocab)
        check_cuts(top_k_cuts, top_p_cuts)
        block = _clipped_block(block, vocab)
        nb = triton.cdiv(vocab, block)
        up = max(2, triton.next_power_of_2(nb * (block // unit)))
        units = torch.empty((bs * n, up), dtype=torch.float32, device=logits.device)
        _posterior_kernel[(bs * n,)](
            logits, temperature.float().contiguous(), top_k.contiguous(), top_p.float().contiguous(),
            min_p.float().contiguous(), seed.contiguous(), positions.contiguous(), out, units, n, vocab, nb,
            BLOCK=block, NBP=max(2, triton.next_power_of_2(nb)), NC=CUTS, KC=top_k_cuts, PC=top_p_cuts, UNIT=unit,
            SPAN=mass_span(block, unit, vocab), UP=up, INDEX_TIES=index_ties,
            num_warps=8 if block >= 2048 else 4,
        )
    return out
