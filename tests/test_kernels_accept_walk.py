"""Accept walk and commit helpers: Triton against torch against a per-request Python walk."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES
from tests.kernels_reference import walk

from kernels import gather_accepted
from kernels.accept_walk import accept_walk_torch, accept_walk_triton, parents_from_links
from kernels.commit import commit_slots_torch, commit_slots_triton
from kernels.tree_build import select_tree_torch
from kernels.vocab_topk import draft_topk_torch

CASES = [(8, 4, 8, 7), (6, 15, 64, 64), (2, 15, 128, 300), (3, 2, 16, 1), (2, 3, 8, 0)]


def _round(bs: int, depth: int, vocab: int, budget: int, seed: int):
    """A tree plus posteriors that follow the draft often enough to give long accepted paths."""
    gen = torch.Generator().manual_seed(seed)
    if budget:
        lp, tok = draft_topk_torch(torch.randn(bs, depth, vocab, generator=gen) * 3, min(budget, vocab))
        tree = select_tree_torch(lp, tok, budget)
    else:
        minus = torch.full((bs, 1), -1)
        tree = select_tree_torch(torch.zeros(bs, 1, 1), torch.zeros(bs, 1, 1, dtype=torch.int64), 0)
        assert torch.equal(tree.parent, minus)
    tokens = tree.tokens.clone()
    tokens[:, 0] = torch.randint(0, vocab, (bs,), generator=gen)
    n = budget + 1
    noise = torch.randint(0, vocab, (bs, n), generator=gen)
    kid_token = tokens.gather(1, tree.first_child.clamp(min=0))
    follow = (torch.rand(bs, n, generator=gen) < 0.8) & (tree.first_child >= 0)
    return tree, tokens, torch.where(follow, kid_token, noise)


@pytest.mark.parametrize("bs,depth,vocab,budget", CASES)
def test_torch_walk_equals_python(bs: int, depth: int, vocab: int, budget: int) -> None:
    tree, tokens, post = _round(bs, depth, vocab, budget, seed=budget)
    assert torch.equal(parents_from_links(tree.first_child, tree.next_sibling), tree.parent)
    acc, length, bonus = accept_walk_torch(tokens, tree.first_child, tree.next_sibling, post, depth)
    assert acc.shape == (bs, depth + 1)
    for b in range(bs):
        path, want_bonus = walk(tokens[b].tolist(), tree.parent[b].tolist(), post[b].tolist())
        assert acc[b].tolist() == path + [-1] * (depth + 1 - len(path))
        assert length[b].item() == len(path) - 1 and bonus[b].item() == want_bonus
    if budget >= 7:
        assert length.max() >= 2


def test_walk_default_depth() -> None:
    tree, tokens, post = _round(3, 4, 8, 7, seed=1)
    acc, _, _ = accept_walk_torch(tokens, tree.first_child, tree.next_sibling, post)
    assert acc.shape == (3, 8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,budget", CASES)
def test_triton_walk_equals_torch(device: str, bs: int, depth: int, vocab: int, budget: int) -> None:
    tree, tokens, post = _round(bs, depth, vocab, budget, seed=budget + 1)
    ref = accept_walk_torch(tokens, tree.first_child, tree.next_sibling, post, depth)
    got = accept_walk_triton(*(t.to(device) for t in (tokens, tree.first_child, tree.next_sibling, post)), depth)
    for r, g in zip(ref, got):
        assert torch.equal(g.cpu(), r)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,budget", CASES)
def test_commit_slots(device: str, bs: int, depth: int, vocab: int, budget: int) -> None:
    tree, tokens, post = _round(bs, depth, vocab, budget, seed=budget + 2)
    acc, length, _ = accept_walk_torch(tokens, tree.first_child, tree.next_sibling, post, depth)
    n = budget + 1
    loc = torch.randperm(bs * n * 3)[: bs * n].view(bs, n)
    keep, free = commit_slots_torch(acc, length, loc)
    for b in range(bs):
        path = acc[b, : length[b] + 1].tolist()
        assert keep[b].tolist() == [loc[b, i].item() for i in path] + [-1] * (depth - length[b].item())
        assert free[b].tolist() == [i not in path for i in range(n)]
    stale = torch.where(torch.arange(depth + 1) > length[:, None], n - 1, acc)  # tail ignored via accept_len
    got = commit_slots_triton(stale.to(device), length.to(device), loc.to(device))
    assert torch.equal(got[0].cpu(), keep) and torch.equal(got[1].cpu(), free)


def test_gather_accepted() -> None:
    rows = torch.randn(2, 5, 3, 4)
    acc = torch.tensor([[0, 2, 4], [0, -1, -1]])
    out = gather_accepted(rows, acc)
    assert torch.equal(out[0], rows[0, [0, 2, 4]])
    assert torch.equal(out[1, 0], rows[1, 0]) and out[1, 1:].eq(0).all()
