"""SGLang's logit adjustments at every tree node, with the node's own path counted as output.

Plain decoding adjusts the logits of the next token from the request's output-token counts c:
    additive:  x -= frequency * c + presence * (c > 0)   (and -inf on stop tokens while the
               output is shorter than min_new_tokens)
    scaling:   where c > 0: x = x * r if x < 0 else x / r   (repetition penalty r)
    bias:      x += logit_bias
in that order (SGLang's order when the penalties are accumulated, as in overlap scheduling and
its speculative verify). At tree node j the output so far is the request's output plus the
tokens of j's path (j and its ancestors, the root excluded: the root is the last committed
token), so c there is counts + path counts and the output length is length + depth.

Computed as the dense per-request adjustment for every node, then the <= depth path tokens of
each node recomputed from the raw logits with their path counts and scattered back. The dense
step is one Triton pass on CUDA (read logits and the request's counts once, write once; the torch
ops make ~8 passes over the [bs, n, V] logits) and equals the torch ops bit for bit: the same
fp32 operations in the same order, no fused multiply-add, IEEE division. The path step is torch
ops after one Triton walk to the root per node (`path_tokens`).
Fixed shapes, no host sync, capturable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

DENSE_BLOCK = 2048


@dataclass(frozen=True)
class Penalties:
    """Per-request penalty state, [bs] unless noted; any of them None when unused."""

    counts: torch.Tensor  # [bs, V] output-token counts before this round (root included)
    frequency: torch.Tensor | None = None
    presence: torch.Tensor | None = None
    repetition: torch.Tensor | None = None
    out_len: torch.Tensor | None = None  # output length before this round (root included)
    min_new_tokens: torch.Tensor | None = None
    stop_tokens: torch.Tensor | None = None  # [bs, V] bool


def _adjust(x: torch.Tensor, c: torch.Tensor, pen: Penalties, stop: torch.Tensor | None,
            short: torch.Tensor | None, bias: torch.Tensor | None, idx: tuple) -> torch.Tensor:
    """x adjusted for counts c; per-request tensors are indexed by `idx` to broadcast to x."""
    seen = c > 0
    if pen.frequency is not None:
        x = x - pen.frequency[idx] * c
    if pen.presence is not None:
        x = x - torch.where(seen, pen.presence[idx], 0.0)
    if stop is not None:
        x = torch.where(stop & short, float("-inf"), x)
    if pen.repetition is not None:
        r = pen.repetition[idx]
        x = torch.where(seen, torch.where(x < 0, x * r, x / r), x)
    if bias is not None:
        x = x + bias
    return x


@triton.jit
def _walk_kernel(tokens_ptr, parent_ptr, out_ptr, n, D):
    """`path_tokens_torch` for one node row (b * n + j): up to D steps towards the root."""
    row = tl.program_id(0)
    base = (row // n).to(tl.int64) * n
    node = (row % n).to(tl.int64)
    for s in range(D):
        real = node > 0
        at = base + tl.maximum(node, 0)
        tl.store(out_ptr + row.to(tl.int64) * D + s, tl.where(real, tl.load(tokens_ptr + at).to(tl.int64), -1))
        node = tl.where(real, tl.load(parent_ptr + at).to(tl.int64), 0)


def path_tokens_triton(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """`path_tokens_torch` in one launch (the torch loop takes ~6 small kernels per depth step)."""
    bs, n = tokens.shape
    out = torch.empty((bs, n, max_depth), dtype=torch.int64, device=tokens.device)
    if bs * n and max_depth:
        _walk_kernel[(bs * n,)](tokens.contiguous(), parent.contiguous(), out, n, max_depth)
    return out


def path_tokens(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """int64[bs, n, max_depth]: the tokens of node j and its ancestors (root excluded), -1 beyond."""
    walk = path_tokens_triton if tokens.is_cuda else path_tokens_torch
    return walk(tokens, parent, max_depth)


def path_tokens_torch(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """`path_tokens`'s reference."""
    bs, n = tokens.shape
    out = torch.full((bs, n, max_depth), -1, dtype=torch.int64, device=tokens.device)
    node = torch.arange(n, device=tokens.device).expand(bs, n)
    for s in range(max_depth):
        real = node > 0
        out[:, :, s] = torch.where(real, tokens.gather(1, node.clamp(min=0)), -1)
        node = torch.where(real, parent.gather(1, node.clamp(min=0)), 0)
    return out


