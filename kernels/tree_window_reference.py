"""Sliding-window layers under a tree verify: each node's window measured from its own position.

A node at depth d of a request with prefix length L stands at position L + d (`tree_positions`).
Decoded one token at a time along its path, a sliding-window layer lets it see the keys at
positions q - window .. q, q = L + d (SGLang's `sliding_window_size` convention: a query sees a key
when `q_pos <= k_pos + window`; -1 = no window): the prefix tokens from position L + d - window on,
and its ancestors of depth >= d - window. The mask below is that: the tree mask (ancestors only)
AND the window along the path, in the layout of `tree_mask.build_tree_mask` (per request a row-major
`[n, L + n]` block, requests concatenated).

SGLang's extend kernel measures the window by a query's row in the verify, L + i for node i, which
is L + d only along a chain: under a tree it hides prefix tokens that plain decoding shows a node
(i > d). patches/tree_window.py hands that kernel this mask and a window wide enough to hide
nothing the mask shows.

Plain torch, a reference: the runtime builds the same mask on the GPU from these rules.
"""

from __future__ import annotations

import torch

from .tree_mask import ancestor_matrix_torch


def node_depths(parent: torch.Tensor) -> torch.Tensor:
    """int64[bs, n]: each node's depth (the root 0), from the parent links."""
    return ancestor_matrix_torch(parent).sum(-1) - 1


def tree_window_mask(parent: torch.Tensor, prefix_lens: torch.Tensor, window: int) -> torch.Tensor:
    """Flat bool mask (tree_mask layout, prefix columns included): ancestors and prefix, AND each
    key within `window` of the node's own position L + depth (window < 0: the plain tree mask)."""
    anc = ancestor_matrix_torch(parent)
    depth = anc.sum(-1) - 1
    bs, n = parent.shape
    blocks = []
    for b, length in enumerate(prefix_lens.tolist()):
        visible = torch.cat([torch.ones(n, length, dtype=torch.bool, device=parent.device), anc[b]], dim=1)
        if window >= 0:
            query = length + depth[b]
            keys = torch.cat([torch.arange(length, device=parent.device), length + depth[b]])
            visible &= (query[:, None] - keys[None, :]) <= window
        blocks.append(visible.flatten())
    if not blocks:
        return torch.zeros(0, dtype=torch.bool, device=parent.device)
    return torch.cat(blocks)
