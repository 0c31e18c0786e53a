"""Drive DDTreeWorkerV2's decode rounds through SGLang's own spec-v2 KV bookkeeping on a CPU (test harness).

Runs in the release's CPU venv (tests/cpu_serverargs) with a patched SGLang (0.5.14+) first on PYTHONPATH
and TRITON_INTERPRET=1. Real SGLang: ServerArgs (parsed and validated by the release, DDTREE widths
included; --page-size 1 --disable-overlap-schedule --disable-radix-cache), the class
`SpeculativeAlgorithm.DDTREE.create_worker` returns, built with the scheduler's keywords (DDTreeWorkerV2's
own `__init__`: widths, budget, and the reorder blocker, None at page size 1 without overlap),
DFlash's methods a round calls (draft block buffers, the draft-KV writer, the draft-state makers),
ReqToTokenPool, TokenToKVPoolAllocator, the tree cache the release builds without a radix cache
(ChunkCache; a disabled UnifiedRadixCache where ChunkCache is gone), Req, ScheduleBatch,
SamplingBatchInfo, DFlashDraftInputV2. Each round is the non-overlap scheduler loop, run by the
release's own code on a Scheduler holding only the state it reads (scheduler_path.SchedulerUnderTest;
every stood-in attribute read is reported):
- `Scheduler.update_running_batch`: `filter_batch` (drops finished requests), `check_decode_mem` and
  `prepare_for_decode`, i.e. `DFlashDraftInputV2.prepare_for_decode`, which reserves KV up to
  `kv_committed_len + 2 x verify width` (`alloc_token_slots`), writes the new slots into req_to_token
  and raises `kv_allocated_len`;
- `Scheduler.run_batch`: the forward isolation, `worker.forward_batch_generation(batch)`, and the draft
  state and sequence lengths carried to the next round;
- `SchedulerBatchResultProcessor.process_batch_result_decode` (where `process_batch_result` sends a
  decode batch): `kv_committed_len += accept length` (`_resolve_spec_v2_tokens`), output_ids, the finish
  checks (max_new_tokens; a stop token inside an accepted run) and `release_kv_cache` for requests
  that finished.
Stand-ins only for what needs weights or a GPU: DFlashWorkerV2's base `__init__` (it loads the draft
model; `dflash_init` sets the state its round methods read), the target forward (`_verify`: greedy
next token f(x) = x + 1 mod V, 300 absorbing; makes prepare_for_verify's edits to the batch, writes each
tree node's token into its KV slot and returns it as the node's hidden feature), the draft runner's
forward (stores the block's tokens in the draft KV at the block's slots, as a real draft forward
overwrites them, and drafts the target's chain, ranked second behind 300 at every third depth, so
accepted paths leave the first-child chain), the draft model's KV projection (identity), the KV
buffers (one token id per slot), streams and events.
Checked every round (failures listed in the output): for every live request, the target and the draft
KV read through req_to_token at [0, kv_committed_len) is its prompt and emitted tokens (the committed
KV is the accepted path, in position order) and kv_committed_len == prompt + output - 1; the allocator
neither leaks nor double-frees: the free list has no repeats and none of the owned slots, no slot is
owned by two live rows (a live request owns req_to_token[row, :kv_allocated_len]), available_size ==
total - owned, and a finished request holds no row. At the end: the outputs equal the target's greedy
decoding, the finish lengths SGLang recorded, and the pools are whole again.
usage: python drive_round_v2_pool.py move:BUDGET|reorder:BUDGET ...  -> one JSON line per case
(reorder sets DDTREE_KV_COMMIT=reorder: the commit rewrites req_to_token rows instead of moving KV).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import traceback
import types
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
import stand_ins  # noqa: E402  (beside this file)

stand_ins.install()

import torch  # noqa: E402

import scheduler_path  # noqa: E402  (stands in what scheduler.py imports and run_batch never uses)
from drive_round import greedy_chain  # noqa: E402
from successor_model import MASK, V, draft_block_logits, successor, target_logits  # noqa: E402
from scheduler_path import SchedulerUnderTest, _Quiet  # noqa: E402

from sglang.srt.layers.logits_processor import LogitsProcessorOutput  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.scheduler_components.batch_result_processor import (  # noqa: E402
    SchedulerBatchResultProcessor,
)
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode  # noqa: E402
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler  # noqa: E402
from sglang.srt.speculative import dflash_worker_v2  # noqa: E402
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker  # noqa: E402
from sglang.srt.speculative.ddtree import verify_graphs, worker_v2  # noqa: E402
from sglang.srt.speculative.ddtree.kernels import accept_walk  # noqa: E402
from sglang.srt.speculative.ddtree.table_fence import TableFence, barrier_slot  # noqa: E402
from sglang.srt.speculative.ddtree.worker import worker_class  # noqa: E402
from sglang.srt.speculative.dflash_info import DFlashVerifyInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

REPO = HERE.parents[1]
TARGET, DRAFT = REPO / "fixtures/models/tiny-qwen3", REPO / "fixtures/models/tiny-dflash-draft"
ROWS, CONTEXT, MAX_ROUNDS = 8, 1024, 60
SIZE = ROWS * CONTEXT  # KV slots
# (prompt length, last prompt token, max_new_tokens, stop token): every request finishes, at different
# rounds; the last one on a stop token inside an accepted run (the KV past it is committed, then freed).
REQUESTS = ((10, 5, 80, None), (20, 290, 17, None), (30, 299, 120, None), (14, 40, 1000, 63))
KV_ENV = "DDTREE_KV_COMMIT"
READS: set[str] = set()  # stood-in attributes the result processor read


class SlotTokens:
    """A KV buffer stand-in: the token whose KV each slot holds (-1 = never written)."""

    def __init__(self, size: int):
        self.tok = torch.full((size + 1,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        self.tok[tgt_loc] = self.tok[src_loc].clone()

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None, **kwargs) -> None:
        self.tok[loc] = cache_k.reshape(len(loc), -1)[:, 0].round().long()

    def set_kv_buffer_prefix_valid(self, layer, loc_2d, commit_lens, cache_k, cache_v, k_scale=None, v_scale=None,
                                   **kwargs) -> None:
        """Each row's first `commit_lens` entries only, as MHATokenToKVPool.set_kv_buffer_prefix_valid."""
        live = torch.arange(loc_2d.shape[1])[None, :] < commit_lens.to(torch.int64)[:, None]
        values = cache_k.reshape(loc_2d.numel(), -1)[:, 0].round().long().view(loc_2d.shape)
        self.tok[loc_2d[live]] = values[live]