@triton.jit
def _dense_kernel(x_ptr, counts_ptr, freq_ptr, pres_ptr, rep_ptr, stop_ptr, short_ptr, bias_ptr, out_ptr, n, V,
                  HAS_FREQ: tl.constexpr, HAS_PRES: tl.constexpr, HAS_REP: tl.constexpr, HAS_STOP: tl.constexpr,
                  HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """`_adjust` for one block of one node row (b * n + j), the request's counts broadcast over its n nodes."""
    row = tl.program_id(0)
    b = (row // n).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = offs < V
    x = tl.load(x_ptr + row.to(tl.int64) * V + offs, mask=live).to(tl.float32)
    c = tl.load(counts_ptr + b * V + offs, mask=live, other=0.0)
    seen = c > 0
    if HAS_FREQ:
        x = x - tl.load(freq_ptr + b) * c
    if HAS_PRES:
        x = x - tl.where(seen, tl.load(pres_ptr + b), 0.0)
    if HAS_STOP:
        stop = tl.load(stop_ptr + b * V + offs, mask=live, other=0) != 0
        x = tl.where(stop & (tl.load(short_ptr + row) != 0), float("-inf"), x)
    if HAS_REP:
        r = tl.load(rep_ptr + b)
        x = tl.where(seen, tl.where(x < 0, x * r, tl.math.div_rn(x, r)), x)
    if HAS_BIAS:
        x = x + tl.load(bias_ptr + b * V + offs, mask=live, other=0.0)
    tl.store(out_ptr + row.to(tl.int64) * V + offs, x, mask=live)


def dense_adjust_torch(logits: torch.Tensor, pen: Penalties, short: torch.Tensor | None,
                       logit_bias: torch.Tensor | None) -> torch.Tensor:
    """fp32 [bs, n, V]: every node's logits adjusted for its request's counts (no path); `short` [bs, n]."""
    stop = None if pen.stop_tokens is None else pen.stop_tokens[:, None, :]
    bias = None if logit_bias is None else logit_bias.float()[:, None, :]
    return _adjust(logits.float(), pen.counts.float()[:, None, :], pen, stop,
                   None if short is None else short[..., None], bias, (slice(None), None, None))


def dense_adjust_triton(logits: torch.Tensor, pen: Penalties, short: torch.Tensor | None,
                        logit_bias: torch.Tensor | None) -> torch.Tensor:
    """`dense_adjust_torch` in one pass (a fresh fp32 tensor, never the input)."""
    bs, n, vocab = logits.shape
    x = logits.contiguous()
    out = torch.empty((bs, n, vocab), dtype=torch.float32, device=x.device)
    f32 = lambda t: t.float().contiguous()  # noqa: E731
    has_stop = pen.stop_tokens is not None
    args = [x, f32(pen.counts)]
    args += [f32(t) if t is not None else out for t in (pen.frequency, pen.presence, pen.repetition)]
    args += [pen.stop_tokens.to(torch.int8).contiguous() if has_stop else out,
             short.to(torch.int8).contiguous() if has_stop else out,
             f32(logit_bias) if logit_bias is not None else out]
    grid = (bs * n, triton.cdiv(vocab, DENSE_BLOCK))
    _dense_kernel[grid](*args, out, n, vocab, HAS_FREQ=pen.frequency is not None, HAS_PRES=pen.presence is not None,
                        HAS_REP=pen.repetition is not None, HAS_STOP=has_stop, HAS_BIAS=logit_bias is not None,
                        BLOCK=DENSE_BLOCK, enable_fp_fusion=False)
    return out


def apply_path_penalties(logits: torch.Tensor, tokens: torch.Tensor, parent: torch.Tensor, max_depth: int,
                         penalties: Penalties | None, logit_bias: torch.Tensor | None,
                         dense: Callable | None = None) -> torch.Tensor:
    """Adjusted fp32 copy of node logits [bs, n, V]; `tokens`/`parent` [bs, n] are the tree's
    (node 0 the root), `max_depth` bounds a node's depth (the draft depth). `dense` picks the dense
    step (default: Triton for CUDA tensors, torch otherwise)."""
    bs, n, vocab = logits.shape
    if penalties is None:
        x = logits.float()
        return x if logit_bias is None else x + logit_bias.float()[:, None, :]
    pen = penalties
    path = path_tokens(tokens, parent, max_depth)  # [bs, n, D]
    short = None
    if pen.stop_tokens is not None:
        short = (pen.out_len[:, None] + (path >= 0).sum(-1)) < pen.min_new_tokens[:, None]  # [bs, n]
    if dense is None:
        dense = dense_adjust_triton if logits.is_cuda else dense_adjust_torch
    x = dense(logits, pen, short, logit_bias)
    if max_depth == 0:
        return x
    valid = path >= 0
    # empty slots repeat slot 0 (the node's own token; the root's is token 0 at its dense value)
    tok = torch.where(valid, path, path[..., :1]).clamp(min=0)
    same = (path[..., :, None] == path[..., None, :]) & valid[..., None, :]
    c = pen.counts.float().gather(1, tok.view(bs, -1)).view(bs, n, max_depth) + same.sum(-1)
    pstop = None if pen.stop_tokens is None else pen.stop_tokens.gather(1, tok.view(bs, -1)).view(bs, n, max_depth)
    pbias = None if logit_bias is None else logit_bias.float().gather(1, tok.view(bs, -1)).view(bs, n, max_depth)
    new = _adjust(logits.float().gather(2, tok), c, pen, pstop, None if short is None else short[..., None], pbias,
                  (slice(None), None, None))
    new = torch.where(valid, new, new[..., :1])
    if x.data_ptr() == logits.data_ptr():  # no dense adjustment applied: never write the caller's logits
        return x.scatter(2, tok, new)
    return x.scatter_(2, tok, new)
