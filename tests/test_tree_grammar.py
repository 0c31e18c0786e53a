"""patches/tree_grammar.py and the node sampler under a grammar, on a CPU (fast; the release's real
grammar path is tests/test_grammar_path.py).

Every tree node's row is masked by its own grammar row before the draw, greedy and sampled, also
where the node logits are a strided view of the verify's (a verify wider than the tree); a batch
carrying grammars without masks is refused. The mask stands in for SGLang's `GrammarMask` (a
packed int32 bitmask, one row per node, 32 tokens a word, applied by its grammar's
`apply_vocab_mask` as xgrammar's `apply_token_bitmask_inplace` does: forbidden tokens to -inf).
"""

from __future__ import annotations

import importlib
import types
from typing import NamedTuple

import pytest
import torch

from tests.round_harness.stubs import bare_site, sglang_from
from tests.test_node_sampling import _info


@pytest.fixture(scope="module")
def ns(tmp_path_factory):
    with sglang_from(bare_site(tmp_path_factory.mktemp("tg_site"))):
        yield importlib.import_module("sglang.srt.speculative.ddtree.node_sampling")


def _allowed_bits(allowed: torch.Tensor) -> torch.Tensor:
    """bool [rows, V] -> packed int32 [rows, ceil(V / 32)] (bit t % 32 of word t // 32)."""
    rows, vocab = allowed.shape
    padded = torch.zeros(rows, -(-vocab // 32) * 32, dtype=torch.int64)
    padded[:, :vocab] = allowed.to(torch.int64)
    words = (padded.view(rows, -1, 32) << torch.arange(32)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


class _Grammar:
    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        vocab = logits.shape[-1]
        bits = (vocab_mask.to(torch.int64)[:, torch.arange(vocab) // 32] >> (torch.arange(vocab) % 32)) & 1
        logits.masked_fill_(bits == 0, float("-inf"))


class GrammarMask(NamedTuple):  # SGLang's (0.5.17+: sglang.srt.constrained.base_grammar_backend)
    grammar: _Grammar
    vocab_mask: torch.Tensor

    def apply(self, logits: torch.Tensor) -> None:
        self.grammar.apply_vocab_mask(logits=logits, vocab_mask=self.vocab_mask)


BS, N, WIDTH, VOCAB = 2, 5, 8, 70


def _tree():
    tokens = torch.tensor([[9, 1, 2, 3, 4], [8, 5, 6, 7, 1]])
    parent = torch.tensor([[-1, 0, 0, 1, 3], [-1, 0, 1, 1, 2]])
    return tokens, parent


def _allowed() -> torch.Tensor:
    """A few allowed tokens per node, never the row's unconstrained argmax (so a skipped mask shows)."""
    gen = torch.Generator().manual_seed(5)
    return torch.rand(BS * N, VOCAB, generator=gen) < 0.15


@pytest.mark.parametrize("strided", [True, False], ids=["verify-wider-than-tree", "verify-as-wide"])
def test_every_node_row_is_masked_by_its_own_grammar_row(ns, strided: bool) -> None:
    """Greedy: each node's token is the argmax over the tokens its own row allows."""
    verify = torch.randn(BS, WIDTH if strided else N, VOCAB, generator=torch.Generator().manual_seed(1))
    node_logits = verify[:, :N]  # as the worker slices the verify's rows
    allowed = _allowed()
    raw_best = verify[:, :N].reshape(-1, VOCAB).argmax(-1)
    allowed[torch.arange(BS * N), raw_best] = False
    want = verify[:, :N].reshape(-1, VOCAB).masked_fill(~allowed, float("-inf")).argmax(-1).view(BS, N)
    tokens, parent = _tree()
    batch = types.SimpleNamespace(sampling_info=_info(BS, VOCAB, grammars=[object(), None]),
                                  req_pool_indices=torch.arange(BS))
    sampler = ns.NodeSampler(4, "cpu", sparse=False)
    got = sampler.posterior(node_logits, batch, tokens, parent, torch.zeros(BS, N, dtype=torch.int64), 3,
                            tokens[:, 0], torch.Generator(), grammar_mask=GrammarMask(_Grammar(), _allowed_bits(allowed)))
    assert torch.equal(got, want)


def test_sampled_draws_stay_inside_each_node_s_row(ns) -> None:
    """Sampled (temperature 1, no truncation): 200 draws of every node, all inside the node's own row."""
    verify = torch.randn(BS, WIDTH, VOCAB, generator=torch.Generator().manual_seed(2))
    allowed = _allowed()
    allowed[:, 0] = True  # every row allows something
    tokens, parent = _tree()
    info = _info(BS, VOCAB, greedy=False, grammars=[object(), object()])
    batch = types.SimpleNamespace(sampling_info=info, req_pool_indices=torch.arange(BS))
    sampler, gen = ns.NodeSampler(4, "cpu", sparse=False), torch.Generator().manual_seed(0)
    mask = GrammarMask(_Grammar(), _allowed_bits(allowed))
    ok = allowed.view(BS, N, VOCAB)
    for step in range(200):
        positions = torch.full((BS, N), step, dtype=torch.int64)
        got = sampler.posterior(verify[:, :N].clone(), batch, tokens, parent, positions, 3, tokens[:, 0], gen,
                                grammar_mask=mask)
        assert bool(ok.gather(2, got[..., None]).all()), step


def test_grammar_rows_without_masks_are_refused(ns) -> None:
    batch = types.SimpleNamespace(sampling_info=_info(BS, VOCAB, grammars=[None, object()]),
                                  req_pool_indices=torch.arange(BS))
    tokens, parent = _tree()
    with pytest.raises(ValueError, match="grammar"):
        ns.NodeSampler(4, "cpu", sparse=False).adjust(torch.zeros(BS, N, VOCAB), batch, tokens, parent, 3, tokens[:, 0])
