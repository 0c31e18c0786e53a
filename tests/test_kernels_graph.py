"""A whole DDTree round of kernels captured once in a CUDA graph, replayed on new logits."""

from __future__ import annotations

import pytest
import torch

import tests.kernels_env  # noqa: F401  (sets TRITON_INTERPRET before kernels import)
from tests.cuda_graph import capture_graph

from kernels import accept_walk, build_tree, build_tree_mask, commit_slots, posterior_tokens, tree_positions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

BS, DEPTH, VOCAB, BUDGET = 4, 15, 4096, 64


def _round(draft, target, seq_lens, prefix_sum, temp, top_k, top_p, seed, cache_loc):
    tree = build_tree(draft, BUDGET)
    tokens = tree.tokens.clone()
    tokens[:, 0] = 7
    positions = tree_positions(tree.depth, seq_lens)
    mask = build_tree_mask(tree.parent, seq_lens, prefix_sum)
    post = posterior_tokens(target, temp, top_k, top_p, seed)
    acc, length, bonus = accept_walk(tokens, tree.first_child, tree.next_sibling, post, DEPTH)
    keep, free = commit_slots(acc, length, cache_loc)
    return (tokens, tree.parent, tree.logprob, positions, mask, post, acc, length, bonus, keep, free)


def test_graph_replay_matches_eager() -> None:
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    draft = torch.empty(BS, DEPTH, VOCAB, dtype=torch.bfloat16, device=dev)
    target = torch.empty(BS, BUDGET + 1, VOCAB, dtype=torch.bfloat16, device=dev)
    seq_lens = torch.tensor([5, 0, 17, 300], device=dev)
    prefix_sum = int(seq_lens.sum())
    temp = torch.tensor([0.0, 1.0, 0.7, 0.0], device=dev)
    top_k = torch.tensor([0, 20, -1, 5], device=dev)
    top_p = torch.tensor([1.0, 0.9, 0.8, 1.0], device=dev)
    seed = torch.zeros(BS, dtype=torch.int64, device=dev)
    cache_loc = torch.arange(BS * (BUDGET + 1), device=dev).view(BS, -1)
    args = (draft, target, seq_lens, prefix_sum, temp, top_k, top_p, seed, cache_loc)

    def fill(i: int) -> None:
        draft.copy_(torch.randn(draft.shape, generator=gen, device=dev) * 3)
        target.copy_(torch.randn(target.shape, generator=gen, device=dev) * 3)
        tree = build_tree(draft, BUDGET)  # eager: make the target favour each node's first child
        kid = torch.where(tree.first_child >= 0, tree.tokens.gather(1, tree.first_child.clamp(min=0)), 0)
        target.scatter_(2, kid[..., None], torch.where(tree.first_child >= 0, 30.0, -30.0)[..., None].to(target.dtype))
        seed.fill_(1000 + i)

    fill(0)
    graph, static_out = capture_graph(lambda: _round(*args))
    for i in range(1, 4):
        fill(i)
        graph.replay()
        eager = _round(*args)
        for got, want in zip(static_out, eager):
            assert torch.equal(got, want)
        assert static_out[7][temp == 0].min() >= 1  # greedy rows follow the favoured first children
    assert static_out[0][:, 1:].ge(0).all()
