"""The torch reference of the posterior kernels: the same blocks, units, cuts and draws on all rows
at once (the algorithm is posterior.py's module docstring; the candidate pool is posterior_pool.py's).
The Triton paths are tested against it, and the runtime runs it where there is no CUDA device."""

from __future__ import annotations

import torch

from .posterior import (BLOCK, CUTS, POOL, POOL_FLAT, TOP_K_CUTS, TOP_P_CUTS, UNIT, _above, _clipped_block, _prepare,
                        check_cuts, floor_unit, just_below_torch, mass_span, uniform_torch)
from .posterior_pool import check_pool, pool_eligible_torch, pool_floor_torch


def posterior_tokens_torch(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *,
                           min_p: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                           block: int = BLOCK, unit: int = UNIT, index_ties: bool = False,
                           top_k_cuts: int = TOP_K_CUTS, top_p_cuts: int = TOP_P_CUTS,
                           pool: int = POOL) -> torch.Tensor:
    """Reference: the kernel's algorithm on all rows at once in torch ops (same blocks, same units,
    same draws; `index_ties`: the module docstring's tie order; `top_k_cuts` / `top_p_cuts`: cut
    candidates of a row with / without top-k, and `pool`: the candidate pool per block
    (posterior_pool.py; with one top-k cut only), as `posterior_split`'s. The per-node kernel has no
    pool: its draws are this reference's with pool=0)."""
    bs, n, vocab = target_logits.shape
    seed, min_p, positions = _prepare(target_logits, temperature, top_k, top_p, seed, min_p, positions)
    dev = target_logits.device
    rows = bs * n
    unit, span = floor_unit(block, unit, vocab), mass_span(block, unit, vocab)
    check_cuts(top_k_cuts, top_p_cuts)
    block = _clipped_block(block, vocab)  # as the launcher: the same blocks, the same sums
    nb = -(-vocab // block)
    x = target_logits.reshape(rows, vocab).float()
    per_row = lambda t: t.repeat_interleave(n)  # noqa: E731
    temp, k, p, mp = per_row(temperature.float()), per_row(top_k.long()), per_row(top_p.float()), per_row(min_p.float())
    seed_r, pos_r = per_row(seed), positions.reshape(rows)
    out = x.argmax(dim=-1)
    sampled = (temp > 0) & (k != 1)
    if not bool(sampled.any()):
        return out.view(bs, n)
    z = torch.nn.functional.pad(x / torch.where(sampled, temp, 1.0)[:, None], (0, nb * block - vocab), value=float("-inf"))
    zb = z.view(rows, nb, block)
    bmax = zb.amax(-1)
    bsum = torch.exp(zb - torch.where(bmax == float("-inf"), 0.0, bmax)[..., None]).sum(-1)
    row_max = bmax.amax(-1, keepdim=True)
    mass = torch.where(bmax > float("-inf"), bsum * torch.exp(bmax - row_max), 0.0)
    total = mass.sum(-1)
    w_all = torch.exp(zb - row_max[..., None])
    k_on, p_on = (k > 0) & (k < vocab), p < 1
    # the top-k floor: the k-th largest unit maximum has k tokens at or above it
    umax = z.view(rows, -1, unit).amax(-1)
    kth = umax.sort(-1, descending=True).values.gather(1, (k - 1).clamp(0, umax.shape[1] - 1)[:, None])[:, 0]
    floored = sampled & k_on & (k <= -(-vocab // unit)) & (kth > float("-inf"))
    floor = torch.where(floored, just_below_torch(kth), float("-inf"))
    pool = check_pool(pool, block) if top_k_cuts == 1 else 0
    pooled = torch.zeros_like(floored)
    if pool:
        flat = (bsum[:, :vocab // block] >= POOL_FLAT).all(-1)
        eligible = pool_eligible_torch(sampled, k, vocab, nb, unit, block) & flat
        if bool(eligible.any()):
            pooled, pool_floor = pool_floor_torch(zb, eligible, k, pool, vocab)
            floor = torch.where(pooled, pool_floor, floor)
    support = torch.where((zb > floor[:, None, None]) & (w_all >= mp[:, None, None]), w_all, 0.0)
    support_mass = support.sum(-1)
    if unit < block:  # a floored row's blocks are summed span by span, in order (the kernels skip spans below the floor)
        by_span = torch.zeros_like(support_mass)
        per_span = support.view(rows, nb, block // span, span).sum(-1)
        for u in range(block // span):
            by_span = by_span + per_span[..., u]
        support_mass = torch.where(floored[:, None], by_span, support_mass)
    mass = torch.where((mp[:, None] > 0) | floored[:, None] | pooled[:, None], support_mass, mass)
    floor_mass = mass.sum(-1)
    floor_idx = torch.zeros(rows, dtype=torch.int64, device=dev)
    searching = sampled.clone()
    offs, blocks = torch.arange(block, device=dev), torch.arange(nb, device=dev)
    idx_all = torch.arange(nb * block, device=dev).view(nb, block)
    above_torch = lambda zz, ii, cut, cut_idx: (zz > cut) | ((zz == cut) & (ii < cut_idx))  # noqa: E731  (`_above`)
    rnd = 0
    while bool(searching.any()):
        a = searching.nonzero()[:, 0]  # the rows still drawing (host sync: reference only)
        target = uniform_torch(seed_r[a], pos_r[a], rnd) * floor_mass[a]
        m = mass[a]
        cum = m.cumsum(-1)
        last_b = torch.where(m > 0, blocks, -1).amax(-1)
        pick_b = torch.minimum(torch.where(cum > target[:, None], blocks, nb).amin(-1), last_b).clamp(min=0)
        before = torch.where(blocks < pick_b[:, None], m, 0.0).sum(-1)
        zp = zb[a, pick_b]
        w = torch.exp(zp - row_max[a])
        w = torch.where(above_torch(zp, idx_all[pick_b], floor[a, None], floor_idx[a, None]) & (w >= mp[a, None]), w, 0.0)
        cw = before[:, None] + w.cumsum(-1)
        last_j = torch.where(w > 0, offs, -1).amax(-1)
        pick_j = torch.minimum(torch.where(cw > target[:, None], offs, block).amin(-1), last_j).clamp(min=0)
        token = pick_b * block + pick_j
        z_pick = zp.gather(1, pick_j[:, None])
        ci = torch.arange(CUTS, device=dev)
        ncut = torch.where(k_on[a], top_k_cuts, top_p_cuts)[:, None]
        frac = ci.to(torch.float32) / ncut.to(torch.float32)
        cand = torch.where(ci < ncut, z_pick + (row_max[a] - z_pick) * frac, float("inf"))  # [A, CUTS]
        cand_idx = torch.zeros_like(cand, dtype=torch.int64)
        if index_ties:
            cand_idx[:, 0] = token
        za, wa = zb[a], w_all[a]
        gts = [above_torch(za, idx_all, cand[:, i, None, None], cand_idx[:, i, None, None]) for i in range(CUTS)]
        above_n = torch.stack([gt.sum((-1, -2)) for gt in gts], 1)
        above = torch.stack([torch.where(gt, wa, 0.0).sum(-1) for gt in gts], 1)
        above_mass = above.sum(-1)
        outside = (k_on[a, None] & (above_n >= k[a, None])) | (p_on[a, None] & (above_mass > (p[a] * total[a])[:, None]))
        best = torch.where(outside, torch.arange(CUTS, device=dev), -1).amax(-1)
        kept = best < 0
        sel = best.clamp(min=0)
        out[a] = torch.where(kept, token, out[a])
        floor[a] = torch.where(kept, floor[a], cand.gather(1, sel[:, None])[:, 0])
        floor_idx[a] = torch.where(kept, floor_idx[a], cand_idx.gather(1, sel[:, None])[:, 0])
        mass[a] = torch.where(kept[:, None], m, above[torch.arange(len(a), device=dev), sel])
        floor_mass[a] = torch.where(kept, floor_mass[a], above_mass.gather(1, sel[:, None])[:, 0])
        searching[a] = ~kept
        rnd += 1
    return out.view(bs, n)
