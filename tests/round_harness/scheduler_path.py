"""Drive DDTreeWorkerV2 through a real SGLang release's `Scheduler.run_batch` on a CPU (test harness).

Run in the release's CPU venv (tests/cpu_serverargs/venv_builder.py) with PYTHONPATH = a patched
install, then tests/cpu_serverargs (the torchvision stand-in). Real: the release's `Scheduler.run_batch` (which calls
`model_worker.forward_batch_generation` with the keywords that release passes, then writes the
result back into the batch) and the Scheduler helpers it calls, `ScheduleBatch`,
`GenerationBatchResult`, `DFlashDraftInputV2`, `SpeculativeAlgorithm.DDTREE`, `worker_class` (with
its contract check), the DDTree round, its kernels and DFlash's `_make_next_draft_input_decode`.
Stand-ins: what needs a GPU or weights (draft and target forwards, KV pools, streams: drive_round's
worker; device events: `RecordedEvent`, which notes when it was recorded) and Scheduler state that
run_batch only hands on (metrics, profiler); every such attribute read is reported, so a new
branch selector shows up in the output.
usage: python scheduler_path.py [auto]  -> one JSON line (`auto`: the `--speculative-ddtree-budget auto`
modes only, `auto_modes`)
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent

import torchvision_stand_in  # noqa: E402

STAND_IN_MODULES = ("setproctitle", "uvicorn", "fastapi", "xgrammar")  # imported with scheduler.py, unused by run_batch
torchvision_stand_in.install(STAND_IN_MODULES)

import torch  # noqa: E402

from sglang.srt.layers.logits_processor import LogitsProcessorOutput  # noqa: E402
from sglang.srt.managers import scheduler as scheduler_module  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.ddtree.worker import worker_class  # noqa: E402
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2  # noqa: E402
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

import drive_round  # noqa: E402

ROUNDS = 6
STAND_IN_READS: set[str] = set()


class _Quiet:
    """A stand-in for scheduler state run_batch only hands on: callable, falsy, a context manager."""

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __bool__(self):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# What DFlash's own `_make_next_draft_input_decode` takes on this release, read here rather than
# from worker_v2's guards, so the harness checks the adapter against the release, not itself.
NEXT_INPUT_TAKES = frozenset(inspect.signature(DFlashWorkerV2._make_next_draft_input_decode).parameters)
SEED = "verified_id" if "verified_id" in NEXT_INPUT_TAKES else "bonus_tokens"


class RecordedEvent:
    """A device event on a CPU: remembers `clock()` (the draft-KV writes so far) when recorded."""

    clock: Callable[[], int] = staticmethod(lambda: 0)

    def __init__(self):
        self.recorded_at: int | None = None

    def record(self, stream=None):
        self.recorded_at = RecordedEvent.clock()

    def synchronize(self):
        pass


class Stream:
    """A device stream on a CPU: notes the events it was made to wait for."""

    def __init__(self):
        self.waited: list = []

    def wait_event(self, event) -> None:
        self.waited.append(event)

    def wait_stream(self, stream) -> None:
        self.waited.append(stream)


CURRENT_STREAM = Stream()  # the stream torch.get_device_module(...).current_stream() gives (main)


class FutureMap:
    """Records what the worker publishes through `on_publish` (the overlap scheduler's relay)."""

    def __init__(self):
        self.published: list[torch.Tensor] = []
        self.spec_algo = SpeculativeAlgorithm.DDTREE

    def publish(self, future_indices, new_seq_lens):
        self.published.append(new_seq_lens.clone())

    def resolve_seq_lens_cpu(self, batch, *args, **kwargs):
        pass

    def stash(self, future_indices, payload):  # the next round's inputs, relayed on the GPU
        pass


class SchedulerUnderTest(scheduler_module.Scheduler):
    """The release's Scheduler holding only the state run_batch's DDTREE decode path reads."""

    def __init__(self, worker, overlap: bool):  # noqa: D107 - no super().__init__: that builds a server
        self.model_worker = worker
        self.enable_overlap = overlap
        self.is_generation = True
        self.spec_algorithm = SpeculativeAlgorithm.DDTREE
        self.forward_ct = 0
        self._sched_idled = False
        self.processed_tokens_counter = 0
        self.scripted_scheduler_hook = None
        self.forward_sleep_time = None
        self.disaggregation_mode = scheduler_module.DisaggregationMode.NULL
        self.enable_pdmux = False
        self.enable_unified_memory = False
        # 0.5.19 / 0.5.20 check self.ps.pp_size == 1 before copying the result to the host (0.5.21+
        # ask get_parallel()): one rank, no pipeline.
        self.ps = types.SimpleNamespace(pp_size=1, pp_rank=0, tp_size=1, tp_rank=0, attn_tp_rank=0, attn_cp_rank=0,
                                        dp_rank=None, dp_size=1)
        self._confidence_budget_prepare = None
        self.pp_group = types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1)
        self.future_map = FutureMap()
        self.result_queue = []
        self.batch_record_buf = [[] for _ in range(4)]
        self.batch_record_ct = 0
        self.device_module = types.SimpleNamespace(Event=_Quiet)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        STAND_IN_READS.add(name)
        return _Quiet()


