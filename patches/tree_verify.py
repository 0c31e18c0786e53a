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

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.ddtree.kernels import build_tree_mask, tree_positions
from sglang.srt.speculative.dflash_info import DFlashVerifyInput

if TYPE_CHECKING:
    from sglang.srt.speculative.ddtree.kernels import DraftTree


@dataclass
class DDTreeVerifyInput(DFlashVerifyInput):
    """DFlash's verify input with a tree: width `budget + 1`, depth positions, a custom mask.

    Reuses DFlash's `prepare_for_verify` (CUDA-graph load or eager attention metadata) unchanged;
    only the contents differ, so every attention backend that honours `custom_mask` in target
    verify (Triton, FlashInfer) computes tree attention.
    """

    @classmethod
    def from_tree(
        cls,
        tree: DraftTree,
        bonus_tokens: torch.Tensor,
        prefix_lens: torch.Tensor,
        prefix_lens_sum_bound: int,
        prefix_ones: bool = True,
    ) -> "DDTreeVerifyInput":
        """Verify input for `tree` (root = `bonus_tokens`) after prefixes of `prefix_lens`.

        `prefix_lens_sum_bound` is a host value >= sum(prefix_lens): it sizes the mask without
        reading the device. `prefix_ones=False` skips the prefix columns (`mask_reads_prefix`).
        """
        bs, n = tree.tokens.shape
        tokens = tree.tokens
        tokens[:, 0] = bonus_tokens
        positions = tree_positions(tree.depth, prefix_lens)
        mask = build_tree_mask(tree.parent, prefix_lens, prefix_lens_sum_bound, prefix_ones=prefix_ones)
        return cls(
            draft_token=tokens.reshape(-1),
            positions=positions.reshape(-1),
            draft_token_num=n,
            custom_mask=mask,
            capture_hidden_mode=CaptureHiddenMode.FULL,
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
