"""The move-free KV commit: a request's row of req_to_token reordered, Triton vs torch vs a plain loop."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.slot_reorder import reorder_path_slots, reorder_path_slots_torch, reorder_path_slots_triton


def _round(bs: int, width: int, depths: int, seed: int, table_dtype: torch.dtype = torch.int32):
    """A table whose rows hold distinct slots, requests at scattered pool rows and prefixes, and
    accepted paths as the walk gives them: root 0, then strictly increasing node indices, -1 after
    the accepted length (some requests accept the root only, some a first-child chain)."""
    gen = torch.Generator().manual_seed(seed)
    rows, cols = bs + 3, 40 + width
    table = (torch.randperm(rows * cols, generator=gen) + 1).view(rows, cols).to(table_dtype)
    req = torch.randperm(rows, generator=gen)[:bs]
    prefix = torch.randint(0, cols - width + 1, (bs,), generator=gen)
    acc = torch.full((bs, depths), -1, dtype=torch.int64)
    last = torch.randint(0, min(depths, width), (bs,), generator=gen)  # the walk's path fits the tree
    for b in range(bs):
        n = int(last[b])
        if b % 4 == 1:
            nodes = torch.arange(1, n + 1)  # first-child chain: nothing to reorder
        else:
            nodes = torch.randperm(width - 1, generator=gen)[:n].sort().values + 1
        acc[b, : n + 1] = torch.cat([torch.zeros(1, dtype=torch.int64), nodes])
    return table, req, prefix, acc, last


def _expected(table, req, prefix, acc, last, width):
    """The definition, one request at a time: path slots in depth order, then the rest in node order."""
    want = table.clone()
    rows = []
    for b in range(len(req)):
        r, p = int(req[b]), int(prefix[b])
        old = table[r, p: p + width].tolist()
        path = acc[b, : int(last[b]) + 1].tolist()
        new = [old[j] for j in path] + [old[j] for j in range(width) if j not in path]
        want[r, p: p + width] = torch.tensor(new, dtype=table.dtype)
        rows.append(new)
    return want, torch.tensor(rows, dtype=torch.int64)


@pytest.mark.parametrize("bs,width,depths", [(5, 17, 16), (8, 65, 16), (3, 16, 16), (1, 2, 2), (4, 257, 9),
                                             (3, 9, 16)])
def test_torch_reference_is_the_definition(bs: int, width: int, depths: int) -> None:
    """Also a walk output wider than the tree (D + 1 > width: only the accepted depths count)."""
    table, req, prefix, acc, last = _round(bs, width, depths, seed=bs * 1000 + width)
    want_table, want_rows = _expected(table, req, prefix, acc, last, width)
    got = reorder_path_slots_torch(table, req, prefix, acc, last, width)
    assert torch.equal(got, want_rows) and torch.equal(table, want_table)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,width,depths,dtype", [(5, 17, 16, torch.int32), (8, 65, 16, torch.int64),
                                                   (3, 16, 16, torch.int32), (1, 2, 2, torch.int32),
                                                   (4, 257, 9, torch.int32), (3, 9, 16, torch.int32)])
def test_triton_equals_torch(device: str, bs: int, width: int, depths: int, dtype: torch.dtype) -> None:
    """In place, the other rows and columns of the table untouched, int32 and int64 tables."""
    table, req, prefix, acc, last = _round(bs, width, depths, seed=bs + width, table_dtype=dtype)
    ref = table.clone()
    want = reorder_path_slots_torch(ref, req, prefix, acc, last, width)
    got_table = table.to(device)
    got = reorder_path_slots_triton(got_table, req.to(device), prefix.to(device), acc.to(device), last.to(device),
                                    width)
    assert torch.equal(got.cpu(), want) and torch.equal(got_table.cpu(), ref)
    # Every range still holds the slots it held, each once: nothing leaks, nothing is owned twice.
    for b in range(bs):
        r, p = int(req[b]), int(prefix[b])
        assert sorted(ref[r, p: p + width].tolist()) == sorted(table[r, p: p + width].tolist())


def test_dispatch_and_refusals() -> None:
    table, req, prefix, acc, last = _round(2, 9, 4, seed=3)
    want = reorder_path_slots_torch(table.clone(), req, prefix, acc, last, 9)
    assert torch.equal(reorder_path_slots(table, req, prefix, acc, last, 9), want)  # CPU tensors: the reference
    with pytest.raises(ValueError, match="width >= 1"):
        reorder_path_slots(table, req, prefix, acc, last, 0)
    with pytest.raises(ValueError, match="expected table"):
        reorder_path_slots(table, req[:1], prefix, acc, last, 9)
