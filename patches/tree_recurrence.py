"""Gated DeltaNet layers of a hybrid target under DDTree's tree verify: SGLang's own EAGLE-tree path.

SGLang already verifies EAGLE trees on GDN layers: given the tree's first-child / next-sibling links
(`retrieve_next_token` / `retrieve_next_sibling`, DDTree's `first_child` / `next_sibling`), its
short-convolution update derives each node's parent and convolves along the node's path, and its
GDN verify kernel starts each node from its parent's cached state; the Mamba pool then keeps one
dense conv window per verify row. Two constructors decide whether that path exists, both from
`speculative_eagle_topk`, which DDTREE leaves unset (<= 1) because other consumers (attention
backends, EAGLE's own buffers) must keep seeing no EAGLE tree:
- `MambaAttnBackendBase.__init__` sets `self.topk`: > 1 turns on the tree links in verify metadata
  and their CUDA-graph buffers;
- `MambaPool.__init__(speculative_eagle_topk=...)`: <= 1 on CUDA stores the per-row conv windows
  deduplicated (overlapping as along a chain), which a tree's windows are not.
`install` wraps just those two so they see a tree's topk; it must run before the target's pool and
attention backends are built, which SGLang 0.5.14-0.5.23 do after the draft (DDTree) worker exists
(0.5.23 reads its topk from the published config, still inside that constructor).

After a round, DFlash's commit (`_update_target_mamba_state_after_verify`) asks the backend to keep
the state at verify row `accepted length` (and, for the prefix cache, at a row `steps` along the
run): right for a chain, where row = step. In a tree the state after step `s` of the accepted path
is node `accepted_idx[b, s]`'s row; `steps_as_nodes` maps the steps to those rows for that call.
"""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch

TREE_TOPK = 2  # any topk > 1 selects SGLang's tree path; its value is read nowhere else by these two
_MARK = "_ddtree_tree_recurrence"
_COMMIT = "update_mamba_state_after_mtp_verify"
logger = logging.getLogger(__name__)


def _at_least_tree(topk: Optional[int]) -> int:
    return max(int(topk or 0), TREE_TOPK)


def _backend_init(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.topk = _at_least_tree(self.topk)

    setattr(init, _MARK, True)
    return init


def _pool_init(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Any, *args: Any, speculative_eagle_topk: Optional[int] = None, **kwargs: Any) -> None:
        original(self, *args, speculative_eagle_topk=_at_least_tree(speculative_eagle_topk), **kwargs)

    setattr(init, _MARK, True)
    return init


def install() -> bool:
    """Make SGLang's linear-attention backends and Mamba pool take their EAGLE-tree path (idempotent);
    False when this SGLang lacks either class."""
    try:
        from sglang.srt.layers.attention.hybrid_linear_attn_backend import MambaAttnBackendBase
        from sglang.srt.mem_cache.memory_pool import MambaPool
    except ImportError:
        return False
    for cls, wrap in ((MambaAttnBackendBase, _backend_init), (MambaPool, _pool_init)):
        if not getattr(cls.__init__, _MARK, False):
            cls.__init__ = wrap(cls.__init__)
    logger.info("DDTREE target verify: recurrent layers run each tree node from its parent's state")
    return True


def tree_links(first_child: torch.Tensor, next_sibling: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DDTree's links in the form SGLang's tree verify reads (`retrieve_next_token`, `retrieve_next_sibling`):
    int32 [bs, width], -1 = none. Same meaning; DDTree's links point forward, as SGLang's parent rule needs."""
    return first_child.to(torch.int32), next_sibling.to(torch.int32)


def node_of_step(accepted_idx: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The verify row of step `steps[b]` along request b's accepted path (negative steps, "none", kept)."""
    rows = accepted_idx.gather(1, steps.clamp(min=0).to(torch.int64)[:, None])[:, 0]
    return torch.where(steps >= 0, rows.to(steps.dtype), steps)


@contextmanager
def steps_as_nodes(attn_backend: Any, accepted_idx: torch.Tensor) -> Iterator[None]:
    """While open, the backend's recurrent-state commit takes DFlash's accepted steps as the accepted
    path's nodes: the request keeps the last accepted node's state (and the prefix cache the state of
    the node at its tracked step)."""
    original = getattr(attn_backend, _COMMIT)

    def commit(last_correct_step_indices: torch.Tensor, mamba_track_indices: Optional[torch.Tensor],
               mamba_steps_to_track: Optional[torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        tracked = None if mamba_steps_to_track is None else node_of_step(accepted_idx, mamba_steps_to_track)
        return original(node_of_step(accepted_idx, last_correct_step_indices), mamba_track_indices, tracked,
                        *args, **kwargs)

    setattr(attn_backend, _COMMIT, commit)
    try:
        yield
    finally:
        delattr(attn_backend, _COMMIT)
