"""The draft head in request groups (kernels/head_groups.py) builds the one-GEMM stage's tree."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.head_groups import group_bounds, head_tree_grouped, head_tree_reference


def _head(bs: int, depth: int, hidden: int, vocab: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(bs, depth, hidden, generator=gen)
    w = torch.randn(vocab, hidden, generator=gen) * 0.5
    return x.to(device), w.to(torch.bfloat16).to(device)


@pytest.mark.parametrize("bs, groups, want", [
    (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (5, 2, [(0, 2), (2, 5)]),
    (3, 8, [(0, 1), (1, 2), (2, 3)]),  # never an empty group
    (1, 1, [(0, 1)]),
])
def test_group_bounds_cover_the_batch(bs: int, groups: int, want: list) -> None:
    assert group_bounds(bs, groups) == want


def test_bad_arguments_refused() -> None:
    with pytest.raises(ValueError, match="groups=0"):
        group_bounds(4, 0)
    x, w = _head(2, 3, 8, 100, seed=0, device="cpu")
    with pytest.raises(ValueError, match="weight \\[V, H\\]"):
        head_tree_grouped(x, w[:, :4], 8, None, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,budget,groups", [(5, 3, 700, 12, 2), (4, 2, 300, 20, 4), (3, 4, 500, 0, 2),
                                                          (2, 3, 400, 300, 2)])
def test_grouped_tree_is_the_one_gemm_tree(device: str, bs: int, depth: int, vocab: int, budget: int,
                                           groups: int) -> None:
    """Same nodes, tokens and links as the whole batch's tree; scores equal on CUDA (both run the
    streaming top-K with one split layout) and within the LSE's summation order against the CPU's
    torch reference. Budget 300 takes the K > 256 path."""
    x, w = _head(bs, depth, 32, vocab, seed=bs * vocab + budget, device=device)
    got = head_tree_grouped(x, w, budget, None, groups)
    want = head_tree_reference(x, w, budget, None)
    for name in ("tokens", "depth", "parent", "first_child", "next_sibling"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    if device == "cuda":
        assert torch.equal(got.logprob, want.logprob)
    else:
        torch.testing.assert_close(got.logprob, want.logprob, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_side_stream_and_graph_build_the_same_tree() -> None:
    """Each group's top-K and build on a side stream, eager and replayed from a CUDA graph, at the 8B
    head's shape: the one-GEMM stage's tree, bit for bit."""
    from tests.cuda_graph import capture_graph

    x, w = _head(64, 15, 4096, 151936, seed=3, device="cuda")
    want = head_tree_reference(x, w, 64, None)
    side = torch.cuda.Stream(priority=-1)
    for groups in (2, 4, 8):
        got = head_tree_grouped(x, w, 64, None, groups, side)
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got, want)), groups
    graph, replayed = capture_graph(lambda: head_tree_grouped(x, w, 64, None, 4, side))
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(replayed, want))
