"""Pieces of one DDTree round that do not depend on the DFlash worker family (v1 or spec-v2).

Each takes plain tensors and SGLang objects every family has (server args, a target KV pool, the
verify pass's hidden states), so the family adapters differ only in how they reach them. The
posterior per node is `node_sampling.NodeSampler`, shared the same way.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch

from .kernels import commit_slots, gather_accepted
from .kv_move import SlotMover


def draft_server_args(server_args: Any, block: int) -> Any:
    """A private copy of `server_args` as the draft runner must see them: width = the block.

    DDTREE's `speculative_num_draft_tokens` is the target's verify width; the drafter keeps its
    trained block. From 0.5.17 a resolved ServerArgs refuses assignment (it is the process-wide
    record); the copy is not that record, so it is written through the class's own base setter,
    which the record's guard itself calls (a plain object's setter where there is no guard).
    """
    draft_args = copy.copy(server_args)
    # A cached_property computed from the target width would otherwise travel with the copy.
    getattr(draft_args, "__dict__", {}).pop("max_speculative_num_draft_tokens", None)
    super(type(draft_args), draft_args).__setattr__("speculative_num_draft_tokens", block)
    return draft_args


def draft_vocab_logits(hidden: torch.Tensor, lm_head: Any) -> torch.Tensor:
    """Draft logits [bs, L, V] over the target's original vocabulary from draft features [bs, L, H].

    One 2-D GEMM over all bs x L rows: the features are usually a strided slice (the block minus
    its first position), and a 3-D matmul on such a slice runs as a batched GEMM that reads the
    whole lm_head once per request (H200, Qwen3-8B shape, batch 64: 17.8 ms per round against 1.4 ms
    for DFLASH's single GEMM; `scripts/bench/profile_round.py`, docs/evidence/profile-8b.md).
    """
    weight = head_weight(lm_head)
    bs, length, _ = hidden.shape
    rows = hidden.reshape(bs * length, -1).to(weight.dtype)
    return torch.mm(rows, weight.T).view(bs, length, weight.shape[0])


def head_weight(lm_head: Any) -> torch.Tensor:
    """The lm_head's rows of the original vocabulary (a shard's padding rows left out)."""
    weight = lm_head.weight
    shard = getattr(lm_head, "shard_indices", None)
    return weight[: int(shard.num_org_elements)] if shard is not None else weight


def move_accepted_kv(
    mover: SlotMover, accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc_2d: torch.Tensor, tree_size: int
) -> torch.Tensor:
    """Move the accepted nodes' target KV to their path positions; returns those slots [bs, L].

    `cache_loc_2d[b, i]` is the slot of position `prefix + i`, where the verify wrote node `i`.
    Node i sits at depth i of the path and its index is >= i, so no source is overwritten before it
    is read; unused entries (-1) and slots already in place are not moved.
    """
    path_len = accepted_idx.shape[1]
    keep_loc, _ = commit_slots(accepted_idx, accept_len, cache_loc_2d[:, :tree_size])
    path_slots = cache_loc_2d[:, :path_len].contiguous()
    mover.move(path_slots, keep_loc)
    return path_slots


def paged_keep_slots(prefix_lens: torch.Tensor, commit_lens: torch.Tensor, width: int, page_size: int) -> torch.Tensor:
    """How many of each request's `width` verify slots stay allocated after committing `commit_lens`.

    A paged allocator frees whole pages (`free` takes the pages its slots fall in), so only the
    pages wholly past the last committed token may go back; the slots up to the end of that
    token's page stay with the request, and the next round's allocation extends from them. At page
    size 1 this is `commit_lens`.
    """
    new_lens = prefix_lens.to(torch.int64) + commit_lens.to(torch.int64)
    page_end = (new_lens + page_size - 1) // page_size * page_size
    return (page_end - prefix_lens.to(torch.int64)).clamp(min=0, max=width)


def free_past_kept_pages(
    allocator: Any, slots_2d: torch.Tensor, prefix_lens: torch.Tensor, commit_lens: torch.Tensor, page_size: int
) -> None:
    """Give back each request's slots [bs, width] (positions `prefix ..`) past `paged_keep_slots`."""
    width = slots_2d.shape[1]
    held = paged_keep_slots(prefix_lens, commit_lens, width, page_size)
    offsets = torch.arange(width, device=slots_2d.device)[None, :]
    allocator.free(slots_2d[offsets >= held[:, None]])


def path_features(
    hidden: torch.Tensor, accepted_idx: torch.Tensor, width: int, tree_size: int, lengths: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Target hidden features of the accepted path: [bs, L, F], or the first `lengths[b]` rows of
    each request concatenated [sum(lengths), F] when `lengths` is given."""
    bs = accepted_idx.shape[0]
    node_hidden = hidden.view(bs, width, -1)[:, :tree_size]
    path = gather_accepted(node_hidden, accepted_idx)
    if lengths is None:
        return path
    keep = torch.arange(path.shape[1], device=path.device)[None, :] < lengths.to(path.device)[:, None]
    return path[keep]