class DraftRunner:
    """Stands in for the draft TpModelWorker's runner and model (identity KV projection)."""

    def __init__(self, req_to_token_pool, allocator, draft_kv: SlotTokens):
        config = json.loads((DRAFT / "config.json").read_text())
        self.model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace(**config))
        self.req_to_token_pool, self.token_to_kv_pool_allocator = req_to_token_pool, allocator
        self.token_to_kv_pool, self.attn_backend, self.device = draft_kv, object(), "cpu"
        attn = types.SimpleNamespace(
            kv_proj_only=lambda h: (h, h), apply_k_norm=lambda k: k, apply_k_rope=lambda pos, k: k,
            num_kv_heads=1, head_dim=1, attn=types.SimpleNamespace(k_scale=None, v_scale=None, layer_id=0),
        )
        self.model = types.SimpleNamespace(
            layers=[types.SimpleNamespace(self_attn=attn)], project_target_hidden=lambda h: h,
            prepare_context_hidden_for_kv=lambda layer, h: h,
        )

    def forward(self, forward_batch, **kwargs):
        """The draft forward over `[bonus, MASK...]`: its features are the draft logits (the target
        lm_head is the identity). The target's chain is ranked first, but second behind 300 at every
        third depth."""
        bs = forward_batch.batch_size
        ids = forward_batch.input_ids.view(bs, -1)
        assert bool((ids[:, 1:] == MASK).all()), "the draft block is [bonus, MASK...]"
        self.token_to_kv_pool.tok[forward_batch.out_cache_loc.long()] = ids.reshape(-1)  # the block's KV
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=draft_block_logits(ids)))


