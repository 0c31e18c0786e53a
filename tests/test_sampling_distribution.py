"""The per-node sampling distribution equals SGLang's own, for every sampling parameter.

The exact target distribution is computed here in float64 with SGLang's semantics (its torch
sampler: softmax(logits / T), sort, top-k ranks, top-p on the mass before a rank, min-p against
the top probability; penalties from the output-token counts: additive, then repetition scaling,
then the logit bias). Tied logits sort by index, lowest first, as the torch sampler's CUDA sort
does (`index_ties=True`), or are all kept or all cut, as FlashInfer's pivots do (a setting with
bf16 logits has a tie at its top-k cut; both orders are tested there). The node sits at depth 2 of a tree, so its own path (two tokens) counts as
output. Draws: 20,000 rows per setting on the torch path (all rows in a few vectorised calls) and
1,000-2,000 on interpreted Triton (10-100 ms per row on one CPU core: 20k would take an hour);
their per-node draws are compared by chi-square over ~40 rank-ordered bins (the favoured token
of the alternative below in a bin of its own).

Power: the alternative is a sampler that moves 3 % of the mass onto one kept token (rank 10; as
a walk that favours a draft token would). `_power` computes, from the same bins, the noncentrality
N * sum((q - p)^2 / p) and the normal-approximated probability of rejecting at alpha = 1e-4;
each test asserts it is >= 0.99 and that the biased draws are rejected.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from tests.kernels_env import INTERPRETED

from kernels.path_penalties import Penalties, apply_path_penalties
from kernels.posterior import CUTS, POOL, POOL_FLAT, posterior_tokens_triton
from kernels.posterior_reference import posterior_tokens_torch
from kernels.posterior_pool import pool_eligible_torch, pool_floor_torch

ALPHA = 1e-4
MOVED = 0.03


def sglang_probs(logits: np.ndarray, temp: float, top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0,
                 index_ties: bool = True) -> np.ndarray:
    """SGLang's sampling distribution of one row, float64: its torch sampler (ties by index), or with
    `index_ties=False` FlashInfer's order (a tied token is above the cut iff all its ties are)."""
    z = logits / temp
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    ps = p[order]
    before = np.cumsum(ps) - ps
    rank = np.arange(len(ps))
    if not index_ties:  # each token counts only the tokens strictly above it
        first = np.searchsorted(-ps, -ps, side="left")
        rank, before = first, (np.cumsum(ps) - ps)[first]
    keep = np.ones_like(ps, dtype=bool)
    if 0 < top_k < len(p):
        keep &= rank < top_k
    keep &= before <= top_p
    if min_p > 0:
        keep &= ps >= ps[0] * min_p
    out = np.zeros_like(p)
    out[order] = np.where(keep, ps, 0.0)
    return out / out.sum()


def sglang_penalized(raw: np.ndarray, counts: np.ndarray, freq: float, pres: float, rep: float,
                     bias: np.ndarray | None) -> np.ndarray:
    """Logits after SGLang's penalties for output-token counts `counts` (plain decoding)."""
    x = raw - freq * counts - pres * (counts > 0)
    x = np.where(counts > 0, np.where(x < 0, x * rep, x / rep), x)
    return x if bias is None else x + bias


def _bins(probs: np.ndarray, draws: int) -> list[np.ndarray]:
    """The favoured token of the biased alternative alone, the others in rank order in about 40
    groups of >= max(10, draws / 40) expected draws (the rest pooled into the last)."""
    fav = _favoured(probs)
    order = np.argsort(-probs, kind="stable")
    order = order[(probs[order] > 0) & (order != fav)]
    groups, cur, mass = [np.array([fav])], [], 0.0
    for tok in order:
        cur.append(tok)
        mass += probs[tok]
        if mass * draws >= max(10.0, draws / 40):
            groups.append(np.array(cur))
            cur, mass = [], 0.0
    if cur:
        groups[-1] = np.concatenate([groups[-1], np.array(cur)])
    return groups


def _chi_square_p(tokens: np.ndarray, probs: np.ndarray) -> float:
    """Goodness-of-fit p-value (Wilson-Hilferty tail); 0 if a token outside the support shows up."""
    n = len(tokens)
    counts = np.bincount(tokens, minlength=len(probs))
    if counts[probs == 0].sum():
        return 0.0
    groups = _bins(probs, n)
    obs = np.array([counts[g].sum() for g in groups], dtype=np.float64)
    exp = np.array([probs[g].sum() * n for g in groups])
    stat, df = float(((obs - exp) ** 2 / exp).sum()), len(groups) - 1
    assert df >= 5, "too few bins for a meaningful test"
    zz = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(zz / math.sqrt(2))


