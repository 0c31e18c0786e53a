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
each node recomputed from the raw logits with their path counts and scattered back. Torch ops
only: fixed shapes, no host sync, capturable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def path_tokens(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """int64[bs, n, max_depth]: the tokens of node j and its ancestors (root excluded), -1 beyond."""
    bs, n = tokens.shape
    out = torch.full((bs, n, max_depth), -1, dtype=torch.int64, device=tokens.device)
    node = torch.arange(n, device=tokens.device).expand(bs, n)
    for s in range(max_depth):
        real = node > 0
        out[:, :, s] = torch.where(real, tokens.gather(1, node.clamp(min=0)), -1)
        node = torch.where(real, parent.gather(1, node.clamp(min=0)), 0)
    return out


def apply_path_penalties(logits: torch.Tensor, tokens: torch.Tensor, parent: torch.Tensor, max_depth: int,
                         penalties: Penalties | None, logit_bias: torch.Tensor | None) -> torch.Tensor:
    """Adjusted fp32 copy of node logits [bs, n, V]; `tokens`/`parent` [bs, n] are the tree's
    (node 0 the root), `max_depth` bounds a node's depth (the draft depth)."""
    bs, n, vocab = logits.shape
    x = logits.float()
    bias = None if logit_bias is None else logit_bias.float()[:, None, :]
    if penalties is None:
        return x if bias is None else x + bias
    pen = penalties
    r1 = (slice(None), None, None)
    stop = short = None
    depth_of = (path_tokens(tokens, parent, max_depth) >= 0).sum(-1)  # [bs, n]
    if pen.stop_tokens is not None:
        stop = pen.stop_tokens[:, None, :]
        short = ((pen.out_len[:, None] + depth_of) < pen.min_new_tokens[:, None])[..., None]
    raw = x
    x = _adjust(raw, pen.counts.float()[:, None, :], pen, stop, short, bias, r1)
    if max_depth == 0:
        return x
    path = path_tokens(tokens, parent, max_depth)  # [bs, n, D]
    valid = path >= 0
    # empty slots repeat slot 0 (the node's own token; the root's is token 0 at its dense value)
    tok = torch.where(valid, path, path[..., :1]).clamp(min=0)
    same = (path[..., :, None] == path[..., None, :]) & valid[..., None, :]
    c = pen.counts.float().gather(1, tok.view(bs, -1)).view(bs, n, max_depth) + same.sum(-1)
    pstop = None if stop is None else pen.stop_tokens.gather(1, tok.view(bs, -1)).view(bs, n, max_depth)
    pbias = None if bias is None else logit_bias.float().gather(1, tok.view(bs, -1)).view(bs, n, max_depth)
    new = _adjust(raw.gather(2, tok), c, pen, pstop, short, pbias, r1)
    new = torch.where(valid, new, new[..., :1])
    return x.scatter(2, tok, new)