def _parallel_stand_in() -> None:
    """One process, no pipeline stages: the topology run_batch asks `get_parallel()` about."""
    if hasattr(scheduler_module, "get_parallel"):
        topology = types.SimpleNamespace(pp_size=1, tp_size=1, attn_dp_enabled=False, pp_rank=0, tp_rank=0)
        scheduler_module.get_parallel = lambda: topology


def _batch(worker, prefix: torch.Tensor, bonus: torch.Tensor) -> ScheduleBatch:
    reqs = [types.SimpleNamespace(grammar=None, rid=str(i)) for i in range(len(prefix))]
    batch = ScheduleBatch(reqs=reqs)
    batch.forward_mode = ForwardMode.DECODE
    batch.spec_algorithm = SpeculativeAlgorithm.DDTREE
    batch.req_pool_indices = torch.arange(len(prefix))
    batch.seq_lens = prefix.clone()
    batch.seq_lens_cpu = prefix.clone()
    batch.seq_lens_sum = int(prefix.sum())
    batch.sampling_info = None
    batch.spec_info = worker._make_next_draft_input_decode(**{SEED: bonus}, new_seq_lens=prefix.clone())
    return batch


def _carried_ok(carried: DFlashDraftInputV2, reserved, writes_before: int) -> dict[str, bool]:
    """Whether the round handed back the extra state this release's DFlash round hands back."""
    checks = {}
    if "verify_done" in NEXT_INPUT_TAKES:  # recorded after the round's draft-KV write, its last work
        event = carried.verify_done
        checks["verify_done_recorded_last"] = isinstance(event, RecordedEvent) and event.recorded_at == writes_before + 1
    if "cur_allocated_seq_lens_cpu" in NEXT_INPUT_TAKES:  # the watermark prepare_for_decode reserved
        checks["cur_allocated_is_reserved"] = carried.cur_allocated_seq_lens_cpu is reserved
    return checks


# The logprob mode: per request its top_logprobs_num, token_ids_logprob and temperature (small enough
# that every draw is the successor, so the rounds stay the greedy chain's). Every request names token
# ids: 0.5.18-0.5.20's own result processor fails on a batch mixing requests with and without them
# (their decode helper gives a list, not a tensor, for a request without: fixed in 0.5.21).
TOP_LOGPROBS, TOKEN_IDS_LOGPROBS, TEMPERATURES = (2, 0, 3), ([5, 300], [7, 8], [0]), (0.3, 0.5, 0.4)