def _favoured(probs: np.ndarray) -> int:
    """The token a biased sampler favours: rank 10 of the kept set (the last one if fewer)."""
    order = np.argsort(-probs, kind="stable")
    return int(order[min(10, int((probs > 0).sum()) - 1)])


def _power(probs: np.ndarray, n: int) -> float:
    """P(reject at ALPHA) against 3 % of the mass moved onto one token (normal approximation)."""
    groups = _bins(probs, n)
    biased = probs * (1 - MOVED)
    biased[_favoured(probs)] += MOVED
    p = np.array([probs[g].sum() for g in groups])
    q = np.array([biased[g].sum() for g in groups])
    lam, df = n * float(((q - p) ** 2 / p).sum()), len(groups) - 1
    crit = df + math.sqrt(2 * df) * 3.72 + 2 * 3.72**2 / 3  # ~ chi2 quantile at 1e-4 (Cornish-Fisher)
    z = (crit - df - lam) / math.sqrt(2 * (df + 2 * lam))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _biased(tokens: np.ndarray, probs: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(len(tokens)) < MOVED, _favoured(probs), tokens)


# A tree root -> a -> b: node 2 (depth 2) has path (a, b) on top of the request's output counts.
A_TOK, B_TOK = 3, 7
TREE_TOKENS = torch.tensor([[0, A_TOK, B_TOK]])
TREE_PARENT = torch.tensor([[-1, 0, 1]])


def _logits(vocab: int, scale: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(vocab, generator=gen, dtype=torch.float64) * scale
    x[A_TOK], x[B_TOK] = 2.5, -1.5  # the path tokens: one positive, one negative logit
    return x


SETTINGS = {
    # name: (vocab, logit scale, sampling kwargs, penalty kwargs)
    "temperature_1": (2048, 2.0, dict(temp=1.0), {}),
    "temperature_0.7": (2048, 2.0, dict(temp=0.7), {}),
    "top_p_0.9_flat": (8192, 0.3, dict(temp=1.0, top_p=0.9), {}),
    "top_k_2000_flat": (8192, 0.3, dict(temp=1.0, top_k=2000), {}),
    "top_k_8_flat": (8192, 0.3, dict(temp=1.0, top_k=8), {}),  # k <= 32 units: the top-k floor applies
    "top_k_24_bf16_ties": (8192, 0.3, dict(temp=1.0, top_k=24, bf16=True), {}),  # a tie at the cut (`test_tie_orders`)
    "min_p_0.2": (2048, 0.8, dict(temp=1.0, min_p=0.2), {}),
    "joint_k_p_min_p": (8192, 1.5, dict(temp=0.8, top_k=50, top_p=0.8, min_p=0.05), {}),
    "top_k_100_flat": (8192, 0.3, dict(temp=1.0, top_k=100), {}),
    "top_k_100_top_p_0.005_flat": (8192, 0.3, dict(temp=1.0, top_k=100, top_p=0.005), {}),  # a nucleus of ~40
    "joint_k_100_p_min_p": (8192, 0.8, dict(temp=0.8, top_k=100, top_p=0.8, min_p=0.05), {}),
    "repetition_1.3": (2048, 1.5, dict(temp=1.0), dict(rep=1.3)),
    "frequency_0.5": (2048, 1.5, dict(temp=1.0), dict(freq=0.5)),
    "presence_0.7": (2048, 1.5, dict(temp=1.0), dict(pres=0.7)),
    "logit_bias": (2048, 1.5, dict(temp=1.0), dict(bias=True)),
    "all_penalties_top_p": (2048, 1.5, dict(temp=0.9, top_p=0.95), dict(rep=1.2, freq=0.3, pres=0.2, bias=True)),
}


# settings made for the candidate pool (`test_pooled_rows_match_sglang`), run there only
POOL_ONLY = ("top_k_100_flat", "top_k_100_top_p_0.005_flat", "joint_k_100_p_min_p")


def _case(name: str, index_ties: bool = True):
    """(node logits [1, 3, V] fp32, penalties, logit bias, exact probs of node 2, sampling kwargs)."""
    vocab, scale, samp, pen = SETTINGS[name]
    raw = _logits(vocab, scale, seed=len(name))
    if samp.get("bf16"):
        raw = raw.to(torch.bfloat16).double()
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(vocab, dtype=torch.float64)
    counts[torch.randint(0, vocab, (40,), generator=gen)] += 1
    counts[A_TOK] = 0  # a: first seen on the path; b: already in the output once
    counts[B_TOK] = 1
    bias = None
    if pen.get("bias"):
        bias = torch.zeros(vocab, dtype=torch.float64)
        bias[torch.randint(0, vocab, (30,), generator=gen)] = 3.0
        bias[11] = -100.0
    path_counts = counts.clone()
    path_counts[A_TOK] += 1
    path_counts[B_TOK] += 1
    x = sglang_penalized(raw.numpy(), path_counts.numpy(), pen.get("freq", 0.0), pen.get("pres", 0.0),
                         pen.get("rep", 1.0), None if bias is None else bias.numpy())
    probs = sglang_probs(x, samp["temp"], samp.get("top_k", -1), samp.get("top_p", 1.0), samp.get("min_p", 0.0),
                         index_ties)
    penalties = None
    if pen and set(pen) != {"bias"}:
        one = lambda v: torch.tensor([float(v)])  # noqa: E731
        penalties = Penalties(counts=counts.float()[None], frequency=one(pen.get("freq", 0.0)),
                              presence=one(pen.get("pres", 0.0)), repetition=one(pen.get("rep", 1.0)))
    node = raw.float()[None, None].expand(1, 3, vocab)
    return node, penalties, None if bias is None else bias.float()[None], probs, samp


def _draw(name: str, rows: int, sampler) -> np.ndarray:
    node, penalties, bias, _, samp = _case(name)
    adjusted = apply_path_penalties(node, TREE_TOKENS, TREE_PARENT, 2, penalties, bias)[:, 2:3]
    out = []
    for start in range(0, rows, 5000):
        r = min(5000, rows - start)
        ones = torch.ones(r)
        got = sampler(adjusted.expand(r, 1, -1).contiguous(), samp["temp"] * ones,
                      torch.full((r,), samp.get("top_k", -1)), samp.get("top_p", 1.0) * ones,
                      torch.arange(start, start + r) * 7919 + len(name), min_p=samp.get("min_p", 0.0) * ones,
                      positions=torch.full((r, 1), 1000))
        out.append(got[:, 0].numpy())
    return np.concatenate(out)


def _check(name: str, tokens: np.ndarray, index_ties: bool = True) -> None:
    probs = _case(name, index_ties)[3]
    assert _power(probs, len(tokens)) >= 0.99
    assert _chi_square_p(tokens, probs) > ALPHA
    assert _chi_square_p(_biased(tokens, probs, seed=5), probs) < ALPHA


@pytest.mark.heavy
@pytest.mark.parametrize("name", [n for n in SETTINGS if n not in POOL_ONLY])
def test_torch_path_matches_sglang(name: str) -> None:
    _check(name, _draw(name, 20_000, functools.partial(posterior_tokens_torch, index_ties=True)))


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["top_p_0.9_flat", "joint_k_p_min_p", "all_penalties_top_p"])
@pytest.mark.parametrize("top_p_cuts", [3, CUTS])
def test_more_top_p_cuts_match_sglang(name: str, top_p_cuts: int) -> None:
    """The check with more cut candidates than the default's one on rows without top-k (a speed
    knob) is as exact."""
    _check(name, _draw(name, 20_000, functools.partial(posterior_tokens_torch, index_ties=True, top_p_cuts=top_p_cuts)))


