"""Drive DDTreeWorkerV2's decode round on a CPU against a successor-map target (test harness).

Run with the stub SGLang tree first on sys.path. The target's greedy next token is f(x) = x + 1
(mod V) with 300 absorbing; the fake verify writes each node's token into its KV slot and returns
the node token as its hidden feature, so the commit can be checked slot by slot.
usage: python drive_round.py BUDGET:TOPK[:GRAPH[:KV_COMMIT]] ...  -> one JSON line per case
GRAPH=1 runs the tree stage through `TreeStage`'s graph path, on a replaying stand-in graph. The
draft head is the identity: the stubbed draft features are the logits. KV_COMMIT=reorder sets
DDTREE_KV_COMMIT=reorder (req_to_token rewritten instead of KV moved); every round then checks that
each request's verify range still holds the slots it held, each once.
"""

from __future__ import annotations

import json
import os
import sys
import types

import torch

from sglang.srt.speculative.ddtree import worker_v2
from sglang.srt.speculative.ddtree.kv_commit import commit_mode
from sglang.srt.speculative.ddtree.tree_stage import TreeStage
from replaying_graph import ReplayingGraph  # beside this script

V, G, BLOCK, BS, ROUNDS = 512, 300, 8, 3, 12


def successor(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x == G, G, (x + 1) % V)


def target_rows(tokens: torch.Tensor) -> torch.Tensor:
    """The stand-in target's next-token logits after each of `tokens` [N] -> [N, V]: 5 at the
    successor, below -4 elsewhere, no two equal in a row (so log-probs and their top-k are unambiguous)."""
    flat = tokens.reshape(-1).to(torch.int64)
    logits = -5.0 + ((torch.arange(V)[None, :] * 31 + flat[:, None] * 17) % V).float() / V  # 31 is prime to V
    logits[torch.arange(flat.numel()), successor(flat)] = 5.0
    return logits


def greedy_chain(first: int, length: int) -> list[int]:
    """The target's own greedy decoding from `first`, `length` tokens long."""
    seq = [first]
    while len(seq) < length:
        seq.append(int(successor(torch.tensor(seq[-1]))))
    return seq


def make_worker(budget: int, topk: int, graph: bool = False) -> worker_v2.DDTreeWorkerV2:
    w = worker_v2.DDTreeWorkerV2.__new__(worker_v2.DDTreeWorkerV2)
    w.device, w.block_size, w.budget, w.topk = "cpu", BLOCK, budget, topk
    w.tree_size, w.verify_width = budget + 1, max(budget + 1, BLOCK)
    w.max_commit = min(budget, BLOCK - 1) + 1
    w._sample_generator = torch.Generator().manual_seed(0)
    w._node_sampler_instance, w._sampling_backend = None, None  # built on first use, as in a server
    w._width_offsets = torch.arange(w.verify_width)
    # As __init__ leaves them at page size 1 without overlap (the mode from DDTREE_KV_COMMIT).
    w._kv_commit, w._reorder_blocker, w._kv_commit_mode = None, None, commit_mode(None)
    w._table_fence = None  # no overlap: nothing to fence
    w.slots_kept_once = True  # every verify range still holds its slots, each once (recording_commit)
    w._tree_stage_instance = None
    w._auto_budget = None  # a fixed budget (auto rounds: tests/round_harness/scheduler_path.py)
    w._width_graphs = None  # no per-width verify graphs (CUDA graphs are a GPU matter)
    w._tree_recurrence = False  # a dense target: no recurrent layers
    req_to_token = torch.randperm(BS * 4096, generator=torch.Generator().manual_seed(1)).to(torch.int32) + 1
    w.model_runner = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token.view(BS, 4096)))
    w.kv = torch.full((BS * 4096 + 1,), -1, dtype=torch.int64)

    class KVCache:
        def move_kv_cache(self, tgt, src):
            w.kv[tgt] = w.kv[src].clone()

    # SGLang's ParallelLMHead at TP=1 (the whole vocabulary), as the identity: the stubbed draft
    # features below are the draft logits themselves.
    lm_head = types.SimpleNamespace(tp_size=1, weight=torch.eye(V))
    target = types.SimpleNamespace(model_runner=types.SimpleNamespace(
        attn_backend=object(), token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=KVCache),
        model=types.SimpleNamespace(lm_head=lm_head)))
    if isinstance(getattr(type(w), "target_worker", None), property):  # real DFlashWorkerV2
        w._target_worker = target
    else:
        w.target_worker = target

    def draft_logits(batch, draft_input, bound):
        # The right token (the target's greedy chain) is ranked first at most depths but second,
        # behind 300, at depths 3 and 6: accepted paths then leave the first-child chain, so the
        # commit has to move KV from later tree nodes.
        bs = len(batch.seq_lens)
        logits = torch.full((bs, BLOCK - 1, V), -10.0)
        right, rows = w._seed_tokens(draft_input).to(torch.int64), torch.arange(bs)
        for d in range(BLOCK - 1):
            right = successor(right)
            second = 2.5 if d % 3 == 2 else 2.0
            logits[rows, d, (right + 5) % V] = 1.0
            logits[rows, d, G] = 3.0 if d % 3 == 2 else 2.0
            logits[rows, d, right] = second if d % 3 == 2 else 3.0
        return logits

    def verify(batch, verify_input, cache_loc_2d, bound):
        tokens = verify_input.draft_token.view(len(batch.seq_lens), -1)
        w.kv[cache_loc_2d.reshape(-1)] = tokens.reshape(-1)
        logits = target_rows(tokens)
        return types.SimpleNamespace(next_token_logits=logits, hidden_states=tokens.reshape(-1, 1).float()), False

    w._draft_features, w._verify = draft_logits, verify
    if graph:  # the same trees, through the (stand-in) graph
        w._tree_stage_instance = TreeStage(lm_head, budget, topk, w.verify_width, graphs=True,
                                           graph_factory=ReplayingGraph)
    w._prefix_lens_bound_cpu = lambda batch, draft_input: batch.seq_lens.clone()
    w.draft_writes = []
    w._append_target_hidden_to_draft_kv_by_loc = lambda **kw: w.draft_writes.append(kw)
    w._make_next_draft_input_decode = lambda bonus_tokens, new_seq_lens: (bonus_tokens, new_seq_lens)
    commit_target_kv = w._commit_target_kv

    def recording_commit(batch, prefix_lens, accepted_idx, accept_len, cache_loc_2d, tree_size):
        w.last_accepted = accepted_idx.clone()
        cols = prefix_lens[:, None] + torch.arange(cache_loc_2d.shape[1])  # the round's verify range
        before = req_to_token.view(BS, 4096)[batch.req_pool_indices[:, None], cols].sort(dim=1).values
        path_slots = commit_target_kv(batch, prefix_lens, accepted_idx, accept_len, cache_loc_2d, tree_size)
        after = req_to_token.view(BS, 4096)[batch.req_pool_indices[:, None], cols].sort(dim=1).values
        w.slots_kept_once &= bool(torch.equal(before, after))
        return path_slots

    w._commit_target_kv = recording_commit
    return w