def _ask_for_logprobs(batch: ScheduleBatch) -> None:
    """Make the batch's requests the release's own `Req`s asking for log-probs (a top-k, token ids,
    a temperature), and its sampling info the release's own, built from them."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.sampling.sampling_params import SamplingParams

    _server_args()  # the sampling info reads the published config
    reqs = []
    for i, (top, ids, temperature) in enumerate(zip(TOP_LOGPROBS, TOKEN_IDS_LOGPROBS, TEMPERATURES)):
        params = SamplingParams(max_new_tokens=1000, temperature=temperature, ignore_eos=True)
        params.normalize(None)  # as the tokenizer manager does
        req = Req(str(i), "", [7] * int(batch.seq_lens[i]), params, return_logprob=True, top_logprobs_num=top,
                  token_ids_logprob=ids, vocab_size=drive_round.V)
        req.req_pool_idx = i
        reqs.append(req)
    batch.reqs, batch.device, batch.return_logprob = reqs, "cpu", True
    batch.top_logprobs_nums, batch.token_ids_logprobs = list(TOP_LOGPROBS), list(TOKEN_IDS_LOGPROBS)
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, drive_round.V)


def _deliver_logprobs(batch: ScheduleBatch, result, accepted: list[list[int]]) -> None:
    """The release's own result processor hands each request its round's log-probs (its
    `_resolve_spec_v2_tokens`, which also feeds metrics and grammars, answers with `accepted`)."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor as P

    processor = types.SimpleNamespace(_resolve_spec_v2_tokens=lambda result, batch: accepted)
    ids, logprobs = P._normalize_decode_outputs(processor, batch=batch, result=result,
                                                logits_output=result.logits_output, next_token_ids=result.next_token_ids)
    for i, req in enumerate(batch.reqs):
        P._apply_decode_logprobs(processor, req=req, i=i, batch=batch, next_token_id=ids[i],
                                 next_token_logprobs=logprobs, logits_output=result.logits_output)


def _logprobs_match(reqs, outputs: list[list[int]]) -> dict[str, bool]:
    """Each request's log-probs against plain decoding's: token j's log-softmax of the target's row
    after token j - 1, over the request's temperature (its value, its top-k, the ids asked for)."""
    checks = {"token": True, "top": True, "token_ids": True}
    close = lambda a, b: torch.allclose(torch.tensor(a, dtype=torch.float32), b, atol=1e-5)  # noqa: E731
    for req, out, temperature in zip(reqs, outputs, TEMPERATURES):
        state = req.logprob
        rows = torch.log_softmax(drive_round.target_rows(torch.tensor(out[:-1])) / temperature, dim=-1)
        emitted = torch.tensor(out[1:])
        checks["token"] &= state.output_token_logprobs_idx == out[1:] and close(
            state.output_token_logprobs_val, rows.gather(1, emitted[:, None])[:, 0])
        if state.top_logprobs_num:
            top = rows.topk(state.top_logprobs_num, dim=-1)
            checks["top"] &= state.output_top_logprobs_idx == top.indices.tolist() and close(
                state.output_top_logprobs_val, top.values)
        if state.token_ids_logprob is not None:
            checks["token_ids"] &= state.output_token_ids_logprobs_idx == [state.token_ids_logprob] * len(emitted) and \
                close(state.output_token_ids_logprobs_val, rows[:, state.token_ids_logprob])
    return checks