@pytest.mark.heavy
@pytest.mark.parametrize("name,unit,top_k_cuts", [
    ("top_k_2000_flat", 2, 1),  # 4096 units of 2 tokens: the floor serves k = 2000, one cut per check
    ("top_k_2000_flat", 4, 2),  # 2048 units: a looser floor
    ("joint_k_p_min_p", 16, 3),
])
def test_other_top_k_cuts_match_sglang(name: str, unit: int, top_k_cuts: int) -> None:
    """Rows with top-k checked with one or a few cut candidates under a finer floor unit (speed
    knobs): as exact."""
    _check(name, _draw(name, 20_000, functools.partial(posterior_tokens_torch, index_ties=True, unit=unit,
                                                       top_k_cuts=top_k_cuts)))


@pytest.mark.heavy
@pytest.mark.parametrize("index_ties", [True, False])
def test_tie_orders(index_ties: bool) -> None:
    """bf16 logits tie at the top-k cut: each tie order samples its own distribution (the torch
    sampler's: exactly k tokens; FlashInfer's: the whole tie), which the other order's draws fail."""
    name = "top_k_24_bf16_ties"
    assert np.abs(_case(name, True)[3] - _case(name, False)[3]).sum() / 2 > 0.02  # the orders differ here
    draws = {o: _draw(name, 20_000, functools.partial(posterior_tokens_torch, index_ties=o)) for o in (True, False)}
    _check(name, draws[index_ties], index_ties)
    assert _chi_square_p(draws[not index_ties], _case(name, index_ties)[3]) < ALPHA