def make_target(req_to_token_pool, allocator):
    """Stands in for the target TpModelWorker (weights, GPU), holding the real pools."""
    shard = types.SimpleNamespace(num_org_elements=V, num_added_elements=0, org_vocab_start_index=0)
    lm_head = types.SimpleNamespace(weight=torch.eye(V), tp_size=1, shard_indices=shard)
    model = types.SimpleNamespace(get_input_embeddings=lambda: (lambda ids: torch.zeros(*ids.shape, 4)),
                                  lm_head=lm_head)
    runner = types.SimpleNamespace(
        model=model, attn_backend=object(), decode_cuda_graph_runner=None, graph_runner=None, device="cpu",
        model_config=types.SimpleNamespace(vocab_size=V, context_len=CONTEXT), req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator, memory_pool_config=None,
    )
    return types.SimpleNamespace(device="cpu", tokenizer=None, model_runner=runner)


def server_args(budget: int):
    """The release's resolved server args, installed where the scheduler installs them."""
    args = prepare_server_args([
        "--model-path", str(TARGET), "--speculative-draft-model-path", str(DRAFT), "--device", "cuda",
        "--speculative-algorithm", "DDTREE", "--attention-backend", "triton", "--speculative-ddtree-budget",
        str(budget), "--random-seed", "0", "--page-size", "1", "--disable-overlap-schedule", "--disable-radix-cache",
    ])  # fmt: skip
    if hasattr(args, "resolve_once"):  # 0.5.19+: the record resolves through the published bags
        args.resolve_once()
    set_global_server_args_for_scheduler(args)
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:
        pass
    else:  # 0.5.17+: prepare_for_decode reads the verify width from the published config (get_spec())
        if hasattr(get_context(), "set_server_args"):
            get_context().set_server_args(args)
    return args


