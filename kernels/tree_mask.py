"""Verify-pass layout of a draft tree: positions and the ancestor-only attention mask.

Mask layout (SGLang's tree verify, as for EAGLE trees): per request a row-major bool matrix
`[n, prefix_len + n]`, True = may attend: the whole prefix, then the tree columns that are the row's
ancestors or itself. Requests are concatenated with no padding, so request b starts at
`n * sum(prefix_lens[:b]) + b * n * n`. The total length needs `sum(prefix_lens)` on the host:
pass it (SGLang keeps it as `seq_lens_sum`) to stay sync-free.

`prefix_ones=False` leaves the prefix columns out (unwritten on CUDA, False on the torch path) for
backends that never read them: SGLang's Triton extend kernel in target verify
(`skip_prefix_custom_mask=True`, its default) reads only the tree columns, at the same offsets.
That saves `n * sum(prefix_lens)` bytes of writes per round; the layout and size are unchanged.

Bit-packed variant: tree columns only, `int32[bs, n, ceil(n / 32)]`, column j in bit j % 32 of
word j // 32 (two's complement, so bit 31 makes the word negative).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def tree_positions(depth: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """RoPE positions of the tree tokens: seq_len + depth (siblings share a position)."""
    return seq_lens.to(torch.int64)[:, None] + depth


def mask_numel(n: int, bs: int, prefix_lens_sum: int) -> int:
    return n * prefix_lens_sum + bs * n * n


@triton.jit
def _ancestors(parent_ptr, b, rows, cols, n_nodes):
    """[R, NP] bool: column j is an ancestor-or-self of row i (walks up the parent links)."""
    cur = tl.where(rows < n_nodes, rows, -1)
    anc = (rows[:, None] < 0) & (cols[None, :] < 0)
    while tl.max(cur, axis=0) >= 0:
        anc = anc | (cols[None, :] == cur[:, None])
        cur = tl.load(parent_ptr + b * n_nodes + cur, mask=cur >= 0, other=-1).to(tl.int32)
    return anc


@triton.jit
def _request_rows(prefix_ptr, b, rows, n_nodes, BSP: tl.constexpr):
    """Request b's prefix length and the flat offset of each of its rows (layout: module docstring)."""
    boffs = tl.arange(0, BSP)
    before = tl.sum(tl.load(prefix_ptr + boffs, mask=boffs < b, other=0).to(tl.int64), axis=0)
    prefix = tl.load(prefix_ptr + b).to(tl.int64)
    width = prefix + n_nodes
    row_start = n_nodes * before + b * n_nodes * n_nodes + rows.to(tl.int64) * width
    return prefix, row_start


