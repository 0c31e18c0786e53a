"""The draft head and the tree build in request groups, each group's top-K and tree beside the next group's GEMM.

At batch 64 the draft head's GEMM is compute-bound (~1.6 ms on the Qwen3-8B shape) and the top-K that
reads its logits back is bandwidth-bound (~130-240 us), so run back to back the top-K is all visible.
Cut along the vocabulary, cuBLAS lost more than the overlap gained (`head_topk.py`). Cut along the
requests instead, every group's GEMM is a plain one on contiguous rows (the same head weight, M = the
group's rows), and once a group's logits are written its top-K and tree build run on a side stream
while the main stream computes the next group's logits: only the last group's top-K and build stay
on the critical path.

Every group's top-K uses the split count the whole batch would use, so each row's LSE is summed in
the same order and the tree is the one `build_tree` gives for the whole batch, bit for bit.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from .tree_build import DraftTree, build_tree, root_only_tree, select_tree, tree_topk
from .vocab_topk import PROGRAMS_PER_SM, STREAM_MAX_K, _default_splits, log_probs, topk_parts_stream


def group_bounds(bs: int, groups: int) -> list[tuple[int, int]]:
    """`groups` request ranges [start, stop) covering 0..bs as evenly as possible (fewer when bs is smaller)."""
    if groups < 1:
        raise ValueError(f"groups={groups} must be >= 1")
    groups = min(groups, max(bs, 1))
    cuts = [bs * g // groups for g in range(groups + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def head_tree_grouped(hidden: torch.Tensor, weight: torch.Tensor, budget: int, topk: Optional[int], groups: int,
                      side: Optional[torch.cuda.Stream] = None) -> DraftTree:
    """The draft tree of `hidden [bs, D, H] @ weight[V, H].T`, computed in `groups` request groups.

    `side`: the stream for each group's top-K and build (they then overlap the next group's GEMM); None
    runs them on the current stream. CUDA only; `build_tree` of the one-GEMM logits is the reference."""
    if hidden.dim() != 3 or weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden [bs, D, H] and weight [V, H] expected, got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    bs, depth, _ = hidden.shape
    vocab = weight.shape[0]
    if budget == 0:
        return root_only_tree(bs, hidden.device)
    k = tree_topk(budget, vocab, topk)
    splits = _default_splits(bs * depth, weight.device, PROGRAMS_PER_SM)  # the whole batch's layout
    x = hidden.reshape(bs * depth, -1).to(weight.dtype)
    logits = torch.empty((bs * depth, vocab), dtype=weight.dtype, device=weight.device)
    main = torch.cuda.current_stream(weight.device) if side is not None else None
    trees = []
    for start, stop in group_bounds(bs, groups):
        rows = slice(start * depth, stop * depth)
        torch.mm(x[rows], weight.T, out=logits[rows])
        if side is not None:
            side.wait_stream(main)  # this group's logits are written
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            group_logits = logits[rows].view(stop - start, depth, vocab)
            if k <= STREAM_MAX_K:
                trees.append(select_tree(*log_probs(topk_parts_stream(group_logits, k, splits=splits)), budget))
            else:  # torch.topk's path: no split layout to match
                trees.append(build_tree(group_logits, budget, topk))
    if side is not None:
        main.wait_stream(side)
        for tree in trees:  # made on the side stream, read on the main one
            for field in tree:
                field.record_stream(main)
    return DraftTree(*(torch.cat(fields) for fields in zip(*trees)))


def head_tree_reference(hidden: torch.Tensor, weight: torch.Tensor, budget: int, topk: Optional[int]) -> DraftTree:
    """One GEMM, then `build_tree` of the whole batch: what the grouped form must equal."""
    bs, depth, _ = hidden.shape
    logits = torch.mm(hidden.reshape(bs * depth, -1).to(weight.dtype), weight.T)
    return build_tree(logits.view(bs, depth, -1), budget, topk)
