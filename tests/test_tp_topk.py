"""Draft top-K over a vocab-parallel lm_head (kernels/tp_topk.py, patches/tp_draft.py) on the CPU.

The merge must give every rank exactly the single-GPU top-K of the full row (tokens and their
order, ties in token order across the shard boundary, padded and empty shards), and so the
identical tree on every rank. Checked in one process on stacked payloads, then through a real
`torch.distributed` gloo group of 2 spawned processes, with SGLang's shard layout and the drop-in
loaded as SGLang loads it.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types

import pytest
import torch

from tests.kernels_env import INTERPRETED  # noqa: F401  (sets TRITON_INTERPRET first)

from kernels.tp_topk import merge_payloads, pack_keys, shard_payload, sharded_topk, unpack_keys
from kernels.tree_build import build_tree
from kernels.vocab_topk import draft_topk_torch, topk_parts_torch
from tests.round_harness.stubs import sglang_from
from tests.tp_ranks import CASES, REPO, TREE_CASES, case_logits, make_site, shard_head, shard_range, tree_case

WORLD = 2


def _assert_same_topk(got: tuple[torch.Tensor, torch.Tensor], logits: torch.Tensor, k: int) -> None:
    """Tokens identical to the single-GPU reference (order included); log-probs up to the LSE's
    fp32 summation order (the tolerance tests/test_kernels_vocab_topk.py allows the kernel)."""
    ref_lp, ref_tok = draft_topk_torch(logits, k)
    assert torch.equal(got[1], ref_tok)
    torch.testing.assert_close(got[0], ref_lp, rtol=0, atol=4e-6)


def test_keys_order_as_the_reference_sort() -> None:
    """Packed keys sort as the reference does: logit desc, token asc, -0.0 == +0.0, -inf last; round trip."""
    values = torch.tensor([1.0, 3.0, -0.0, 3.0, 0.0, float("-inf"), 3.0, -2.5])
    tokens = torch.arange(8) + 2**30
    keys = pack_keys(values, tokens)
    assert (keys >= 0).all()
    order = torch.argsort(keys, descending=True)
    assert order.tolist() == topk_parts_torch(values[None, None], 8).tokens[0, 0].tolist()
    back_values, back_tokens = unpack_keys(keys)
    assert torch.equal(back_tokens, tokens)
    assert torch.equal(back_values, values + 0.0) and not torch.signbit(back_values[2])


def test_cases_have_the_shard_layouts_they_test() -> None:
    """SGLang's layout: the boundary inside the top tie, a last shard shorter than K, an empty one."""
    assert shard_range(1000, 1, WORLD) == (512, 1000)
    assert shard_range(70, 1, WORLD) == (64, 70) and case_logits("short_padded_shard")[1] > 6
    assert shard_range(30, 1, WORLD) == (30, 30)


@pytest.mark.parametrize("name", CASES)
def test_merge_of_shard_payloads_equals_full_topk(name: str) -> None:
    logits, k = case_logits(name)
    vocab = logits.shape[-1]
    payloads = []
    for rank in range(WORLD):
        start, end = shard_range(vocab, rank, WORLD)
        payloads.append(shard_payload(logits[..., start:end], k, start))
    _assert_same_topk(merge_payloads(torch.stack(payloads)), logits, k)


def test_merge_needs_the_whole_vocabulary() -> None:
    """A rank order or a shard start that is wrong changes the result (the test above can fail)."""
    logits, k = case_logits("ties_across_boundary")
    start, end = shard_range(1000, 1, WORLD)
    shifted = torch.stack([shard_payload(logits[..., :start], k, 0), shard_payload(logits[..., start:], k, start + 1)])
    assert not torch.equal(merge_payloads(shifted)[1], draft_topk_torch(logits, k)[1])


def test_sharded_topk_refuses_k_above_the_vocabulary() -> None:
    group = types.SimpleNamespace(world_size=1, all_gather_into_tensor=lambda out, inp: out.copy_(inp))
    with pytest.raises(ValueError, match="k=31"):
        sharded_topk(torch.zeros(1, 1, 30), 31, 0, 30, group)


@pytest.fixture
def tp_draft(tmp_path):
    """patches/tp_draft.py loaded as SGLang loads it, from a site WITHOUT sglang.srt.distributed."""
    with sglang_from(make_site(tmp_path / "site", tp_group_stub=False)):
        yield importlib.import_module("sglang.srt.speculative.ddtree.tp_draft")


def test_unsharded_head_builds_the_tree_from_its_logits_without_a_group(tp_draft) -> None:
    """TP=1: the tree of build_tree itself, and no TP group is looked up (the site has none)."""
    logits = torch.randn(2, 3, 200, generator=torch.Generator().manual_seed(1))
    head = types.SimpleNamespace(weight=torch.zeros(200, 4), shard_indices=None)
    got, ref = tp_draft.build_draft_tree(logits, head, 20, 5), build_tree(logits, 20, 5)
    for field in got._fields:
        assert torch.equal(getattr(got, field), getattr(ref, field)), field


def test_sharded_head_checks_the_group(tp_draft) -> None:
    _, weight = tree_case(1000)
    head = shard_head(weight, 0, WORLD)
    def no_gather(out, inp):
        raise AssertionError("no collective expected")
    one_rank = types.SimpleNamespace(world_size=1, all_gather_into_tensor=no_gather)
    with pytest.raises(RuntimeError, match="split over 2 ranks but the TP group has 1"):
        tp_draft.build_draft_tree(torch.zeros(3, 5, 512), head, 8, 4, group=one_rank)
    root = tp_draft.build_draft_tree(torch.zeros(3, 5, 512), head, 0, 4, group=one_rank)  # budget 0: no collective
    assert root.tokens.shape == (3, 1)


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory) -> list[dict]:
    """Both ranks' results from two spawned processes joined in a gloo group."""
    root = tmp_path_factory.mktemp("tp2")
    site = make_site(root / "site", tp_group_stub=True)
    out = root / "out"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), TRITON_INTERPRET="1")
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests/tp_ranks.py"), str(rank), str(WORLD), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(WORLD)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    return [torch.load(out / f"rank{rank}.pt") for rank in range(WORLD)]


@pytest.mark.parametrize("name", CASES)
def test_gloo_ranks_get_the_full_topk(rank_results, name: str) -> None:
    logits, k = case_logits(name)
    first = rank_results[0][name]
    for result in rank_results:
        assert all(torch.equal(a, b) for a, b in zip(result[name], first))  # bit for bit on every rank
        _assert_same_topk(result[name], logits, k)


@pytest.mark.parametrize("vocab, budget, topk", TREE_CASES)
def test_gloo_ranks_build_the_identical_tree(rank_results, vocab: int, budget: int, topk: int | None) -> None:
    """Through the lm_head shards (padding rows included): every rank the same tree, bit for bit,
    and the tree TP=1 builds from the whole lm_head (scores up to the LSE's rounding)."""
    trees = [result[f"tree_{vocab}"] for result in rank_results]
    assert all(torch.equal(trees[0][f], t[f]) for t in trees[1:] for f in trees[0])
    features, weight = tree_case(vocab)
    ref = build_tree(torch.mm(features.reshape(-1, features.shape[-1]), weight.T).view(*features.shape[:2], -1),
                     budget, topk)._asdict()
    for field, value in ref.items():
        if field == "logprob":
            torch.testing.assert_close(trees[0][field], value, rtol=0, atol=2e-5)
        else:
            assert torch.equal(trees[0][field], value), field
    assert (trees[0]["tokens"][:, 1:] >= 0).all() and (trees[0]["tokens"] < vocab).all()
