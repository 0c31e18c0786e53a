"""Posterior sampling and the statistical losslessness of sample-then-walk.

The losslessness test runs whole DDTree rounds (build, posterior, walk) for thousands of
independent requests on a tiny second-order Markov "target" and checks, by chi-square against the
exact probabilities, that the first emitted tokens are distributed as the target's own
autoregressive sampling with the same temperature / top-k / top-p. A walk that favours the draft
slightly must fail the same test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.kernels_env import DEVICES

from kernels import accept_walk, build_tree, posterior_tokens
from kernels.posterior import posterior_tokens_triton
from kernels.posterior_reference import posterior_tokens_torch

VOCAB, DEPTH, BUDGET, EMIT = 5, 3, 6, 3
GROUPS = [(1.0, 0, 1.0), (0.6, 3, 1.0), (1.3, -1, 0.7), (0.8, 2, 0.9)]  # (temperature, top_k, top_p)
PER_GROUP = 6000


def _params(per_group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    temp, top_k, top_p = (torch.tensor([g[i] for g in GROUPS]).repeat_interleave(per_group) for i in range(3))
    return temp.float(), top_k.long(), top_p.float()


@pytest.mark.parametrize("device", DEVICES)
def test_triton_posterior_equals_torch(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    bs, n, vocab = 8, 9, 300
    logits = (torch.randn(bs, n, vocab, generator=gen) * 3).to(torch.bfloat16)
    temp = torch.tensor([0.0, 0.7, 1.0, 1.3, 1.0, 0.5, 0.0, 2.0])
    top_k = torch.tensor([0, 5, -1, 3, 400, 1, 7, 50])
    top_p = torch.tensor([1.0, 0.9, 0.5, 1.0, 0.95, 1.0, 0.3, 0.8])
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.3, 0.0, 0.5, 0.05])
    seed = torch.randint(0, 2**60, (bs,), generator=gen)
    positions = torch.randint(0, 5000, (bs, n), generator=gen)
    for block in (64, 2048):  # several blocks per row, one block per row
        ref = posterior_tokens_torch(logits, temp, top_k, top_p, seed, min_p=min_p, positions=positions, block=block,
                                     pool=0)  # the per-node kernel has no candidate pool
        got = posterior_tokens_triton(*(t.to(device) for t in (logits, temp, top_k, top_p, seed)),
                                      min_p=min_p.to(device), positions=positions.to(device), block=block)
        assert torch.equal(got.cpu(), ref)
    assert torch.equal(ref[temp == 0], logits.float().argmax(-1)[temp == 0])


def test_posterior_semantics() -> None:
    """Draws respect top-k / top-p; same seed, same draw; another seed, another draw."""
    logits = torch.tensor([[[3.0, 2.0, 1.0, 0.0, -1.0]]]).repeat(4000, 1, 1)
    ones = torch.ones(4000)
    seed = torch.arange(4000)
    top2 = posterior_tokens(logits, ones, 2 * ones.long(), ones, seed)
    assert set(top2.unique().tolist()) == {0, 1}
    # probabilities .636, .234, .086, ...: the mass before rank 1 is .636, before rank 2 .870
    assert set(posterior_tokens(logits, ones, 0 * ones.long(), 0.7 * ones, seed).unique().tolist()) == {0, 1}
    assert set(posterior_tokens(logits, ones, 0 * ones.long(), 0.6 * ones, seed).unique().tolist()) == {0}
    assert torch.equal(posterior_tokens(logits, ones, 0 * ones.long(), ones, seed),
                       posterior_tokens(logits, ones, 0 * ones.long(), ones, seed))
    free = posterior_tokens(logits, ones, 0 * ones.long(), ones, seed)
    probs = torch.softmax(logits[0, 0], -1)
    freq = torch.bincount(free.flatten(), minlength=5).float() / 4000
    assert (freq - probs).abs().max() < 0.03
    assert not torch.equal(free, posterior_tokens(logits, ones, 0 * ones.long(), ones, seed + 1))
    gen = torch.Generator().manual_seed(3)
    assert posterior_tokens(logits, ones, 0 * ones.long(), ones, gen).shape == (4000, 1)


def _filtered_probs(logits: np.ndarray, temp: float, top_k: int, top_p: float) -> np.ndarray:
    """The target's own sampling distribution, float64, SGLang's filter semantics (ties kept whole,
    the kernels' default order)."""
    if temp <= 0:
        out = np.zeros_like(logits)
        out[np.argmax(logits)] = 1.0
        return out
    z = logits / temp
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-logits, kind="stable")
    keep = np.zeros(len(p), dtype=bool)
    before = 0.0
    for rank, tok in enumerate(order):
        if (0 < top_k <= rank) or before > top_p:
            break
        keep[tok] = True
        before += p[tok]
    thr = logits[keep].min()
    p = np.where(logits >= thr, p, 0.0)
    return p / p.sum()


