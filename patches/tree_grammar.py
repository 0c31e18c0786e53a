"""Grammar-constrained decoding on the DDTree verify tree, with the release's own grammar machinery.

SGLang verifies EAGLE's draft trees under a grammar: `spec_utils.traverse_tree` walks the tree with
each request's matcher (accept a node's token, fill that node's bitmask row, roll back; a node whose
token its parent's row forbids is skipped with its subtree, as it can never be accepted), and the
rows mask the verify logits before the accept walk. DDTree's tree has EAGLE's layout (node 0 the
root, first-child and next-sibling links), so a round hands it to the release's
`build_grammar_vocab_mask` (0.5.17+), which first runs the scheduler's grammar barrier (advancing each
matcher over the previous round's committed tokens, under overlap) and returns the release's
`GrammarMask`. `NodeSampler.adjust` applies it to every node's row after the node's path penalties and
logit bias (plain SGLang masks between the two; a mask sets -inf, so the order does not change a
row), so the greedy and the sampled draws see plain decoding's constrained distribution at each node.
The request's matcher is advanced along the accepted run by the release's own result processor, its
spec-v2 path (`advance_grammar_fsm` / `_resolve_spec_v2_tokens`), exactly as after EAGLE's verify;
it stops at the token that terminates the grammar and drops the rest of the run.

Releases before 0.5.17 lack `build_grammar_vocab_mask`, and their DFlash request check (which runs
for DDTREE) refuses grammars: capability "grammar" names that helper in `needs`, so DDTREE refuses
grammars there.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch


class TreeGrammar:
    """One round's grammar masks: the tree copied to the host before the verify, the masks built after."""

    def __init__(self, batch: Any, tree_tokens: torch.Tensor, first_child: torch.Tensor,
                 next_sibling: torch.Tensor) -> None:
        from sglang.srt.speculative.spec_utils import GrammarTree

        self.batch = batch
        self.tree = GrammarTree.from_device(first_child.to(torch.int64), next_sibling.to(torch.int64),
                                            tree_tokens.to(torch.int64))
        self.device = tree_tokens.device

    @classmethod
    def start(cls, batch: Any, tree_tokens: torch.Tensor, first_child: torch.Tensor,
              next_sibling: torch.Tensor) -> Optional["TreeGrammar"]:
        """Before the verify launch (the host copy overlaps it); None for a batch without grammars.
        `tree_tokens`, `first_child`, `next_sibling`: [bs, n], the round's tree (node 0 = root)."""
        if not getattr(batch, "has_grammar", False):
            return None
        return cls(batch, tree_tokens, first_child, next_sibling)

    def mask(self, barrier: Optional[Callable[[], None]]) -> Any:
        """The release's `GrammarMask` over the tree's nodes (bs * n rows), or None when no request
        of the batch carries a grammar; `barrier`: the scheduler's grammar barrier (overlap)."""
        from sglang.srt.speculative.spec_utils import build_grammar_vocab_mask

        return build_grammar_vocab_mask(reqs=self.batch.reqs, tree=self.tree, sampling_info=self.batch.sampling_info,
                                        device=self.device, barrier=barrier)


def apply_node_mask(logits: torch.Tensor, grammar_mask: Any) -> torch.Tensor:
    """`logits` [bs, n, V] with every node's row masked by its grammar row (the release's `apply`)."""
    rows = logits.reshape(-1, logits.shape[-1])  # a view where the logits are contiguous, else a copy
    grammar_mask.apply(rows)
    return rows.view(logits.shape)
