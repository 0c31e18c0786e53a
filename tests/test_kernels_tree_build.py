"""Tree build: torch reference and Triton kernel against the plain-Python best-first heap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels_env import DEVICES
from tests.kernels_reference import heap_tree

from kernels import build_tree
from kernels.tree_build import select_tree_torch, select_tree_triton, tree_node_capacity
from kernels.vocab_topk import draft_topk_torch, draft_topk_triton


def _lp(bs: int, depth: int, vocab: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return draft_topk_torch(torch.randn(bs, depth, vocab, generator=gen) * 2, k)


def _tied_lp(bs: int, depth: int, k: int, seed: int):
    """Log-probs on a coarse grid (multiples of 0.5, zero included): many exactly equal path scores."""
    gen = torch.Generator().manual_seed(seed)
    lp = -0.5 * torch.randint(0, 4, (bs, depth, k), generator=gen).float().sort(dim=-1).values
    return lp, torch.arange(k).expand(bs, depth, k).contiguous()


def _assert_matches_heap(tree, lp: torch.Tensor, budget: int) -> None:
    """Same nodes in the same pop order, same fp32 scores, consistent links."""
    bs, n = tree.parent.shape
    assert n == budget + 1
    for b in range(bs):
        heap = heap_tree(lp[b].numpy(), budget)
        assert tree.parent[b, 1:].tolist() == [p for p, _, _ in heap]
        assert tree.depth[b, 1:].tolist() == [len(path) for _, path, _ in heap]
        assert np.array_equal(tree.logprob[b, 1:].numpy(), np.array([s for _, _, s in heap], np.float32))
    assert (tree.parent[:, 1:] < torch.arange(1, n)).all()
    assert (tree.depth[:, 1:] == tree.depth.gather(1, tree.parent[:, 1:]) + 1).all()
    assert tree.parent[:, 0].eq(-1).all() and tree.depth[:, 0].eq(0).all() and tree.tokens[:, 0].eq(-1).all()


def _assert_links(tree) -> None:
    """first_child / next_sibling enumerate exactly each node's children, in increasing index."""
    bs, n = tree.parent.shape
    for b in range(bs):
        parent = tree.parent[b].tolist()
        for i in range(n):
            kids, c = [], tree.first_child[b, i].item()
            while c != -1:
                kids.append(c)
                c = tree.next_sibling[b, c].item()
            assert kids == [j for j in range(n) if parent[j] == i]


def _node_set(tree, tokens: torch.Tensor, b: int) -> set[tuple[int, ...]]:
    """Token paths of request b."""
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for i in range(1, tree.parent.shape[1]):
        paths[i] = paths[tree.parent[b, i].item()] + (tokens[b, i].item(),)
    return set(paths.values())


@pytest.mark.parametrize("depth", range(1, 16))
@pytest.mark.parametrize("budget", [1, 7, 64, 300])
def test_torch_reference_equals_heap(depth: int, budget: int) -> None:
    vocab = 512 if budget == 300 else 128
    k = budget  # <= vocab: depth 1 alone holds `budget` prefixes, so every case can fill its budget
    assert tree_node_capacity(depth, k) >= budget
    bs = 3 if budget < 300 else 2
    lp, tok = _lp(bs, depth, vocab, k, seed=depth * 1000 + budget)
    tree = select_tree_torch(lp, tok, budget)
    _assert_matches_heap(tree, lp, budget)
    if budget <= 64:
        _assert_links(tree)


@pytest.mark.parametrize("budget", [1, 7, 64])
def test_tie_rule_equals_heap(budget: int) -> None:
    """Integer logits: many equal path scores; the (score, parent index) rule must match the heap."""
    lp, tok = _tied_lp(4, 6, min(budget, 16), seed=budget)
    _assert_matches_heap(select_tree_torch(lp, tok, budget), lp, budget)


def test_top_prefixes_by_score() -> None:
    """The node set is the top-budget prefixes: every excluded one-step extension scores no higher."""
    lp, tok = _lp(2, 5, 32, 32, seed=7)
    tree = select_tree_torch(lp, tok, 40)
    for b in range(2):
        worst = tree.logprob[b, 1:].min()
        for i in range(41):
            d = tree.depth[b, i].item()
            kids = (tree.parent[b] == i).sum().item()
            if d < 5 and kids < 32:
                assert lp[b, d, kids] + tree.logprob[b, i] <= worst


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,budget", [(1, 1, 64, 1), (3, 4, 64, 7), (4, 15, 256, 64), (2, 9, 64, 64),
                                                   (1, 15, 512, 300), (2, 3, 64, 0)])
