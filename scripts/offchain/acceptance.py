"""Expected acceptance on the off-chain oracle, round by round, from its known draft and target.

DDTREE round: the draft logits of the bonus (`offchain_oracle.draft_logits`) -> `kernels.build_tree`
(the best-first tree the worker builds, K = min(budget, topk)) -> the target's posterior at every
node by its rule (two back, plus two: the parent's token, or the last committed one for the root)
-> `kernels.accept_walk` (as deep as the worker's max_commit). DFLASH round: the draft's argmax
chain, accepted while it equals the target's choice. A request emits 1 token at prefill and
accepted + 1 per round; SGLang reports spec_accept_length = completion_tokens / verify rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from kernels.accept_walk import accept_walk_torch
from kernels.tree_build import DraftTree, build_tree
from scripts.offchain.oracle import DEFAULT, Plan, continuation, draft_logits, target_next


@dataclass(frozen=True)
class RoundOutcome:
    emitted: tuple[int, ...]  # accepted draft tokens + the bonus
    off_first_child_chain: bool  # some accepted node is not its parent's first child
    kv_move: bool  # accepted node indices are not 1, 2, ..., len (the KV commit has to move them)


@dataclass
class RequestOutcome:
    rounds: int = 0
    tokens: list[int] = field(default_factory=list)
    off_chain_rounds: int = 0
    kv_move_rounds: int = 0

    def accept_length(self, max_new: int) -> float:
        return max_new / self.rounds if self.rounds else float("nan")


@lru_cache(maxsize=None)
def _tree(bonus: int, budget: int, topk: int | None, plan: Plan) -> DraftTree:
    return build_tree(draft_logits(bonus, plan)[None], budget, topk)


@lru_cache(maxsize=None)  # a pure function of its arguments; a long simulation revisits the same rounds
def ddtree_round(prev: int, bonus: int, budget: int, topk: int | None = None, plan: Plan = DEFAULT) -> RoundOutcome:
    """One DDTREE round after `... prev, bonus` (bonus not yet verified)."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    tree = _tree(bonus, budget, topk, plan)
    tokens = tree.tokens.clone()
    tokens[:, 0] = bonus
    parent = tree.parent[0]
    posterior = torch.tensor([[target_next(prev, bonus) if p < 0 else target_next(int(tokens[0, p]), -1)
                               for p in parent.tolist()]])
    accepted, length, bonus_out = accept_walk_torch(tokens, tree.first_child, tree.next_sibling, posterior,
                                                    max_depth=min(budget, plan.depths))
    path = accepted[0, 1:int(length) + 1].tolist()
    first_child = tree.first_child[0]
    off = any(int(first_child[parent[n]]) != n for n in path)
    return RoundOutcome(tuple(int(tokens[0, n]) for n in path) + (int(bonus_out),), off,
                        path != list(range(1, len(path) + 1)))


@lru_cache(maxsize=None)
def dflash_round(prev: int, bonus: int, plan: Plan = DEFAULT) -> RoundOutcome:
    """One DFLASH round: the argmax chain of the draft, accepted while the target agrees."""
    chain = draft_logits(bonus, plan).argmax(dim=-1).tolist()
    out, last2 = [], (prev, bonus)
    for token in chain:
        want = target_next(*last2)
        if token != want:
            break
        out.append(token)
        last2 = (last2[1], token)
    return RoundOutcome(tuple(out) + (target_next(*last2),), False, False)


def simulate(prompt: list[int], max_new: int, algo: str, budget: int | None = None,
             plan: Plan = DEFAULT) -> RequestOutcome:
    """The rounds one request takes to emit `max_new` tokens, checked against plain decoding."""
    expected = continuation(prompt, max_new)
    seq = list(prompt) + expected[:1]  # prefill emits the first token
    res = RequestOutcome(tokens=expected[:1])
    while len(res.tokens) < max_new:
        if algo == "DDTREE":
            outcome = ddtree_round(seq[-2], seq[-1], budget, plan=plan)
        elif algo == "DFLASH":
            outcome = dflash_round(seq[-2], seq[-1], plan)
        else:
            raise ValueError(f"unknown algorithm {algo!r}")
        res.rounds += 1
        res.off_chain_rounds += outcome.off_first_child_chain
        res.kv_move_rounds += outcome.kv_move
        seq += outcome.emitted
        res.tokens += outcome.emitted
    res.tokens = res.tokens[:max_new]
    if res.tokens != expected:
        raise AssertionError(f"the simulated {algo} output left plain decoding: {res.tokens} vs {expected}")
    return res


def expected_acceptance(prompts: list[list[int]], max_new: int, algo: str, budget: int | None = None,
                        plan: Plan = DEFAULT) -> dict:
    """Per-request and mean accepted tokens per round (SGLang's spec_accept_length) and off-chain counts."""
    outs = [simulate(p, max_new, algo, budget, plan) for p in prompts]
    per_request = [o.accept_length(max_new) for o in outs]
    return {"per_request": [round(x, 4) for x in per_request],
            "mean": round(sum(per_request) / len(per_request), 4),
            "rounds": sum(o.rounds for o in outs),
            "off_chain_rounds": sum(o.off_chain_rounds for o in outs),
            "kv_move_rounds": sum(o.kv_move_rounds for o in outs)}

