"""Drive DDTreeWorkerV2's decode round against a fake target that attends (test harness).

Run with the stub SGLang tree first on sys.path. Unlike `drive_round.py`'s target, which reads only
each node's own token, this one computes every node's next token from what it can SEE: its KV
entries (token, position) are written by the verify into the slots the round gives it, and each
node reads, among the prefix slots and the tree slots its row of the verify mask admits, the
entries stored at its own position and the one before (`rule`). So a wrong mask (a node seeing a
sibling), a wrong position (verify or commit) or a wrong KV slot after the commit changes the
output. The KV move is done in place, pair by pair in the order given (no clone), and the draft
puts the target's continuation at rank 0, 1 or 2 per depth, so accepted paths leave the
first-child chain. Sampled mode draws at T = 1 with a per-request seed; because DDTree keys its
draws by (seed, position), its output must equal sequential sampling with the same sampler.

usage: python drive_round_attn.py BUDGET:TOPK:MODE ...  (MODE greedy | sampled | auto-greedy | auto-sampled)
-> one JSON line per case. `auto-*`: `--speculative-ddtree-budget auto` with BUDGET the ladder's widest,
each round's budget drawn at random from the ladder (any choice must give sequential decoding's output).
"""

from __future__ import annotations

import json
import random
import sys
import types

import torch

from drive_round import BLOCK, BS, make_worker  # noqa: E402  (same folder, on sys.path)
from sglang.srt.speculative.ddtree.kernels.posterior_reference import posterior_tokens_torch

V, ROUNDS, SEEDS = 61, 10, (11, 22, 33)
PROMPT_LENS = (9, 17, 26)


def rule(last: int, before: int) -> int:
    """The target's most likely token after `... before, last`."""
    return (last + 2 * before + 3) % V


def scores(last: int, before: int) -> torch.Tensor:
    """The target's logits over the vocabulary after `... before, last`."""
    out = torch.zeros(V)
    top = rule(last, before)
    out[top], out[(top + 1) % V], out[(top + 3) % V] = 6.0, 4.5, 4.0
    return out


