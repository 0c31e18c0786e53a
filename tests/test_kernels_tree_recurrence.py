"""Per-node recurrent state of a tree verify (kernels/tree_recurrence_reference.py): each node's
output and state equal running the recurrence along its path alone, and the committed state is the
last accepted node's; the short convolution likewise along each path."""

from __future__ import annotations

import pytest
import torch

from kernels.tree_build import select_tree_torch
from kernels.tree_recurrence_reference import (committed_state, gated_delta_step, tree_causal_conv,
                                               tree_gated_delta)
from kernels.vocab_topk import draft_topk_torch

H, K, V, DIM, WIDTH = 2, 8, 4, 6, 4


def _parents(bs: int, depth: int, budget: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lp, tok = draft_topk_torch(torch.randn(bs, depth, 64, generator=gen) * 3, budget)
    return select_tree_torch(lp, tok, budget).parent


def _inputs(bs: int, n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return {"state0": r(bs, H, K, V), "q": r(bs, n, H, K), "k": torch.nn.functional.normalize(r(bs, n, H, K), dim=-1),
            "v": r(bs, n, H, V), "g": -torch.rand(bs, n, H, generator=gen, dtype=torch.float64),
            "beta": torch.rand(bs, n, H, generator=gen, dtype=torch.float64)}


def _path(parent: list[int], i: int) -> list[int]:
    path = [i]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    return path[::-1]


def _walk(x: dict[str, torch.Tensor], b: int, path: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode the path one token at a time from the committed state: (last output, last state)."""
    state = x["state0"][b]
    for j in path:
        state, out = gated_delta_step(state, x["q"][b, j], x["k"][b, j], x["v"][b, j], x["g"][b, j],
                                      x["beta"][b, j], 0.5)
    return out, state


CASES = [(2, 5, 12), (3, 3, 31), (1, 6, 6)]


@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_each_node_equals_its_path_decoded_alone(bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget)
    x = _inputs(bs, parent.shape[1], seed=budget)
    outputs, states = tree_gated_delta(x["state0"], x["q"], x["k"], x["v"], x["g"], x["beta"], parent, 0.5)
    assert bool((parent[:, 1:] != torch.arange(parent.shape[1] - 1)).any())  # a real tree, not a chain
    for b in range(bs):
        for i in range(parent.shape[1]):
            out, state = _walk(x, b, _path(parent[b].tolist(), i))
            torch.testing.assert_close(outputs[b, i], out, rtol=0, atol=1e-12)
            torch.testing.assert_close(states[b, i], state, rtol=0, atol=1e-12)


def test_the_committed_state_is_the_last_accepted_nodes() -> None:
    parent = _parents(2, 5, 12, seed=4)
    x = _inputs(2, parent.shape[1], seed=4)
    _, states = tree_gated_delta(x["state0"], x["q"], x["k"], x["v"], x["g"], x["beta"], parent, 0.5)
    leaves = [max(range(parent.shape[1]), key=lambda i: (len(_path(parent[b].tolist(), i)), i)) for b in range(2)]
    paths = [_path(parent[b].tolist(), leaves[b]) for b in range(2)]
    depth = max(map(len, paths))
    accepted_idx = torch.tensor([p + [-1] * (depth - len(p)) for p in paths])
    accept_len = torch.tensor([len(p) - 1 for p in paths])
    got = committed_state(states, accepted_idx, accept_len)
    for b in range(2):
        torch.testing.assert_close(got[b], _walk(x, b, paths[b])[1], rtol=0, atol=1e-12)


def test_nodes_before_their_parents_are_refused() -> None:
    x = _inputs(1, 3, seed=0)
    with pytest.raises(ValueError, match="after its parent"):
        tree_gated_delta(x["state0"], x["q"], x["k"], x["v"], x["g"], x["beta"], torch.tensor([[-1, 2, 0]]), 0.5)


@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_convolution_equals_a_rolling_window_along_each_path(bs: int, depth: int, budget: int) -> None:
    parent = _parents(bs, depth, budget, seed=budget + 1)
    n = parent.shape[1]
    gen = torch.Generator().manual_seed(budget)
    conv_state = torch.randn(bs, DIM, WIDTH - 1, generator=gen, dtype=torch.float64)
    x = torch.randn(bs, n, DIM, generator=gen, dtype=torch.float64)
    weight = torch.randn(DIM, WIDTH, generator=gen, dtype=torch.float64)
    bias = torch.randn(DIM, generator=gen, dtype=torch.float64)
    got = tree_causal_conv(conv_state, x, weight, bias, parent)
    for b in range(bs):
        for i in range(n):
            window = conv_state[b].clone()  # slide the committed window along the path, one input at a time
            for j in _path(parent[b].tolist(), i):
                full = torch.cat([window, x[b, j][:, None]], dim=1)
                y = torch.nn.functional.silu((full * weight).sum(-1) + bias)
                window = full[:, 1:]
            torch.testing.assert_close(got[b, i], y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bs,depth,budget", CASES)
def test_sglangs_parent_rule_recovers_ddtrees_parents_from_its_links(bs: int, depth: int, budget: int) -> None:
    """SGLang's short-convolution update (EAGLE-tree mode) derives the parents its GDN verify reads
    from first-child / next-sibling links, in node order: parent[first_child[i]] = i, then
    parent[next_sibling[i]] = parent[i]. That is right only where links point forward, as DDTree's do
    (transcribed here: the Triton interpreter cannot run that kernel)."""
    logits = torch.randn(bs, depth, 64, generator=torch.Generator().manual_seed(budget)) * 3
    tree = select_tree_torch(*draft_topk_torch(logits, budget), budget)
    for b in range(bs):
        first, sibling = tree.first_child[b].tolist(), tree.next_sibling[b].tolist()
        derived = [0] * len(first)
        for i in range(len(first)):
            if first[i] != -1:
                derived[first[i]] = i
            if sibling[i] != -1:
                derived[sibling[i]] = derived[i]
        assert derived[1:] == tree.parent[b, 1:].tolist()
