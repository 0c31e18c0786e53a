"""The set-up both DDTree workers share (worker_v1.py, worker_v2.py).

Before the DFlash base is built: `check_validated` (DDTree's server-arg validation has run) and
`draft_block` (the drafter's block, which the draft runner is built at). After it: the mixin
`TreeWorkerSetup._set_up_tree`, the tree's sizes (budget, `auto`'s ladder, verify width, longest
accepted run), the sampling generator and the state built on first use. What differs stays in each
worker: where the server args are read (spec-v2: the release's resolved view), the start-up checks
of the target's graphs, the KV commit's mode and fence, when the node sampler is built, the log line.

The mixin comes before the DFlash base in each worker's bases, so the contract (contract.py) reads
it as the adapter's own base: the attributes it sets are the adapter's, not the base's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch

from .auto_budget import auto_ladder

if TYPE_CHECKING:
    from .budget_ladder import Ladder
    from .kv_commit import KVCommit
    from .tree_stage import TreeStage


def check_validated(server_args: Any) -> None:
    """Refuse server args that DDTree's validation has not seen (it sets the budget)."""
    if server_args.speculative_ddtree_budget is None:
        raise RuntimeError(
            "DDTREE server args were not validated: speculative_ddtree_budget is unset "
            "(validate_ddtree_server_args must run after DFlash's validation)."
        )


def draft_block(server_args: Any) -> int:
    """The drafter's block (`speculative_dflash_block_size`, unset when the verify width is the block)."""
    return int(server_args.speculative_dflash_block_size or server_args.speculative_num_draft_tokens)


class TreeWorkerSetup:
    """The part of a DDTree worker's `__init__` both adapters share; mixed in before the DFlash base."""

    def _set_up_tree(self, server_args: Any, block: int, width: int) -> Optional[Ladder]:
        """The tree's sizes and the round state both workers keep, once the DFlash base is built
        (its `block_size` and `device` are read); returns `auto`'s ladder (None: a fixed budget)."""
        self.topk = int(server_args.speculative_ddtree_topk)
        ladder = auto_ladder(server_args.speculative_ddtree_budget, block, self.topk)  # None unless `auto`
        # `auto`: every round builds the tree at the ladder's widest budget (the spec-v2 worker then
        # verifies the prefix it chooses; the v1 worker verifies the widest every round).
        self.budget = ladder.widest if ladder else int(server_args.speculative_ddtree_budget)
        self.tree_size = self.budget + 1
        self.verify_width = width
        # Longest accepted run per round (root + one node per draft depth): the output stride.
        self.max_commit = min(self.budget, self.block_size - 1) + 1
        self._sample_generator = torch.Generator(device=self.device)
        self._sample_generator.manual_seed(int(server_args.random_seed or 0))
        self._sampling_backend = getattr(server_args, "sampling_backend", None)
        self._kv_commit: Optional[KVCommit] = None  # built on first use: the KV pool exists by then
        self._tree_stage_instance: Optional[TreeStage] = None  # built at the first round: the lm_head is reached then
        return ladder
