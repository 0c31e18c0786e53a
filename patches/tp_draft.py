"""The draft tree from the target lm_head's draft logits, with or without a vocab-parallel lm_head.

`tree_round.draft_vocab_logits` gives each rank the logits of its own lm_head shard (the whole
vocabulary at TP=1). At TP=1 the tree is built from them directly; with a sharded lm_head the
per-depth top-K is merged across the TP group first (`kernels.tp_topk`: one all-gather of each
rank's top-K and LSE), so every rank builds the identical tree and verifies the same tokens. The
tree itself is one code path (`kernels.tree_build.select_tree`).

SGLang's TP group is imported only for a sharded lm_head, so TP=1 needs nothing from
`sglang.srt.distributed`.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from .kernels.tp_topk import TPGroup, sharded_topk
from .kernels.tree_build import (
    DraftTree,
    build_tree,
    root_only_tree,
    select_tree,
    tree_topk,
)


def lm_head_shards(lm_head: Any) -> int:
    """How many ranks share the lm_head's vocabulary (SGLang's VocabParallelEmbedding.tp_size)."""
    return int(getattr(lm_head, "tp_size", 1) or 1)


def _tp_group() -> TPGroup:
    # The group DFlash's own vocab-parallel draft head gathers over (dflash_worker_v2.py).
    from sglang.srt.distributed import get_tp_group

    return get_tp_group()


def build_draft_tree(shard_logits: torch.Tensor, lm_head: Any, budget: int, topk: Optional[int],
                     group: Optional[TPGroup] = None) -> DraftTree:
    """The round's draft tree from this rank's draft logits [bs, D, V_shard]; identical on every rank.

    `group` defaults to SGLang's TP group; it must span the lm_head's shards (a replicated head
    gathered over more ranks would repeat every candidate)."""
    shards = lm_head_shards(lm_head)
    if shards == 1:
        return build_tree(shard_logits, budget, topk)
    if budget == 0:  # the same on every rank, so no rank enters the collective
        return root_only_tree(shard_logits.shape[0], shard_logits.device)
    group = group if group is not None else _tp_group()
    if int(group.world_size) != shards:
        raise RuntimeError(
            f"DDTREE: the lm_head is split over {shards} ranks but the TP group has {group.world_size}; "
            "the draft top-K merge needs one shard per rank."
        )
    shard = lm_head.shard_indices
    vocab = int(lm_head.org_vocab_size)
    lp, tok = sharded_topk(shard_logits, tree_topk(budget, vocab, topk), int(shard.org_vocab_start_index), vocab,
                           group)
    return select_tree(lp, tok, budget)
