"""Pieces of one DDTree round that do not depend on the DFlash worker family (v1 or spec-v2).

Each takes plain tensors and SGLang objects every family has (server args, the target KV pool
behind a `kv_move.SlotMover`), so the family adapters differ only in how they reach them. Both
families sample nodes through `node_sampling.NodeSampler`.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch

from sglang.srt.speculative.ddtree.kernels import commit_slots, gather_accepted
from sglang.srt.speculative.ddtree.kv_move import SlotMover


def draft_server_args(server_args: Any) -> Any:
    """Copy of `server_args` as the draft runner must see them: width = the drafter's block.

    DDTREE's `speculative_num_draft_tokens` is the target's verify width; the drafter keeps its
    trained block (`speculative_dflash_block_size`, set whenever the two differ).
    """
    draft_args = copy.copy(server_args)
    draft_args.speculative_num_draft_tokens = int(
        server_args.speculative_dflash_block_size or server_args.speculative_num_draft_tokens
    )
    # A cached_property computed from the target width would otherwise travel with the copy.
    draft_args.__dict__.pop("max_speculative_num_draft_tokens", None)
    return draft_args


def move_accepted_kv(
    mover: SlotMover, accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc_2d: torch.Tensor, tree_size: int
) -> torch.Tensor:
    """Move the accepted nodes' target KV to their path positions; returns those slots [bs, L].

    `cache_loc_2d[b, i]` is the slot of position `prefix + i`, where the verify wrote node `i`.
    Node i sits at depth i of the path and its index is >= i, so no source is overwritten before it
    is read; unused path entries (-1) and slots already in place are not moved (`SlotMover`).
    """
    path_len = accepted_idx.shape[1]
    keep_loc, _ = commit_slots(accepted_idx, accept_len, cache_loc_2d[:, :tree_size])
    path_slots = cache_loc_2d[:, :path_len].contiguous()
    mover.move(path_slots, keep_loc)
    return path_slots


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