# Candidate pools (kernels/posterior_pool.py) on 8192 tokens: 4 blocks of 2048 serve a top-k above
# the 32 floor units and at most 128 (V / 64).
POOL_SETTINGS = {"top_k_100_flat": True, "top_k_100_top_p_0.005_flat": True, "joint_k_100_p_min_p": False}


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(POOL_SETTINGS))
def test_pooled_rows_match_sglang(name: str) -> None:
    """Rows drawn from their candidate pool (checked pooled here) sample SGLang's distribution, in
    the tie order named (FlashInfer's value order for the joint filter)."""
    index_ties = POOL_SETTINGS[name]
    node, penalties, bias, _, samp = _case(name)
    vocab = node.shape[-1]
    k = torch.tensor([samp["top_k"]])
    yes = torch.ones(1, dtype=torch.bool)
    z = node[0, 2].float() / samp["temp"]
    assert bool(pool_eligible_torch(yes, k, vocab, vocab // 2048, 256, 2048)[0])
    zb = z.view(vocab // 2048, 2048)
    assert bool((torch.exp(zb - zb.amax(-1, keepdim=True)).sum(-1) >= POOL_FLAT).all())  # flat: the pool serves it
    assert bool(pool_floor_torch(z.view(1, vocab // 2048, 2048), yes, k, POOL, vocab)[0][0])
    _check(name, _draw(name, 20_000, functools.partial(posterior_tokens_torch, index_ties=index_ties)), index_ties)


# draws per setting on interpreted Triton: 1,000 where that already gives power >= 0.99 (the top-k
# floor's setting, top_k_8_flat, is left to the equality tests: its kernels equal the torch path draw for draw)
TRITON_SETTINGS = {"temperature_1": 2000, "top_p_0.9_flat": 1000, "top_k_2000_flat": 1000, "min_p_0.2": 2000,
                   "repetition_1.3": 2000, "all_penalties_top_p": 2000}


@pytest.mark.heavy
@pytest.mark.skipif(not INTERPRETED, reason="the CPU run interprets Triton; on CUDA the equality tests cover it")
@pytest.mark.parametrize("name", list(TRITON_SETTINGS))
def test_interpreted_triton_matches_sglang(name: str) -> None:
    _check(name, _draw(name, TRITON_SETTINGS[name], posterior_tokens_triton))


@pytest.mark.parametrize("sparse", [False, pytest.param(True, marks=pytest.mark.skipif(
    not INTERPRETED, reason="the CPU run interprets Triton; on CUDA the equality tests cover it"))])
def test_path_penalties_per_node(sparse: bool) -> None:
    """Every node of a random tree gets SGLang's adjustment for counts + its own path: the torch
    reference and the runtime's sparse Triton step (interpreted)."""
    gen = torch.Generator().manual_seed(2)
    bs, n, vocab, depth = 2, 9, 40, 4
    parent = torch.tensor([[-1, 0, 0, 1, 1, 3, 2, 5, 6], [-1, 0, 1, 2, 3, 0, 5, 1, 7]])
    tokens = torch.randint(0, 6, (bs, n), generator=gen)  # few distinct tokens: repeats on paths
    raw = torch.randn(bs, n, vocab, generator=gen, dtype=torch.float64) * 2
    counts = torch.randint(0, 3, (bs, vocab), generator=gen).double()
    bias = torch.randn(bs, vocab, generator=gen, dtype=torch.float64)
    stop = torch.zeros(bs, vocab, dtype=torch.bool)
    stop[:, 5] = True
    pen = Penalties(counts=counts.float(), frequency=torch.tensor([0.5, 0.1]), presence=torch.tensor([0.3, -0.2]),
                    repetition=torch.tensor([1.3, 0.8]), out_len=torch.tensor([3, 10]),
                    min_new_tokens=torch.tensor([5, 4]), stop_tokens=stop)
    got = apply_path_penalties(raw.float(), tokens, parent, depth, pen, bias.float(), sparse=sparse)
    for b in range(bs):
        for j in range(n):
            c, node, d = counts[b].clone(), j, 0
            while node > 0:
                c[tokens[b, node]] += 1
                node, d = int(parent[b, node]), d + 1
            want = sglang_penalized(raw[b, j].numpy(), c.numpy(), float(pen.frequency[b]), float(pen.presence[b]),
                                    float(pen.repetition[b]), bias[b].numpy())
            if 3 + d < 5 and b == 0:
                want = np.where(stop[b].numpy(), -np.inf, want)
            np.testing.assert_allclose(got[b, j].double().numpy(), want, rtol=1e-5, atol=1e-5)
