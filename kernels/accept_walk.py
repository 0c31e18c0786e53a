"""Accept walk: from the root, follow the child whose draft token equals the current node's posterior.

Outputs, per request: `accepted_idx[bs, D + 1]` (node indices in path order, starting with 0 = root,
padded with -1), `accept_len[bs]` (accepted nodes excluding the root) and `bonus[bs]` (posterior at
the last accepted node). D = `max_depth` when given (the draft depth), else n - 1 (any tree of n
nodes is at most that deep). Siblings hold distinct tokens, so at most one child can match.

The Triton kernel identifies a node's siblings without parent links: pointer doubling along
`next_sibling` gives every node the last node of its sibling chain, a family id shared by exactly
the children of one parent. Each step is then one vector compare and max-reduction.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _accept_walk_kernel(tokens_ptr, first_ptr, next_ptr, post_ptr, acc_ptr, len_ptr, bonus_ptr, n_nodes, D,
                        NP: tl.constexpr, LOG_NP: tl.constexpr, DP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, NP)
    live = offs < n_nodes
    base = b * n_nodes
    tok = tl.load(tokens_ptr + base + offs, mask=live, other=-1)
    first = tl.load(first_ptr + base + offs, mask=live, other=-1).to(tl.int32)
    nxt = tl.load(next_ptr + base + offs, mask=live, other=-1).to(tl.int32)
    post = tl.load(post_ptr + base + offs, mask=live, other=-1)
    family = tl.where(nxt >= 0, nxt, offs)
    for _ in tl.static_range(LOG_NP):
        family = tl.gather(family, family, 0)
    kids_family = tl.where(first >= 0, tl.gather(family, tl.maximum(first, 0), 0), -1)
    dpos = tl.arange(0, DP)
    path = tl.where(dpos == 0, 0, -1)
    cur = 0
    length = 0
    active = True
    for step in range(D):
        want = tl.sum(tl.where(offs == cur, post, 0), axis=0)
        fam = tl.sum(tl.where(offs == cur, kids_family, 0), axis=0)
        match = live & (offs > 0) & (family == fam) & (tok == want) & (fam >= 0)
        child = tl.max(tl.where(match, offs, -1), axis=0)
        active = active & (child >= 0)
        cur = tl.where(active, child, cur)
        length += active.to(tl.int32)
        path = tl.where((dpos == step + 1) & active, child, path)
    tl.store(acc_ptr + b * (D + 1) + dpos, path.to(tl.int64), mask=dpos < D + 1)
    tl.store(len_ptr + b, length.to(tl.int64))
    tl.store(bonus_ptr + b, tl.sum(tl.where(offs == cur, post, 0), axis=0))


def _walk_shape(tokens: torch.Tensor, *others: torch.Tensor, max_depth: int | None) -> tuple[int, int, int]:
    """(bs, n, D) of a walk, once the four inputs are checked to be [bs, n] each."""
    if tokens.dim() != 2 or any(o.shape != tokens.shape for o in others):
        raise ValueError("tokens, first_child, next_sibling and posterior must all be [bs, n]")
    bs, n = tokens.shape
    return bs, n, n - 1 if max_depth is None else max_depth


def accept_walk_triton(tokens: torch.Tensor, first_child: torch.Tensor, next_sibling: torch.Tensor,
                       posterior: torch.Tensor, max_depth: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    bs, n, depth = _walk_shape(tokens, first_child, next_sibling, posterior, max_depth=max_depth)
    dev = tokens.device
    acc = torch.empty((bs, depth + 1), dtype=torch.int64, device=dev)
    length = torch.empty(bs, dtype=torch.int64, device=dev)
    bonus = torch.empty(bs, dtype=torch.int64, device=dev)
    if bs:
        np_nodes = triton.next_power_of_2(n)
        _accept_walk_kernel[(bs,)](tokens.contiguous(), first_child.contiguous(), next_sibling.contiguous(),
                                   posterior.contiguous(), acc, length, bonus, n, depth, NP=np_nodes,
                                   LOG_NP=max(1, np_nodes.bit_length() - 1), DP=triton.next_power_of_2(depth + 1),
                                   num_warps=max(1, min(4, np_nodes // 128)))
    return acc, length, bonus


def parents_from_links(first_child: torch.Tensor, next_sibling: torch.Tensor) -> torch.Tensor:
    """parent[bs, n] (root -1) from first-child / next-sibling links (children have larger indices)."""
    bs, n = first_child.shape
    rows = torch.arange(bs, device=first_child.device)
    parent = torch.full((bs, n), -1, dtype=torch.int64, device=first_child.device)
    for i in range(n):
        kid = first_child[:, i]
        parent[rows[kid >= 0], kid[kid >= 0]] = i
        sib = next_sibling[:, i]
        parent[rows[sib >= 0], sib[sib >= 0]] = parent[rows[sib >= 0], i]
    return parent


def accept_walk_torch(tokens: torch.Tensor, first_child: torch.Tensor, next_sibling: torch.Tensor,
                      posterior: torch.Tensor, max_depth: int | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference: rebuilds parent links, then walks all requests in lockstep, one depth per step."""
    bs, n, depth = _walk_shape(tokens, first_child, next_sibling, posterior, max_depth=max_depth)
    dev = tokens.device
    parent = parents_from_links(first_child, next_sibling)
    rows = torch.arange(bs, device=dev)
    nodes = torch.arange(n, device=dev)
    acc = torch.full((bs, depth + 1), -1, dtype=torch.int64, device=dev)
    acc[:, 0] = 0
    cur = torch.zeros(bs, dtype=torch.int64, device=dev)
    length = torch.zeros(bs, dtype=torch.int64, device=dev)
    active = torch.ones(bs, dtype=torch.bool, device=dev)
    for step in range(depth):
        want = posterior[rows, cur]
        match = (parent == cur[:, None]) & (tokens == want[:, None])
        child = torch.where(match, nodes, -1).max(dim=1).values
        active &= child >= 0
        cur = torch.where(active, child, cur)
        length += active.long()
        acc[:, step + 1] = torch.where(active, child, -1)
    return acc, length, posterior[rows, cur]


def accept_walk(tokens: torch.Tensor, first_child: torch.Tensor, next_sibling: torch.Tensor,
                posterior: torch.Tensor, max_depth: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(accepted_idx int64[bs, D + 1], accept_len int64[bs], bonus int64[bs]); Triton on CUDA."""
    if tokens.is_cuda:
        return accept_walk_triton(tokens, first_child, next_sibling, posterior, max_depth)
    return accept_walk_torch(tokens, first_child, next_sibling, posterior, max_depth)