@triton.jit
def _tree_mask_kernel(parent_ptr, prefix_ptr, out_ptr, bs, n_nodes,
                      R: tl.constexpr, NP: tl.constexpr, BSP: tl.constexpr, PB: tl.constexpr,
                      PREFIX_ONES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * R + tl.arange(0, R)
    cols = tl.arange(0, NP)
    prefix, row_start = _request_rows(prefix_ptr, b, rows, n_nodes, BSP)
    live = rows < n_nodes
    anc = _ancestors(parent_ptr, b, rows, cols, n_nodes)
    tl.store(out_ptr + row_start[:, None] + prefix + cols[None, :], anc,
             mask=live[:, None] & (cols[None, :] < n_nodes))
    if PREFIX_ONES:
        poffs = tl.arange(0, PB)
        ones = tl.full([R, PB], 1, tl.int1)
        for start in range(0, prefix, PB):
            tl.store(out_ptr + row_start[:, None] + start + poffs[None, :], ones,
                     mask=live[:, None] & (start + poffs[None, :] < prefix))


@triton.jit
def _pack_mask_kernel(parent_ptr, out_ptr, n_nodes, W, R: tl.constexpr, NP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * R + tl.arange(0, R)
    cols = tl.arange(0, NP)
    anc = _ancestors(parent_ptr, b, rows, cols, n_nodes)
    bits = anc.to(tl.int32) << (cols % 32)[None, :]
    words = tl.sum(tl.reshape(bits, [R, NP // 32, 32]), axis=2)
    woffs = tl.arange(0, NP // 32)
    tl.store(out_ptr + (b * n_nodes + rows[:, None]) * W + woffs[None, :], words,
             mask=(rows[:, None] < n_nodes) & (woffs[None, :] < W))


def _row_block(np_cols: int) -> int:
    return max(1, min(np_cols, 4096 // np_cols))


def _check(parent: torch.Tensor) -> None:
    if parent.dim() != 2:
        raise ValueError(f"parent must be [bs, n], got {tuple(parent.shape)}")


def build_tree_mask_triton(parent: torch.Tensor, prefix_lens: torch.Tensor, prefix_lens_sum: int,
                           prefix_ones: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """`out`: a flat bool buffer of at least the mask's size to write into (e.g. a static one)."""
    _check(parent)
    bs, n = parent.shape
    numel = mask_numel(n, bs, prefix_lens_sum)
    if out is None:
        out = torch.empty(numel, dtype=torch.bool, device=parent.device)
    elif out.dtype != torch.bool or out.dim() != 1 or out.numel() < numel or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous flat bool tensor of >= {numel} elements")
    if bs == 0:
        return out
    np_cols = triton.next_power_of_2(n)
    rows = _row_block(np_cols)
    _tree_mask_kernel[(bs, triton.cdiv(n, rows))](parent.contiguous(), prefix_lens.contiguous(), out, bs, n,
                                                  R=rows, NP=np_cols, BSP=triton.next_power_of_2(bs), PB=256,
                                                  PREFIX_ONES=prefix_ones)
    return out


def build_tree_mask_torch(parent: torch.Tensor, prefix_lens: torch.Tensor, prefix_lens_sum: int,
                          prefix_ones: bool = True) -> torch.Tensor:
    """Reference: ancestor matrix by repeated parent lookups, prefix columns by a per-element request map."""
    _check(parent)
    bs, n = parent.shape
    anc = ancestor_matrix_torch(parent)  # [bs, n, n]
    total = mask_numel(n, bs, prefix_lens_sum)
    pos = torch.arange(total, device=parent.device)
    lens = prefix_lens.to(torch.int64)
    starts = n * (torch.cumsum(lens, 0) - lens) + torch.arange(bs, device=parent.device) * n * n
    req = torch.searchsorted(starts, pos, right=True) - 1
    local = pos - starts[req]
    width = lens[req] + n
    row, col = local // width, local % width
    inside = row < n  # `prefix_lens_sum` may be an upper bound: the tail past the last request
    tree_col = (col - lens[req]).clamp(min=0)
    return inside & torch.where(col < lens[req], prefix_ones, anc[req, row.clamp(max=n - 1), tree_col])


def ancestor_matrix_torch(parent: torch.Tensor) -> torch.Tensor:
    """bool[bs, n, n]: [b, i, j] = j is an ancestor of i or i itself (syncs once per tree level)."""
    bs, n = parent.shape
    cols = torch.arange(n, device=parent.device)
    cur = cols.expand(bs, n).clone()
    anc = torch.zeros((bs, n, n), dtype=torch.bool, device=parent.device)
    while bool((cur >= 0).any()):
        anc |= (cols[None, None, :] == cur[:, :, None]) & (cur[:, :, None] >= 0)
        cur = torch.where(cur >= 0, parent.gather(1, cur.clamp(min=0)), -1)
    return anc


def pack_tree_mask_triton(parent: torch.Tensor) -> torch.Tensor:
    _check(parent)
    bs, n = parent.shape
    words = triton.cdiv(n, 32)
    out = torch.empty((bs, n, words), dtype=torch.int32, device=parent.device)
    if bs == 0:
        return out
    np_cols = max(32, triton.next_power_of_2(n))
    rows = _row_block(np_cols)
    _pack_mask_kernel[(bs, triton.cdiv(n, rows))](parent.contiguous(), out, n, words, R=rows, NP=np_cols)
    return out


def pack_tree_mask_torch(parent: torch.Tensor) -> torch.Tensor:
    bs, n = parent.shape
    words = (n + 31) // 32
    anc = torch.nn.functional.pad(ancestor_matrix_torch(parent), (0, words * 32 - n)).to(torch.int64)
    shifts = torch.arange(32, device=parent.device)
    packed = (anc.view(bs, n, words, 32) << shifts).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def build_tree_mask(parent: torch.Tensor, prefix_lens: torch.Tensor,
                    prefix_lens_sum: int | None = None, prefix_ones: bool = True,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """Flat bool mask of all requests (layout in the module docstring); Triton on CUDA.

    `prefix_lens_sum` sizes the output and may be a host-side upper bound of sum(prefix_lens):
    the requests are packed from the start and the tail past them is padding (False on the torch
    path, unwritten on CUDA). Without it the sum is read from the device (a sync, not capturable).
    `prefix_ones=False`: tree columns only (module docstring), for a backend that skips the prefix.
    `out`: a flat bool buffer of at least the mask's size to write into; returns its first
    `mask_numel` elements (on the torch path the whole mask is copied in, prefix columns included).
    """
    if prefix_lens_sum is None:
        prefix_lens_sum = int(prefix_lens.sum())
    if parent.is_cuda:
        mask = build_tree_mask_triton(parent, prefix_lens, prefix_lens_sum, prefix_ones, out)
    else:
        mask = build_tree_mask_torch(parent, prefix_lens, prefix_lens_sum, prefix_ones)
        if out is not None:
            if out.dtype != torch.bool or out.dim() != 1 or out.numel() < mask.numel():
                raise ValueError(f"out must be a flat bool tensor of >= {mask.numel()} elements")
            mask = out[: mask.numel()].copy_(mask)
    return mask[: mask_numel(parent.shape[1], parent.shape[0], prefix_lens_sum)]


def pack_tree_mask(parent: torch.Tensor) -> torch.Tensor:
    """Bit-packed tree-columns-only mask int32[bs, n, ceil(n / 32)]; Triton on CUDA."""
    if parent.is_cuda:
        return pack_tree_mask_triton(parent)
    return pack_tree_mask_torch(parent)
