"""The path-window mask (kernels/tree_window_reference.py) against a per-row walk of each node's path,
and its Triton builder (kernels/tree_window.py) against that reference."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.tree_build import select_tree_torch
from kernels.tree_window import path_window_mask, path_window_mask_torch, path_window_mask_triton
from kernels.tree_mask import build_tree_mask_torch
from kernels.tree_window_reference import node_depths, tree_window_mask
from kernels.vocab_topk import draft_topk_torch


def _parents(bs: int, depth: int, budget: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lp, tok = draft_topk_torch(torch.randn(bs, depth, 64, generator=gen) * 3, budget)
    return select_tree_torch(lp, tok, budget).parent


def _walked_row(parent: list[int], node: int, length: int, window: int) -> list[bool]:
    """Decode the node's path one token at a time: the prefix at 0..L-1, then root..node at L, L+1..;
    the node (the last token) sees every earlier token of that sequence within the window."""
    path = [node]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    path.reverse()
    sequence = [("prefix", c) for c in range(length)] + [("node", j) for j in path]
    query = len(sequence) - 1
    seen = {key for pos, key in enumerate(sequence) if window < 0 or query - pos <= window}
    return [("prefix", c) in seen for c in range(length)] + [("node", j) in seen for j in range(len(parent))]


@pytest.mark.parametrize("window", [0, 1, 3, 6, 40, -1])
@pytest.mark.parametrize("bs,depth,budget", [(3, 6, 15), (2, 4, 31), (1, 8, 8)])
def test_mask_rows_equal_the_walk_along_each_path(window: int, bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget + window)
    prefix_lens = torch.randint(0, 30, (bs,), generator=torch.Generator().manual_seed(window + 7))
    mask = tree_window_mask(parent, prefix_lens, window)
    n, offset = parent.shape[1], 0
    for b, length in enumerate(prefix_lens.tolist()):
        block = mask[offset:offset + n * (length + n)].view(n, length + n)
        offset += n * (length + n)
        for i in range(n):
            assert block[i].tolist() == _walked_row(parent[b].tolist(), i, length, window), (b, i)
    assert offset == mask.numel()


def test_no_window_is_the_tree_mask() -> None:
    parent = _parents(2, 6, 20, seed=3)
    prefix_lens = torch.tensor([5, 17])
    assert torch.equal(tree_window_mask(parent, prefix_lens, -1), build_tree_mask_torch(parent, prefix_lens, 22))


def test_a_branch_sees_more_prefix_than_its_verify_row_would() -> None:
    """The window follows depth, not row: node 2 (depth 1, row 2) sees prefix position L + 1 - w."""
    parent = torch.tensor([[-1, 0, 0]])
    assert node_depths(parent).tolist() == [[0, 1, 1]]
    length, window = 10, 4
    row = tree_window_mask(parent, torch.tensor([length]), window).view(3, length + 3)[2]
    assert row[:length].nonzero().flatten().tolist() == list(range(length + 1 - window, length))
    assert row[length:].tolist() == [True, False, True]


def _verify_call(bs: int, depth: int, budget: int, seed: int, slack: int, prefix_ones: bool):
    """A verify call's tree mask (as the round builds it, with a buffer's slack), its mask_indptr, the
    tree and the prefix lengths."""
    gen = torch.Generator().manual_seed(seed)
    lp, tok = draft_topk_torch(torch.randn(bs, depth, 64, generator=gen) * 3, budget)
    tree = select_tree_torch(lp, tok, budget)
    prefix_lens = torch.randint(0, 300, (bs,), generator=gen)
    prefix_lens[0] = 0
    n = tree.parent.shape[1]
    tree_mask = build_tree_mask_torch(tree.parent, prefix_lens, int(prefix_lens.sum()) + slack, prefix_ones=prefix_ones)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(n * (prefix_lens + n), 0)])
    return tree_mask, indptr, tree, prefix_lens


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", [0, 2, 5, -1])
@pytest.mark.parametrize("bs,depth,budget,prefix_ones", [(3, 5, 12, False), (1, 8, 40, True), (2, 6, 60, False)])
def test_the_mask_derived_in_the_verify_equals_the_reference(device: str, window: int, bs: int, depth: int,
                                                             budget: int, prefix_ones: bool) -> None:
    """From the tree mask alone (prefix columns written or not), Triton and torch give the reference's
    path-window mask; a graph buffer's slack past the last request stays unwritten (torch: False)."""
    tree_mask, indptr, tree, prefix_lens = _verify_call(bs, depth, budget, seed=budget + window, slack=7,
                                                        prefix_ones=prefix_ones)
    ref = tree_window_mask(tree.parent, prefix_lens, window)
    n, used = tree.parent.shape[1], ref.numel()
    torch_mask = path_window_mask_torch(tree_mask, indptr, n, window)
    assert torch.equal(torch_mask[:used], ref) and not torch_mask[used:].any()
    got = path_window_mask_triton(tree_mask.to(device), indptr.to(device), n, window)
    assert torch.equal(got[:used].cpu(), ref)
    assert torch.equal(path_window_mask(tree_mask, indptr, n, window)[:used], ref)


def test_the_derived_depth_is_the_trees() -> None:
    """A node's depth is read from its row (ancestors shown, less one): a window of 0 leaves each node
    itself, a window of 1 adds its parent and the prefix key just before the root."""
    tree_mask, indptr, tree, prefix_lens = _verify_call(1, 5, 12, seed=2, slack=0, prefix_ones=False)
    n, length = tree.parent.shape[1], int(prefix_lens[0])
    rows = path_window_mask_torch(tree_mask, indptr, n, 1).view(n, length + n)
    for i, p in enumerate(tree.parent[0].tolist()):
        expected = {i, p} if p >= 0 else {i}
        assert set(rows[i, length:].nonzero().flatten().tolist()) == expected
        assert rows[i, :length].sum().item() == (1 if int(tree.depth[0, i]) == 0 and length else 0)


def test_a_call_without_requests_gives_an_all_false_mask() -> None:
    empty = path_window_mask(torch.ones(6, dtype=torch.bool), torch.zeros(1, dtype=torch.int64), 3, 2)
    assert empty.shape == (6,) and not empty.any()
