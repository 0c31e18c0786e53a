"""The target's verify input for one DDTree round: the tree, not DFlash's chain.

DFlash verifies a causal chain of `block_size` tokens with no mask. DDTree verifies `n = budget + 1`
tree nodes (root = last round's bonus token) in one target pass, so the verify input carries:
- tokens `[bs, n]` in best-first node order (parent index < child index),
- positions `prefix_len + depth` (siblings share a position, RoPE sees the path length),
- the ancestor-only mask in SGLang's tree layout: per request `[n, prefix_len + n]` row-major,
  True = visible, requests concatenated with no padding (EAGLE trees use the same layout; Triton and
  FlashInfer read it through `mask_indptr`, which they derive from the device `seq_lens`).

The mask length depends on the prefix lengths, which live on the device and, under the overlap
scheduler, lag one round behind on the host. Its size is therefore taken from a host upper bound of
the prefix sum; the layout is written from the device lengths, and the slack at the end is never read.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput

from .kernels import build_tree_mask, tree_positions
from .kernels.tree_mask import mask_numel
from .tree_recurrence import tree_links

if TYPE_CHECKING:
    from .kernels import DraftTree

MASK_ENV = "DDTREE_MASK_IN_PLACE"
MASK_LOG = "DDTREE verify mask: built in place in the attention backend's graph buffer"
logger = logging.getLogger(__name__)


@functools.cache
def _announce_mask_in_place() -> None:
    logger.warning(MASK_LOG)  # once per process: what a server (and the GPU matrix) can look for


@dataclass
class DDTreeVerifyInput(DFlashVerifyInput):
    """DFlash's verify input with a tree: width `budget + 1`, depth positions, a custom mask.

    Reuses DFlash's `prepare_for_verify` (CUDA-graph load or eager attention metadata) unchanged;
    only the contents differ, so every attention backend that honours `custom_mask` in target
    verify (Triton, FlashInfer) computes tree attention. A target with recurrent (GDN) layers also
    gets the tree's links in the names SGLang's EAGLE-tree verify reads them by (tree_recurrence.py).
    """

    retrieve_next_token: Optional[torch.Tensor] = None  # [bs, width] int32: first child, -1 = none
    retrieve_next_sibling: Optional[torch.Tensor] = None  # [bs, width] int32: next sibling, -1 = none

    @classmethod
    def from_tree(
        cls,
        tree: DraftTree,
        bonus_tokens: torch.Tensor,
        prefix_lens: torch.Tensor,
        prefix_lens_sum_bound: int,
        prefix_ones: bool = True,
        mask_buffer: Optional[torch.Tensor] = None,
        recurrent_links: bool = False,
    ) -> "DDTreeVerifyInput":
        """Verify input for `tree` (root = `bonus_tokens`) after prefixes of `prefix_lens`.

        `prefix_lens_sum_bound` is a host value >= sum(prefix_lens): it sizes the mask without
        reading the device. `prefix_ones=False` skips the prefix columns (`mask_reads_prefix`).
        `mask_buffer` (`graph_mask_buffer`): the mask is written into it when it fits, and the verify
        input carries that view of it, so the graph replay's copy of the mask onto its buffer is
        a copy of a tensor onto itself; otherwise the mask gets its own allocation.
        `recurrent_links`: carry the tree's links for recurrent layers (`tree_recurrence.tree_links`).
        """
        bs, n = tree.tokens.shape
        tokens = tree.tokens
        tokens[:, 0] = bonus_tokens
        positions = tree_positions(tree.depth, prefix_lens)
        size = mask_numel(n, bs, prefix_lens_sum_bound)
        if mask_buffer is not None and size <= mask_buffer.numel():
            mask = mask_buffer[:size]
            build_tree_mask(tree.parent, prefix_lens, prefix_lens_sum_bound, prefix_ones=prefix_ones,
                            out=mask.view(torch.bool))
            _announce_mask_in_place()
        else:
            mask = build_tree_mask(tree.parent, prefix_lens, prefix_lens_sum_bound, prefix_ones=prefix_ones)
        next_token, next_sibling = tree_links(tree.first_child, tree.next_sibling) if recurrent_links else (None, None)
        return cls(
            draft_token=tokens.reshape(-1),
            positions=positions.reshape(-1),
            draft_token_num=n,
            custom_mask=mask,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            retrieve_next_token=next_token,
            retrieve_next_sibling=next_sibling,
        )


def mask_reads_prefix(attn_backend: object) -> bool:
    """Whether the target's attention backend reads the prefix columns of the tree mask.

    Only SGLang's own Triton backend is known not to: in target verify it calls
    `extend_attention_fwd` without `skip_prefix_custom_mask`, whose default (True in 0.5.11-0.5.23)
    skips them. Its deterministic mode (the unified kernel reads every column), a dLLM attention,
    FlashInfer (packs the whole mask) and any other or wrapping backend get the full layout.
    """
    return not (
        type(attn_backend).__name__ == "TritonAttnBackend"
        and getattr(attn_backend, "enable_deterministic", None) is False
        and getattr(attn_backend, "dllm_attention", None) is None
    )


def graph_mask_buffer(attn_backend: object) -> Optional[torch.Tensor]:
    """The flat buffer SGLang's Triton backend replays target-verify graphs with (None elsewhere).

    The backend hands it out so that a worker builds its tree mask in place, as EAGLE's v2 worker
    does: `verify_mask.buffer` from 0.5.17 (in its full-mask layout only, which is DDTree's),
    `get_verify_buffers_to_fill_after_draft()[0]` before. None without CUDA graphs, for any other
    backend, or unless the server's environment sets DDTREE_MASK_IN_PLACE=1 (not yet run on a GPU).
    """
    if os.environ.get(MASK_ENV, "").strip() != "1" or type(attn_backend).__name__ != "TritonAttnBackend":
        return None
    if hasattr(type(attn_backend), "verify_mask"):  # 0.5.17+
        holder = attn_backend.verify_mask
        full = holder is not None and getattr(holder.mode, "name", None) == "FULL_MASK"
        buffer = holder.buffer if full else None
    else:
        getter = getattr(attn_backend, "get_verify_buffers_to_fill_after_draft", None)
        buffer = getter()[0] if getter is not None else None
    ok = buffer is not None and buffer.dim() == 1 and buffer.dtype in (torch.uint8, torch.bool)
    return buffer if ok else None


def pad_tree(tree: "DraftTree", width: int) -> "DraftTree":
    """`tree` widened to `width` nodes for a verify pass wider than the tree.

    Padding nodes are childless children of the root at depth 0 holding token 0: they see the
    prefix, the root and themselves, no tree node sees them, and the accept walk never reaches them
    (it runs on the unpadded links).
    """
    bs, n = tree.tokens.shape
    if width == n:
        return tree
    if width < n:
        raise ValueError(f"cannot pad a tree of {n} nodes to width {width}")

    def widen(x: torch.Tensor, fill: float) -> torch.Tensor:  # one kernel per field (a fill + a copy was two)
        return torch.nn.functional.pad(x, (0, width - n), value=fill)

    return type(tree)(
        tokens=widen(tree.tokens, 0),
        depth=widen(tree.depth, 0),
        parent=widen(tree.parent, 0),
        first_child=widen(tree.first_child, -1),
        next_sibling=widen(tree.next_sibling, -1),
        logprob=widen(tree.logprob, float("-inf")),
    )
