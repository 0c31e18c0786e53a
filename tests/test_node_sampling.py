"""patches/node_sampling.py on a CPU: refusals, per-slot output counts, penalties reaching the draw.

The module is loaded as SGLang would load it (dropped into sglang/srt/speculative/ddtree/ with its
kernels), from a temporary site holding only the package folders; SGLang's sampling_info and
penalizers are stood in by objects with the same attribute names (their classes named as SGLang's).
"""

from __future__ import annotations

import importlib
import types

import numpy as np
import pytest
import torch

from tests.kernels_env import INTERPRETED  # sets TRITON_INTERPRET first

from kernels.path_penalties import Penalties, apply_path_penalties
from tests.round_harness.stubs import bare_site, sglang_from
from tests.test_sampling_distribution import ALPHA, _biased, _chi_square_p, _power, sglang_probs


@pytest.fixture(scope="module")
def ns(tmp_path_factory):
    with sglang_from(bare_site(tmp_path_factory.mktemp("ns_site"))):
        yield importlib.import_module("sglang.srt.speculative.ddtree.node_sampling")


def _penalizer(name: str, **tensors):
    cls = type(name, (), {"is_prepared": lambda self: True})
    obj = cls()
    obj.__dict__.update(tensors)
    return obj


def _info(bs: int, vocab: int, greedy: bool = True, **kw):
    base = dict(temperatures=torch.ones(bs, 1), top_ks=torch.full((bs,), 1 if greedy else -1),
                top_ps=torch.ones(bs), min_ps=torch.zeros(bs), is_all_greedy=greedy, need_top_k_sampling=greedy,
                need_top_p_sampling=False, need_min_p_sampling=False, vocab_size=vocab, logit_bias=None,
                penalizer_orchestrator=None, sampling_seed=None, has_custom_logit_processor=False)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_refusals(ns) -> None:
    assert ns.unsupported_sampling_reason(None) is None
    assert ns.unsupported_sampling_reason(_info(2, 10)) is None
    assert "custom logit" in ns.unsupported_sampling_reason(_info(2, 10, has_custom_logit_processor=True))
    assert "grammar" in ns.unsupported_sampling_reason(_info(2, 10, vocab_mask=torch.zeros(2, 1)))
    assert "grammar" in ns.unsupported_sampling_reason(_info(2, 10, grammars=[None, object()]))
    assert "watermark" in ns.unsupported_sampling_reason(_info(2, 10, has_watermark_candidates=True))
    mixed = _info(2, 10, greedy=False, need_top_k_sampling=True, need_top_p_sampling=True, need_min_p_sampling=True)
    assert ns.unsupported_sampling_reason(mixed) is None  # sampled in FlashInfer's order (test below)
    assert ns.renormalises_top_k(mixed, None) and ns.renormalises_top_k(mixed, "flashinfer")
    assert not ns.renormalises_top_k(mixed, "pytorch")
    assert not ns.renormalises_top_k(_info(2, 10, greedy=False, need_min_p_sampling=True), None)
    sampler = ns.NodeSampler(4, "cpu")
    batch = types.SimpleNamespace(sampling_info=_info(1, 10, has_custom_logit_processor=True), reqs=[],
                                  req_pool_indices=torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="custom logit"):
        sampler.posterior(torch.zeros(1, 2, 10), batch, torch.zeros(1, 2, dtype=torch.int64),
                          torch.tensor([[-1, 0]]), torch.zeros(1, 2, dtype=torch.int64), 1,
                          torch.zeros(1, dtype=torch.int64), torch.Generator())


def _lists_match_counts(sampler, rows: list[int]) -> bool:
    """Each row's kept touched list holds exactly its tokens with nonzero counts (no stop / bias here)."""
    ids, cnt = sampler.lists.state()
    return all(sorted(ids[r, : int(cnt[r])].tolist()) == sampler.counts[r].nonzero().flatten().tolist() for r in rows)


@pytest.mark.parametrize("sparse", [False, pytest.param(True, marks=pytest.mark.skipif(
    not INTERPRETED, reason="the Triton step on CPU tensors needs TRITON_INTERPRET=1"))])
