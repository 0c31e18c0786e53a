"""`round_logprobs`: which logits and tokens a DDTree round hands SGLang's speculative log-prob helper.

The helper itself (SGLang 0.5.18+) and the result processor that reads its output run for real in
tests/test_scheduler_path.py; here a recorder stands in for the helper, so the gathering is checked
row by row, and the refusal where a release lacks the helper.
"""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

HELPER = "sglang.srt.layers.logprob_processor"


@pytest.fixture()
def rl(dropin):
    module = dropin("round_logprobs")
    dropin("requests")._provides.cache_clear()
    yield module
    dropin("requests")._provides.cache_clear()


def test_each_emitted_token_is_scored_on_its_accepted_node_s_logits(rl, monkeypatch):
    seen = {}

    def recorder(batch, logits_output, predict, *, accept_index=None, chain_stride=None):
        seen.update(logits=logits_output.next_token_logits.clone(), predict=predict.clone(), stride=chain_stride,
                    accept_index=accept_index)
        logits_output.next_token_logprobs = "filled"

    monkeypatch.setitem(sys.modules, HELPER, types.SimpleNamespace(compute_spec_logprobs=recorder))
    bs, n, vocab = 2, 5, 11
    node_logits = torch.randn(bs, n, vocab, generator=torch.Generator().manual_seed(0))
    accepted = torch.tensor([[0, 2, 4, -1], [0, 1, -1, -1]])
    out_tokens = torch.tensor([[3, 1, 7, 3], [9, 0, 9, 9]])
    verify_logits = torch.zeros(bs * 8, vocab)
    output = types.SimpleNamespace(next_token_logits=verify_logits, next_token_logprobs=None)
    rl.refuse_where_absent()  # the helper is there
    rl.attach_logprobs(object(), output, node_logits, accepted, out_tokens)
    want = torch.stack([node_logits[b, max(int(i), 0)] for b in range(bs) for i in accepted[b]])
    assert torch.equal(seen["logits"], want)
    assert torch.equal(seen["predict"], out_tokens.reshape(-1)) and seen["stride"] == 4 and seen["accept_index"] is None
    assert output.next_token_logits is verify_logits and output.next_token_logprobs == "filled"


def test_a_release_without_the_helper_is_refused_before_the_round(rl, monkeypatch):
    monkeypatch.setitem(sys.modules, HELPER, types.ModuleType(HELPER))
    with pytest.raises(ValueError) as raised:
        rl.refuse_where_absent()
    assert str(raised.value) == rl.capability("logprobs").refusal