def drive(overlap: bool, fenced: bool = False, logprobs: bool = False) -> dict:
    """Rounds through run_batch; `fenced`: with the reorder commit under overlap, the verify
    publishing a read-done event as SGLang's graph runner does, and after each round the release's
    own WAR barrier and the worker's release hook run, noting which event each waited for;
    `logprobs`: the batch asks for log-probs, and each round's result is delivered by the release's
    result processor (a release without SGLang's speculative log-prob helper raises the refusal)."""
    worker = drive_round.make_worker(7, 7)
    # The real DFlash state the scheduler carries between rounds, and the real host-length bound.
    del worker._make_next_draft_input_decode, worker._prefix_lens_bound_cpu
    verify = worker._verify
    slot = None
    committed = {"round": False}
    fence_placed: list[tuple[bool, int]] = []  # per round: (table rewritten yet, draft-KV writes so far)
    if fenced:
        from sglang.srt.speculative.ddtree.table_fence import TableFence, barrier_slot

        slot = barrier_slot(type(worker))
        worker._kv_commit_mode, worker._table_fence = "reorder", TableFence(slot, "cpu")
        commit, after_write = worker._commit_target_kv, worker._table_fence.after_write

        def noting_commit(*args, **kwargs):
            out = commit(*args, **kwargs)
            committed["round"] = True
            return out

        def noting_after_write(owner):
            fence_placed.append((committed["round"], len(worker.draft_writes)))
            after_write(owner)

        worker._commit_target_kv, worker._table_fence.after_write = noting_commit, noting_after_write

    def real_logits_output(*args):  # the target forward stays a stand-in; its output type is real
        out, can_run_cuda_graph = verify(*args)
        if slot is not None:  # the verify's read-done event, published as the graph runner does
            published = RecordedEvent()
            published.record()
            setattr(getattr(worker, slot[0]), slot[1], published)
        return LogitsProcessorOutput(next_token_logits=out.next_token_logits, hidden_states=out.hidden_states), can_run_cuda_graph

    worker._verify = real_logits_output
    keywords: set[str] = set()
    entry = worker.forward_batch_generation

    def recording_entry(*args, **kwargs):  # records, then calls the real entry with the same call
        keywords.update(kwargs)
        return entry(*args, **kwargs)

    worker.forward_batch_generation = recording_entry
    scheduler = SchedulerUnderTest(worker, overlap)
    prefix = torch.tensor([10, 20, 30])
    bonus = drive_round.successor(torch.tensor([5, 290, 299]))
    batch = _batch(worker, prefix, bonus)
    if logprobs:
        _ask_for_logprobs(batch)
    outputs = [[int(b)] for b in bonus]
    RecordedEvent.clock = staticmethod(lambda: len(worker.draft_writes))
    carried: dict[str, bool] = {}
    fences = {"placed_after_the_rewrite": True, "barrier_waits_for_it": True, "release_waits_for_it": True}
    if fenced:  # the streams and the barrier switch the release's _apply_war_barrier reads
        scheduler.schedule_stream, scheduler.forward_stream, scheduler._war_barrier_enabled = Stream(), Stream(), True
    for _ in range(ROUNDS):
        reserved = None
        if "cur_allocated_seq_lens_cpu" in NEXT_INPUT_TAKES:  # as the release's prepare_for_decode sets it
            reserved = batch.seq_lens_cpu + 2 * worker.verify_width
            batch.spec_info.reserved_seq_lens_cpu = reserved
        writes_before = len(worker.draft_writes)
        result = scheduler.run_batch(batch)
        stride = result.speculative_num_draft_tokens
        ids, lens = result.next_token_ids.view(len(prefix), stride), result.accept_lens
        accepted = [ids[i, : int(lens[i])].tolist() for i in range(len(prefix))]
        if logprobs:
            _deliver_logprobs(batch, result, accepted)
        for out, new in zip(outputs, accepted):
            out += new
        if overlap:  # the overlap scheduler takes the new lengths from what on_publish relayed
            batch.seq_lens = scheduler.future_map.published[-1].clone()
            batch.seq_lens_cpu = batch.seq_lens.clone()
        if not isinstance(batch.spec_info, DFlashDraftInputV2):
            raise AssertionError(f"run_batch left {type(batch.spec_info).__name__} as the batch's draft state")
        for name, ok in _carried_ok(batch.spec_info, reserved, writes_before).items():
            carried[name] = carried.get(name, True) and ok
        if fenced:  # where the round put its event; then the release's own barrier and the release hook
            end = worker._table_fence.event
            fences["placed_after_the_rewrite"] &= fence_placed[-1:] == [(True, writes_before)] and end is not None
            committed["round"] = False
            scheduler._apply_war_barrier()
            worker.prepare_for_kv_cache_release(batch.reqs[0])
            fences["barrier_waits_for_it"] &= scheduler.schedule_stream.waited[-1:] == [end]
            fences["release_waits_for_it"] &= CURRENT_STREAM.waited[-1:] == [end]
    greedy = [drive_round.greedy_chain(out[0], len(out)) for out in outputs]
    return {
        "equal_to_greedy": outputs == greedy,
        "tokens_per_round": sum(len(o) - 1 for o in outputs) / (len(prefix) * ROUNDS),
        "published": len(scheduler.future_map.published),
        "keywords": sorted(keywords),
        "seed_field": SEED,
        "carried": carried,
        "final_seq_lens": batch.seq_lens.tolist(),
        "expected_seq_lens": [int(p) + len(o) - 1 for p, o in zip(prefix, outputs)],
        "slots_kept_once": worker.slots_kept_once,
        **({"fences": fences} if fenced else {}),
        **({"logprobs_match": _logprobs_match(batch.reqs, outputs)} if logprobs else {}),
    }