class _MarkovTarget:
    """Target logits depend on the two previous tokens; the drafter's on the previous one and depth."""

    def __init__(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.table = torch.randn(VOCAB, VOCAB, VOCAB, generator=gen) * 1.5
        self.draft = torch.randn(DEPTH, VOCAB, VOCAB, generator=gen) * 2

    def sequence_probs(self, start: tuple[int, int], temp: float, top_k: int, top_p: float) -> dict:
        table = self.table.double().numpy()
        out = {}
        for seq in np.ndindex(*(VOCAB,) * EMIT):
            prob, ctx = 1.0, list(start)
            for tok in seq:
                prob *= _filtered_probs(table[ctx[-2], ctx[-1]], temp, top_k, top_p)[tok]
                ctx.append(tok)
            out[seq] = prob
        return out


def _ddtree_emit(target: _MarkovTarget, temp, top_k, top_p, device: str, bias: float = 0.0) -> torch.Tensor:
    """Run DDTree rounds until every request emitted EMIT tokens; returns [bs, EMIT]."""
    bs = temp.shape[0]
    temp, top_k, top_p = temp.to(device), top_k.to(device), top_p.to(device)
    table, draft = target.table.to(device), target.draft.to(device)
    prev2 = torch.zeros(bs, dtype=torch.int64, device=device)
    prev1 = torch.ones(bs, dtype=torch.int64, device=device)
    emitted = torch.full((bs, EMIT + DEPTH + 1), -1, dtype=torch.int64, device=device)
    count = torch.zeros(bs, dtype=torch.int64, device=device)
    rows = torch.arange(bs, device=device)
    gen = torch.Generator(device=device).manual_seed(11)
    for round_ in range(EMIT):
        tree = build_tree(draft[:, prev1].transpose(0, 1), BUDGET)
        tokens = tree.tokens.clone()
        tokens[:, 0] = prev1
        before = torch.where(tree.parent >= 0, tokens.gather(1, tree.parent.clamp(min=0)), prev2[:, None])
        target_logits = table[before, tokens]
        post = posterior_tokens(target_logits, temp, top_k, top_p, torch.randint(0, 2**62, (bs,), generator=gen,
                                                                                    device=device))
        if bias:
            kid = tokens.gather(1, tree.first_child.clamp(min=0))
            lucky = (torch.rand(post.shape, generator=gen, device=device) < bias) & (tree.first_child >= 0)
            post = torch.where(lucky, kid, post)
        acc, length, bonus = accept_walk(tokens, tree.first_child, tree.next_sibling, post, DEPTH)
        path_tokens = tokens.gather(1, acc.clamp(min=0))[:, 1:]
        new = torch.where(torch.arange(DEPTH, device=device) < length[:, None], path_tokens, -1)
        new = torch.cat([new, torch.full_like(bonus[:, None], -1)], 1)
        new.scatter_(1, length[:, None], bonus[:, None])
        slots = count[:, None] + torch.arange(DEPTH + 1, device=device)
        valid = (torch.arange(DEPTH + 1, device=device) <= length[:, None]) & (slots < emitted.shape[1])
        emitted[rows[:, None].expand_as(slots)[valid], slots[valid]] = new[valid]
        ctx = torch.cat([prev2[:, None], prev1[:, None], new], 1)
        last = length + 2
        prev2, prev1 = ctx[rows, last - 1], ctx[rows, last]
        count += length + 1
    assert (count >= EMIT).all()
    return emitted[:, :EMIT].cpu()


def _chi_square_p(counts: dict, probs: dict, total: int) -> float:
    """Goodness of fit p-value (bins with expected < 5 pooled; Wilson-Hilferty for the chi-square tail);
    0 when a sequence the target cannot emit shows up."""
    if any(probs[seq] == 0 for seq in counts):
        return 0.0
    obs, exp, pool_obs, pool_exp = [], [], 0, 0.0
    for seq, p in probs.items():
        if p * total >= 5:
            obs.append(counts.get(seq, 0))
            exp.append(p * total)
        else:
            pool_obs += counts.get(seq, 0)
            pool_exp += p * total
    if pool_exp > 0:
        obs.append(pool_obs)
        exp.append(pool_exp)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    df = len(obs) - 1
    assert df >= 5, "too few categories for a meaningful test"
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _p_values(device: str, bias: float) -> list[float]:
    target = _MarkovTarget(seed=4)
    temp, top_k, top_p = _params(PER_GROUP)
    emitted = _ddtree_emit(target, temp, top_k, top_p, device, bias)
    out = []
    for g, (t, k, p) in enumerate(GROUPS):
        seqs = emitted[g * PER_GROUP:(g + 1) * PER_GROUP].tolist()
        counts: dict = {}
        for s in seqs:
            counts[tuple(s)] = counts.get(tuple(s), 0) + 1
        probs = target.sequence_probs((0, 1), t, k, p)
        out.append(_chi_square_p(counts, probs, PER_GROUP))
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_sample_then_walk_is_lossless(device: str) -> None:
    p_values = _p_values(device, bias=0.0)
    assert min(p_values) > 1e-3, p_values


@pytest.mark.heavy
def test_biased_walk_is_caught() -> None:
    """Taking the draft's first child for 3% of posteriors must fail. The first group samples
    without filters (every sequence possible), so its rejection is the chi-square's alone."""
    p_values = _p_values("cpu", bias=0.03)
    assert max(p_values) < 1e-6, p_values


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_rounds_equal_greedy_decoding(device: str) -> None:
    target = _MarkovTarget(seed=9)
    bs = 4
    zeros = torch.zeros(bs)
    emitted = _ddtree_emit(target, zeros, zeros.long(), zeros + 1, device)
    table = target.table
    ctx = [0, 1]
    for _ in range(EMIT):
        ctx.append(int(table[ctx[-2], ctx[-1]].argmax()))
    assert emitted.tolist() == [ctx[2:]] * bs
