"""DDTree round kernels: tree build, tree mask, posterior, accept walk, commit.

Every entry point runs the Triton kernel for CUDA tensors and the plain-torch reference otherwise.
All CUDA paths have fixed output shapes, read nothing back to the host and are CUDA-graph
capturable. Modules import each other only relatively, so this package works both as the repo's
`kernels` and as `sglang.srt.speculative.ddtree.kernels`.

Additions to the agreed contract (all keyword arguments with defaults, nothing removed):
- `build_tree_mask(parent, prefix_lens, prefix_lens_sum=None, prefix_ones=True)`: the flat length
  needs sum(prefix_lens) on the host; pass SGLang's `seq_lens_sum` or the call syncs (not
  capturable). `prefix_ones=False` skips the prefix columns (for SGLang's Triton verify kernel).
- `commit.move_slots_triton(data_ptrs, data_strides, max_stride, dst, src)`: the KV commit move on
  raw per-slot buffers, skipping padding and slot-onto-itself entries (CUDA only).
- `slot_reorder.reorder_path_slots(table, req_pool_indices, prefix_lens, accepted_idx, accept_len,
  width)`: the commit without a move at page size 1 (a request's req_to_token row reordered).
- `pack_tree_mask(parent) -> int32[bs, n, ceil(n / 32)]`: tree columns only, bit j % 32 of word j // 32.
- `posterior_tokens(..., min_p=None, positions=None, all_greedy=False, index_ties=False)`: SGLang's
  temperature / top-k / top-p / min-p distribution drawn exactly over the whole vocabulary;
  `positions` [bs, n] key the randomness; `all_greedy` (host-known) is a plain argmax;
  `index_ties` keeps tied logits at a cut lowest index first (the pytorch sampler; see posterior.py).
- `path_penalties.apply_path_penalties`: SGLang's penalties and logit bias at every node, with the
  node's own path counted as output (the dense step one Triton pass on CUDA, the path step torch).
- `accept_walk(..., max_depth=None)`: D = max_depth (the draft depth), else n - 1.
- Vocab top-K: a streaming Triton top-K + log-sum-exp (K <= 256; torch.topk above); equal logits
  rank in token order. `gather_accepted` is a torch gather; `tree_positions` is one add.
- `tree_build.select_tree(lp, tok, budget)`: the tree from a top-K computed elsewhere;
  `tp_topk.sharded_topk`: that top-K from a vocab-parallel lm_head shard, the same on every rank.
"""

from .accept_walk import accept_walk
from .commit import commit_slots, gather_accepted
from .node_posterior import posterior_tokens
from .tree_build import DraftTree, build_tree
from .tree_mask import build_tree_mask, pack_tree_mask, tree_positions
from .vocab_topk import draft_topk

__all__ = [
    "DraftTree",
    "accept_walk",
    "build_tree",
    "build_tree_mask",
    "commit_slots",
    "draft_topk",
    "gather_accepted",
    "pack_tree_mask",
    "posterior_tokens",
    "tree_positions",
]