# `--speculative-ddtree-budget auto` over the 8-token drafter, ladder capped at 32: plain decoding and
# budgets 7, 8, 16, 32 (verify widths 1, 8, 9, 17, 33). The forced widths: an adversarial order
# (widest next to narrowest, plain between trees, repeats) standing for any estimate, however wrong.
AUTO_CAP, AUTO_ROUNDS = 32, 20
FORCED = (32, 0, 7, 7, 16, 0, 0, 32, 8, 32, 7, 0, 16, 8, 8, 32, 7, 16, 0, 32, 7)


def _auto_worker():
    """drive_round's worker for `auto`: the tree built at the widest budget, the round's budget from
    the release's own `AutoBudget` (CUDA graphs off: every ladder width may be verified), and a
    target attention backend carrying the server's verify width as SGLang's Triton backend does."""
    from sglang.srt.speculative.ddtree.auto_budget import AutoBudget
    from sglang.srt.speculative.ddtree.budget_ladder import build_ladder

    worker = drive_round.make_worker(AUTO_CAP, AUTO_CAP)
    ladder = build_ladder(drive_round.BLOCK, AUTO_CAP, AUTO_CAP, 2047, plain=True)
    worker._auto_budget = AutoBudget.for_worker(ladder, drive_round.BLOCK, "cpu", graph_widths=None, token_cap=None)
    worker.target_worker.model_runner.attn_backend = types.SimpleNamespace(num_draft_tokens=worker.verify_width)
    return worker


