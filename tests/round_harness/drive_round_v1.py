"""Drive DDTreeWorkerV1 through SGLang's own v1 DFlash decode path on a CPU (test harness).

Runs in the release's CPU venv with a patched SGLang (0.5.11, 0.5.12 or 0.5.13) on PYTHONPATH and
TRITON_INTERPRET=1 (SGLang's req_to_token Triton kernel then runs on CPU tensors). Real SGLang:
ServerArgs (parsed and validated by the release, DDTREE widths included), DFlashWorker's
`__init__` and `forward_batch_generation` (draft block, verify call, draft-KV writer), DFlashVerifyInput
slot allocation, ScheduleBatch, Req (finish checks), ReqToTokenPool, TokenToKVPoolAllocator,
ChunkCache, LogitsProcessorOutput, GenerationBatchResult. Stand-ins only for what needs weights or
a GPU: the target worker (greedy next token f(x) = x + 1 mod V, 300 absorbing; writes each verified
token into its KV slot and returns it as its hidden feature), the draft runner (drafts the target's
chain, second-ranked behind 300 at depths 2 and 5, so accepted paths leave the first-child chain),
the draft model's KV projection (identity) and the KV buffers (one token id per slot).
Paged cases run at --page-size 4 or 16 with SGLang's PagedTokenToKVPoolAllocator, which frees whole
pages: after each round it must hold exactly the pages of each request's committed tokens.
Reorder cases set DDTREE_KV_COMMIT=reorder (the commit rewrites req_to_token instead of moving KV;
at a page size above 1 it must fall back to the move).
Penalised cases give every request a frequency penalty of 2 (SGLang's largest), which drives the
absorbing token 300 out once it is emitted five times: the output must equal sequential decoding of the target
with the penalty counted over the request's own output (`reference_decode`); greedy, or sampled with
a per-request seed (set on the batch's SamplingBatchInfo as SGLang's deterministic mode builds it),
whose draws are keyed by position and so equal sequential sampling's.
The graph case replays the worker's tree stage from a CPU stand-in for a CUDA graph
(replaying_graph.py: a replay rewrites the captured outputs in place, as a CUDA graph's buffers),
one capture per batch size, as the GPU runs it.
Every round records each run of the release's own `DFlashVerifyInput.prepare_for_verify` (its slot
allocation) and whether it built DFlash's causal chain mask: a DDTree round prepares once, the
tree's input, without it (DFlash's chain input stands in unprepared, worker_v1.ChainInputV1).
A batch whose sampling DDTree cannot reproduce (a custom logit processor, flagged on the batch's
SamplingBatchInfo as SGLang sets it) must be refused with the reason before the round touches it.
usage: python drive_round_v1.py BUDGET|sampled:BUDGET|paged:PAGE:BUDGET|reorder:PAGE:BUDGET|penalized:BUDGET|
  penalized-sampled:BUDGET|graph:BUDGET|refusal|custom-processor ...
  -> one JSON line per case
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import stand_ins  # beside this file
from replaying_graph import ReplayingGraph

stand_ins.install()

from successor_model import MASK, V, draft_block_logits, successor, target_logits  # noqa: E402

import torch  # noqa: E402

from sglang.srt.layers.logits_processor import LogitsProcessorOutput  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler import GenerationBatchResult  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.chunk_cache import ChunkCache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler  # noqa: E402
from sglang.srt.speculative import dflash_worker  # noqa: E402
from sglang.srt.speculative.ddtree import worker_v1  # noqa: E402
from sglang.srt.speculative.ddtree.kernels import posterior_tokens  # noqa: E402
from sglang.srt.speculative.ddtree.tree_stage import TreeStage  # noqa: E402
from sglang.srt.speculative.ddtree.worker import worker_class  # noqa: E402
from sglang.srt.speculative.dflash_info import DFlashDraftInput, DFlashVerifyInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TARGET, DRAFT = REPO / "fixtures/models/tiny-qwen3", REPO / "fixtures/models/tiny-dflash-draft"
ROUNDS, POOL = 12, 4096
PROMPT_LENS, LAST_PROMPT_TOKENS = (10, 20, 30), (5, 290, 299)
MAX_NEW = (1000, 17, 1000)  # the second request finishes inside a round
SEEDS = (11, 12, 13)  # per-request sampling seeds of the seeded case


class SlotTokens:
    """A KV buffer stand-in: the token whose KV each slot holds (-1 = never written)."""

    def __init__(self, size: int):
        self.tok = torch.full((size + 1,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        self.tok[tgt_loc] = self.tok[src_loc].clone()

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None) -> None:
        self.tok[loc] = cache_k.reshape(len(loc), -1)[:, 0].round().long()


class TargetWorker:
    """Stands in for the target TpModelWorker (weights, GPU)."""

    def __init__(self, req_to_token_pool, allocator, kv: SlotTokens, attn_backend, graph_runner=None):
        self.device, self.tokenizer, self.kv = "cpu", None, kv
        self._pools = (req_to_token_pool, allocator)
        model = types.SimpleNamespace(
            get_input_embeddings=lambda: (lambda ids: torch.zeros(*ids.shape, 4)),
            lm_head=types.SimpleNamespace(weight=torch.eye(V), shard_indices=types.SimpleNamespace(num_org_elements=V)),
        )
        self.model_runner = types.SimpleNamespace(
            model=model, attn_backend=attn_backend, graph_runner=graph_runner, device="cpu",
            model_config=types.SimpleNamespace(vocab_size=V, context_len=POOL), memory_pool_config=None,
        )
        self.verify_widths = []

    def get_memory_pool(self):
        return self._pools

    def forward_batch_generation(self, model_worker_batch, is_verify: bool = False, **kwargs):
        assert is_verify and model_worker_batch.forward_mode.is_target_verify()
        ids = model_worker_batch.input_ids.to(torch.int64)
        self.verify_widths.append(model_worker_batch.spec_info.draft_token_num)
        self.kv.tok[model_worker_batch.out_cache_loc] = ids
        out = LogitsProcessorOutput(next_token_logits=target_logits(ids), hidden_states=ids.float()[:, None])
        return GenerationBatchResult(logits_output=out, can_run_cuda_graph=False)


class DraftRunner:
    """Stands in for the draft TpModelWorker's runner: drafts the target's chain from the bonus."""

    def __init__(self, req_to_token_pool, allocator, draft_kv: SlotTokens):
        config = json.loads((DRAFT / "config.json").read_text())
        self.model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace(**config))
        self.req_to_token_pool, self.token_to_kv_pool_allocator = req_to_token_pool, allocator
        self.token_to_kv_pool, self.attn_backend = draft_kv, object()
        attn = types.SimpleNamespace(
            kv_proj_only=lambda h: (h, h), apply_k_norm=lambda k: k, apply_k_rope=lambda pos, k: k,
            num_kv_heads=1, head_dim=1, attn=types.SimpleNamespace(k_scale=None, v_scale=None),
        )
        self.model = types.SimpleNamespace(
            layers=[types.SimpleNamespace(self_attn=attn)], project_target_hidden=lambda h: h
        )

    def forward(self, forward_batch):
        bs = forward_batch.batch_size
        ids = forward_batch.input_ids.view(bs, -1)
        assert bool((ids[:, 1:] == MASK).all()), "the draft block is [bonus, MASK...]"
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=draft_block_logits(ids)))


def reference_decode(req, length: int, frequency: float, seed: int | None) -> list[int]:
    """Sequential decoding of the target from the request's first output token, one token at a
    time: logits minus `frequency` x the token's count in the output so far (SGLang's frequency
    penalty), then argmax (temperature 0) or a draw keyed by (seed, position of the last token)."""
    out, counts = [int(req.output_ids[0])], torch.zeros(V)
    counts[out[0]] += 1
    params = req.sampling_params
    while len(out) < length:
        logits = target_logits(torch.tensor([out[-1]]))[0] - frequency * counts
        if params.temperature == 0 or params.top_k == 1:  # SGLang's greedy (normalize sets top_k 1)
            token = int(logits.argmax())
        else:
            position = len(req.origin_input_ids) + len(out) - 1
            token = int(posterior_tokens(
                logits.view(1, 1, V), torch.tensor([params.temperature]), torch.tensor([params.top_k]),
                torch.tensor([params.top_p]), torch.tensor([seed]), min_p=torch.tensor([params.min_p]),
                positions=torch.tensor([[position]]),
            )[0, 0])
        out.append(token)
        counts[token] += 1
    return out


def server_args(budget: int, page_size: int = 1):
    return prepare_server_args([
        "--model-path", str(TARGET), "--speculative-draft-model-path", str(DRAFT), "--device", "cuda",
        "--speculative-algorithm", "DDTREE", "--attention-backend", "triton",
        "--speculative-ddtree-budget", str(budget), "--random-seed", "0", "--page-size", str(page_size),
    ])  # fmt: skip


def make_worker(args, target: TargetWorker, draft_runner: DraftRunner):
    """The class SGLang's create_worker returns, built with the scheduler's keywords."""
    seen = {}

    def draft_tp_worker(server_args, **kwargs):
        seen["draft_num_draft_tokens"] = server_args.speculative_num_draft_tokens
        return types.SimpleNamespace(model_runner=draft_runner)

    dflash_worker.TpModelWorker = draft_tp_worker
    set_global_server_args_for_scheduler(args)  # as the scheduler does before building workers
    cls = SpeculativeAlgorithm.DDTREE.create_worker(args)
    assert cls is worker_class(args)
    worker = cls(server_args=args, gpu_id=0, tp_rank=0, dp_rank=None, moe_ep_rank=0, attn_cp_rank=0,
                 moe_dp_rank=0, nccl_port=0, target_worker=target)
    return worker, seen


def pages(n: int, page_size: int) -> int:
    """Slots a paged allocator holds for n tokens (whole pages)."""
    return -(-n // page_size) * page_size


def main(budget: int, temperature: float = 0.0, frequency: float = 0.0, seeded: bool = False, case: str = "",
         custom_processor: bool = False, page_size: int = 1, kv_commit: str = "", graph: bool = False) -> None:
    os.environ.pop("DDTREE_KV_COMMIT", None)
    if kv_commit:  # read when the worker is built
        os.environ["DDTREE_KV_COMMIT"] = kv_commit
    args = server_args(budget, page_size)
    req_to_token_pool = ReqToTokenPool(size=8, max_context_len=POOL, device="cpu", enable_memory_saver=False)
    kv, draft_kv = SlotTokens(8 * POOL), SlotTokens(8 * POOL)
    if page_size == 1:
        allocator = TokenToKVPoolAllocator(8 * POOL, torch.float32, "cpu", kv, need_sort=False)
    else:  # as the scheduler builds it for --page-size > 1: frees whole pages
        allocator = PagedTokenToKVPoolAllocator(8 * POOL, page_size, torch.float32, "cpu", kv, need_sort=False)
    tree_cache = ChunkCache(CacheInitParams(disable=True, req_to_token_pool=req_to_token_pool,
                                            token_to_kv_pool_allocator=allocator, page_size=page_size))
    target = TargetWorker(req_to_token_pool, allocator, kv, attn_backend=object())
    worker, seen = make_worker(args, target, DraftRunner(req_to_token_pool, allocator, draft_kv))
    ReplayingGraph.captures = ReplayingGraph.replays = 0
    if graph:  # the stage the worker would build on CUDA, with the stand-in graph
        worker._tree_stage_instance = TreeStage(target.model_runner.model.lm_head, worker.budget, worker.topk,
                                                worker.verify_width, graphs=True, graph_factory=ReplayingGraph)

    # Prefill, as DFlash leaves it: prompt KV in place, first token emitted, draft KV materialised.
    reqs, bonus = [], []
    for i, (n, last, max_new) in enumerate(zip(PROMPT_LENS, LAST_PROMPT_TOKENS, MAX_NEW)):
        prompt = [7] * (n - 1) + [last]
        params = SamplingParams(max_new_tokens=max_new, temperature=temperature, frequency_penalty=frequency,
                                ignore_eos=True)
        params.normalize(None)  # as the tokenizer manager does
        params.verify(V)
        req = Req(f"r{i}", "", prompt, params, vocab_size=V)
        req.req_pool_idx = req_to_token_pool.alloc([req])[0] if _alloc_takes_reqs() else req_to_token_pool.alloc(1)[0]
        slots = allocator.alloc(pages(n, page_size))[:n]  # the prompt's pages, as prefill leaves them
        req_to_token_pool.req_to_token[req.req_pool_idx, :n] = slots.to(req_to_token_pool.req_to_token.dtype)
        kv.tok[slots] = torch.tensor(prompt)
        draft_kv.tok[slots] = torch.tensor(prompt)
        req.kv_committed_len = req.kv_allocated_len = n
        first = int(successor(torch.tensor(last)))
        req.output_ids.append(first)
        reqs.append(req)
        bonus.append(first)
    seq_lens = torch.tensor(PROMPT_LENS, dtype=torch.int64)
    batch = ScheduleBatch(
        reqs=reqs, req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator,
        tree_cache=tree_cache, forward_mode=ForwardMode.DECODE, device="cpu",
        spec_algorithm=SpeculativeAlgorithm.DDTREE,
        req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64),
        seq_lens=seq_lens.clone(), seq_lens_cpu=seq_lens.clone(), seq_lens_sum=int(seq_lens.sum()),
        orig_seq_lens=seq_lens.to(torch.int32), model_config=types.SimpleNamespace(is_encoder_decoder=False),
        spec_info=DFlashDraftInput(
            **{_bonus_field(): torch.tensor(bonus)}, target_hidden=torch.empty((0, 1)),
            ctx_lens=torch.zeros(len(reqs), dtype=torch.int32), draft_seq_lens=seq_lens.to(torch.int32),
        ),
    )
    if "req_pool_indices_cpu" in ScheduleBatch.__dataclass_fields__:  # 0.5.13: a host copy too
        batch.req_pool_indices_cpu = batch.req_pool_indices.clone()
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, V)
    if seeded:  # what from_schedule_batch builds under --enable-deterministic-inference
        batch.sampling_info.sampling_seed = torch.tensor(SEEDS, dtype=torch.int64)

    if custom_processor:
        batch.sampling_info.has_custom_logit_processor = True
        free = allocator.available_size()
        try:
            worker.forward_batch_generation(batch)
            message = None
        except ValueError as exc:
            message = str(exc)
        untouched = (allocator.available_size() == free and isinstance(batch.spec_info, DFlashDraftInput)
                     and batch.seq_lens.tolist() == list(PROMPT_LENS) and all(len(r.output_ids) == 1 for r in reqs))
        print(json.dumps({"case": case, "refusal": message, "untouched": untouched}), flush=True)
        return

    recorded = []
    real_walk = worker_v1.accept_walk

    def recording_walk(*a, **kw):
        out = real_walk(*a, **kw)
        recorded.append(out[0].clone())
        return out

    worker_v1.accept_walk = recording_walk
    prepares = []  # build_custom_mask of each run of the release's prepare_for_verify
    real_prepare = DFlashVerifyInput.prepare_for_verify

    def recording_prepare(self, batch, page_size, *, build_custom_mask=True):
        prepares.append(build_custom_mask)
        return real_prepare(self, batch, page_size, build_custom_mask=build_custom_mask)

    DFlashVerifyInput.prepare_for_verify = recording_prepare
    commit_ok, off_chain, rounds, emitted = True, 0, 0, 0
    for _ in range(ROUNDS):
        if not batch.reqs:
            break
        before = {id(r): (int(batch.seq_lens[i]), len(r.output_ids), r.output_ids[-1])
                  for i, r in enumerate(batch.reqs)}
        result = worker.forward_batch_generation(batch)
        rounds += 1
        accepted = recorded[-1]
        committed_now = []
        for i, req in enumerate(batch.reqs):
            prefix, n_out, root = before[id(req)]
            n = len(req.output_ids) - n_out  # tokens committed this round
            emitted += n
            committed_now.append(n)
            path = [root] + list(req.output_ids[n_out: n_out + n - 1])  # an array from 0.5.13
            slots = req_to_token_pool.req_to_token[req.req_pool_idx, prefix: prefix + n].long()
            commit_ok &= kv.tok[slots].tolist() == path and draft_kv.tok[slots].tolist() == path
            commit_ok &= int(batch.seq_lens[i]) == prefix + n == req.kv_committed_len
            off_chain += int(any(int(a) != j for j, a in enumerate(accepted[i, :n].tolist())))
        held = sum(pages(r.kv_committed_len, page_size) for r in reqs)
        commit_ok &= allocator.available_size() == 8 * POOL - held  # nothing leaked or freed twice
        # The result in this release's field names (0.5.11: num_accepted_drafts...).
        total, per_req = (getattr(result, f"num_{kind}_drafts{suffix}", None)
                          for kind in [_drafts_word(result)] for suffix in ("", "_per_req_cpu"))
        commit_ok &= total == sum(per_req) == sum(max(0, n - 1) for n in committed_now)
        keep = [i for i, r in enumerate(batch.reqs) if not r.finished()]
        if len(keep) < len(batch.reqs):
            batch.filter_batch(keep_indices=keep)
        batch.prepare_for_decode()

    # The per-request speculative counters the v1 verify keeps (renamed in 0.5.12).
    counter = "spec_num_correct_drafts" if hasattr(reqs[0], "spec_num_correct_drafts") else "spec_accepted_drafts"
    commit_ok &= all(getattr(r, counter) == len(r.output_ids) - 1 - r.spec_verify_ct for r in reqs)
    greedy_ok = True
    for req, max_new in zip(reqs, MAX_NEW):
        out = list(req.output_ids)
        want = [out[0]]
        while len(want) < len(out):
            want.append(int(successor(torch.tensor(want[-1]))))
        greedy_ok &= out == want and len(out) <= max_new
    reference_ok = all(
        list(req.output_ids) == reference_decode(req, len(req.output_ids), frequency, seed if seeded else None)
        for req, seed in zip(reqs, SEEDS)
    ) if (seeded or temperature == 0) else None
    print(json.dumps({
        "case": case or str(budget), "equal_to_reference": reference_ok,
        "outputs": [list(map(int, r.output_ids)) for r in reqs],
        "budget": budget, "temperature": temperature, "equal_to_greedy": greedy_ok, "commit_ok": bool(commit_ok),
        "rounds_with_off_chain_paths": off_chain, "finished": [r.finished() for r in reqs],
        "output_lens": [len(r.output_ids) for r in reqs],
        "tokens_per_round": emitted / max(1, rounds * len(reqs)),
        "verify_width": sorted(set(target.verify_widths)), "draft_runner_width": seen["draft_num_draft_tokens"],
        "widths": [args.speculative_num_draft_tokens, args.speculative_dflash_block_size,
                   args.speculative_ddtree_budget, args.speculative_ddtree_topk],
        "worker": type(worker).__name__, "block_size": worker.block_size, "page_size": args.page_size,
        "kv_commit": worker._kv_commit.mode, "rounds": rounds, "verify_prepares": prepares,
        "graph_captures": ReplayingGraph.captures, "graph_replays": ReplayingGraph.replays,
    }), flush=True)


def refusal_case() -> None:
    """A target whose verify graphs were captured without a mask (FlashInfer on v1) is refused."""
    args = server_args(8)
    pool = ReqToTokenPool(size=8, max_context_len=POOL, device="cpu", enable_memory_saver=False)
    kv = SlotTokens(8 * POOL)
    allocator = TokenToKVPoolAllocator(8 * POOL, torch.float32, "cpu", kv, need_sort=False)
    flashinfer = type("FlashInferAttnBackend", (), {})()
    target = TargetWorker(pool, allocator, kv, attn_backend=flashinfer, graph_runner=object())
    try:
        make_worker(args, target, DraftRunner(pool, allocator, SlotTokens(8 * POOL)))
        message = None
    except RuntimeError as exc:
        message = str(exc)
    print(json.dumps({"refusal": message}), flush=True)


def _drafts_word(result) -> str:
    return "correct" if hasattr(result, "num_correct_drafts") else "accepted"


def _bonus_field() -> str:
    return "bonus_tokens" if "bonus_tokens" in DFlashDraftInput.__dataclass_fields__ else "verified_id"


def _alloc_takes_reqs() -> bool:
    import inspect

    return "reqs" in inspect.signature(ReqToTokenPool.alloc).parameters


if __name__ == "__main__":
    for case in sys.argv[1:]:
        if case == "refusal":
            refusal_case()
        elif case == "custom-processor":
            main(8, case=case, custom_processor=True)
        elif case.startswith("paged:"):  # paged:PAGE:BUDGET -> --page-size PAGE, greedy
            _, page, budget = case.split(":")
            main(int(budget), case=case, page_size=int(page))
        elif case.startswith("reorder:"):  # reorder:PAGE:BUDGET -> DDTREE_KV_COMMIT=reorder, greedy
            _, page, budget = case.split(":")
            main(int(budget), case=case, page_size=int(page), kv_commit="reorder")
        elif case.startswith("graph:"):  # graph:BUDGET -> the tree stage replayed from a stand-in graph
            main(int(case.split(":")[1]), case=case, graph=True)
        elif case.startswith("sampled:"):  # sampled:BUDGET -> temperature 1
            main(int(case.split(":")[1]), temperature=1.0, case=case)
        elif case.startswith("penalized:"):  # greedy with a frequency penalty
            main(int(case.split(":")[1]), frequency=2.0, case=case)
        elif case == "auto":  # --speculative-ddtree-budget auto: every v1 round verifies the ladder's widest budget
            main("auto", case=case)
        elif case.startswith("penalized-sampled:"):  # temperature 1, frequency penalty, seeded
            main(int(case.split(":")[1]), temperature=1.0, frequency=2.0, seeded=True, case=case)
        else:
            main(int(case))
