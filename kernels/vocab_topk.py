"""Per-depth top-K draft log-probabilities: the only stage of the tree build that reads the vocabulary.

`lp[b, d, r] = float32(logit) - logsumexp_fp32(row)` for the K largest logits of each row, in the
order `torch.topk` returns them (descending; the order among equal logits is torch.topk's).
The top-K itself is torch's radix select on the logits in their own dtype (no host sync,
capturable; on an H200 it beat a two-stage chunked top-K and a top-K on an fp32 copy). The Triton
kernel streams the row once in its own dtype to get an fp32 log-sum-exp and writes `lp`, so no
fp32 copy of the `[bs, D, V]` logits is ever made.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _lse_minus_kernel(logits_ptr, vals_ptr, lp_ptr, V, K, BLOCK: tl.constexpr, KP: tl.constexpr):
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
    lse = safe_max + tl.log(total)
    koffs = tl.arange(0, KP)
    vals = tl.load(vals_ptr + row * K + koffs, mask=koffs < K, other=0.0).to(tl.float32)
    tl.store(lp_ptr + row * K + koffs, vals - lse, mask=koffs < K)


def draft_topk_torch(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: fp32 log-sum-exp by torch, same top-K. Returns (lp fp32, token int64), [bs, D, k]."""
    vals, idx = torch.topk(draft_logits, k, dim=-1)
    lse = torch.logsumexp(draft_logits.float(), dim=-1, keepdim=True)
    return vals.float() - lse, idx


def draft_topk_triton(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton log-sum-exp fused with the `vals - lse` write; same values as `draft_topk_torch`."""
    bs, depth, vocab = draft_logits.shape
    logits = draft_logits.contiguous()
    vals, idx = torch.topk(logits, k, dim=-1)
    lp = torch.empty((bs, depth, k), dtype=torch.float32, device=logits.device)
    rows = bs * depth
    if rows:
        block = min(4096, triton.next_power_of_2(vocab))
        _lse_minus_kernel[(rows,)](logits, vals.contiguous(), lp, vocab, k, BLOCK=block,
                                   KP=triton.next_power_of_2(k), num_warps=8 if block >= 2048 else 4)
    return lp, idx


def draft_topk(draft_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-`k` tokens per draft row with fp32 log-softmax values; Triton on CUDA, torch elsewhere."""
    if draft_logits.dim() != 3:
        raise ValueError(f"draft_logits must be [bs, D, V], got {tuple(draft_logits.shape)}")
    if not 1 <= k <= draft_logits.shape[-1]:
        raise ValueError(f"k={k} must be in [1, V={draft_logits.shape[-1]}]")
    if draft_logits.is_cuda:
        return draft_topk_triton(draft_logits, k)
    return draft_topk_torch(draft_logits, k)
