"""Drive DDTreeWorkerV2's decode round against a fake recurrent (GDN-like) target (test harness).

Run with the stub SGLang tree first on sys.path. The target's next token depends only on a state
carried along the token path (`step`, `rule`). Its verify runs as SGLang's GDN verify does: each row
starts from its parent row's state, the parents derived from the verify input's `retrieve_next_token`
/ `retrieve_next_sibling` by SGLang's rule (tests/gdn_conv_stand_in.py) when the backend was built for
a tree (topk > 1) and the links are there, else a chain; one state per verify row is kept, like
SGLang's intermediate-state cache. The backend's `update_mamba_state_after_mtp_verify` keeps, per
request, the state at the verify row it is given (and the tracked row's into the track slot), called
by a stand-in of DFlash's `_update_target_mamba_state_after_verify` (the stub's is a no-op).

The worker takes its GDN path as its `__init__` decides it: `has_gdn_layers` / `gdn_refusal` on the
server args of a qwen3_next config (Triton linear attention, fixed budget), then its own
`_build_target_recurrence_for_trees` (the constructor wraps, on the stub's classes) before the
backend exists. The draft puts the target's continuation at rank 0, 1 or 2 per depth, so accepted
paths leave the first-child chain: a chain verify or a commit at the accepted length then keeps
another path's state.

usage: python drive_round_recurrent.py BUDGET:TOPK ...  -> one JSON line per case (greedy).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch

from drive_round import BLOCK, BS, make_worker  # noqa: E402  (same folder, on sys.path)
from sglang.srt.layers.attention.hybrid_linear_attn_backend import MambaAttnBackendBase
from sglang.srt.speculative.ddtree.server_args import gdn_refusal, has_gdn_layers

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo, after the stub site
from tests.gdn_conv_stand_in import parents_from_links  # noqa: E402

V, M, S0, ROUNDS, TRACK = 61, 997, 1, 12, 4  # vocabulary, state modulus, initial state, rounds, track interval
PROMPT_LENS = (9, 17, 26)


def step(state: int, token: int) -> int:
    """The recurrent state after `token`."""
    return (31 * state + token + 7) % M


def rule(state: int) -> int:
    """The target's greedy next token from a state."""
    return (7 * state + 3) % V


def state_of(tokens: list[int]) -> int:
    out = S0
    for t in tokens:
        out = step(out, t)
    return out


def gdn_server_args(budget: int) -> types.SimpleNamespace:
    """Server args of a qwen3_next target (GDN and full-attention layers) that DDTREE runs the tree path for."""
    config = types.SimpleNamespace(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
                                   layer_types=["linear_attention", "linear_attention", "linear_attention",
                                                "full_attention"])
    return types.SimpleNamespace(get_model_config=lambda: types.SimpleNamespace(hf_config=config),
                                 linear_attn_backend="triton", speculative_ddtree_budget=budget,
                                 speculative_eagle_topk=None)


class RecurrentBackend(MambaAttnBackendBase):
    """The target's linear-attention backend: states per cache slot, one state per verify row, and
    SGLang's commit (keep the state at the given row per request; the tracked row into the track slot)."""

    def __init__(self, model_runner: types.SimpleNamespace) -> None:
        super().__init__(model_runner)
        self.state = torch.zeros(2 * BS, dtype=torch.int64)  # slot b: request b; BS + b: its prefix-cache track
        self.rows = torch.zeros(BS, 1, dtype=torch.int64)  # the last verify's states [bs, width]
        self.parents: torch.Tensor | None = None

    def verify(self, tokens: torch.Tensor, verify_input: Any) -> torch.Tensor:
        """Every row's state from its parent row's (row 0 from the request's slot)."""
        bs, n = tokens.shape
        links = verify_input.retrieve_next_token, verify_input.retrieve_next_sibling
        tree = self.topk > 1 and links[0] is not None
        self.parents = parents_from_links(*links) if tree else torch.arange(-1, n - 1).expand(bs, n)
        self.rows = torch.zeros(bs, n, dtype=torch.int64)
        for b in range(bs):
            for i in range(n):
                before = int(self.state[b]) if i == 0 else int(self.rows[b, self.parents[b, i]])
                self.rows[b, i] = step(before, int(tokens[b, i]))
        return self.rows

    def update_mamba_state_after_mtp_verify(self, last_correct_step_indices: torch.Tensor,
                                            mamba_track_indices: torch.Tensor | None,
                                            mamba_steps_to_track: torch.Tensor | None, model: Any = None,
                                            **_: Any) -> None:
        for b, row in enumerate(last_correct_step_indices.tolist()):
            if row >= 0:
                self.state[b] = self.rows[b, row]
        if mamba_track_indices is not None:
            for b, (slot, row) in enumerate(zip(mamba_track_indices.tolist(), mamba_steps_to_track.tolist())):
                if row >= 0:
                    self.state[slot] = self.rows[b, row]


