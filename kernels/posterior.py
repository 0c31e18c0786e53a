"""Posterior token at every tree node: what the target itself would emit there.

Greedy rows (temperature <= 0): argmax of the logits (lowest index on ties). Sampled rows: one
Gumbel-max draw from softmax(logits / T) restricted to the top-k / top-p set, which is an exact
sample of that distribution. Filter semantics follow SGLang's torch sampler: ranks by logit, top-k
keeps ranks < k (k <= 0 or k >= V: off), top-p keeps a rank while the probability mass strictly
before it is <= top_p (probabilities of the full-vocabulary softmax at temperature T). The kept set
is applied as a logit threshold (the last kept candidate's logit), so tokens tied with it are kept.
The filters look at the top `max_candidates` logits only: exact whenever top-k <= max_candidates
(or off) and the top-p set fits in them, truncated to them otherwise.

Noise is a counter-based hash of (seed[b], node index, token id): seeded, order-free, identical in
the torch and Triton paths up to float rounding of log(). Give each round its own seeds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_M32 = 0xFFFFFFFF
_C_HI, _C_NODE, _C_TOK = 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for int64 x in [0, 2**32) without int64 overflow."""
    return ((x & 0xFFFF) * c + ((((x >> 16) * c) & 0xFFFF) << 16)) & _M32


