"""Grammar-constrained DDTREE rounds through a real SGLang release's `Scheduler.run_batch` (test harness).

Run in the release's CPU venv with a patched install and a real xgrammar (the release's pin) on
PYTHONPATH. Real: the release's xgrammar grammar backend (`XGrammarGrammarBackend`, compiling JSON
schemas, regexes and an EBNF grammar over a small byte-level vocabulary handed to it through its
`init_xgrammar` tokenizer hook), its `Req`s and `SamplingBatchInfo`, `Scheduler.run_batch` with its
grammar barrier under overlap, its tree grammar walk (`build_grammar_vocab_mask`, called by the DDTree
round) and its spec-v2 result processor advancing each matcher along the accepted run
(`advance_grammar_fsm`). Stand-ins (scheduler_path / drive_round): the target is a Markov table
(its logits after a token), the drafter proposes the plain constrained greedy continuation, ranking a
decoy first at every third depth (the target's unconstrained choice there, which the grammar forbids),
so accepted paths leave the first-child chain and a node whose mask is skipped emits the decoy.
The reference is plain constrained greedy decoding by the release's own plain path
(`update_regex_vocab_mask`, `apply_logits_bias`, argmax, the result processor's `_accept_grammar_tokens`).
usage: python grammar_path.py  -> one JSON line
"""

from __future__ import annotations

import functools
import json
import traceback
import types
from pathlib import Path

import scheduler_path  # beside this file; installs the stand-ins (a real xgrammar on the path wins)

import torch  # noqa: E402
import xgrammar  # noqa: E402

from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_MATCHED_TOKEN, Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler_components.batch_result_processor import (  # noqa: E402
    SchedulerBatchResultProcessor as Processor,
)
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.ddtree import worker_v2  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

import drive_round  # noqa: E402

V = drive_round.V
PIECES = ['{"', '"}', '":', '",', '","', '":"', "name", "age", "ok", "tags", "kind", "true", "false", "null",
          "cat", "dog", "bird", "ab", "cd", "12", "42", "7", ".com", ".org", "@", "[]", '["', '"]']
VOCAB = [chr(32 + i) for i in range(95)] + PIECES
EOS = V - 1
VOCAB = VOCAB + [""] * (V - 1 - len(VOCAB)) + ["</s>"]  # "" tokens: never allowed by a grammar
BUDGET, TOPK, MAX_ROUNDS, MAX_TOKENS = 16, 4, 48, 160
PREFIX = (10, 20, 30)

_CONSTRAINTS = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "grammar_constraints.json").read_text())
SCHEMAS, REGEXES, EBNF = _CONSTRAINTS["json_schemas"], _CONSTRAINTS["regexes"], _CONSTRAINTS["ebnf"]
# Batches of three requests (drive_round's worker holds three): (key type, key string) or None (no grammar).
BATCHES = {
    "json": [("json", json.dumps(s)) for s in SCHEMAS],
    "regex": [("regex", r) for r in REGEXES],
    "ebnf_mixed": [("ebnf", EBNF), ("regex", REGEXES[0]), None],
}


def target_table() -> torch.Tensor:
    """The Markov target: its logits after each token [V, V]; whitespace and "" tokens unlikely, the end
    and closing tokens likely (so outputs finish), the rest a fixed random draw."""
    table = torch.randn(V, V, generator=torch.Generator().manual_seed(7)) * 2.0
    for token, boost in ((EOS, 1.5), (VOCAB.index("}"), 2.0), (VOCAB.index('"'), 1.0), (VOCAB.index(","), 0.5)):
        table[:, token] += boost
    table[:, [i for i, s in enumerate(VOCAB) if s in (" ", "")]] -= 20.0
    return table


TABLE = target_table()


class Tokenizer:
    """What the grammar backend asks a tokenizer: the xgrammar vocabulary (its `init_xgrammar` hook)."""

    def init_xgrammar(self):
        return xgrammar.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS]), None


BACKEND = XGrammarGrammarBackend(Tokenizer(), vocab_size=V, any_whitespace=False)


def _grammar(key):
    if key is None:
        return None
    kind, text = key
    grammar = getattr(BACKEND, f"dispatch_{kind}")(text)
    if not hasattr(grammar, "matcher"):
        raise RuntimeError(f"the backend did not compile {kind} {text!r}: {grammar!r}")
    return grammar