def test_triton_equals_torch(device: str, bs: int, depth: int, vocab: int, budget: int) -> None:
    lp, tok = _lp(bs, depth, vocab, max(1, min(budget, vocab)), seed=bs + depth + budget)
    ref = select_tree_torch(lp, tok, budget)
    got = select_tree_triton(lp.to(device), tok.to(device), budget)
    for name in ref._fields:
        assert torch.equal(getattr(got, name).cpu(), getattr(ref, name)), name


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_warps", [1, 2, 4, 8])
@pytest.mark.parametrize("budget", [64, 300])
def test_every_warp_count_builds_the_same_tree(device: str, num_warps: int, budget: int) -> None:
    """The launch's warps only tune the speed (the default picks them per frontier size)."""
    lp, tok = _lp(2, 15, 512, budget, seed=budget + num_warps)
    ref = select_tree_torch(lp, tok, budget)
    got = select_tree_triton(lp.to(device), tok.to(device), budget, num_warps=num_warps)
    for name in ref._fields:
        assert torch.equal(getattr(got, name).cpu(), getattr(ref, name)), name


@pytest.mark.parametrize("device", DEVICES)
def test_triton_ties_equal_torch(device: str) -> None:
    lp, tok = _tied_lp(3, 6, 16, seed=3)
    ref = select_tree_torch(lp, tok, 64)
    got = select_tree_triton(lp.to(device), tok.to(device), 64)
    for name in ref._fields:
        assert torch.equal(getattr(got, name).cpu(), getattr(ref, name)), name


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_vocab_topk_triton_equals_torch(device: str, dtype: torch.dtype) -> None:
    """Values exact; tokens compared through their logits, since the order among equal
    half-precision logits is torch.topk's and may differ between devices."""
    logits = (torch.randn(3, 5, 1000, generator=torch.Generator().manual_seed(1)) * 4).to(dtype).to(device)
    lp_ref, _ = draft_topk_torch(logits, 37)
    lp, tok = draft_topk_triton(logits, 37)
    assert lp.dtype == torch.float32 and tok.dtype == torch.int64
    torch.testing.assert_close(lp, lp_ref, rtol=0, atol=2e-6)
    assert torch.equal(logits.gather(-1, tok), torch.topk(logits, 37).values)
    assert (tok.sort(-1).values.diff(dim=-1) > 0).all()
    exact = torch.log_softmax(logits.double(), -1).gather(-1, tok)
    torch.testing.assert_close(lp.double(), exact, rtol=0, atol=5e-6)


def test_build_tree_api() -> None:
    logits = (torch.randn(2, 4, 50, generator=torch.Generator().manual_seed(5)) * 3).to(torch.bfloat16)
    root = build_tree(logits, 0)
    assert root.tokens.tolist() == [[-1], [-1]] and root.first_child.tolist() == [[-1], [-1]]
    assert root.logprob.tolist() == [[0.0], [0.0]]
    tree = build_tree(logits, 20, topk=3)
    assert tree.tokens.shape == (2, 21) and all(t.dtype == torch.int64 for t in tree[:5])
    assert tree.logprob.dtype == torch.float32
    children = (tree.parent[:, None, :] == torch.arange(21)[None, :, None]).sum(-1)
    assert children.max() <= 3
    top3 = torch.log_softmax(logits.float(), -1).topk(3, -1)
    for b in range(2):
        for i in range(1, 21):
            d = tree.depth[b, i].item()
            assert tree.tokens[b, i].item() in top3.indices[b, d - 1].tolist()
        path_tokens = _node_set(tree, tree.tokens, b)
        assert len(path_tokens) == 21
    lp, _ = draft_topk_torch(logits, 3)
    _assert_matches_heap(tree, lp, 20)
    with pytest.raises(ValueError):
        build_tree(logits, 200, topk=1)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_warps", [1, 2])
def test_triton_launch_warps_keep_results(device: str, num_warps: int) -> None:
    """The benchmark's warps-per-request knob changes nothing but speed (compiled on CUDA)."""
    lp, tok = _lp(2, 15, 512, 256, seed=5)
    ref = select_tree_torch(lp, tok, 256)
    got = select_tree_triton(lp.to(device), tok.to(device), 256, num_warps=num_warps)
    for name in ref._fields:
        assert torch.equal(getattr(got, name).cpu(), getattr(ref, name)), name
