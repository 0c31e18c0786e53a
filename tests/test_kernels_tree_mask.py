"""Tree positions and masks against the numpy visibility matrix, Triton against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels_env import DEVICES
from tests.kernels_reference import visibility

from kernels import build_tree_mask, pack_tree_mask, tree_positions
from kernels.tree_build import select_tree_torch
from kernels.tree_mask import (build_tree_mask_torch, build_tree_mask_triton, pack_tree_mask_torch,
                               pack_tree_mask_triton)
from kernels.vocab_topk import draft_topk_torch


def _parents(bs: int, depth: int, budget: int, seed: int) -> torch.Tensor:
    if budget == 0:
        return torch.full((bs, 1), -1, dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    lp, tok = draft_topk_torch(torch.randn(bs, depth, 512, generator=gen) * 3, budget)
    return select_tree_torch(lp, tok, budget).parent


def _check_layout(mask: torch.Tensor, parent: torch.Tensor, prefix_lens: torch.Tensor) -> None:
    n = parent.shape[1]
    offset = 0
    for b, length in enumerate(prefix_lens.tolist()):
        block = mask[offset:offset + n * (length + n)].view(n, length + n)
        offset += n * (length + n)
        assert block[:, :length].all()
        assert np.array_equal(block[:, length:].numpy(), visibility(parent[b].tolist()))
    assert offset == mask.numel()


CASES = [(1, 15, 0), (3, 4, 7), (4, 15, 64), (2, 3, 1), (1, 15, 300)]


@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_torch_mask_equals_visibility(bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget)
    prefix_lens = torch.randint(0, 300, (bs,), generator=torch.Generator().manual_seed(bs))
    mask = build_tree_mask(parent, prefix_lens)
    assert mask.dtype == torch.bool
    _check_layout(mask, parent, prefix_lens)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_triton_mask_equals_torch(device: str, bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget + 1)
    prefix_lens = torch.randint(0, 600, (bs,), generator=torch.Generator().manual_seed(budget))
    prefix_lens[0] = 0
    total = int(prefix_lens.sum())
    ref = build_tree_mask_torch(parent, prefix_lens, total)
    got = build_tree_mask_triton(parent.to(device), prefix_lens.to(device), total)
    assert torch.equal(got.cpu(), ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_packed_mask(device: str, bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget + 2)
    ref = pack_tree_mask_torch(parent)
    n = parent.shape[1]
    assert ref.shape == (bs, n, (n + 31) // 32) and ref.dtype == torch.int32
    bits = ((ref.to(torch.int64)[..., None] >> torch.arange(32)) & 1).flatten(-2)[..., :n].bool()
    for b in range(bs):
        assert np.array_equal(bits[b].numpy(), visibility(parent[b].tolist()))
    assert torch.equal(pack_tree_mask_triton(parent.to(device)).cpu(), ref)
    assert torch.equal(pack_tree_mask(parent), ref)


def test_positions() -> None:
    depth = torch.tensor([[0, 1, 1, 2], [0, 1, 2, 3]])
    assert tree_positions(depth, torch.tensor([10, 0])).tolist() == [[10, 11, 11, 12], [0, 1, 2, 3]]


@pytest.mark.parametrize("device", DEVICES)
def test_mask_sized_by_an_upper_bound_packs_requests_from_the_start(device):
    parent = torch.tensor([[-1, 0, 0, 1], [-1, 0, 1, 2]], device=device)
    prefix = torch.tensor([3, 5], device=device)
    exact = build_tree_mask(parent, prefix, 8)
    bounded = build_tree_mask(parent, prefix, 8 + 6)  # e.g. host lengths plus one round of lag
    assert bounded.numel() == exact.numel() + 4 * 6
    assert torch.equal(bounded[: exact.numel()], exact)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,budget", [(3, 4, 7), (2, 15, 64)])
def test_tree_only_mask_writes_no_prefix(device: str, bs: int, depth: int, budget: int) -> None:
    """prefix_ones=False: same size, tree columns as the full mask; torch writes False in the prefix,
    Triton leaves it untouched (checked by writing into pre-filled buffers)."""
    parent = _parents(bs, depth, budget, seed=budget + 3)
    prefix_lens = torch.randint(1, 300, (bs,), generator=torch.Generator().manual_seed(7))
    total = int(prefix_lens.sum())
    full = build_tree_mask_torch(parent, prefix_lens, total)
    ref = build_tree_mask_torch(parent, prefix_lens, total, prefix_ones=False)
    n = parent.shape[1]
    in_prefix = torch.zeros_like(full)
    offset = 0
    for length in prefix_lens.tolist():
        in_prefix[offset:offset + n * (length + n)].view(n, length + n)[:, :length] = True
        offset += n * (length + n)
    assert torch.equal(ref, full & ~in_prefix)
    for fill, expect in ((True, full), (False, ref)):
        buf = torch.full((full.numel() + 5,), fill, dtype=torch.bool, device=device)
        got = build_tree_mask_triton(parent.to(device), prefix_lens.to(device), total, prefix_ones=False, out=buf)
        assert got is buf and torch.equal(buf[: full.numel()].cpu(), expect) and bool(buf[-5:].eq(fill).all())
    with pytest.raises(ValueError, match="out must be"):
        build_tree_mask_triton(parent.to(device), prefix_lens.to(device), total, out=buf[:10])


def test_mask_into_a_buffer_returns_the_mask_sized_view() -> None:
    """`build_tree_mask(..., out=)` on the torch path (the Triton path's `out=` is tested above) writes the
    mask into the buffer and returns its first mask-size elements, the buffer's own memory; the rest
    of the buffer is not written."""
    parent = _parents(2, 4, 7, seed=5)
    prefix = torch.tensor([3, 6])
    want = build_tree_mask_torch(parent, prefix, 9)
    buf = torch.zeros(want.numel() + 3, dtype=torch.uint8)
    got = build_tree_mask(parent, prefix, 9, out=buf.view(torch.bool))
    assert got.data_ptr() == buf.data_ptr() and got.numel() == want.numel()
    assert torch.equal(got, want) and not buf[want.numel():].any()
    with pytest.raises(ValueError, match="out must be"):
        build_tree_mask(parent, prefix, 9, out=torch.zeros(want.numel() - 1, dtype=torch.bool))