def _processor():
    """The release's result processor methods that advance grammars, on an object holding only them."""
    proc = types.SimpleNamespace()
    proc._accept_grammar_tokens = functools.partial(Processor._accept_grammar_tokens, proc)
    proc.advance_grammar_fsm = functools.partial(Processor.advance_grammar_fsm, proc)
    return proc


def _batch(keys, temperature: float) -> ScheduleBatch:
    scheduler_path._server_args()  # the sampling info reads the published config
    reqs = []
    for i, key in enumerate(keys):
        params = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=temperature, ignore_eos=False)
        params.normalize(None)
        req = Req(str(i), "", [7] * PREFIX[i], params, vocab_size=V)
        req.req_pool_idx, req.grammar = i, _grammar(key)
        reqs.append(req)
    batch = ScheduleBatch(reqs=reqs)
    batch.device, batch.forward_mode, batch.spec_algorithm = "cpu", ForwardMode.DECODE, SpeculativeAlgorithm.DDTREE
    batch.has_grammar = any(r.grammar is not None for r in reqs)
    batch.return_logprob = False
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, V)
    return batch


def _finish(req, token: int) -> None:
    if req.grammar is not None and req.grammar.is_terminated():
        req.finished_reason = FINISH_MATCHED_TOKEN(matched=token)


def plain(keys) -> list[list[int]]:
    """Plain constrained greedy decoding, one token a step, by the release's plain path."""
    batch = _batch(keys, 0.0)
    info, proc = batch.sampling_info, _processor()
    info.grammars = [r.grammar for r in batch.reqs]
    last = torch.tensor([7] * len(keys))
    outputs: list[list[int]] = [[] for _ in keys]
    for _ in range(MAX_TOKENS):
        info.update_regex_vocab_mask()
        logits = TABLE[last].clone()
        info.apply_logits_bias(logits)
        nxt = logits.argmax(-1)
        for i, req in enumerate(batch.reqs):
            if req.finished():
                continue
            if req.grammar is not None:
                proc._accept_grammar_tokens(req, int(nxt[i]))
            outputs[i].append(int(nxt[i]))
            _finish(req, int(nxt[i]))
        if all(r.finished() for r in batch.reqs if r.grammar is not None) and len(outputs[0]) > 2 * MAX_ROUNDS:
            break
        last = nxt
    return outputs


def _worker(refs):
    """drive_round's worker with the Markov target and a drafter of the reference continuations."""
    worker = drive_round.make_worker(BUDGET, TOPK)
    del worker._make_next_draft_input_decode, worker._prefix_lens_bound_cpu

    def verify(batch, verify_input, cache_loc_2d, bound):
        tokens = verify_input.draft_token.view(len(batch.seq_lens), -1)
        worker.kv[cache_loc_2d.reshape(-1)] = tokens.reshape(-1)
        logits = TABLE[tokens.reshape(-1)].clone()
        return scheduler_path.LogitsProcessorOutput(next_token_logits=logits,
                                                    hidden_states=tokens.reshape(-1, 1).float()), False

    def draft(batch, draft_input, bound):
        bs, block = len(batch.seq_lens), drive_round.BLOCK
        logits = torch.full((bs, block - 1, V), -10.0)
        for i in range(bs):
            k = int(batch.seq_lens[i]) - PREFIX[i]  # the seed is output token k
            for d in range(block - 1):
                right = refs[i][k + d + 1] if k + d + 1 < len(refs[i]) else EOS
                before = refs[i][k + d] if k + d < len(refs[i]) else EOS
                decoy = int(TABLE[before].argmax())  # the unconstrained choice after the right token
                off = d % 3 == 2
                logits[i, d, (right + 5) % V] = 1.0
                logits[i, d, decoy] = 3.0 if off else 2.0
                logits[i, d, right] = 2.5 if off else 3.0
        return logits

    worker._verify, worker._draft_features = verify, draft
    return worker