def drive_auto(overlap: bool, chooser: str) -> dict:
    """`auto` rounds through run_batch. `chooser="forced"`: the chooser replaced by FORCED (any
    sequence of widths must give plain decoding's output); `chooser="costs"`: the real chooser, its
    round timings replaced by a table in which a wide verify is free at batch 1 and at batch 3 costs
    more than the block's tokens it could emit (plain decoding, 1 token for 1, is the best there),
    AUTO_ROUNDS rounds at batch 1 then AUTO_ROUNDS at batch 3 on the same worker."""
    worker = _auto_worker()
    del worker._make_next_draft_input_decode, worker._prefix_lens_bound_cpu
    auto, verify, backend = worker._auto_budget, worker._verify, worker.target_worker.model_runner.attn_backend
    widths: list[tuple[int, int]] = []  # per round: (verify input's width, the backend's width during it)

    def real_logits_output(batch, verify_input, *args):
        widths.append((verify_input.draft_token_num, backend.num_draft_tokens))
        out, can_run_cuda_graph = verify(batch, verify_input, *args)
        return LogitsProcessorOutput(next_token_logits=out.next_token_logits, hidden_states=out.hidden_states), can_run_cuda_graph

    worker._verify = real_logits_output
    chosen: list[tuple[int, int]] = []  # per round: (batch size, budget)
    if chooser == "forced":
        sequence = iter(FORCED)
        auto.chooser.choose = lambda bs: next(sequence)
    else:
        observe = auto.chooser.observe_round
        auto.chooser.observe_round = lambda bs, budget, predicted, accepted, seconds: observe(
            bs, budget, predicted, accepted, 1.0 if bs == 1 else 1.0 + 1.5 * budget)
    choose = auto.chooser.choose

    def noting_choose(bs):
        budget = choose(bs)
        chosen.append((bs, budget))
        return budget

    auto.chooser.choose = noting_choose
    segments = [(3, len(FORCED))] if chooser == "forced" else [(1, AUTO_ROUNDS), (3, AUTO_ROUNDS)]
    equal, emitted, rounds = True, 0, 0
    for bs, n_rounds in segments:
        scheduler = SchedulerUnderTest(worker, overlap)
        prefix = torch.tensor([10, 20, 30])[:bs]
        bonus = drive_round.successor(torch.tensor([5, 290, 299])[:bs])
        batch = _batch(worker, prefix, bonus)
        outputs = [[int(b)] for b in bonus]
        for _ in range(n_rounds):
            result = scheduler.run_batch(batch)
            ids, lens = result.next_token_ids.view(bs, result.speculative_num_draft_tokens), result.accept_lens
            for i, out in enumerate(outputs):
                out += ids[i, : int(lens[i])].tolist()
            if overlap:
                batch.seq_lens = scheduler.future_map.published[-1].clone()
                batch.seq_lens_cpu = batch.seq_lens.clone()
        equal &= outputs == [drive_round.greedy_chain(out[0], len(out)) for out in outputs]
        emitted += sum(len(o) - 1 for o in outputs)
        rounds += bs * n_rounds
    return {"equal_to_greedy": equal, "tokens_per_round": emitted / rounds, "chosen": chosen, "widths": widths,
            "server_width_after": backend.num_draft_tokens, "ladder": list(auto.ladder.budgets),
            "forced": list(FORCED) if chooser == "forced" else None}


def _server_args(extra_args: tuple[str, ...] = ()):
    """The release's resolved ServerArgs for budget 32 over the tiny pair, published where the
    release keeps them process-wide (0.5.17+: config bags; before: the scheduler's global)."""
    from sglang.srt.server_args import prepare_server_args

    models = HERE.parents[1] / "fixtures" / "models"
    server_args = prepare_server_args([
        "--model-path", str(models / "tiny-qwen3"), "--speculative-draft-model-path", str(models / "tiny-dflash-draft"),
        "--device", "cuda", "--attention-backend", "triton", "--speculative-algorithm", "DDTREE",
        "--speculative-ddtree-budget", "32", *extra_args,
    ])  # fmt: skip
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:
        get_context = None
    if get_context is not None and hasattr(get_context(), "set_server_args"):
        get_context().set_server_args(server_args)
    else:  # 0.5.14 has a runtime context for parallel state only, no config bags
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
    return server_args


def _attention_backend(server_args) -> types.SimpleNamespace:
    """A target backend carrying the verify width where the release's Triton backend reads it at
    construction: the published config from 0.5.17, the server args before."""
    from sglang.srt.speculative.ddtree import verify_graphs

    published = verify_graphs.published_draft_tokens()
    return types.SimpleNamespace(num_draft_tokens=published if published is not None
                                 else server_args.speculative_num_draft_tokens)


