"""After the walk: which KV slots survive, and moving accepted rows to the front.

`commit_slots` (page size 1): `keep_loc[bs, D + 1]` = cache locations of the accepted path (root
first, -1 padded) and `free_mask[bs, n]` = True for every tree node not on the path, i.e. the slots
to hand back. Validity comes from `accept_len`, so a stale `accepted_idx` tail is ignored.
`gather_accepted` (page size > 1, hidden states): rows of the accepted path moved to the front;
padded positions are zero.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _commit_kernel(acc_ptr, len_ptr, loc_ptr, keep_ptr, free_ptr, n_nodes, D1,
                   NP: tl.constexpr, DP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    dpos = tl.arange(0, DP)
    nodes = tl.arange(0, NP)
    valid = dpos <= tl.load(len_ptr + b)
    acc = tl.load(acc_ptr + b * D1 + dpos, mask=(dpos < D1) & valid, other=-1)
    loc = tl.load(loc_ptr + b * n_nodes + acc, mask=acc >= 0, other=-1)
    tl.store(keep_ptr + b * D1 + dpos, loc.to(tl.int64), mask=dpos < D1)
    kept = tl.max((nodes[:, None] == acc[None, :]).to(tl.int32), axis=1)
    tl.store(free_ptr + b * n_nodes + nodes, kept == 0, mask=nodes < n_nodes)


def _check(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor) -> None:
    bs = accepted_idx.shape[0]
    if accepted_idx.dim() != 2 or accept_len.shape != (bs,) or cache_loc.dim() != 2 or cache_loc.shape[0] != bs:
        raise ValueError("expected accepted_idx [bs, D+1], accept_len [bs], cache_loc [bs, n]")


def commit_slots_triton(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    _check(accepted_idx, accept_len, cache_loc)
    bs, d1 = accepted_idx.shape
    n = cache_loc.shape[1]
    keep = torch.empty((bs, d1), dtype=torch.int64, device=cache_loc.device)
    free = torch.empty((bs, n), dtype=torch.bool, device=cache_loc.device)
    if bs:
        _commit_kernel[(bs,)](accepted_idx.contiguous(), accept_len.contiguous(), cache_loc.contiguous(), keep, free,
                              n, d1, NP=triton.next_power_of_2(n), DP=triton.next_power_of_2(d1))
    return keep, free


def commit_slots_torch(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    _check(accepted_idx, accept_len, cache_loc)
    d1 = accepted_idx.shape[1]
    valid = torch.arange(d1, device=accepted_idx.device)[None, :] <= accept_len[:, None]
    idx = torch.where(valid, accepted_idx, 0)
    keep = torch.where(valid, cache_loc.gather(1, idx).to(torch.int64), -1)
    on_path = torch.zeros(cache_loc.shape, dtype=torch.bool, device=cache_loc.device).scatter(1, idx, True)
    return keep, ~on_path


def commit_slots(accepted_idx: torch.Tensor, accept_len: torch.Tensor, cache_loc: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep_loc int64[bs, D + 1] in path order, -1 padded; free_mask bool[bs, n]); Triton on CUDA."""
    if cache_loc.is_cuda:
        return commit_slots_triton(accepted_idx, accept_len, cache_loc)
    return commit_slots_torch(accepted_idx, accept_len, cache_loc)


def gather_accepted(rows: torch.Tensor, accepted_idx: torch.Tensor) -> torch.Tensor:
    """rows[bs, n, ...] -> rows[bs, D + 1, ...] along the accepted path (torch gather, any device)."""
    bs, d1 = accepted_idx.shape
    idx = accepted_idx.clamp(min=0).view(bs, d1, *([1] * (rows.dim() - 2))).expand(bs, d1, *rows.shape[2:])
    out = rows.gather(1, idx)
    pad = (accepted_idx < 0).view(bs, d1, *([1] * (rows.dim() - 2)))
    return out.masked_fill(pad, 0)
