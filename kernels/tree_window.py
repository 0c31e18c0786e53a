"""The path-window verify mask on the GPU: tree_window_reference.py's rule as one Triton kernel.

Same layout as `tree_mask.build_tree_mask` (prefix columns written): row i of request b shows prefix
column c when `L + depth[i] - c <= window` and tree column j when j is an ancestor-or-self of i and
`depth[i] - depth[j] <= window` (window < 0: no window, the plain tree mask). `depth` is the draft
tree's own (`DraftTree.depth`). `prefix_lens_sum` (SGLang's `seq_lens_sum`) sizes the output and may
be an upper bound (the tail is False); the kernel reads nothing back, so a CUDA graph can capture it.
On CPU tensors the torch reference runs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tree_mask import _ancestors, _request_rows, _row_block, mask_numel
from .tree_window_reference import tree_window_mask

_NO_WINDOW = 2**30  # wider than any sequence: the window never hides a key


@triton.jit
def _window_mask_kernel(parent_ptr, depth_ptr, prefix_ptr, out_ptr, bs, n_nodes, window,
                        R: tl.constexpr, NP: tl.constexpr, BSP: tl.constexpr, PB: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * R + tl.arange(0, R)
    cols = tl.arange(0, NP)
    prefix, row_start = _request_rows(prefix_ptr, b, rows, n_nodes, BSP)
    live = rows < n_nodes
    d_row = tl.load(depth_ptr + b * n_nodes + rows, mask=live, other=0).to(tl.int64)
    d_col = tl.load(depth_ptr + b * n_nodes + cols, mask=cols < n_nodes, other=0).to(tl.int64)
    anc = _ancestors(parent_ptr, b, rows, cols, n_nodes)
    seen = anc & ((d_row[:, None] - d_col[None, :]) <= window)
    tl.store(out_ptr + row_start[:, None] + prefix + cols[None, :], seen,
             mask=live[:, None] & (cols[None, :] < n_nodes))
    poffs = tl.arange(0, PB)
    for start in range(0, prefix, PB):
        c = start + poffs
        tl.store(out_ptr + row_start[:, None] + c[None, :], (prefix + d_row[:, None] - c[None, :]) <= window,
                 mask=live[:, None] & (c[None, :] < prefix))


def build_tree_window_mask_triton(parent: torch.Tensor, depth: torch.Tensor, prefix_lens: torch.Tensor,
                                  prefix_lens_sum: int, window: int) -> torch.Tensor:
    if parent.dim() != 2 or depth.shape != parent.shape:
        raise ValueError(f"parent and depth must both be [bs, n], got {tuple(parent.shape)} and {tuple(depth.shape)}")
    bs, n = parent.shape
    out = torch.zeros(mask_numel(n, bs, prefix_lens_sum), dtype=torch.bool, device=parent.device)
    if bs == 0:
        return out
    np_cols = triton.next_power_of_2(n)
    rows = _row_block(np_cols)
    _window_mask_kernel[(bs, triton.cdiv(n, rows))](
        parent.contiguous(), depth.contiguous(), prefix_lens.contiguous(), out, bs, n,
        window if window >= 0 else _NO_WINDOW, R=rows, NP=np_cols, BSP=triton.next_power_of_2(bs), PB=256)
    return out


def build_tree_window_mask(parent: torch.Tensor, depth: torch.Tensor, prefix_lens: torch.Tensor,
                           prefix_lens_sum: int, window: int) -> torch.Tensor:
    """Flat bool path-window mask of all requests (module docstring); Triton on CUDA."""
    if parent.is_cuda:
        return build_tree_window_mask_triton(parent, depth, prefix_lens, prefix_lens_sum, window)
    mask = tree_window_mask(parent, prefix_lens, window)
    out = torch.zeros(mask_numel(parent.shape[1], parent.shape[0], prefix_lens_sum), dtype=torch.bool)
    out[:mask.numel()] = mask  # `prefix_lens_sum` may be an upper bound: the tail stays False
    return out
