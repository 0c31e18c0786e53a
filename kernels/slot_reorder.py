"""The KV commit without moving KV (page size 1): reorder a request's slots in `req_to_token`.

The verify writes tree node i's KV into the slot of position `prefix + i`. The accepted path
(nodes a_0 = 0 < a_1 < ... < a_L) has to become the KV of positions `prefix .. prefix + L`. The move
(`commit.move_slots_triton`) copies each accepted node's KV onto its position's slot; at page size
1 nothing ties a slot to a position, so the same result costs no KV traffic by rewriting the row
of the request-to-token table instead: positions `prefix .. prefix + L` get the accepted nodes'
slots in path order, the positions after them the other slots of the range in node order. The
range holds the same slots as before, each once, so whatever SGLang later frees or caches from
that range (past the committed length, or the whole row when the request ends) is still every
slot the request owns, once.

`reorder_path_slots(table, req_pool_indices, prefix_lens, accepted_idx, accept_len, width)` does
it in place and returns the row's new slots [bs, width] (int64): the first `accept_len + 1` are
the committed positions', the rest are free to hand back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _reorder_kernel(table_ptr, table_stride, req_ptr, prefix_ptr, acc_ptr, len_ptr, out_ptr, width, D1,
                    WP: tl.constexpr, DP: tl.constexpr):
    """Program b: request b's `width` slots from `prefix`, read, placed, written back."""
    b = tl.program_id(0).to(tl.int64)
    nodes = tl.arange(0, WP)
    depth = tl.arange(0, DP)
    last = tl.load(len_ptr + b).to(tl.int32)  # the path's last depth
    acc = tl.load(acc_ptr + b * D1 + depth, mask=(depth < D1) & (depth <= last), other=-1).to(tl.int32)
    row = table_ptr + tl.load(req_ptr + b).to(tl.int64) * table_stride + tl.load(prefix_ptr + b).to(tl.int64)
    in_row = nodes < width
    slots = tl.load(row + nodes, mask=in_row)
    hit = nodes[:, None] == acc[None, :]  # [WP, DP]: node j is the path's node at that depth
    on_path = tl.max(hit.to(tl.int32), axis=1) > 0
    path_depth = tl.sum(tl.where(hit, depth[None, :], 0), axis=1)
    path_before = tl.sum(((acc[None, :] >= 0) & (acc[None, :] < nodes[:, None])).to(tl.int32), axis=1)
    # Off the path: after the path, in node order (j minus the path nodes below it).
    place = tl.where(on_path, path_depth, last + 1 + nodes - path_before)
    tl.debug_barrier()  # every slot of the row is read before any is overwritten
    tl.store(row + place, slots, mask=in_row)
    tl.store(out_ptr + b * width + place, slots.to(tl.int64), mask=in_row)


def _rows(table: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
          accepted_idx: torch.Tensor, accept_len: torch.Tensor, width: int) -> None:
    bs = accepted_idx.shape[0]
    if table.dim() != 2 or accepted_idx.dim() != 2 or any(t.shape != (bs,) for t in (req_pool_indices, prefix_lens,
                                                                                      accept_len)):
        raise ValueError("expected table [rows, cols], accepted_idx [bs, D+1], req_pool_indices / prefix_lens / "
                         "accept_len [bs]")
    if width < 1 or accepted_idx.shape[1] < 1:
        raise ValueError(f"expected a width >= 1 and a path of >= 1 depths, got {width} and {accepted_idx.shape[1]}")


def reorder_path_slots_triton(table: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                              accepted_idx: torch.Tensor, accept_len: torch.Tensor, width: int) -> torch.Tensor:
    _rows(table, req_pool_indices, prefix_lens, accepted_idx, accept_len, width)
    bs, d1 = accepted_idx.shape
    out = torch.empty((bs, width), dtype=torch.int64, device=table.device)
    if bs:
        _reorder_kernel[(bs,)](table, table.stride(0), req_pool_indices.contiguous(), prefix_lens.contiguous(),
                               accepted_idx.contiguous(), accept_len.contiguous(), out, width, d1,
                               WP=triton.next_power_of_2(width), DP=triton.next_power_of_2(d1))
    return out


def reorder_path_slots_torch(table: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                             accepted_idx: torch.Tensor, accept_len: torch.Tensor, width: int) -> torch.Tensor:
    """Reference: sort the row's nodes by (depth on the path, else width + node index)."""
    _rows(table, req_pool_indices, prefix_lens, accepted_idx, accept_len, width)
    bs, d1 = accepted_idx.shape
    dev = table.device
    rows = req_pool_indices.to(torch.int64)[:, None]
    cols = prefix_lens.to(torch.int64)[:, None] + torch.arange(width, device=dev)
    slots = table[rows, cols]
    depths = torch.arange(d1, device=dev).expand(bs, d1)
    on_path = depths <= accept_len.to(torch.int64)[:, None]
    key = torch.arange(width, 2 * width + 1, device=dev).repeat(bs, 1)  # a spare last column takes the padding
    key.scatter_(1, torch.where(on_path, accepted_idx.to(torch.int64), width), torch.where(on_path, depths, 2 * width))
    order = key[:, :width].argsort(dim=1)
    new = slots.gather(1, order)
    table[rows, cols] = new
    return new.to(torch.int64)


def reorder_path_slots(table: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                       accepted_idx: torch.Tensor, accept_len: torch.Tensor, width: int) -> torch.Tensor:
    """Reorder `table[req_pool_indices[b], prefix_lens[b] : + width]` in place: the accepted path's
    slots first (`accepted_idx[b, :accept_len[b] + 1]`, node indices, strictly increasing), then the
    others in node order; returns the new row [bs, width] int64. Triton on CUDA."""
    if table.is_cuda:
        return reorder_path_slots_triton(table, req_pool_indices, prefix_lens, accepted_idx, accept_len, width)
    return reorder_path_slots_torch(table, req_pool_indices, prefix_lens, accepted_idx, accept_len, width)
