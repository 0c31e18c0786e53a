"""How a round puts the accepted path's target KV at positions `prefix .. prefix + len`.

Two ways, one result for every reader of the request-to-token table:
- move (the default, any page size): copy each accepted node's KV onto its position's slot
  (`kv_move.SlotMover`); the table is not touched.
- reorder (`DDTREE_KV_COMMIT=reorder`): rewrite the request's table row so that its positions point
  at the accepted nodes' slots, the other slots of the range after them (`kernels.slot_reorder`);
  no KV moves. Where it cannot be right, the move runs instead (`reorder_blocker`): a paged pool
  ties slots to positions; under the overlap scheduler SGLang frees a finished request's range and
  hands its table row to the next request while the following round, which still carries that
  request, may be rewriting the row, so the worker fences the scheduler behind its rewrite
  (`table_fence`), and a release that offers no place for that fence keeps the move.
  (HiSparse, which binds verify slots to positions of its own, is refused at start.)
Reorder stays opt-in: the off-chain GPU suite passed with it on 0.5.15 under both schedulers; the
base suite, the other releases and what the fence costs a round have not run on a GPU yet.
"""

from __future__ import annotations

import logging
import os

import torch

from .kernels.slot_reorder import reorder_path_slots
from .kv_move import SlotMover
from .tree_round import move_accepted_kv

ENV = "DDTREE_KV_COMMIT"
MODES = ("move", "reorder")
logger = logging.getLogger(__name__)


def reorder_blocker(page_size: int | None, overlap: bool, unfenced: str | None) -> str | None:
    """Why this server cannot commit by reordering req_to_token (module docstring), or None; an
    unknown page size blocks it too. `unfenced`: why the overlap scheduler cannot be fenced on this
    release (`table_fence.unfenced`), read only under overlap."""
    if page_size != 1:
        return f"needs --page-size 1 (got {page_size})"
    if overlap and unfenced:
        return f"is not fenced against the overlap scheduler: {unfenced} (needs --disable-overlap-schedule)"
    return None


def commit_mode(blocker: str | None) -> str:
    """The commit this server runs: `DDTREE_KV_COMMIT` (default move); reorder unless `blocker`."""
    asked = os.environ.get(ENV, "move").strip().lower() or "move"
    if asked not in MODES:
        raise ValueError(f"{ENV}={asked!r}: expected one of {', '.join(MODES)}")
    if asked == "reorder" and blocker:
        logger.warning("%s=reorder %s: DDTREE moves the accepted KV instead", ENV, blocker)
        return "move"
    return asked


class KVCommit:
    """One target pool's commit in `mode` (`commit_mode`, decided when the worker is built; the pool
    exists by the first round)."""

    def __init__(self, pool: object, mode: str):
        if mode not in MODES:
            raise ValueError(f"KV commit mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.mover = SlotMover(pool) if mode == "move" else None
        # the opt-in commit announces itself at the default log level (a server, and the benchmark,
        # can tell it ran); the default stays quiet
        logger.log(logging.INFO if mode == "move" else logging.WARNING, "DDTREE KV commit: %s", self.mode)

    def __call__(self, table: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                 accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc_2d: torch.Tensor,
                 tree_size: int) -> torch.Tensor:
        """The slots of positions `prefix .. prefix + width` once committed [bs, width] int64: the
        first `accept_len + 1` hold the accepted path; `cache_loc_2d` [bs, width] is that range as
        the verify wrote it (`table`'s row)."""
        if self.mover is None:
            return reorder_path_slots(table, req_pool_indices, prefix_lens, accepted_idx, accept_len,
                                      cache_loc_2d.shape[1])
        move_accepted_kv(self.mover, accepted_idx, accept_len, cache_loc_2d, tree_size)
        return cache_loc_2d.to(torch.int64)
