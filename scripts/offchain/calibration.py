"""A calibrated drafter for the off-chain oracle: who is right how often, and what the draft says.

Why: the oracle's default drafter (scripts/offchain/oracle.py) is weak (DFLASH ~1.9 tokens per round);
real DFlash drafters accept 6-8 (the DDTree paper: DFLASH 7.79 at block 16 on Qwen3-8B). This module
plans a drafter of that strength in the form `scripts/bench/calibrated_tree.py` models analytically:
at every depth the draft puts probability q on its first choice and (1 - q)(1 - a) a^(r - 1) on its
rank-r choice (r >= 1), and it is calibrated: the true token has rank r about that often.

- q is fitted so that the chain of `depths` first choices accepts `dflash_tau` tokens per round
  (1 + q + ... + q^depths); the ring is then *assigned*, not drawn: exactly round(ring q^k) bonuses
  have their first k depths at rank 0 (so DFLASH's mean over the ring is 1 + sum_k of that / ring),
  every depth has round(ring q) rank-0 rows, and the misses' ranks follow the tail, pooled over depths.
  Which bonus gets which row is a seeded permutation (independent across depths but for the chain).
- The candidates are the first `candidates` ranks; the tail beyond them is spread over the tokens the
  draft never names (logit 0), so the truth's rank frequencies are the tail's renormalised over the
  named ranks (the only miscalibration, (1 - q) a^(candidates - 1) of mass).
- Logits are bf16-exact eighths; a row's non-first logits move by -1/8, 0 or +1/8 (seeded) so that no
  true-path prefix sits on a tie at a checked budget's cut-off (oracle.ambiguous_budgets).
"""

from __future__ import annotations

import math

import torch

from scripts.bench.calibrated_tree import fit_first_choice

EIGHTH = 0.125


def draft_probs(q: float, tail: float, candidates: int) -> tuple[float, ...]:
    """The draft's planned probability of its rank-0 .. rank-(candidates - 1) choice."""
    return (q,) + tuple((1 - q) * (1 - tail) * tail ** (r - 1) for r in range(1, candidates))


def rank_probs(q: float, tail: float, candidates: int) -> tuple[float, ...]:
    """How often the true token has each rank: q, then the tail renormalised over the named ranks."""
    probs = draft_probs(q, tail, candidates)
    miss = sum(probs[1:])
    return (q,) + tuple((1 - q) * p / miss for p in probs[1:])


def fit(dflash_tau: float, depths: int, tail: float, candidates: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(rank_probs, draft_probs) of the drafter whose chain accepts `dflash_tau` tokens per round."""
    q = fit_first_choice(dflash_tau, depths)
    return rank_probs(q, tail, candidates), draft_probs(q, tail, candidates)


def _largest_remainder(total: int, weights: list[float]) -> list[int]:
    """Integer counts summing to `total`, proportional to `weights` (largest remainder)."""
    raw = [total * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: counts[i] - raw[i])[:total - sum(counts)]:
        counts[i] += 1
    return counts


def chain_counts(q: float, depths: int, ring: int) -> list[int]:
    """How many bonuses have their first k depths all at rank 0, k = 1..depths: round(ring q^k)."""
    return [round(ring * q**k) for k in range(1, depths + 1)]


def rank_table(probs: tuple[float, ...], depths: int, ring: int, seed: int) -> torch.Tensor:
    """The true token's rank per (bonus, depth) [ring, depths], assigned as the module docstring says."""
    g = torch.Generator().manual_seed(seed)
    chain = chain_counts(probs[0], depths, ring)
    order = torch.randperm(ring, generator=g).tolist()
    leading = torch.zeros(ring, dtype=torch.int64)  # leading rank-0 depths per bonus (DFLASH accepts that many)
    for slot, bonus in enumerate(order):
        leading[bonus] = sum(slot < c for c in chain)
    ranks = torch.full((ring, depths), -1, dtype=torch.int64)
    zeros = round(ring * probs[0])
    for d in range(depths):
        ranks[leading > d, d] = 0
        ranks[leading == d, d] = 1  # the chain's first miss (its rank is set below)
        free = (leading < d).nonzero().flatten()
        want = zeros - int((leading > d).sum())
        if not 0 <= want <= len(free):
            raise ValueError(f"depth {d + 1}: {want} rank-0 rows wanted from {len(free)} free ones")
        pick = free[torch.randperm(len(free), generator=g)]
        ranks[pick[:want], d], ranks[pick[want:], d] = 0, 1
    misses = (ranks == 1).nonzero()
    counts = _largest_remainder(len(misses), list(probs[1:]))
    tail = torch.tensor([r + 1 for r, c in enumerate(counts) for _ in range(c)])
    shuffled = misses[torch.randperm(len(misses), generator=g)]
    ranks[shuffled[:, 0], shuffled[:, 1]] = tail
    return ranks


def planned_logits(probs: tuple[float, ...], vocab: int) -> list[float]:
    """Logits (eighths) whose softmax over `vocab` tokens (the unnamed ones at 0) gives `probs`."""
    rest = 1 - sum(probs)
    top = math.log(probs[0] * (vocab - len(probs)) / rest)
    return [round((top + math.log(p / probs[0])) / EIGHTH) * EIGHTH for p in probs]


def jittered(logits: list[float], g: torch.Generator) -> list[float]:
    """`logits` with each non-first one moved by -1/8, 0 or +1/8, kept strictly decreasing."""
    steps = (torch.randint(-1, 2, (len(logits) - 1,), generator=g) * EIGHTH).tolist()
    out = [logits[0]]
    for v, s in zip(logits[1:], steps):
        out.append(min(v + s, out[-1] - EIGHTH))
    return out