def _mix32_torch(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def gumbel_noise_torch(seed: torch.Tensor, n: int, vocab: int) -> torch.Tensor:
    """fp32 Gumbel noise [bs, n, vocab] keyed by (seed[b], node j, token v)."""
    seed = seed.to(torch.int64)
    dev = seed.device
    h = _mix32_torch((seed & _M32) ^ _mix32_torch(((seed >> 32) & _M32) ^ _C_HI))
    node = _mix32_torch(torch.arange(n, device=dev, dtype=torch.int64) ^ _C_NODE)
    h = _mix32_torch(h[:, None] ^ node[None, :])
    tok = _mix32_torch(torch.arange(vocab, device=dev, dtype=torch.int64) ^ _C_TOK)
    h = _mix32_torch(h[:, :, None] ^ tok[None, None, :])
    u = ((h >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)
    return -torch.log(-torch.log(u))


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _posterior_kernel(logits_ptr, cand_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, out_ptr,
                      n, V, C, FILTERS: tl.constexpr, BLOCK: tl.constexpr, CP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    b = row // n
    j = row % n
    temp = tl.load(temp_ptr + b).to(tl.float32)
    greedy = temp <= 0.0
    tdiv = tl.where(greedy, 1.0, temp)
    noise_scale = tl.where(greedy, 0.0, 1.0)
    offs = tl.arange(0, BLOCK)
    x_row = logits_ptr + row * V
    thr = float("-inf")
    if FILTERS:
        top_k = tl.load(topk_ptr + b).to(tl.int64)
        top_p = tl.load(topp_ptr + b).to(tl.float32)
        run_max = tl.full([BLOCK], float("-inf"), tl.float32)
        run_sum = tl.zeros([BLOCK], tl.float32)
        for start in range(0, V, BLOCK):
            z = tl.load(x_row + start + offs, mask=start + offs < V, other=float("-inf")).to(tl.float32) / tdiv
            new_max = tl.maximum(run_max, z)
            safe = tl.where(new_max == float("-inf"), 0.0, new_max)
            run_sum = run_sum * tl.exp(run_max - safe) + tl.exp(z - safe)
            run_max = new_max
        row_max = tl.max(run_max, axis=0)
        lse = row_max + tl.log(tl.sum(run_sum * tl.exp(run_max - row_max), axis=0))
        ranks = tl.arange(0, CP)
        cand = tl.load(cand_ptr + row * C + ranks, mask=ranks < C, other=float("-inf")).to(tl.float32)
        prob = tl.where(ranks < C, tl.exp(cand / tdiv - lse), 0.0)
        before = tl.cumsum(prob, axis=0) - prob
        k_off = (top_k <= 0) | (top_k >= V)
        k_eff = tl.where(k_off, C, tl.minimum(top_k, C))
        keep = (ranks < k_eff) & (before <= top_p)
        last = tl.sum(keep.to(tl.int32), axis=0) - 1
        thr = tl.sum(tl.where(ranks == last, cand, 0.0), axis=0)
        thr = tl.where((k_off & (top_p >= 1.0)) | greedy, float("-inf"), thr)
    seed = tl.load(seed_ptr + b)
    h = _mix32((seed & 0xFFFFFFFF).to(tl.uint32) ^ _mix32(((seed >> 32) & 0xFFFFFFFF).to(tl.uint32) ^ 0x9E3779B9))
    h = _mix32(h ^ _mix32(j.to(tl.uint32) ^ 0x85EBCA6B))
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK], 2147483647, tl.int32)
    for start in range(0, V, BLOCK):
        idx = start + offs
        x = tl.load(x_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
        hv = _mix32(h ^ _mix32(idx.to(tl.uint32) ^ 0xC2B2AE35))
        u = ((hv >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        score = x / tdiv + noise_scale * -tl.log(-tl.log(u))
        score = tl.where((idx < V) & (x >= thr), score, float("-inf"))
        better = score > best
        best_idx = tl.where(better, idx, best_idx)
        best = tl.where(better, score, best)
    top = tl.max(best, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(best == top, best_idx, 2147483647), axis=0).to(tl.int64))


def _check(target_logits: torch.Tensor, *per_request: torch.Tensor) -> None:
    if target_logits.dim() != 3:
        raise ValueError(f"target_logits must be [bs, n, V], got {tuple(target_logits.shape)}")
    for t in per_request:
        if t.shape != (target_logits.shape[0],):
            raise ValueError(f"per-request tensors must be [bs], got {tuple(t.shape)}")


def _seeds(seed: torch.Tensor | torch.Generator, bs: int, device: torch.device) -> torch.Tensor:
    if isinstance(seed, torch.Generator):
        return torch.randint(0, 2**62, (bs,), generator=seed, device=seed.device).to(device)
    return seed.to(device=device, dtype=torch.int64)


def posterior_tokens_torch(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *, filters: bool = True,
                           max_candidates: int = 1024) -> torch.Tensor:
    """Reference: same semantics on the whole [bs, n, V] tensor in torch ops."""
    bs, n, vocab = target_logits.shape
    seed = _seeds(seed, bs, target_logits.device)
    _check(target_logits, temperature, top_k, top_p, seed)
    x = target_logits.float()
    greedy = (temperature.float() <= 0)[:, None, None]
    tdiv = torch.where(greedy, 1.0, temperature.float()[:, None, None])
    z = x / tdiv
    thr = torch.full((bs, n, 1), float("-inf"), device=x.device)
    if filters:
        c = min(vocab, max_candidates)
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        cand = torch.topk(target_logits, c, dim=-1).values.float()
        prob = torch.exp(cand / tdiv - lse)
        before = torch.cumsum(prob, dim=-1) - prob
        k = top_k.to(torch.int64)[:, None, None]
        k_off = (k <= 0) | (k >= vocab)
        k_eff = torch.where(k_off, c, k.clamp(max=c))
        ranks = torch.arange(c, device=x.device)
        keep = (ranks < k_eff) & (before <= top_p.float()[:, None, None])
        last = keep.sum(-1, keepdim=True) - 1
        cut = cand.gather(-1, last.clamp(min=0))
        thr = torch.where((k_off & (top_p.float()[:, None, None] >= 1)) | greedy, float("-inf"), cut)
    noise = gumbel_noise_torch(seed, n, vocab) * torch.where(greedy, 0.0, 1.0)
    score = torch.where(x >= thr, z + noise, float("-inf"))
    return score.argmax(dim=-1)


def posterior_tokens_triton(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                            top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *, filters: bool = True,
                            max_candidates: int = 1024) -> torch.Tensor:
    """Triton: one program per node, streams the row (twice with filters: log-sum-exp, then draw)."""
    bs, n, vocab = target_logits.shape
    seed = _seeds(seed, bs, target_logits.device)
    _check(target_logits, temperature, top_k, top_p, seed)
    logits = target_logits.contiguous()
    c = min(vocab, max_candidates)
    cand = torch.topk(logits, c, dim=-1).values.contiguous() if filters else logits
    out = torch.empty((bs, n), dtype=torch.int64, device=logits.device)
    if bs * n:
        block = min(2048, triton.next_power_of_2(vocab))
        _posterior_kernel[(bs * n,)](logits, cand, temperature.contiguous(), top_k.contiguous(), top_p.contiguous(),
                                     seed.contiguous(), out, n, vocab, c, FILTERS=filters, BLOCK=block,
                                     CP=triton.next_power_of_2(c), num_warps=8 if block >= 2048 else 4)
    return out


def posterior_tokens(target_logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                     top_p: torch.Tensor, seed: torch.Tensor | torch.Generator, *, all_greedy: bool = False,
                     filters: bool = True, max_candidates: int = 1024) -> torch.Tensor:
    """int64[bs, n] posterior token per tree node. `all_greedy` (host-known) skips sampling;
    `filters=False` (host-known: no request uses top-k / top-p) skips the top-k/top-p pass."""
    if all_greedy:
        return target_logits.argmax(dim=-1)
    if target_logits.is_cuda:
        return posterior_tokens_triton(target_logits, temperature, top_k, top_p, seed,
                                       filters=filters, max_candidates=max_candidates)
    return posterior_tokens_torch(target_logits, temperature, top_k, top_p, seed,
                                  filters=filters, max_candidates=max_candidates)