def ddtree(keys, refs, overlap: bool, temperature: float = 0.0) -> dict:
    """Rounds through run_batch until every grammar request finishes; the result processor's spec-v2
    path advances the matchers (under overlap through the next round's grammar barrier)."""
    worker = _worker(refs)
    off_chain = {"rounds": 0}
    walk = worker_v2.accept_walk

    def noting_walk(tokens, first_child, next_sibling, posterior, max_depth):
        out = walk(tokens, first_child, next_sibling, posterior, max_depth=max_depth)
        accepted, accept_len = out[0], out[1]
        for i in range(accepted.shape[0]):
            path = accepted[i, : int(accept_len[i]) + 1].tolist()
            off_chain["rounds"] += any(int(first_child[i, a]) != b for a, b in zip(path, path[1:]))
        return out

    worker_v2.accept_walk = noting_walk
    try:
        scheduler = scheduler_path.SchedulerUnderTest(worker, overlap)
        proc = _processor()
        scheduler.batch_result_processor = proc
        batch = _batch(keys, temperature)
        first = [refs[i][0] if temperature == 0 else int(TABLE[7].argmax()) for i in range(len(keys))]
        for i, req in enumerate(batch.reqs):  # the first output token, from prefill, advances the matcher
            if req.grammar is not None:
                if temperature:
                    info = batch.sampling_info
                    info.grammars = [r.grammar for r in batch.reqs]
                    info.update_regex_vocab_mask()
                    row = TABLE[7].expand(len(keys), V).clone()
                    info.apply_logits_bias(row)
                    first[i] = int(row[i].argmax())
                proc._accept_grammar_tokens(req, first[i])
        batch.spec_info = worker._make_next_draft_input_decode(
            **{scheduler_path.SEED: torch.tensor(first)}, new_seq_lens=torch.tensor(PREFIX))
        batch.req_pool_indices = torch.arange(len(keys))
        batch.seq_lens, batch.seq_lens_cpu = torch.tensor(PREFIX), torch.tensor(PREFIX)
        batch.seq_lens_sum = sum(PREFIX)
        outputs = [[t] for t in first]
        pending = None
        rounds = 0
        while rounds < MAX_ROUNDS and not all(r.finished() for r in batch.reqs if r.grammar is not None):
            result = scheduler.run_batch(batch)
            rounds += 1
            if overlap:
                if pending is not None:
                    _collect(*pending, outputs)  # its matchers were advanced by this round's barrier
                scheduler.result_queue = [(batch, result)]
                pending = (batch, result)
                batch.seq_lens = scheduler.future_map.published[-1].clone()
                batch.seq_lens_cpu = batch.seq_lens.clone()
            else:
                proc.advance_grammar_fsm(result, batch)
                _collect(batch, result, outputs)
        if pending is not None:
            proc.advance_grammar_fsm(*reversed(pending))
            _collect(*pending, outputs)
    finally:
        worker_v2.accept_walk = walk
    return {"outputs": outputs, "rounds": rounds, "off_chain_rounds": off_chain["rounds"],
            "finished": [r.finished() for r in batch.reqs],
            # the result processor aborts a request whose run its grammar rejects (a token outside its mask)
            "aborted": [getattr(r, "to_finish", None) is not None for r in batch.reqs]}


def _collect(batch, result, outputs) -> None:
    """Each request's retained run (grammar requests: as the result processor truncated it)."""
    stride = result.speculative_num_draft_tokens
    ids, lens = result.next_token_ids.view(len(batch.reqs), stride), result.accept_lens
    for i, req in enumerate(batch.reqs):
        if req.finished():
            continue
        run = ids[i, : int(lens[i])].tolist()
        if req.grammar is not None:
            run = result.grammar_retained_tokens[i]
        outputs[i] += run
        _finish(req, run[-1])


def text(tokens: list[int]) -> str:
    return "".join(VOCAB[t] for t in tokens if t != EOS)


def main() -> None:
    torch.Tensor.record_stream = lambda self, stream: None
    torch.get_device_module = lambda device=None: types.SimpleNamespace(
        current_stream=lambda: scheduler_path.CURRENT_STREAM, Event=scheduler_path.RecordedEvent)
    scheduler_path._parallel_stand_in()
    report: dict = {"vocab": VOCAB, "eos": EOS, "batches": {}}
    for name, keys in BATCHES.items():
        entry: dict = {"keys": keys}
        try:
            entry["plain"] = plain(keys)
            for mode, overlap in (("ddtree", False), ("ddtree_overlap", True)):
                entry[mode] = ddtree(keys, entry["plain"], overlap)
            entry["ddtree_sampled"] = ddtree(keys, entry["plain"], False, temperature=0.8)
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            entry["error"] = traceback.format_exc()[-4000:]
        report["batches"][name] = entry
    print(json.dumps(report))


if __name__ == "__main__":
    main()
