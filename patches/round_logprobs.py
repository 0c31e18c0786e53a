"""Per-token log-probabilities of a DDTree round (`return_logprob`), through SGLang's own helper.

SGLang 0.5.18+ compute speculative log-probs in `logprob_processor.compute_spec_logprobs`: EAGLE's
tree verify hands it an accept index (the logits row that produced each emitted token), DFlash's
chain verify a stride. DDTree's j-th emitted token is the token drawn at the j-th accepted node
(the root first), from that node's logits after its own path penalties and logit bias
(`NodeSampler.adjust`), so the helper's log-softmax of those logits (over the request's
temperature for a sampled batch, unless SGLANG_RETURN_ORIGINAL_LOGPROB) is what plain decoding
reports for the token at that position. The result has the layout SGLang's result processor reads
from every speculative worker: `next_token_logprobs` [bs, L] and the top / token-id log-probs flat
at `i * L + j`, L being the round's output stride.
"""

from __future__ import annotations

import torch

from .capabilities import capability
from .requests import implemented_here


def refuse_where_absent() -> None:
    """Raise the capability's refusal on a release without SGLang's speculative log-prob helper
    (before the round does any work: the request intake refuses such requests first)."""
    feature = capability("logprobs")
    if not implemented_here(feature):
        raise ValueError(feature.refusal)


def attach_logprobs(batch, logits_output, node_logits: torch.Tensor, accepted_idx: torch.Tensor,
                    out_tokens: torch.Tensor) -> None:
    """Fill `logits_output`'s log-prob fields for the round's emitted tokens.

    `node_logits` [bs, n, V]: the logits each node's token was drawn from; `accepted_idx` [bs, L]:
    the accepted nodes in path order (-1 past a request's run: those entries use the root's row and
    are never read); `out_tokens` [bs, L]: the tokens emitted. Only the accepted rows are gathered
    (the helper would otherwise be handed every node's row).
    """
    from sglang.srt.layers.logprob_processor import compute_spec_logprobs  # present: refuse_where_absent

    bs, length = accepted_idx.shape
    requests = torch.arange(bs, device=accepted_idx.device)[:, None]
    path_logits = node_logits[requests, accepted_idx.clamp(min=0)]  # [bs, L, V]
    verify_logits = logits_output.next_token_logits
    logits_output.next_token_logits = path_logits.reshape(bs * length, -1)
    try:
        compute_spec_logprobs(batch, logits_output, out_tokens.reshape(-1), chain_stride=length)
    finally:
        logits_output.next_token_logits = verify_logits