class RecordingGraphRunner:
    """Stands in for the release's DecodeCudaGraphRunner (capturing needs a GPU), with its keyword
    signature (the construct report checks the release's own has it): records what it was built with."""

    built: list = []

    def __init__(self, model_runner, *, attn_backend=None, speculative_num_steps=None,
                 speculative_num_draft_tokens=None) -> None:
        from sglang.srt.speculative.ddtree import verify_graphs

        backend = attn_backend or model_runner.attn_backend
        self.width = speculative_num_draft_tokens or backend.num_draft_tokens
        RecordingGraphRunner.built.append({
            "width": self.width, "backend_width": backend.num_draft_tokens,
            "server_width": model_runner.server_args.speculative_num_draft_tokens,
            "published": verify_graphs.published_draft_tokens(),
            "runner_backend_is_its_own": model_runner.attn_backend is backend,
        })


def construct(extra_args: tuple[str, ...] = ()) -> dict:
    """DDTreeWorkerV2.__init__ and init_cuda_graphs on the release's resolved (and, 0.5.17+,
    published) config for budget 32 over an 8-token drafter, so the verify width (33) exceeds the
    block: what DFlash's constructor and graph capture would read (they load and run the draft
    model, so they are replaced by recorders here)."""
    from sglang.srt.speculative.ddtree import verify_graphs, worker_v2

    server_args = _server_args(extra_args)
    seen: dict = {}
    base = worker_v2.DFlashWorkerV2

    def dflash_init(self, server_args, *args, **kwargs):
        seen["init_server_args_width"] = server_args.speculative_num_draft_tokens
        seen["init_published_width"] = verify_graphs.published_draft_tokens()
        self._target_worker, self.device, self.block_size = kwargs["target_worker"], "cpu", 8
        # DFlash's constructor reads the resolved page size (0.5.20+: from the published schedule); an
        # unset one resolves to 1 on CUDA in a server (0.5.23: the `_page_size_default` pass).
        self.page_size = worker_v2.resolved_view(server_args).page_size or 1

    def dflash_graphs(self):
        seen["graphs_published_width"] = verify_graphs.published_draft_tokens()

    saved = base.__init__, base.init_cuda_graphs
    base.__init__, base.init_cuda_graphs = dflash_init, dflash_graphs
    try:
        # As in a server: the request pool is attached after the workers are built (the H200 run at
        # 09ff7ad died where the worker read it at construction).
        runner = types.SimpleNamespace(req_to_token_pool=None, server_args=server_args, device="cpu")
        runner.attn_backend = _attention_backend(server_args)
        graphed = not getattr(worker_v2.resolved_view(server_args), "disable_cuda_graph", False)
        runner.decode_cuda_graph_runner = None
        runner._get_attention_backend = lambda init_new_workspace=False: _attention_backend(server_args)
        worker = worker_v2.DDTreeWorkerV2(server_args, target_worker=types.SimpleNamespace(model_runner=runner))
        # The scheduler captures the target's graphs (tp_worker.init_cuda_graphs), then the worker's.
        runner.decode_cuda_graph_runner = RecordingGraphRunner(runner) if graphed else None
        own = runner.attn_backend, runner.decode_cuda_graph_runner
        RecordingGraphRunner.built.clear()
        worker.init_cuda_graphs()
        seen["graphs_built"] = list(RecordingGraphRunner.built)
        seen["target_own_restored"] = (runner.attn_backend, runner.decode_cuda_graph_runner) == own
        seen["server_args_width_after_capture"] = worker_v2.resolved_view(server_args).speculative_num_draft_tokens
        seen["published_after_capture"] = verify_graphs.published_draft_tokens()
        if worker._width_graphs is not None:  # a round at each captured width swaps in its backend, then back
            seen["round_backends"] = {}
            for width in sorted(worker._width_graphs.widths):
                with worker._target_at(width) as backend:
                    seen["round_backends"][width] = [backend.num_draft_tokens,
                                                     runner.decode_cuda_graph_runner.width]
            seen["target_own_after_rounds"] = (runner.attn_backend, runner.decode_cuda_graph_runner) == own
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

        seen["release_runner_takes_width"] = verify_graphs.runner_takes_width(DecodeCudaGraphRunner)
    finally:
        base.__init__, base.init_cuda_graphs = saved
    return {**seen, "verify_width": worker.verify_width, "budget": worker.budget, "topk": worker.topk,
            "published_after": verify_graphs.published_draft_tokens(),
            "record_width_after": worker_v2.resolved_view(server_args).speculative_num_draft_tokens,
            "reorder_blocker": worker._reorder_blocker, "kv_commit_mode": worker._kv_commit_mode,
            "fenced": worker._table_fence is not None,
            "auto_ladder": list(worker._auto_budget.ladder.budgets) if worker._auto_budget else None}