def dflash_commit(backend: RecurrentBackend) -> Callable[..., None]:
    """Stand-in for DFlash's `_update_target_mamba_state_after_verify`, as it calls the backend: the last
    accepted step (`commit_lens - 1`) and, where a request's length crosses a multiple of TRACK, the
    step ending there (else -1)."""

    def commit(*, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify=None) -> None:
        post = seq_lens_pre_verify + commit_lens if seq_lens_post_verify is None else seq_lens_post_verify
        point = post // TRACK * TRACK
        steps = torch.where(point > seq_lens_pre_verify, point - seq_lens_pre_verify - 1, -1)
        backend.update_mamba_state_after_mtp_verify(
            last_correct_step_indices=commit_lens.to(torch.int64) - 1, mamba_track_indices=batch.mamba_track_indices,
            mamba_steps_to_track=steps.to(torch.int64), model=None)

    return commit


def make_recurrent_worker(budget: int, topk: int) -> tuple[Any, RecurrentBackend]:
    w = make_worker(budget, topk)
    args = gdn_server_args(budget)
    w._tree_recurrence = has_gdn_layers(args) and gdn_refusal(args) is None  # as DDTreeWorkerV2.__init__
    runner = w.target_worker.model_runner
    runner.attn_backend = None  # built after the worker, as SGLang 0.5.14-0.5.23 do
    if w._tree_recurrence:
        w._build_target_recurrence_for_trees(w.target_worker)
    backend = runner.attn_backend = RecurrentBackend(types.SimpleNamespace(server_args=args))
    runner.model.lm_head.weight = torch.eye(V)  # this target's vocabulary: features = logits
    w._update_target_mamba_state_after_verify = dflash_commit(backend)
    w.seqs, w.round_no = None, 0

    def draft_logits(batch, draft_input, bound):
        logits = torch.full((BS, BLOCK - 1, V), -10.0)
        for b in range(BS):
            state = state_of(w.seqs[b])
            for d in range(BLOCK - 1):
                right = rule(state)
                decoys = [(right + 5) % V, (right + 11) % V]
                rank = (b + 2 * w.round_no + d) % 3
                for value, token in zip((3.0, 2.5, 2.0), decoys[:rank] + [right] + decoys[rank:]):
                    logits[b, d, token] = value
                state = step(state, right)
        return logits

    def verify(batch, verify_input, cache_loc_2d, bound):
        n = verify_input.draft_token_num
        tokens = verify_input.draft_token.view(BS, n)
        w.kv[cache_loc_2d.reshape(-1)] = tokens.reshape(-1)
        states = backend.verify(tokens, verify_input)
        logits = torch.zeros(BS * n, V)
        logits[torch.arange(BS * n), [rule(int(s)) for s in states.reshape(-1)]] = 10.0
        return types.SimpleNamespace(next_token_logits=logits, hidden_states=tokens.reshape(-1, 1).float()), False

    w._draft_features, w._verify = draft_logits, verify
    return w, backend


def main(budget: int, topk: int) -> None:
    torch.get_device_module = lambda device: types.SimpleNamespace(current_stream=lambda: None)
    w, backend = make_recurrent_worker(budget, topk)
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, V, (p,), generator=gen).tolist() for p in PROMPT_LENS]
    for b, prompt in enumerate(prompts):
        backend.state[b] = state_of(prompt)
    w.seqs = [p + [rule(state_of(p))] for p in prompts]  # + the first bonus
    prefix = torch.tensor(PROMPT_LENS)
    bonus = torch.tensor([s[-1] for s in w.seqs])
    state_ok, tracked, off_chain = True, 0, 0
    for w.round_no in range(ROUNDS):
        seq_lens = prefix.clone()
        seq_lens.record_stream = lambda stream: None
        batch = types.SimpleNamespace(seq_lens=seq_lens, seq_lens_cpu=prefix.clone(), reqs=[], sampling_info=None,
                                      req_pool_indices=torch.arange(BS), mamba_track_indices=BS + torch.arange(BS))
        backend.state[BS:] = -1
        res = w._decode_round(batch, types.SimpleNamespace(bonus_tokens=bonus), None)
        ids = res.next_token_ids.view(BS, res.speculative_num_draft_tokens)
        for b in range(BS):
            n, p0 = int(res.accept_lens[b]), int(prefix[b])
            off_chain += int(any(int(a) != j for j, a in enumerate(w.last_accepted[b, :n].tolist())))
            w.seqs[b] += ids[b, :n].tolist()
            # The committed state is the accepted path's: the state of the request's tokens but the new bonus.
            state_ok &= int(backend.state[b]) == state_of(w.seqs[b][:p0 + n])
            point = (p0 + n) // TRACK * TRACK
            if point > p0:
                tracked += 1
                state_ok &= int(backend.state[BS + b]) == state_of(w.seqs[b][:point])
            else:
                state_ok &= int(backend.state[BS + b]) == -1
        bonus, prefix = res.next_draft_input
    reference = []
    for prompt, seq in zip(prompts, w.seqs):
        ref = list(prompt)
        while len(ref) < len(seq):
            ref.append(rule(state_of(ref)))
        reference.append(ref)
    print(json.dumps({"budget": budget, "topk": topk, "tree_recurrence": w._tree_recurrence,
                      "backend_topk": backend.topk, "equal_to_sequential": w.seqs == reference,
                      "committed_state_ok": bool(state_ok), "tracked_states": tracked,
                      "rounds_with_off_chain_paths": off_chain,
                      "tokens_per_round": sum(len(s) - len(p) - 1 for s, p in zip(w.seqs, prompts)) / (BS * ROUNDS)}))


if __name__ == "__main__":
    for case in sys.argv[1:]:
        b, k = case.split(":")
        main(int(b), int(k))