class InPlacePool:
    """A KV pool of (token, position) per slot whose move copies pair by pair, as given."""

    def __init__(self, slots: int) -> None:
        self.tok = torch.full((slots,), -1, dtype=torch.int64)
        self.pos = torch.full((slots,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt: torch.Tensor, src: torch.Tensor) -> None:
        for t, s in zip(tgt.tolist(), src.tolist()):
            self.tok[t], self.pos[t] = self.tok[s], self.pos[s]


def attend(pool: InPlacePool, slots: torch.Tensor, position: int) -> tuple[int, int] | None:
    """(last, before) as a node at `position` sees them through `slots`; None if not exactly one each."""
    pos, tok = pool.pos[slots], pool.tok[slots]
    last, before = tok[pos == position], tok[pos == position - 1]
    if len(last) != 1 or len(before) != 1:
        return None
    return int(last[0]), int(before[0])


def make_attending_worker(budget: int, topk: int, sampled: bool):
    w = make_worker(budget, topk)
    req_to_token = w.model_runner.req_to_token_pool.req_to_token
    pool = InPlacePool(int(req_to_token.max()) + 1)
    target = w.target_worker
    target.model_runner.token_to_kv_pool_allocator = types.SimpleNamespace(get_kvcache=lambda: pool)
    w.pool, w.seqs, w.round_no = pool, None, 0

    def draft_logits(batch, draft_input, bound):
        logits = torch.full((BS, BLOCK - 1, V), -10.0)
        for b in range(BS):
            before, last = w.seqs[b][-2], w.seqs[b][-1]
            for d in range(BLOCK - 1):
                right = rule(last, before)
                decoys = [(right + 5) % V, (right + 11) % V]
                rank = (b + 2 * w.round_no + d) % 3
                order = decoys[:rank] + [right] + decoys[rank:]
                for value, token in zip((3.0, 2.5, 2.0), order):
                    logits[b, d, token] = value
                before, last = last, right
        return logits

    def verify(batch, verify_input, cache_loc_2d, bound):
        n = verify_input.draft_token_num
        tokens = verify_input.draft_token.view(BS, n)
        positions = verify_input.positions.view(BS, n)
        pool.tok[cache_loc_2d.reshape(-1)] = tokens.reshape(-1)
        pool.pos[cache_loc_2d.reshape(-1)] = positions.reshape(-1)
        mask, start = verify_input.custom_mask, 0
        logits = torch.full((BS, n, V), -30.0)
        for b in range(BS):
            prefix = int(batch.seq_lens[b])
            rows = mask[start: start + n * (prefix + n)].view(n, prefix + n)
            start += n * (prefix + n)
            keys = torch.cat([req_to_token[b, :prefix].long(), cache_loc_2d[b, :n]])
            for j in range(n):
                seen = attend(pool, keys[rows[j]], int(positions[b, j]))
                if seen is not None:  # a node that sees too much or too little predicts nothing
                    logits[b, j] = scores(*seen) if sampled else 10.0 * (scores(*seen) == 6.0).float()
        hidden = (tokens * 1000 + positions).reshape(-1, 1).float()
        return types.SimpleNamespace(next_token_logits=logits.view(BS * n, V), hidden_states=hidden), False

    target.model_runner.model.lm_head.weight = torch.eye(V)  # this target's vocabulary: features = logits
    w._draft_features, w._verify = draft_logits, verify
    return w


def sampling_info(sampled: bool):
    if not sampled:
        return None
    ones = torch.ones(BS)
    return types.SimpleNamespace(
        temperatures=ones[:, None], top_ks=torch.full((BS,), -1), top_ps=ones, min_ps=torch.zeros(BS),
        is_all_greedy=False, need_top_k_sampling=False, need_top_p_sampling=False, need_min_p_sampling=False,
        vocab_size=V, logit_bias=None, penalizer_orchestrator=None, has_custom_logit_processor=False,
        sampling_seed=torch.tensor(SEEDS))


def next_token(seq: list[int], b: int, sampled: bool) -> int:
    """Sequential decoding's token after `seq` (request b): greedy, or the seeded draw keyed by position."""
    if not sampled:
        return rule(seq[-1], seq[-2])
    x = scores(seq[-1], seq[-2])[None, None]
    one = torch.ones(1)
    return int(posterior_tokens_torch(x, one, torch.full((1,), -1), one, torch.tensor([SEEDS[b]]),
                                      positions=torch.tensor([[len(seq) - 1]]))[0, 0])


def choose_at_random(w, budget: int, topk: int) -> list[int]:
    """The worker runs `auto` with ladder 7 .. `budget`, its chooser replaced by seeded random draws;
    returns the list the chosen budgets are appended to."""
    from sglang.srt.speculative.ddtree.auto_budget import AutoBudget
    from sglang.srt.speculative.ddtree.budget_ladder import build_ladder

    w._auto_budget = AutoBudget.for_worker(build_ladder(BLOCK, topk, budget, 2047), BLOCK, "cpu", graph_widths=None,
                                           token_cap=None)
    budgets, rng, chosen = w._auto_budget.ladder.budgets, random.Random(3), []
    w._auto_budget.chooser.choose = lambda bs: chosen.append(rng.choice(budgets)) or chosen[-1]
    return chosen


def main(budget: int, topk: int, mode: str) -> None:
    torch.get_device_module = lambda device: types.SimpleNamespace(current_stream=lambda: None)
    sampled = mode.endswith("sampled")
    w = make_attending_worker(budget, topk, sampled)
    chosen = choose_at_random(w, budget, topk) if mode.startswith("auto-") else []
    req_to_token = w.model_runner.req_to_token_pool.req_to_token
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, V, (p,), generator=gen).tolist() for p in PROMPT_LENS]
    for b, prompt in enumerate(prompts):
        slots = req_to_token[b, : len(prompt)].long()
        w.pool.tok[slots], w.pool.pos[slots] = torch.tensor(prompt), torch.arange(len(prompt))
    w.seqs = [p + [next_token(p, b, sampled)] for b, p in enumerate(prompts)]  # + the first bonus
    prefix = torch.tensor(PROMPT_LENS)
    bonus = torch.tensor([s[-1] for s in w.seqs])
    draft_ok, off_chain = True, 0
    for w.round_no in range(ROUNDS):
        seq_lens = prefix.clone()
        seq_lens.record_stream = lambda stream: None
        batch = types.SimpleNamespace(seq_lens=seq_lens, seq_lens_cpu=prefix.clone(), reqs=[],
                                      sampling_info=sampling_info(sampled), req_pool_indices=torch.arange(BS))
        res = w._decode_round(batch, types.SimpleNamespace(bonus_tokens=bonus), None)
        stride = res.speculative_num_draft_tokens
        ids = res.next_token_ids.view(BS, stride)
        write = w.draft_writes[-1]
        hidden, positions = write["target_hidden"].view(BS, -1), write["positions"].view(BS, -1)
        for b in range(BS):
            n = int(res.accept_lens[b])
            p0 = int(prefix[b])
            path = [int(bonus[b])] + ids[b, : n - 1].tolist()
            want = [t * 1000 + p0 + i for i, t in enumerate(path)]
            draft_ok &= hidden[b, :n].long().tolist() == want and positions[b, :n].tolist() == list(range(p0, p0 + n))
            off_chain += int(any(int(a) != j for j, a in enumerate(w.last_accepted[b, :n].tolist())))
            w.seqs[b] += ids[b, :n].tolist()
        bonus, prefix = res.next_draft_input
    reference = []
    for b, prompt in enumerate(prompts):
        seq = list(prompt)
        while len(seq) < len(w.seqs[b]):
            seq.append(next_token(seq, b, sampled))
        reference.append(seq)
    print(json.dumps({"budget": budget, "topk": topk, "mode": mode, "equal_to_sequential": w.seqs == reference,
                      "draft_commit_ok": bool(draft_ok), "rounds_with_off_chain_paths": off_chain,
                      "budgets_chosen": chosen,
                      "tokens_per_round": sum(len(s) - len(p) - 1 for s, p in zip(w.seqs, prompts)) / (BS * ROUNDS)}))


if __name__ == "__main__":
    for case in sys.argv[1:]:
        b, k, m = case.split(":")
        main(int(b), int(k), m)