def test_counts_follow_requests_and_reach_the_draw(ns, sparse: bool) -> None:
    """Greedy with a frequency penalty: the draw is the argmax of the path-penalised logits, with
    counts = the root, then the emitted tokens; a new rid in a slot starts again from its root.
    `sparse` (the CUDA default; interpreted here): the Triton step with the touched lists kept
    beside the counts, which follow them through commits and restarts."""
    vocab, n = 12, 3
    orch = types.SimpleNamespace(is_required=True, penalizers={
        1: _penalizer("BatchedFrequencyPenalizer", frequency_penalties=torch.tensor([[2.0], [2.0]]))})
    reqs = [types.SimpleNamespace(rid="a", req_pool_idx=3), types.SimpleNamespace(rid="b", req_pool_idx=1)]
    batch = types.SimpleNamespace(sampling_info=_info(2, vocab, penalizer_orchestrator=orch), reqs=reqs,
                                  req_pool_indices=torch.tensor([3, 1]))
    sampler = ns.NodeSampler(4, "cpu", sparse=sparse)
    tokens = torch.tensor([[0, 4, 5], [0, 6, 6]])
    parent = torch.tensor([[-1, 0, 1], [-1, 0, 1]])
    logits = torch.randn(2, n, vocab, generator=torch.Generator().manual_seed(0))
    root = torch.tensor([4, 9])
    gen = torch.Generator()
    got = sampler.posterior(logits, batch, tokens, parent, torch.zeros(2, n, dtype=torch.int64), 2, root, gen)
    counts = torch.zeros(2, vocab)
    counts[0, 4] = counts[1, 9] = 1
    want = apply_path_penalties(logits, tokens, parent, 2, Penalties(counts=counts, frequency=torch.tensor([2.0, 2.0])),
                                None).argmax(-1)
    assert torch.equal(got, want)
    assert torch.equal(sampler.counts[[3, 1]], counts)
    sampler.committed(batch, torch.tensor([[4, 5, 7], [2, 0, 0]]), torch.tensor([3, 1]))
    counts[0, 4] += 1
    counts[0, 5] += 1
    counts[0, 7] += 1
    counts[1, 2] += 1
    assert torch.equal(sampler.counts[[3, 1]], counts)
    assert sampler.out_len[[3, 1]].tolist() == [4, 2]
    assert (sampler.lists is not None) == sparse and (not sparse or _lists_match_counts(sampler, [3, 1]))
    reqs[1].rid = "c"  # slot 1 now holds another request
    sampler.posterior(logits, batch, tokens, parent, torch.zeros(2, n, dtype=torch.int64), 2, torch.tensor([7, 8]), gen)
    fresh = torch.zeros(vocab)
    fresh[8] = 1
    assert torch.equal(sampler.counts[3], counts[0]) and torch.equal(sampler.counts[1], fresh)
    assert not sparse or _lists_match_counts(sampler, [3, 1])
    counts[1] = fresh
    got = sampler.posterior(logits, batch, tokens, parent, torch.zeros(2, n, dtype=torch.int64), 2, root, gen)
    want = apply_path_penalties(logits, tokens, parent, 2, Penalties(counts=counts, frequency=torch.tensor([2.0, 2.0])),
                                None).argmax(-1)
    assert torch.equal(got, want)


def _flashinfer_min_p_probs(logits: np.ndarray, temp: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """SGLang's FlashInfer sampler with min-p in the batch: top-k renormalised, then top-p, then min-p."""
    z = logits / temp
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    ps = p[order].copy()
    ps[top_k:] = 0.0
    ps /= ps.sum()
    ps[(np.cumsum(ps) - ps) > top_p] = 0.0
    ps[ps < ps[0] * min_p] = 0.0
    out = np.zeros_like(p)
    out[order] = ps
    return out / out.sum()


def test_flashinfer_min_p_batch_samples_top_p_over_the_renormalised_top_k(ns) -> None:
    """A batch with min-p on the FlashInfer backend: DDTree's node draws follow SGLang's sequential
    order (chi-square over 20,000 draws, power stated), which the joint order would fail."""
    vocab, temp, top_k, top_p, min_p = 512, 0.8, 40, 0.7, 0.05
    raw = torch.randn(vocab, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 1.5
    probs = _flashinfer_min_p_probs(raw.numpy(), temp, top_k, top_p, min_p)
    joint = sglang_probs(raw.numpy(), temp, top_k, top_p, min_p)
    assert np.abs(probs - joint).sum() > 0.1  # the two orders really differ on this row
    draws, bs = [], 5000
    for start in range(0, 20_000, bs):
        ones = torch.ones(bs)
        info = _info(bs, vocab, greedy=False, temperatures=(temp * ones)[:, None], top_ks=torch.full((bs,), top_k),
                     top_ps=top_p * ones, min_ps=min_p * ones, need_top_k_sampling=True, need_top_p_sampling=True,
                     need_min_p_sampling=True, sampling_seed=torch.arange(start, start + bs) * 7919 + 11)
        batch = types.SimpleNamespace(sampling_info=info, reqs=[], req_pool_indices=torch.zeros(bs, dtype=torch.int64))
        got = ns.NodeSampler(1, "cpu").posterior(
            raw.float()[None, None].expand(bs, 1, vocab).contiguous(), batch, torch.zeros(bs, 1, dtype=torch.int64),
            torch.full((bs, 1), -1), torch.full((bs, 1), 1000), 0, torch.zeros(bs, dtype=torch.int64),
            torch.Generator(), None)
        draws.append(got[:, 0].numpy())
    tokens = np.concatenate(draws)
    assert _power(probs, len(tokens)) >= 0.99
    assert _chi_square_p(tokens, probs) > ALPHA
    assert _chi_square_p(tokens, joint) < ALPHA
    assert _chi_square_p(_biased(tokens, probs, seed=5), probs) < ALPHA


@pytest.mark.parametrize("backend,kept", [("pytorch", {0, 2}), ("flashinfer", {0, 2, 5}), (None, {0, 2, 5})])
def test_backend_orders_the_ties(ns, backend, kept) -> None:
    """Three tied logits at a top-k 2 cut: the pytorch sampler's sort keeps the two lowest indices,
    FlashInfer (SGLang's CUDA default, None) keeps all three; the node draws follow the backend."""
    bs, vocab = 400, 8
    row = torch.zeros(vocab)
    row[[0, 2, 5]] = 3.0
    ones = torch.ones(bs)
    info = _info(bs, vocab, greedy=False, temperatures=ones[:, None], top_ks=torch.full((bs,), 2), top_ps=ones,
                 need_top_k_sampling=True, sampling_seed=torch.arange(bs) * 7919 + 3)
    batch = types.SimpleNamespace(sampling_info=info, reqs=[], req_pool_indices=torch.zeros(bs, dtype=torch.int64))
    got = ns.NodeSampler(1, "cpu").posterior(
        row[None, None].expand(bs, 1, vocab).contiguous(), batch, torch.zeros(bs, 1, dtype=torch.int64),
        torch.full((bs, 1), -1), torch.full((bs, 1), 1000), 0, torch.zeros(bs, dtype=torch.int64), torch.Generator(),
        backend)
    assert set(got.flatten().tolist()) == kept