def main(budget: int, topk: int, graph: int = 0, kv_commit: str = "move") -> None:
    torch.get_device_module = lambda device: types.SimpleNamespace(current_stream=lambda: None)
    os.environ["DDTREE_KV_COMMIT"] = kv_commit
    w = make_worker(budget, topk, bool(graph))
    ReplayingGraph.captures = ReplayingGraph.replays = 0
    prefix = torch.tensor([10, 20, 30])
    bonus = successor(torch.tensor([5, 290, 299]))
    outputs = [[int(b)] for b in bonus]
    commit_ok, moved = True, 0
    for _ in range(ROUNDS):
        seq_lens = prefix.clone()
        seq_lens.record_stream = lambda stream: None
        batch = types.SimpleNamespace(seq_lens=seq_lens, seq_lens_cpu=prefix.clone(), sampling_info=None,
                                      req_pool_indices=torch.arange(BS))
        res = w._decode_round(batch, types.SimpleNamespace(bonus_tokens=bonus), None)
        stride = res.speculative_num_draft_tokens
        ids = res.next_token_ids.view(BS, stride)
        hidden = w.draft_writes[-1]["target_hidden"].view(BS, stride)
        for i in range(BS):
            n = int(res.accept_lens[i])
            path = [int(bonus[i])] + ids[i, : n - 1].tolist()
            slots = w.model_runner.req_to_token_pool.req_to_token[i, int(prefix[i]): int(prefix[i]) + n].long()
            commit_ok &= w.kv[slots].tolist() == path and hidden[i, :n].long().tolist() == path
            moved += int(any(int(a) != j for j, a in enumerate(w.last_accepted[i, :n].tolist())))
            outputs[i] += ids[i, :n].tolist()
        bonus, prefix = res.next_draft_input
    greedy = [greedy_chain(out[0], len(out)) for out in outputs]
    print(json.dumps({"budget": budget, "topk": topk, "graph": graph, "kv_commit": w._kv_commit.mode,
                      "slots_kept_once": w.slots_kept_once, "graph_captures": ReplayingGraph.captures,
                      "graph_replays": ReplayingGraph.replays,
                      "equal_to_greedy": outputs == greedy, "commit_ok": bool(commit_ok),
                      "rounds_with_off_chain_paths": moved,
                      "tokens_per_round": sum(len(o) - 1 for o in outputs) / (BS * ROUNDS)}))


if __name__ == "__main__":
    for case in sys.argv[1:]:
        budget, topk, *rest = case.split(":")
        main(int(budget), int(topk), *([int(rest[0])] + rest[1:] if rest else []))