def auto_modes(report: dict) -> None:
    """`--speculative-ddtree-budget auto`: the worker built on the release's resolved config (CUDA
    graphs on and off), and its rounds through run_batch (`drive_auto`)."""
    for mode, overlap, chooser in (("auto_forced", False, "forced"), ("auto_forced_overlap", True, "forced"),
                                   ("auto_costs", False, "costs")):
        try:
            report["modes"][mode] = drive_auto(overlap, chooser)
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            report["modes"][mode] = {"error": traceback.format_exc()[-3000:]}
    for name, extra in (("construct_auto", ()), ("construct_auto_eager", ("--disable-cuda-graph",))):
        try:
            report[name] = construct(("--speculative-ddtree-budget", "auto", *extra))
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            report[name] = {"error": traceback.format_exc()[-3000:]}


def main() -> None:
    torch.Tensor.record_stream = lambda self, stream: None  # CPU tensors: no streams to record
    torch.get_device_module = lambda device=None: types.SimpleNamespace(current_stream=lambda: CURRENT_STREAM, Event=RecordedEvent)
    _parallel_stand_in()
    report: dict = {"worker_class": None, "modes": {}}
    try:
        report["worker_class"] = worker_class(None).__name__
    except Exception as exc:  # noqa: BLE001 - the refusal message is the result
        report["worker_class_error"] = f"{type(exc).__name__}: {exc}"
    if sys.argv[1:] == ["auto"]:
        auto_modes(report)
        print(json.dumps(report))
        return
    try:
        report["construct"] = construct()
    except Exception:  # noqa: BLE001 - reported, the test fails on it
        report["construct"] = {"error": traceback.format_exc()[-3000:]}
    try:
        report["construct_no_overlap"] = construct(("--disable-overlap-schedule",))
    except Exception:  # noqa: BLE001 - reported, the test fails on it
        report["construct_no_overlap"] = {"error": traceback.format_exc()[-3000:]}
    os.environ["DDTREE_KV_COMMIT"] = "reorder"  # what the worker decides under overlap, and why
    try:
        report["construct_reorder"] = construct()
    except Exception:  # noqa: BLE001 - reported, the test fails on it
        report["construct_reorder"] = {"error": traceback.format_exc()[-3000:]}
    del os.environ["DDTREE_KV_COMMIT"]
    for mode, overlap, fenced in (("plain", False, False), ("overlap", True, False), ("overlap_reorder", True, True)):
        if fenced and not report["construct_reorder"].get("fenced"):
            continue  # this release keeps the move under overlap (construct_reorder says why)
        try:
            report["modes"][mode] = drive(overlap, fenced)
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            report["modes"][mode] = {"error": traceback.format_exc()[-3000:]}
    for mode, overlap in (("logprobs", False), ("logprobs_overlap", True)):
        try:
            report["modes"][mode] = drive(overlap, logprobs=True)
        except ValueError as exc:  # the round's refusal, where the release lacks the helper
            report["modes"][mode] = {"refused": str(exc)}
        except Exception:  # noqa: BLE001 - reported, the test fails on it
            report["modes"][mode] = {"error": traceback.format_exc()[-3000:]}
    from sglang.srt.speculative.ddtree.table_fence import release_hook_called

    report["release_hook_called"] = release_hook_called()  # read from the release's result processor
    report["stand_in_reads"] = sorted(STAND_IN_READS)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
