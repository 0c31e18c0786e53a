"""The path-window verify mask, derived inside the verify from the tree mask SGLang hands the kernel.

A sliding-window layer's verify call carries the tree mask (`tree_mask.build_tree_mask` layout,
prefix columns possibly unwritten), `mask_indptr` (where each request's `[n, L + n]` block starts)
and the verify width n; nothing else of the tree. That is enough for tree_window_reference.py's
rule: request b's prefix length is `(mask_indptr[b+1] - mask_indptr[b]) / n - n`, and a node's depth
is the number of tree columns its row shows, less one (its ancestors and itself). Row i then shows
prefix column c when `L + depth[i] - c <= window` and tree column j when the tree mask shows it and
`depth[i] - depth[j] <= window`.

Deriving it there, rather than from the round's tree, keeps it right under CUDA graphs: the kernel
reads only the buffers the captured verify already reads, and it needs no host value (no sync). The
output has the tree mask's size; positions past `mask_indptr[bs]` (a graph buffer's slack) are
never written and never read. Padding nodes (`tree_verify.pad_tree`) get depth 1 instead of 0;
their rows are never read.

Triton on CUDA; on CPU the torch version below (sync-free as well).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tree_mask import _row_block

_NO_WINDOW = 2**30  # wider than any sequence: the window never hides a key


@triton.jit
def _depths(mask_ptr, start, width, prefix, nodes, n_nodes, NP: tl.constexpr, KB: tl.constexpr):
    """int64 depth of each of `nodes`: the tree columns its mask row shows, less one."""
    live = nodes < n_nodes
    acc = tl.zeros(nodes.shape, tl.int64)
    koffs = tl.arange(0, KB)
    for k0 in range(0, n_nodes, KB):
        k = k0 + koffs
        seen = tl.load(mask_ptr + start + nodes.to(tl.int64)[:, None] * width + prefix + k[None, :],
                       mask=live[:, None] & (k[None, :] < n_nodes), other=0)
        acc += tl.sum((seen != 0).to(tl.int64), axis=1)
    return acc - 1


@triton.jit
def _window_mask_kernel(mask_ptr, indptr_ptr, out_ptr, n_nodes, window,
                        R: tl.constexpr, NP: tl.constexpr, KB: tl.constexpr, PB: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * R + tl.arange(0, R)
    cols = tl.arange(0, NP)
    start = tl.load(indptr_ptr + b).to(tl.int64)
    width = (tl.load(indptr_ptr + b + 1).to(tl.int64) - start) // n_nodes
    prefix = width - n_nodes
    live = rows < n_nodes
    d_row = _depths(mask_ptr, start, width, prefix, rows, n_nodes, NP, KB)
    d_col = _depths(mask_ptr, start, width, prefix, cols, n_nodes, NP, KB)
    row_start = start + rows.to(tl.int64) * width
    tree = live[:, None] & (cols[None, :] < n_nodes)
    shown = tl.load(mask_ptr + row_start[:, None] + prefix + cols[None, :], mask=tree, other=0) != 0
    tl.store(out_ptr + row_start[:, None] + prefix + cols[None, :],
             shown & ((d_row[:, None] - d_col[None, :]) <= window), mask=tree)
    poffs = tl.arange(0, PB)
    for p0 in range(0, prefix, PB):
        c = p0 + poffs
        tl.store(out_ptr + row_start[:, None] + c[None, :], (prefix + d_row[:, None] - c[None, :]) <= window,
                 mask=live[:, None] & (c[None, :] < prefix))


def path_window_mask_triton(tree_mask: torch.Tensor, mask_indptr: torch.Tensor, n_nodes: int,
                            window: int) -> torch.Tensor:
    bs = mask_indptr.numel() - 1
    out = torch.empty_like(tree_mask)
    np_cols = triton.next_power_of_2(n_nodes)
    rows = _row_block(np_cols)
    _window_mask_kernel[(bs, triton.cdiv(n_nodes, rows))](
        tree_mask, mask_indptr.contiguous(), out, n_nodes, window if window >= 0 else _NO_WINDOW,
        R=rows, NP=np_cols, KB=16, PB=256)
    return out


def path_window_mask_torch(tree_mask: torch.Tensor, mask_indptr: torch.Tensor, n_nodes: int,
                           window: int) -> torch.Tensor:
    """The same mask with torch ops over every position (past `mask_indptr[bs]`: False)."""
    bs = mask_indptr.numel() - 1
    indptr = mask_indptr.to(torch.int64)
    k = torch.arange(tree_mask.numel(), device=tree_mask.device)
    request = torch.searchsorted(indptr[1:], k, right=True)
    live = request < bs
    request = request.clamp(max=bs - 1)
    start = indptr[request]
    width = (indptr[request + 1] - start) // n_nodes
    prefix = width - n_nodes
    row, col = (k - start).div(width, rounding_mode="floor"), (k - start).remainder(width)
    node_col = col - prefix
    is_tree = live & (node_col >= 0)
    shown = tree_mask != 0
    row_id = (request * n_nodes + row).clamp(0, bs * n_nodes - 1)  # the flat node of each position's row
    depth = torch.zeros(bs * n_nodes, dtype=torch.int64, device=tree_mask.device)
    depth.scatter_add_(0, row_id, (is_tree & shown).to(torch.int64))
    depth -= 1
    d_row = depth[row_id]
    d_key = depth[(request * n_nodes + node_col).clamp(0, bs * n_nodes - 1)]
    limit = window if window >= 0 else _NO_WINDOW
    visible = torch.where(is_tree, shown & (d_row - d_key <= limit), prefix + d_row - col <= limit)
    return (visible & live).to(tree_mask.dtype)


def path_window_mask(tree_mask: torch.Tensor, mask_indptr: torch.Tensor, n_nodes: int, window: int) -> torch.Tensor:
    """Flat path-window mask of a verify call (module docstring); Triton on CUDA, torch elsewhere."""
    if mask_indptr.numel() < 2 or n_nodes <= 0:
        return torch.zeros_like(tree_mask)  # no request: nothing is read
    if tree_mask.is_cuda:
        return path_window_mask_triton(tree_mask, mask_indptr, n_nodes, window)
    return path_window_mask_torch(tree_mask, mask_indptr, n_nodes, window)
