"""Best-first draft tree: the `budget` highest-scoring prefixes, one program per request.

Score of a node = fp32 sum of the per-depth log-probs `lp[d, r]` along its rank path, accumulated
parent-first (`score(child) = score(parent) + lp[depth(child), rank(child)]`).

The algorithm is the reference heap with its frontier indexed by node: every node (root = slot 0)
owns at most one pending candidate, its next not-yet-taken child (rank = children taken so far,
depth + 1). A pop takes the best candidate, appends it as node n, advances its parent's slot to the
next rank and opens slot n at rank 0 one level deeper. So the frontier is a fixed vector of
`budget + 1` slots, each pop is one max-reduction, and the output is in pop order (parent < child).

Tie rule (identical in the Triton kernel, the torch reference and the plain-Python heap in the
tests): candidates compare by fp32 score; on equal scores the one whose parent has the smaller node
index wins (-0.0 counts as +0.0). Equal logits inside one row rank in token order (vocab_topk.py).

Each candidate is packed into one int64 key so that a single `max` yields the winner and all it
needs: bits 27..58 order-preserving float bits, 16..26 `2047 - parent`, 11..15 parent depth,
0..10 rank. Hence budget <= 2047, D <= 31, K <= 2047.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .vocab_topk import draft_topk

MAX_BUDGET = 2047
MAX_DEPTH = 31


class DraftTree(NamedTuple):
    """One tree per request, `n = budget + 1` nodes, node 0 = root (int64 unless noted)."""

    tokens: torch.Tensor  # [bs, n]; tokens[:, 0] = -1, the caller writes the bonus token there
    depth: torch.Tensor  # [bs, n]; root 0
    parent: torch.Tensor  # [bs, n]; root -1, parent < child
    first_child: torch.Tensor  # [bs, n]; -1 = leaf
    next_sibling: torch.Tensor  # [bs, n]; -1 = last child (children are in rank order)
    logprob: torch.Tensor  # [bs, n] fp32 path score; root 0


def tree_node_capacity(depth: int, k: int) -> int:
    """Number of distinct prefixes of length 1..depth over k ranks, capped just above MAX_BUDGET."""
    total, level = 0, 1
    for _ in range(depth):
        level = min(level * k, MAX_BUDGET + 1)
        total = min(total + level, MAX_BUDGET + 1)
    return total


def check_tree_args(lp: torch.Tensor, tok: torch.Tensor, budget: int) -> None:
    if lp.dim() != 3 or tok.shape != lp.shape:
        raise ValueError(f"lp and tok must be equal [bs, D, K] shapes, got {tuple(lp.shape)}, {tuple(tok.shape)}")
    if lp.dtype != torch.float32:
        raise ValueError(f"lp must be float32, got {lp.dtype}")
    _, depth, k = lp.shape
    if not 0 <= budget <= MAX_BUDGET:
        raise ValueError(f"budget={budget} must be in [0, {MAX_BUDGET}]")
    if budget and not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"draft depth D={depth} must be in [1, {MAX_DEPTH}]")
    if budget and not 1 <= k <= MAX_BUDGET:
        raise ValueError(f"K={k} must be in [1, {MAX_BUDGET}]")
    if budget > tree_node_capacity(depth, k):
        raise ValueError(f"budget={budget} exceeds the {tree_node_capacity(depth, k)} prefixes of D={depth}, K={k}")


def root_only_tree(bs: int, device: torch.device) -> DraftTree:
    minus = torch.full((bs, 1), -1, dtype=torch.int64, device=device)
    zero = torch.zeros((bs, 1), dtype=torch.int64, device=device)
    return DraftTree(minus.clone(), zero, minus.clone(), minus.clone(), minus.clone(),
                     torch.zeros((bs, 1), dtype=torch.float32, device=device))


@triton.jit
def _encode(score, parent, depth, rank):
    bits = score.to(tl.int32, bitcast=True)
    bits = tl.where(bits == -2147483648, 0, bits)
    ordered = tl.where(bits >= 0, bits.to(tl.int64) + 2147483648, (~bits).to(tl.int64))
    return (ordered << 27) | ((2047 - parent).to(tl.int64) << 16) | (depth.to(tl.int64) << 11) | rank.to(tl.int64)


@triton.jit
def _tree_select_kernel(lp_ptr, tok_ptr, tokens_ptr, depth_ptr, parent_ptr, first_ptr, next_ptr, score_ptr,
                        budget, D, K, F: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n_nodes = budget + 1
    lp_row = lp_ptr + b * D * K
    offs = tl.arange(0, F)
    score = tl.zeros([F], tl.float32)
    depth = tl.zeros([F], tl.int32)
    rank = tl.full([F], -1, tl.int32)
    parent = tl.full([F], -1, tl.int32)
    first = tl.full([F], -1, tl.int32)
    nxt = tl.full([F], -1, tl.int32)
    keys = tl.where(offs == 0, _encode(tl.load(lp_row) + score, offs, depth, offs * 0), -1)
    for step in range(budget):
        best = tl.max(keys, axis=0)
        r = (best & 2047).to(tl.int32)
        pd = ((best >> 11) & 31).to(tl.int32)
        p = 2047 - ((best >> 16) & 2047).to(tl.int32)
        ordered = best >> 27
        bits = tl.where(ordered >= 2147483648, ordered - 2147483648, ~ordered).to(tl.int32)
        s = bits.to(tl.float32, bitcast=True)
        n = step + 1
        nd = pd + 1
        lp_sib = tl.load(lp_row + pd * K + r + 1, mask=r + 1 < K, other=0.0)
        lp_kid = tl.load(lp_row + nd * K, mask=nd < D, other=0.0)
        is_n = offs == n
        is_p = offs == p
        nxt = tl.where((parent == p) & (rank == r - 1), n, nxt)
        first = tl.where(is_p & (r == 0), n, first)
        score = tl.where(is_n, s, score)
        depth = tl.where(is_n, nd, depth)
        rank = tl.where(is_n, r, rank)
        parent = tl.where(is_n, p, parent)
        sib_keys = _encode(score + lp_sib, offs, depth, rank * 0 + r + 1)
        keys = tl.where(is_p, tl.where(r + 1 < K, sib_keys, -1), keys)
        # The new node's score, index and depth are scalars here: one encode, not one per slot
        # (H100: 4-6 % faster at budgets 64 and 256, docs/kernels.md).
        keys = tl.where(is_n, tl.where(nd < D, _encode(s + lp_kid, r * 0 + n, nd, r * 0), -1), keys)
    live = offs < n_nodes
    is_node = live & (offs > 0)
    tok = tl.load(tok_ptr + b * D * K + (depth - 1) * K + rank, mask=is_node, other=-1)
    out = b * n_nodes + offs
    tl.store(tokens_ptr + out, tok, mask=live)
    tl.store(depth_ptr + out, depth.to(tl.int64), mask=live)
    tl.store(parent_ptr + out, parent.to(tl.int64), mask=live)
    tl.store(first_ptr + out, first.to(tl.int64), mask=live)
    tl.store(next_ptr + out, nxt.to(tl.int64), mask=live)
    tl.store(score_ptr + out, score, mask=live)


def select_tree_triton(lp: torch.Tensor, tok: torch.Tensor, budget: int, num_warps: int | None = None) -> DraftTree:
    """Triton: one program per request, `budget` sequential pops over a `budget + 1` slot frontier.

    `num_warps` (default: one per 64 frontier slots, at most 8: the fastest or within 2 % of it at
    every budget 8-256 timed on an H100, docs/kernels.md) only tunes the speed: fewer warps keep each
    pop's max-reduction inside fewer warps (no cross-warp step at 1), more share each pop's slot work."""
    check_tree_args(lp, tok, budget)
    bs, depth, k = lp.shape
    if budget == 0:
        return root_only_tree(bs, lp.device)
    n = budget + 1
    ints = [torch.empty((bs, n), dtype=torch.int64, device=lp.device) for _ in range(5)]
    score = torch.empty((bs, n), dtype=torch.float32, device=lp.device)
    f = triton.next_power_of_2(n)
    _tree_select_kernel[(bs,)](lp.contiguous(), tok.contiguous(), *ints, score, budget, depth, k,
                               F=f, num_warps=num_warps or max(1, min(8, f // 64)))
    return DraftTree(*ints, score)


def _encode_torch(score: torch.Tensor, parent: torch.Tensor, depth: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    bits = score.contiguous().view(torch.int32).to(torch.int64)
    bits = torch.where(bits == -2147483648, 0, bits)
    ordered = torch.where(bits >= 0, bits + 2147483648, -bits - 1)
    return (ordered << 27) | ((2047 - parent) << 16) | (depth << 11) | rank


def select_tree_torch(lp: torch.Tensor, tok: torch.Tensor, budget: int) -> DraftTree:
    """Reference: the same slot frontier in plain torch ops, batched over requests, looped over pops."""
    check_tree_args(lp, tok, budget)
    bs, depth_max, k = lp.shape
    if budget == 0:
        return root_only_tree(bs, lp.device)
    n = budget + 1
    dev = lp.device
    rows = torch.arange(bs, device=dev)
    slots = torch.arange(n, device=dev).expand(bs, n)
    score = torch.zeros((bs, n), dtype=torch.float32, device=dev)
    depth = torch.zeros((bs, n), dtype=torch.int64, device=dev)
    rank = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    parent = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    first = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    nxt = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    keys = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    zero = torch.zeros(bs, dtype=torch.int64, device=dev)
    keys[:, 0] = _encode_torch(lp[:, 0, 0] + score[:, 0], zero, zero, zero)
    for step in range(budget):
        best = keys.max(dim=1).values
        r, pd = best & 2047, (best >> 11) & 31
        p = 2047 - ((best >> 16) & 2047)
        ordered = best >> 27
        s = torch.where(ordered >= 2147483648, ordered - 2147483648, -ordered - 1).to(torch.int32).view(torch.float32)
        node = step + 1
        nd = pd + 1
        lp_sib = torch.where(r + 1 < k, lp[rows, pd, (r + 1).clamp(max=k - 1)], 0.0)
        lp_kid = torch.where(nd < depth_max, lp[rows, nd.clamp(max=depth_max - 1), 0], 0.0)
        prev = (parent == p[:, None]) & (rank == (r - 1)[:, None])
        nxt = torch.where(prev, node, nxt)
        first[rows, p] = torch.where(r == 0, node, first[rows, p])
        score[:, node], depth[:, node], rank[:, node], parent[:, node] = s, nd, r, p
        sib_key = _encode_torch(score[rows, p] + lp_sib, p, pd, r + 1)
        kid_key = _encode_torch(s + lp_kid, slots[:, node], nd, zero)
        keys[rows, p] = torch.where(r + 1 < k, sib_key, -1)
        keys[:, node] = torch.where(nd < depth_max, kid_key, -1)
    tokens = torch.full((bs, n), -1, dtype=torch.int64, device=dev)
    tokens[:, 1:] = tok[rows[:, None], depth[:, 1:] - 1, rank[:, 1:]]
    return DraftTree(tokens, depth, parent, first, nxt, score)


def tree_topk(budget: int, vocab: int, topk: int | None = None) -> int:
    """K, the candidates per depth the tree reads: min(budget, V, topk)."""
    return min(budget, vocab, topk if topk is not None else budget)


def select_tree(lp: torch.Tensor, tok: torch.Tensor, budget: int) -> DraftTree:
    """Draft tree of exactly `budget` nodes from per-depth top-K log-probs and tokens [bs, D, K].

    The entry for a top-K computed elsewhere (merged across tensor-parallel ranks, `tp_topk.py`);
    deterministic, so ranks holding identical (lp, tok) build identical trees."""
    if lp.is_cuda:
        return select_tree_triton(lp, tok, budget)
    return select_tree_torch(lp, tok, budget)


def build_tree(draft_logits: torch.Tensor, budget: int, topk: int | None = None) -> DraftTree:
    """Draft tree of exactly `budget` nodes from draft logits [bs, D, V]; K = `tree_topk`."""
    bs, _, vocab = draft_logits.shape
    if budget == 0:
        return root_only_tree(bs, draft_logits.device)
    return select_tree(*draft_topk(draft_logits, tree_topk(budget, vocab, topk)), budget)
