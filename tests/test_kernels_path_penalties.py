"""The Triton steps of the path penalties (`kernels/path_penalties.py`): the list of each request's
touched tokens, the in-place sparse adjustment and the walk to the root that lists each node's path
tokens.

The sparse step must equal the torch reference (dense adjustment, then the path tokens) bit for bit
(the same fp32 operations in the same order, IEEE division, no fused multiply-add), for each
penalty alone and all together, with min-new-tokens stop rows that differ per node, logit bias,
bf16 or fp32 logits, a vocabulary that ends mid-block, path tokens that are also listed ones, and
requests past the list's cap (adjusted over whole rows). On the CPU the kernels run interpreted; on
CUDA (`-m gpu`) compiled, where a fused multiply-add or an approximate division would show as a
bit difference.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.path_penalties import (DENSE_BLOCK, Penalties, TouchedLists, apply_path_penalties, path_adjust_torch,
                                    path_tokens, path_tokens_torch, path_tokens_triton, sparse_adjust_triton,
                                    touched_tokens)

PARENT = torch.tensor([[-1, 0, 0, 1, 1, 3, 2, 5, 6], [-1, 0, 1, 2, 3, 0, 5, 1, 7]])


def _case(vocab: int, dtype: torch.dtype, device: str, **use: bool):
    """Logits [2, 9, V], tree tokens with repeats (some with counts, some not), and penalties with
    the fields `use` names."""
    gen = torch.Generator().manual_seed(vocab)
    bs, n = PARENT.shape
    logits = (torch.randn(bs, n, vocab, generator=gen) * 3).to(dtype)
    tokens = torch.randint(0, 12, (bs, n), generator=gen)
    counts = torch.randint(0, 3, (bs, vocab), generator=gen).float() * (torch.rand(bs, vocab, generator=gen) < 0.1)
    stop = torch.zeros(bs, vocab, dtype=torch.bool)
    stop[:, [1, vocab - 1]] = True
    per_req = {"frequency": torch.tensor([0.5, 0.1]), "presence": torch.tensor([0.3, -0.2]),
               "repetition": torch.tensor([1.3, 0.7])}
    fields = {k: v.to(device) for k, v in per_req.items() if use.get(k)}
    if use.get("stop"):
        fields.update(stop_tokens=stop.to(device), out_len=torch.tensor([3, 10], device=device),
                      min_new_tokens=torch.tensor([5, 4], device=device))
    pen = Penalties(counts=counts.to(device), **fields)
    bias = None
    if use.get("bias"):  # sparse, as SGLang's logit_bias from a request's {token: bias}
        bias = torch.randn(bs, vocab, generator=gen) * (torch.rand(bs, vocab, generator=gen) < 0.05)
        bias = bias.to(device)
    return logits.to(device), tokens.to(device), PARENT.to(device), pen, bias


SETTINGS = {
    "frequency": dict(frequency=True),
    "presence": dict(presence=True),
    "repetition": dict(repetition=True),
    "stop": dict(stop=True),
    "bias": dict(bias=True),
    "all": dict(frequency=True, presence=True, repetition=True, stop=True, bias=True),
}


def _short(pen: Penalties, path: torch.Tensor) -> torch.Tensor | None:
    if pen.stop_tokens is None:
        return None
    return (pen.out_len[:, None] + (path >= 0).sum(-1)) < pen.min_new_tokens[:, None]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("vocab,dtype", [(300, torch.float32), (DENSE_BLOCK + 77, torch.bfloat16)])
@pytest.mark.parametrize("cap", [4096, 8])  # every request listed / both past the cap (whole rows)
def test_sparse_step_equals_torch_bitwise(device: str, name: str, vocab: int, dtype: torch.dtype, cap: int) -> None:
    logits, tokens, parent, pen, bias = _case(vocab, dtype, device, **SETTINGS[name])
    path = path_tokens(tokens, parent, 4)
    short = _short(pen, path)
    want = path_adjust_torch(logits, path, pen, short, bias)
    x = logits.float()
    got = sparse_adjust_triton(x, path, pen, short, bias, cap=cap)
    assert got.data_ptr() == x.data_ptr()
    assert torch.equal(got, want), (got - want).abs().max()
    if name == "stop":  # the stop token is -inf exactly on the short rows (token 1 is never on a path with counts)
        assert torch.isinf(got[short][:, vocab - 1]).all() and not torch.isinf(got[~short][:, vocab - 1]).any()


@pytest.mark.parametrize("device", DEVICES)
def test_touched_tokens_list_each_changed_token_once(device: str) -> None:
    logits, _, _, pen, bias = _case(DENSE_BLOCK * 2 + 5, torch.float32, device, **SETTINGS["all"])
    ids, cnt = touched_tokens(pen, bias, cap=4096)
    want = (pen.counts > 0) | pen.stop_tokens | (bias != 0)
    for b in range(2):
        assert int(cnt[b]) == int(want[b].sum())
        listed = ids[b, : int(cnt[b])].long().sort().values
        assert torch.equal(listed, want[b].nonzero().flatten())
    _, few = touched_tokens(pen, bias, cap=8)  # the count goes past the cap; the list stops at it
    assert torch.equal(few, cnt)
    full = int(cnt.max())  # a list filled to its last slot
    ids, _ = touched_tokens(pen, bias, cap=full)
    b = int(cnt.argmax())
    assert torch.equal(ids[b].long().sort().values, want[b].nonzero().flatten())


def _listed(ids: torch.Tensor, cnt: torch.Tensor, row: int) -> list[int]:
    return sorted(ids[row, : min(int(cnt[row]), ids.shape[1])].tolist())


@pytest.mark.parametrize("device", DEVICES)
def test_kept_lists_equal_lists_made_from_scratch(device: str) -> None:
    """`TouchedLists` (the runtime's): listed at a restart, then extended at each commit - a token
    committed twice in a round, tokens already counted, stop and bias tokens committed, a request
    committing nothing, a row restarted for another request. After every step each row holds
    exactly the tokens `touched_tokens` lists from the updated counts, once each, and the sparse
    step reading the kept lists equals the reference."""
    vocab = DENSE_BLOCK + 77
    logits, tokens, parent, pen, bias = _case(vocab, torch.float32, device, **SETTINGS["all"])
    pool = torch.zeros(5, vocab, device=device)
    rows = torch.tensor([3, 1], device=device)
    pool[rows] = pen.counts
    pooled = dataclasses.replace(pen, counts=pool, rows=rows)
    lists = TouchedLists(5, vocab, device, cap=4096)
    lists.restart(pool, rows, pen.stop_tokens, bias)
    counted = int(pen.counts[0].nonzero()[0])
    biased = int(((bias[1] != 0) & (pen.counts[1] == 0)).nonzero()[0])
    path = path_tokens(tokens, parent, 4)
    short = _short(pen, path)

    def check() -> None:
        want_ids, want_cnt = touched_tokens(pooled, bias, cap=4096)
        assert torch.equal(lists.cnt[rows], want_cnt)
        for b, r in enumerate(rows.tolist()):
            assert _listed(lists.ids, lists.cnt, r) == _listed(want_ids, want_cnt, b)
        kept = dataclasses.replace(pooled, lists=lists.state())
        assert torch.equal(sparse_adjust_triton(logits.clone(), path, kept, short, bias),
                           path_adjust_torch(logits, path, pooled, short, bias))

    check()
    for step, (committed, lengths) in enumerate([
            ([[vocab - 2, vocab - 2, 1, counted], [biased, vocab - 3, 0, 0]], [4, 2]),
            ([[vocab - 2, 7, 7, 7], [5, 6, 7, 8]], [3, 0]),
            ([[vocab - 2, vocab - 1, 3, 4], [9, 9, 10, 11]], [2, 4])]):  # vocab - 2: listed before the restart
        if step == 2:  # slot 3 now holds another request: its counts restart from its root
            pool[3] = 0.0
            pool[3, 4] = 1.0
            lists.restart(pool, rows[:1], pen.stop_tokens[:1], bias[:1])
            check()
        committed = torch.tensor(committed, device=device)
        lengths = torch.tensor(lengths, device=device)
        lists.append(rows, committed, lengths)
        valid = torch.arange(committed.shape[1], device=device) < lengths[:, None]
        pool.index_put_((rows[:, None].expand_as(committed), committed), valid.float(), accumulate=True)
        check()


@pytest.mark.parametrize("device", DEVICES)
def test_kept_lists_past_their_cap_keep_counting(device: str) -> None:
    """A row whose touched tokens outgrow the cap keeps the whole count, as `touched_tokens` does
    (the sparse step then adjusts its whole rows)."""
    vocab = DENSE_BLOCK + 77
    _, _, _, pen, bias = _case(vocab, torch.float32, device, **SETTINGS["all"])
    rows = torch.tensor([0, 1], device=device)
    lists = TouchedLists(2, vocab, device, cap=8)
    lists.restart(pen.counts, rows, pen.stop_tokens, bias)
    committed = torch.arange(20, device=device).view(2, 10) + vocab - 40
    lists.append(rows, committed, torch.tensor([10, 10], device=device))
    counts = pen.counts.clone()
    counts[rows[:, None], committed] += 1
    assert torch.equal(lists.cnt, touched_tokens(dataclasses.replace(pen, counts=counts), bias, cap=8)[1])
    assert (lists.cnt > 8).all()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_on_a_verify_view(device: str) -> None:
    """The runtime's call: fp32 node logits that are a view of wider verify logits are adjusted where
    they are (the verify's other columns untouched), and equal the reference."""
    logits, tokens, parent, pen, bias = _case(300, torch.float32, device, **SETTINGS["all"])
    wide = torch.cat([logits, torch.full_like(logits[:, :3], 7.0)], dim=1)  # width 12 > 9 nodes
    view = wide[:, :9]
    want = apply_path_penalties(logits, tokens, parent, 4, pen, bias, sparse=False)
    got = apply_path_penalties(view, tokens, parent, 4, pen, bias, in_place=True)
    assert got.data_ptr() == wide.data_ptr() and torch.equal(got, want)
    assert torch.equal(wide[:, 9:], torch.full_like(logits[:, :3], 7.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_copy_unless_in_place(device: str, in_place: bool) -> None:
    """Without `in_place` the caller's logits are never written; bf16 logits always get an fp32 copy."""
    logits, tokens, parent, pen, bias = _case(300, torch.float32, device, **SETTINGS["all"])
    before = logits.clone()
    want = apply_path_penalties(logits, tokens, parent, 4, pen, bias, sparse=False)
    assert torch.equal(logits, before)
    got = apply_path_penalties(logits, tokens, parent, 4, pen, bias, in_place=in_place)
    assert torch.equal(got, want)
    assert (got.data_ptr() == logits.data_ptr()) == in_place
    assert torch.equal(logits, want if in_place else before)
    half = before.bfloat16()
    out = apply_path_penalties(half, tokens, parent, 4, pen, bias, in_place=True)
    assert out.dtype == torch.float32 and torch.equal(half, before.bfloat16())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cap", [4096, 8])
def test_counts_read_from_a_pool_by_row(device: str, cap: int) -> None:
    """The runtime's counts are a pool (one row per request slot) read in place through `rows`: the
    same results as the requests' gathered counts, for the reference and the sparse step."""
    logits, tokens, parent, pen, bias = _case(300, torch.float32, device, **SETTINGS["all"])
    pool = torch.zeros(5, 300, device=device)
    rows = torch.tensor([3, 1], device=device)
    pool[rows] = pen.counts
    pooled = dataclasses.replace(pen, counts=pool, rows=rows)
    path = path_tokens(tokens, parent, 4)
    short = _short(pen, path)
    want = path_adjust_torch(logits, path, pen, short, bias)
    assert torch.equal(path_adjust_torch(logits, path, pooled, short, bias), want)
    assert torch.equal(sparse_adjust_triton(logits.clone(), path, pooled, short, bias, cap=cap), want)


@pytest.mark.parametrize("device", DEVICES)
def test_depth_zero_adjusts_the_touched_tokens_only(device: str) -> None:
    """No path (a draft depth of 0): every node gets its request's adjustment alone."""
    logits, tokens, parent, pen, bias = _case(300, torch.float32, device, **SETTINGS["all"])
    path = path_tokens(tokens, parent, 0)
    want = path_adjust_torch(logits, path, pen, _short(pen, path), bias)
    assert torch.equal(sparse_adjust_triton(logits.clone(), path, pen, _short(pen, path), bias), want)


def test_no_dense_adjustment_leaves_the_logits_alone() -> None:
    """Counts but no penalty value: the reference's dense step returns its input, so the path step must copy."""
    logits, tokens, parent, _, _ = _case(64, torch.float32, "cpu")
    before = logits.clone()
    out = apply_path_penalties(logits, tokens, parent, 4, Penalties(counts=torch.ones(2, 64)), None, sparse=False)
    assert torch.equal(out, before) and torch.equal(logits, before)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_depth", [1, 3, 8])  # shorter than the deepest path, about it, longer
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_walk_equals_torch(device: str, max_depth: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(max_depth)
    bs, n = 3, 12
    parent = torch.full((bs, n), -1)
    for j in range(1, n):  # random trees: each node's parent any earlier node
        parent[:, j] = torch.randint(0, j, (bs,), generator=gen)
    tokens = torch.randint(0, 50_000, (bs, n), generator=gen)
    want = path_tokens_torch(tokens, parent, max_depth)
    got = path_tokens_triton(tokens.to(dtype).to(device), parent.to(dtype).to(device), max_depth)
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), want)
    assert (want[:, 0] == -1).all() and (want[:, 1:, 0] == tokens[:, 1:]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_walk_empty_shapes(device: str) -> None:
    tokens, parent = torch.zeros(2, 1, dtype=torch.int64, device=device), torch.full((2, 1), -1, device=device)
    assert path_tokens_triton(tokens, parent, 0).shape == (2, 1, 0)
    assert torch.equal(path_tokens_triton(tokens, parent, 2).cpu(), torch.full((2, 1, 2), -1))