def dflash_init(draft_runner):
    """Stands in for DFlashWorkerV2.__init__, which loads the draft model and builds its runner (in 0.5.23
    also its parallel placement): sets the state the DFlash methods a DDTree round calls
    (`_ensure_draft_block_buffers`, `_append_target_hidden_to_draft_kv_by_loc`,
    `_make_next_draft_input_*`) read, as the release's own __init__ sets it on one CPU rank."""

    def init(self, server_args, *args, target_worker=None, **kwargs):
        if "__init__" in vars(BaseSpecWorker):  # 0.5.17+: graph-usage bookkeeping
            BaseSpecWorker.__init__(self)
        self.server_args, self._target_worker = server_args, target_worker
        self.model_runner, self.device, self.page_size, self.tp_rank = target_worker.model_runner, "cpu", 1, 0
        self._draft_worker = types.SimpleNamespace(model_runner=draft_runner, draft_runner=draft_runner)
        self.draft_model_runner, self.draft_model = draft_runner, draft_runner.model
        # DFlash's block: the published width from 0.5.17 (DDTree publishes the block while DFlash
        # builds), the width of the server args it is given before.
        published = verify_graphs.published_draft_tokens()
        self.block_size = int(published if published is not None else server_args.speculative_num_draft_tokens)
        self.speculative_num_draft_tokens = self.block_size
        self._mask_token_id = int(draft_runner.model_config.hf_config.dflash_config["mask_token_id"])
        self.draft_window_size, self.use_compact_draft_cache = None, False
        self._block_pos_offsets = torch.arange(self.block_size, dtype=torch.int64)
        for name in ("block_ids", "block_positions", "block_tokens", "verify_out_cache_loc", "block_end",
                     "seq_lens_cpu"):
            setattr(self, f"_draft_{name}_buf", None)
        self._draft_block_spec_info = DFlashVerifyInput(
            draft_token=torch.empty((0,), dtype=torch.long), positions=torch.empty((0,), dtype=torch.int64),
            draft_token_num=self.block_size, custom_mask=None, capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        self._use_fused_kv_materialize, self._fused_kv_helper = False, None  # not CUDA: the per-layer writer
        self._draft_sampler, self.lilicorr = None, None
        self.draft_parallel_layout = types.SimpleNamespace(tp_group=None, disable_cp=False)  # one rank

    return init


def make_worker(args, target, draft_runner):
    """The class SGLang's create_worker returns, built with the keywords this release's scheduler passes,
    over the stood-in DFlash base __init__; its target forward is `verify` below."""
    cls = SpeculativeAlgorithm.DDTREE.create_worker(args)
    assert cls is worker_class(args)
    one_rank = dict(gpu_id=0, nccl_port=0, target_worker=target, tp_rank=0, dp_rank=None, moe_ep_rank=0,
                    attn_cp_rank=0, moe_dp_rank=0, ps=types.SimpleNamespace(tp_rank=0, dp_rank=None))
    taken = inspect.signature(dflash_worker_v2.DFlashWorkerV2.__init__).parameters
    real_init = dflash_worker_v2.DFlashWorkerV2.__init__
    dflash_worker_v2.DFlashWorkerV2.__init__ = dflash_init(draft_runner)
    try:
        worker = cls(args, **{k: v for k, v in one_rank.items() if k in taken})
    finally:
        dflash_worker_v2.DFlashWorkerV2.__init__ = real_init
    kv = target.model_runner.token_to_kv_pool_allocator.get_kvcache()

    def verify(batch, verify_input, cache_loc_2d, bound_cpu):
        """The target forward over the tree: `_verify`'s and prepare_for_verify's edits to the batch
        (the scheduler's forward isolation undoes them), each node's token stored in its KV slot."""
        batch.out_cache_loc = cache_loc_2d.reshape(-1)
        batch.input_ids, batch.spec_info = verify_input.draft_token, verify_input
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        tokens = verify_input.draft_token.to(torch.int64)
        kv.tok[cache_loc_2d.reshape(-1)] = tokens
        out = LogitsProcessorOutput(next_token_logits=target_logits(tokens), hidden_states=tokens.float()[:, None])
        return out, False

    worker._verify = verify
    return worker


def make_tree_cache(req_to_token_pool, allocator):
    """What the release's scheduler builds with --disable-radix-cache at page size 1 (mem_cache/registry.py)."""
    params = dict(disable=True, req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator, page_size=1)
    try:
        from sglang.srt.mem_cache.chunk_cache import ChunkCache
    except ImportError:  # 0.5.22+: a disabled UnifiedRadixCache over the full-attention component
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        return UnifiedRadixCache(CacheInitParams(**params, tree_components=(ComponentType.FULL,)))
    return ChunkCache(CacheInitParams(**params))


def _kv_field(req, name: str):
    """A KV field of a request: on the Req up to 0.5.15, then in its `req.kv` record (ReqKvInfo) as far as
    that record has it: 0.5.16-0.5.18 the allocated length only (None before the first allocation and
    once released), 0.5.19+ every KV field (req_pool_idx, kv_committed_len, ...)."""
    kv = getattr(req, "kv", None)
    return getattr(kv, name) if kv is not None and hasattr(kv, name) else getattr(req, name, None)


def _set_prefilled(req, prompt_len: int) -> None:
    """The KV lengths alloc_for_extend leaves after a prompt: committed == allocated == prompt."""
    if getattr(req, "kv", False) is None:  # 0.5.16-0.5.18: the record is made at the first allocation
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        required = [f.name for f in dataclasses.fields(ReqKvInfo)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        req.kv = ReqKvInfo(**dict.fromkeys(required, 0))
    for name in ("kv_committed_len", "kv_allocated_len"):
        kv = getattr(req, "kv", None)
        setattr(kv if kv is not None and hasattr(kv, name) else req, name, prompt_len)


def prefill(req_to_token_pool, allocator, tree_cache, worker, kv: SlotTokens, draft_kv: SlotTokens):
    """The running batch as prefill and DFlash's prefill round leave it: each prompt's slots allocated
    and in its req_to_token row, its target and draft KV written, the first token emitted, the seed
    token carried in DFlash's own draft state. Returns (batch, prompts)."""
    reqs, prompts = [], []
    for i, (n, last, max_new, stop) in enumerate(REQUESTS):
        prompt = [7] * (n - 1) + [last]
        params = SamplingParams(max_new_tokens=max_new, temperature=0.0, stop_token_ids=[stop] if stop else None,
                                ignore_eos=stop is None)
        params.normalize(None)  # as the tokenizer manager does
        params.verify(V)
        req = Req(f"r{i}", "", array("q", prompt), params, vocab_size=V)  # array[int], as Req declares
        req_to_token_pool.alloc([req])
        slots = allocator.alloc(n)
        req_to_token_pool.req_to_token[_kv_field(req, "req_pool_idx"), :n] = slots.to(torch.int32)
        kv.tok[slots], draft_kv.tok[slots] = torch.tensor(prompt), torch.tensor(prompt)
        _set_prefilled(req, n)
        req.output_ids.append(int(successor(torch.tensor(last))))
        reqs.append(req)
        prompts.append(prompt)
    batch = ScheduleBatch.init_new(
        reqs, req_to_token_pool, allocator, tree_cache,
        model_config=types.SimpleNamespace(vocab_size=V, is_encoder_decoder=False), enable_overlap=False,
        spec_algorithm=SpeculativeAlgorithm.DDTREE,
    )
    seq_lens = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    batch.forward_mode = ForwardMode.DECODE
    batch.req_pool_indices = torch.tensor([_kv_field(r, "req_pool_idx") for r in reqs], dtype=torch.int64)
    if "req_pool_indices_cpu" in ScheduleBatch.__dataclass_fields__:
        batch.req_pool_indices_cpu = batch.req_pool_indices.clone()
    batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens.clone(), seq_lens.clone(), int(seq_lens.sum())
    batch.orig_seq_lens = seq_lens.to(torch.int32)
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, V)
    # The seed token is `verified_id` in 0.5.14, `bonus_tokens` after.
    taken = inspect.signature(worker._make_next_draft_input_prefill).parameters
    seed = "verified_id" if "verified_id" in taken else "bonus_tokens"
    batch.spec_info = worker._make_next_draft_input_prefill(
        **{seed: torch.tensor([r.output_ids[0] for r in reqs])}, seq_lens=seq_lens.clone())
    return batch, prompts


class _Sink(_Quiet):
    """scheduler_path's stand-in that also absorbs counter updates (`reporter.n += k` leaves k)."""

    def __add__(self, other):
        return other

    __radd__ = __add__


class ResultProcessor(SchedulerBatchResultProcessor):
    """The release's result processor with the real pools, tree cache, worker and server args; the rest
    (metrics, output streaming) stood in, every such read recorded."""

    def __init__(self, **real):
        for name, value in real.items():  # a frozen dataclass (slotted in some releases)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        READS.add(f"processor.{name}")
        return _Sink()


def make_scheduler(worker, args, req_to_token_pool, allocator, tree_cache) -> SchedulerUnderTest:
    scheduler = SchedulerUnderTest(worker, overlap=False)
    scheduler.server_args, scheduler.tree_cache = args, tree_cache
    scheduler.token_to_kv_pool_allocator, scheduler.req_to_token_pool = allocator, req_to_token_pool
    scheduler.enable_hierarchical_cache = False
    scheduler.batch_result_processor = ResultProcessor(
        is_generation=True, enable_overlap=False, enable_overlap_mlx=False, server_args=args,
        token_to_kv_pool_allocator=allocator, tree_cache=tree_cache, req_to_token_pool=req_to_token_pool,
        model_worker=worker, draft_worker=worker, hisparse_coordinator=None, decode_offload_manager=None,
        disaggregation_mode=scheduler_path.scheduler_module.DisaggregationMode.NULL,
    )
    return scheduler


def free_slots(allocator) -> torch.Tensor:
    """The allocator's free list (TokenToKVPoolAllocator: free_pages + release_pages, + an open free group)."""
    parts = [allocator.free_pages, getattr(allocator, "release_pages", torch.empty(0, dtype=torch.int64))]
    if not getattr(allocator, "is_not_in_free_group", True):
        parts += list(allocator.free_group)
    return torch.cat([p.to(torch.int64) for p in parts])


class Checks:
    """The per-round checks (module docstring); `failures` lists what differed, with the round."""

    def __init__(self, reqs, prompts, req_to_token_pool, allocator, kv: SlotTokens, draft_kv: SlotTokens):
        self.reqs, self.prompts, self.pool, self.allocator = reqs, prompts, req_to_token_pool, allocator
        self.kv, self.draft_kv = kv, draft_kv
        self.failures: list[str] = []
        self.pool_states = self.request_rounds = 0

    def pool_partition(self, when: str) -> None:
        """What the live rows own (req_to_token[row, :kv_allocated_len]) and the free list partition the pool."""
        self.pool_states += 1
        table = self.pool.req_to_token
        live = [r for r in self.reqs if not r.finished()]
        owned = [table[_kv_field(r, "req_pool_idx"), : _kv_field(r, "kv_allocated_len")] for r in live]
        owned = torch.cat(owned).long() if owned else torch.empty(0, dtype=torch.int64)
        free, problems = free_slots(self.allocator), []
        if owned.unique().numel() != owned.numel():
            problems.append(f"{owned.numel() - owned.unique().numel()} slots owned twice")
        if free.unique().numel() != free.numel():
            problems.append(f"{free.numel() - free.unique().numel()} slots on the free list twice (double free)")
        both = torch.isin(owned, free)
        if bool(both.any()):
            problems.append(f"{int(both.sum())} owned slots on the free list, e.g. {owned[both][:8].tolist()}")
        if bool(((owned < 1) | (owned > SIZE)).any()):
            problems.append("an owned slot outside the pool")
        if self.allocator.available_size() != SIZE - owned.numel():
            problems.append(f"available {self.allocator.available_size()} != {SIZE} - {owned.numel()} owned "
                            f"(leaked {SIZE - owned.numel() - self.allocator.available_size()})")
        problems += [f"{r.rid} finished but holds row {_kv_field(r, 'req_pool_idx')}"
                     for r in self.reqs if r.finished() and _kv_field(r, "req_pool_idx") is not None]
        if problems:
            self.failures.append(f"{when}: " + "; ".join(problems))

    def committed_kv(self, when: str) -> None:
        """Each live request's target and draft KV through req_to_token at [0, kv_committed_len) is its
        prompt and emitted tokens (the last emitted token, the next root, has no KV yet)."""
        for r, prompt in zip(self.reqs, self.prompts):
            if r.finished():
                continue
            self.request_rounds += 1
            n, out = _kv_field(r, "kv_committed_len"), list(r.output_ids)
            if n != len(prompt) + len(out) - 1:
                self.failures.append(f"{when}: {r.rid} kv_committed_len {n} != {len(prompt)} + {len(out)} - 1")
            want = prompt + out[: n - len(prompt)]
            slots = self.pool.req_to_token[_kv_field(r, "req_pool_idx"), :n].long()
            for name, buffer in (("target", self.kv), ("draft", self.draft_kv)):
                got = buffer.tok[slots].tolist()
                bad = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
                if bad is not None or len(got) != len(want):
                    self.failures.append(f"{when}: {r.rid} {name} KV at position {bad} holds "
                                         f"{got[bad] if bad is not None else got[-1:]}, want "
                                         f"{want[bad] if bad is not None else want[-1:]} (committed {n})")


def main(budget: int, kv_commit: str, case: str) -> dict:
    os.environ[KV_ENV] = kv_commit  # read when the worker is built
    args = server_args(budget)
    req_to_token_pool = ReqToTokenPool(size=ROWS, max_context_len=CONTEXT, device="cpu", enable_memory_saver=False)
    kv, draft_kv = SlotTokens(SIZE), SlotTokens(SIZE)
    allocator = TokenToKVPoolAllocator(SIZE, torch.float32, "cpu", kv, need_sort=False)
    tree_cache = make_tree_cache(req_to_token_pool, allocator)
    worker = make_worker(args, make_target(req_to_token_pool, allocator), DraftRunner(req_to_token_pool, allocator,
                                                                                      draft_kv))
    batch, prompts = prefill(req_to_token_pool, allocator, tree_cache, worker, kv, draft_kv)
    reqs = list(batch.reqs)
    scheduler = make_scheduler(worker, args, req_to_token_pool, allocator, tree_cache)
    checks = Checks(reqs, prompts, req_to_token_pool, allocator, kv, draft_kv)
    checks.pool_partition("after prefill")

    accepted = []  # each round's accepted node indices [bs, depth + 1]

    def recording_walk(*a, **kw):
        out = accept_walk(*a, **kw)
        accepted.append(out[0].clone())
        return out

    worker_v2.accept_walk = recording_walk
    # With the reorder, the fence the worker keeps under overlap (patches/table_fence.py): the
    # release's own result processor must call its hook for every finished request, before that
    # request's KV goes back to the allocator.
    hooked: list[tuple[str, int]] = []  # (rid, free slots when the hook ran)
    slot = barrier_slot(type(worker))
    if worker._kv_commit_mode == "reorder" and slot is not None:
        worker._table_fence = TableFence(slot, "cpu")
        hook = worker.prepare_for_kv_cache_release

        def recording_hook(req):
            hooked.append((req.rid, allocator.available_size()))
            hook(req)

        worker.prepare_for_kv_cache_release = recording_hook
    release_hook_before_release = True
    rounds = emitted = request_rounds = off_chain = 0
    finished_at: dict[str, int] = {}
    try:
        while rounds < MAX_ROUNDS and not all(r.finished() for r in reqs):
            batch = scheduler.update_running_batch(batch)  # filter_batch, check_decode_mem, prepare_for_decode
            if batch is None or batch.is_empty():
                checks.failures.append(f"round {rounds + 1}: update_running_batch left no batch to decode")
                break
            rounds += 1
            checks.pool_partition(f"round {rounds} after prepare_for_decode")
            before = {r.rid: len(r.output_ids) for r in batch.reqs}
            result = scheduler.run_batch(batch)
            assert batch.forward_mode.is_decode()  # process_batch_result sends it to the decode branch
            hooks_before = len(hooked)
            scheduler.batch_result_processor.process_batch_result_decode(batch, result)
            if any(free == allocator.available_size() for _, free in hooked[hooks_before:]):
                release_hook_before_release = False  # no release followed the hook in this round
            for i, r in enumerate(batch.reqs):
                n = len(r.output_ids) - before[r.rid]
                emitted, request_rounds = emitted + n, request_rounds + 1
                off_chain += int(any(int(a) != j for j, a in enumerate(accepted[-1][i, :n].tolist())))
                if r.finished():
                    finished_at.setdefault(r.rid, rounds)
            checks.committed_kv(f"round {rounds} after the result")
            checks.pool_partition(f"round {rounds} after the result")
    finally:
        worker_v2.accept_walk = accept_walk

    outputs = [list(map(int, r.output_ids)) for r in reqs]
    through_stop = [list(map(int, r.output_ids_through_stop)) for r in reqs]
    finish_lengths_ok = all(
        len(kept) == (max_new if stop is None else kept.index(stop) + 1 if stop in kept else -1)
        for kept, (_, _, max_new, stop) in zip(through_stop, REQUESTS)
    )
    return {
        "case": case, "kv_commit": worker._kv_commit.mode if worker._kv_commit else None,
        "reorder_blocker": worker._reorder_blocker, "budget": budget, "worker": type(worker).__name__,
        "verify_width": worker.verify_width, "block_size": worker.block_size,
        "equal_to_greedy": outputs == [greedy_chain(o[0], len(o)) for o in outputs],
        "failures": checks.failures[:20], "failure_count": len(checks.failures),
        "checked_pool_states": checks.pool_states, "checked_request_rounds": checks.request_rounds,
        "finished": [r.finished() for r in reqs], "finish_lengths_ok": finish_lengths_ok,
        "finished_at_round": finished_at, "rounds": rounds, "rounds_with_off_chain_paths": off_chain,
        "release_hook": {"fenced": worker._table_fence is not None, "rids": sorted(rid for rid, _ in hooked),
                         "before_release": release_hook_before_release,
                         "waited_for_the_rewrite": bool(hooked) and worker._table_fence is not None
                         and scheduler_path.CURRENT_STREAM.waited[-1:] == [worker._table_fence.event]},
        "tokens_per_round": emitted / max(1, request_rounds),
        "output_lens": [len(o) for o in outputs], "through_stop_lens": [len(t) for t in through_stop],
        "all_free_at_end": bool(torch.equal(free_slots(allocator).sort().values, torch.arange(1, SIZE + 1)))
        and allocator.available_size() == SIZE and req_to_token_pool.available_size() == ROWS,
        "available_at_end": allocator.available_size(), "outputs": outputs,
        "stand_in_reads": sorted(READS | scheduler_path.STAND_IN_READS),
    }


if __name__ == "__main__":
    torch.Tensor.record_stream = lambda self, stream: None  # CPU tensors: no streams to record
    torch.get_device_module = lambda device=None: types.SimpleNamespace(
        current_stream=lambda: scheduler_path.CURRENT_STREAM, Event=scheduler_path.RecordedEvent)
    scheduler_path._parallel_stand_in()
    for case in sys.argv[1:]:
        mode, budget = case.split(":")
        try:
            line = main(int(budget), mode, case)
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            line = {"case": case, "error": traceback.format_exc()[-4000:]}
        print(json.dumps(line), flush=True)
