"""DDTree worker for SGLang's spec-v2 DFlash family (`DFlashWorkerV2`, 0.5.14-0.5.23).

DDTree keeps DFlash's draft runner, prefill path and KV materialisation, and replaces one decode
round's verify:
1. Draft: DFlash's draft runner, unchanged, sees `[bonus, MASK x (block-1)]`; DDTree keeps the full
   draft logits (through the target lm_head) where DFlash keeps only their argmax.
2. Tree: the `budget` best prefixes of the per-depth top-K (`kernels.build_tree`).
3. Verify: one target pass over the tree with depth positions and the ancestor mask.
4. Accept: a posterior token at every node (argmax, or a sample; under a grammar from each node's
   masked row: tree_grammar.py, 0.5.17+), walked from the root; a batch
   asking for log-probs gets each emitted token's from its node's logits (round_logprobs.py, 0.5.18+).
5. Commit: the accepted nodes' target KV is moved to the slots of positions `prefix .. prefix+len`
   (a KV copy, as EAGLE does for trees, so any page size keeps its slot layout; or, opted in at page
   size 1, those positions' `req_to_token` entries reordered to the accepted nodes' slots:
   patches/kv_commit.py); the draft KV of those
   positions is materialised from the accepted nodes' target hidden states by DFlash's own writer; the
   bonus token and new lengths seed the next round exactly as DFlash's do.

Widths (set by `validate_ddtree_server_args`): `speculative_dflash_block_size` is the drafter's block
(unset when the verify width is the block itself);
`speculative_num_draft_tokens` is the target's verify width `max(budget + 1, block)`. Below the block
the extra verify rows are padding (root children of nothing, results unread): the scheduler reserves
KV per round from that one width, and the draft block must fit in it as well as the tree. The draft
runner is built from a copy of the server args whose `speculative_num_draft_tokens` is the block, so
its graphs, attention metadata and buffers keep the trained block while every target-side consumer
(verify graphs, attention, KV reservation, scheduler accounting) sees the verify width. From 0.5.17
SGLang serves resolved config from process-wide bags (`runtime_context.get_spec()`) that its
runners read while they are built; the block is published there while the draft runner is built
and while its graphs are captured, and the verify width restored after.

Entry point: the scheduler calls `forward_batch_generation(batch, **kwargs)` with keywords that grew
per release (`on_publish`; `grammar_barrier` from 0.5.17; `pp_proxy_tensors` from 0.5.19). The base
does the whole decode round inline (no narrower decode method exists in 0.5.14-0.5.23), so the
override names every keyword explicitly, hands prefill and idle batches to the base with exactly
the keywords it was given, and runs the DDTree round for decode. `contract.problems` checks at
start that this signature still covers the base's and the scheduler's (`worker.worker_class`).

State handed back each round: 0.5.15+ carry the next round's seed token in the draft input as
`bonus_tokens`; 0.5.14 names it `verified_id` and also wants the KV watermark reserved for this
round (`cur_allocated_seq_lens_cpu`, its next `prepare_for_decode` plans from it) and a
`verify_done` event recorded after the round's last work: with DFlash's overlap the scheduler
skips its global WAR barrier and instead waits on that event before it rewrites `req_to_token`
for the next round. The release guards below pick the shape from the base's signatures, and the
contract checks the branch each release runs.

No host synchronisation inside a round: shapes are fixed by (bs, width), host-side sizes come from the
scheduler's host sequence lengths plus one round of lag.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Callable, Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from .auto_budget import AutoBudget, prefix_tree, verify_width
from .contract import release_takes
from .graph_capture import install_tree_mask_capture
from .budget_ladder import PLAIN, budget_width, mem_cap_bytes
from .verify_graphs import WidthGraphs, published_width
from .verify_tile import install as install_verify_tile
from .server_args import gdn_refusal, has_gdn_layers, has_sliding_window_layers
from .tree_recurrence import install as install_tree_recurrence, steps_as_nodes
from .tree_window import install as install_tree_window
from .kernels import accept_walk
from .kernels.tree_build import root_only_tree
from .kv_commit import KVCommit, commit_mode, reorder_blocker
from .node_sampling import NodeSampler
from .round_logprobs import attach_logprobs, refuse_where_absent
from .table_fence import TableFence, barrier_slot, release_hook_called, unfenced
from .tree_round import (
    draft_server_args,
    path_features,
)
from .tree_grammar import TreeGrammar
from .tree_stage import TreeStage
from .tree_verify import DDTreeVerifyInput, graph_mask_buffer, mask_reads_prefix, pad_tree
from .worker_setup import TreeWorkerSetup, check_validated, draft_block

logger = logging.getLogger(__name__)

# Release guards (patches/contract.py checks the branch each release runs).
# 0.5.14: the seed token is `verified_id`, with a verify-done event and the reserved watermark.
CARRIES_VERIFIED_ID = release_takes(DFlashWorkerV2._make_next_draft_input_decode, "verified_id")
# 0.5.20+: the recurrent-state commit also wants the post-verify lengths.
MAMBA_COMMIT_TAKES_POST_LENS = release_takes(
    DFlashWorkerV2._update_target_mamba_state_after_verify, "seq_lens_post_verify"
)


def resolved_view(server_args: ServerArgs):
    """Where this release's resolved server args are read at run time.

    From 0.5.19 the record keeps the operator's raw input (no width, say) and resolves through
    `resolving_view`, as DFlash reads its own settings; before, the materialised record itself
    carries the resolved values.
    """
    try:
        from sglang.srt.arg_groups.model_override_base import resolving_view
    except ImportError:
        return server_args
    return resolving_view(server_args)


class DDTreeWorkerV2(TreeWorkerSetup, DFlashWorkerV2):
    """DFlashWorkerV2 with a tree verify (see the module docstring)."""

    def __init__(self, server_args: ServerArgs, *args, **kwargs):
        resolved = resolved_view(server_args)
        check_validated(resolved)
        target_worker = kwargs.get("target_worker")
        if target_worker is not None and getattr(target_worker.model_runner, "decode_cuda_graph_runner", None):
            raise RuntimeError(
                "DDTREE: the target's verify CUDA graphs were captured before the DDTree worker "
                "existed, so they lack the tree mask; this SGLang release initialises workers in an "
                "order DDTREE does not support."
            )
        install_tree_mask_capture()
        install_verify_tile()  # the tree-verify tile (DDTREE_VERIFY_TILE): before the target's attention backend binds the kernel
        if has_sliding_window_layers(server_args) and not install_tree_window():
            raise RuntimeError("DDTREE: this target has sliding-window layers, and this SGLang has no Triton extend "
                               "kernel to give each tree node its window along its path")
        self._tree_recurrence = has_gdn_layers(server_args) and gdn_refusal(server_args) is None
        if self._tree_recurrence:
            self._build_target_recurrence_for_trees(target_worker)
        block = draft_block(resolved)
        width = int(resolved.speculative_num_draft_tokens)
        with published_width(block):
            super().__init__(server_args if width == block else draft_server_args(server_args, block), *args, **kwargs)
        ladder = self._set_up_tree(resolved, block, width)
        # Built on first use: SGLang attaches the request pool after the workers are constructed.
        self._node_sampler_instance: NodeSampler | None = None
        self._width_offsets = torch.arange(self.verify_width, device=self.device, dtype=torch.int64)
        overlap = not getattr(resolved, "disable_overlap_schedule", False)
        fence_slot = barrier_slot(type(self))
        # 0.5.14 (the release whose DFlash state carries `verified_id`) skips the WAR barrier for DFlash.
        why_unfenced = unfenced(fence_slot, CARRIES_VERIFIED_ID, release_hook_called()) if overlap else None
        self._reorder_blocker = reorder_blocker(self.page_size, overlap, why_unfenced)
        self._kv_commit_mode = commit_mode(self._reorder_blocker)  # a bad DDTREE_KV_COMMIT fails the start
        # Under overlap a rewritten table is fenced (patches/table_fence.py); the move needs no fence.
        self._table_fence = (
            TableFence(fence_slot, self.device) if overlap and self._kv_commit_mode == "reorder" else None
        )
        self._auto_ladder = ladder
        self._token_cap = getattr(resolved, "chunked_prefill_size", None)
        self._graphs = not getattr(resolved, "disable_cuda_graph", False)
        self._width_graphs: WidthGraphs | None = None  # `auto` with graphs: the target's per width
        # With graphs, `auto` is built once they are captured (init_cuda_graphs): its ladder is what they allow.
        self._auto_budget = AutoBudget.for_worker(
            ladder, block, self.device, graph_widths=None, token_cap=self._token_cap,
        ) if ladder and not self._graphs else None
        logger.info(  # DDTREE runs with --tp-size 1, so this is one line per server
            "DDTREE worker: budget=%d topk=%d draft block=%d verify width=%d",
            self.budget, self.topk, self.block_size, self.verify_width,
        )

    @staticmethod
    def _build_target_recurrence_for_trees(target_worker) -> None:
        """GDN target: its Mamba pool and linear-attention backend are built for a tree (tree_recurrence.py),
        which works only while neither exists yet (SGLang 0.5.14-0.5.23 build both after this worker)."""
        runner = getattr(target_worker, "model_runner", None)
        if getattr(runner, "req_to_token_pool", None) is not None or getattr(runner, "attn_backend", None) is not None:
            raise RuntimeError("DDTREE: the target's Mamba pool or attention backend was built before the DDTree "
                               "worker, so its GDN layers would verify a chain; this SGLang release initialises "
                               "workers in an order DDTREE does not support for GDN targets.")
        if not install_tree_recurrence():
            raise RuntimeError("DDTREE: this SGLang has no linear-attention backend or Mamba pool to build for a tree")

    def init_cuda_graphs(self):
        # The scheduler captures the draft's graphs after construction; where runners read the
        # width from the published config (0.5.17+), they must see the block then too.
        with published_width(int(self.block_size)):
            super().init_cuda_graphs()
        if self._auto_ladder is not None and self._graphs:
            self._capture_verify_widths(self._auto_ladder)

    def _capture_verify_widths(self, ladder) -> None:
        """`auto` with CUDA graphs: a target verify graph per ladder width (within the memory cap);
        the ladder keeps the budgets whose width has one. A target without graphs verifies eagerly."""
        target = self.target_worker.model_runner
        block = int(self.block_size)
        graph_widths, trimmed = None, ()
        if target.decode_cuda_graph_runner is not None:
            self._width_graphs = WidthGraphs(target, self.verify_width)
            self._width_graphs.capture({budget_width(b, block) for b in ladder.budgets}, target.server_args,
                                       mem_cap_bytes())
            graph_widths, trimmed = self._width_graphs.widths, self._width_graphs.trimmed
            logger.warning("DDTREE auto: target verify graphs at widths %s (%.2f GiB beyond the target's own)",
                        sorted(graph_widths), self._width_graphs.used_bytes / 2**30)
        self._auto_budget = AutoBudget.for_worker(ladder, block, self.device, graph_widths, self._token_cap, trimmed)

    def _maybe_build_draft_sampler(self):
        # DDTree needs the whole draft distribution, not DFlash's in-graph argmax.
        return None

    def forward_batch_generation(
        self,
        batch: ScheduleBatch,
        on_publish: Optional[Callable] = None,
        grammar_barrier: Optional[Callable[[], None]] = None,
        pp_proxy_tensors=None,
    ) -> GenerationBatchResult:
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch or batch.forward_mode.is_idle():
            # Only the keywords the scheduler gave: a release whose base lacks one never gets it.
            given = {"on_publish": on_publish, "grammar_barrier": grammar_barrier, "pp_proxy_tensors": pp_proxy_tensors}
            return super().forward_batch_generation(batch, **{k: v for k, v in given.items() if v is not None})
        if pp_proxy_tensors is not None:
            # DFlash's own validation refuses --pp-size > 1, so a decode batch never carries these.
            raise RuntimeError("DDTREE does not support pipeline parallelism (got pp_proxy_tensors).")
        if getattr(batch, "return_logprob", False):
            refuse_where_absent()
        draft_input = batch.spec_info
        if not isinstance(draft_input, DFlashDraftInputV2):
            raise RuntimeError("DDTREE expected DFlashDraftInputV2 state on the running batch.")
        return self._decode_round(batch, draft_input, on_publish, grammar_barrier)

    # --- one decode round -------------------------------------------------------------------

    def _prefix_lens_bound_cpu(self, batch: ScheduleBatch, draft_input: DFlashDraftInputV2) -> torch.Tensor:
        """Host upper bound of each prefix length (the host copy lags at most one round)."""
        if batch.seq_lens_cpu is not None:
            return batch.seq_lens_cpu.to(torch.int64) + self.max_commit
        reserved = getattr(draft_input, "reserved_seq_lens_cpu", None)  # 0.5.15-0.5.18 only
        if reserved is not None:
            return reserved.to(torch.int64)
        return batch.seq_lens.to("cpu", torch.int64)

    def _decode_round(self, batch, draft_input, on_publish, grammar_barrier=None) -> GenerationBatchResult:
        batch.seq_lens.record_stream(torch.get_device_module(self.device).current_stream())
        bs = len(batch.seq_lens)
        prefix_lens = batch.seq_lens
        bound_cpu = self._prefix_lens_bound_cpu(batch, draft_input)

        # The round's budget (`auto`: chosen from finished rounds; the tree is built at the widest).
        budget = self._auto_budget.choose(bs) if self._auto_budget else self.budget
        tree_size = budget + 1
        width = self._auto_budget.width(budget) if self._auto_budget else self.verify_width
        if budget == PLAIN:  # a root-only tree (`auto`'s plain rung, or budget 0) needs no draft pass
            widest = None
            round_tree = root_only_tree(bs, prefix_lens.device)
            tree = pad_tree(round_tree, width)  # `auto`: width 1; budget 0: the block's width
        else:
            staged = self._tree_stage()(self._draft_features(batch, draft_input, bound_cpu))
            widest, round_tree, tree = staged.tree, staged.tree, staged.padded
            if tree_size != self.tree_size:  # a prefix of the widest tree: the best tree of this budget
                round_tree = prefix_tree(staged.tree, tree_size)
                tree = pad_tree(round_tree, width)
        nodes_first_child, nodes_next_sibling = round_tree.first_child, round_tree.next_sibling
        # Grammar requests: the tree goes to the host now, its per-node masks are built after the verify launch.
        grammar = TreeGrammar.start(batch, tree.tokens[:, :tree_size], nodes_first_child, nodes_next_sibling)
        seed = self._seed_tokens(draft_input)
        with self._target_at(width) as attn_backend:
            verify_input = DDTreeVerifyInput.from_tree(
                tree, seed, prefix_lens, int(bound_cpu.sum()), prefix_ones=mask_reads_prefix(attn_backend),
                mask_buffer=graph_mask_buffer(attn_backend), recurrent_links=self._tree_recurrence,
            )
            cache_loc_2d = self._request_slots(batch, prefix_lens, width)
            with verify_width(attn_backend, width):
                logits_output, can_run_cuda_graph = self._verify(batch, verify_input, cache_loc_2d, bound_cpu)

        node_logits = logits_output.next_token_logits.view(bs, width, -1)[:, :tree_size]
        node_logits, posterior = self._posterior(node_logits, batch, tree, prefix_lens, seed, tree_size,
                                                 grammar.mask(grammar_barrier) if grammar else None)
        tree_tokens = tree.tokens[:, :tree_size]
        accepted_idx, accept_len, bonus = accept_walk(
            tree_tokens, nodes_first_child, nodes_next_sibling, posterior, max_depth=self.max_commit - 1
        )
        commit_lens = (accept_len + 1).to(torch.int32)
        out_tokens = posterior.gather(1, accepted_idx.clamp(min=0))
        if getattr(batch, "return_logprob", False):
            attach_logprobs(batch, logits_output, node_logits, accepted_idx, out_tokens)
        self._node_sampler().committed(batch, out_tokens, commit_lens)
        new_seq_lens = prefix_lens + commit_lens.to(prefix_lens.dtype)

        target_backend = self.target_worker.model_runner.attn_backend
        if hasattr(target_backend, "update_mamba_state_after_mtp_verify"):
            # DFlash's commit names steps along the accepted run; the rows holding their states are the
            # accepted path's nodes (exact where the verify ran the GDN tree path; a recurrent target forced
            # without it, Mamba2 or GDN where gdn_refusal says why, verified a chain: not exact).
            with steps_as_nodes(target_backend, accepted_idx):
                if MAMBA_COMMIT_TAKES_POST_LENS:
                    self._update_target_mamba_state_after_verify(
                        batch=batch, seq_lens_pre_verify=prefix_lens, commit_lens=commit_lens,
                        seq_lens_post_verify=new_seq_lens,
                    )
                else:
                    self._update_target_mamba_state_after_verify(
                        batch=batch, seq_lens_pre_verify=prefix_lens, commit_lens=commit_lens
                    )
        if on_publish is not None:
            on_publish(new_seq_lens)

        if width < accepted_idx.shape[1]:  # a plain round verified 1 slot; the commit reads the path's (reserved) ones
            cache_loc_2d = self._request_slots(batch, prefix_lens, accepted_idx.shape[1])
        path_slots = self._commit_target_kv(batch, prefix_lens, accepted_idx, accept_len, cache_loc_2d, tree_size)
        if self._table_fence is not None:  # right after the table's rewrite: the draft-KV write is no hazard
            self._table_fence.after_write(self)
        self._commit_draft_kv(logits_output.hidden_states, accepted_idx, commit_lens, path_slots, prefix_lens,
                              width, tree_size)
        logits_output.hidden_states = None
        if self._auto_budget:  # after the round's last work: its time, its tree's gains, its acceptance
            self._auto_budget.finish(bs, budget, widest, accept_len)

        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=out_tokens.reshape(-1),
            accept_lens=commit_lens,
            can_run_cuda_graph=can_run_cuda_graph,
            next_draft_input=self._next_draft_input(bonus, new_seq_lens, draft_input),
            speculative_num_draft_tokens=int(out_tokens.shape[1]),
            new_seq_lens=new_seq_lens,
        )

    def prepare_for_kv_cache_release(self, req) -> None:
        """SGLang's result processor calls this before it releases a finished request's KV: under
        overlap, with the reorder commit, the release waits for the in-flight round's rewrite of the
        request's table row (patches/table_fence.py)."""
        if self._table_fence is not None:
            self._table_fence.before_release()

    @staticmethod
    def _seed_tokens(draft_input: DFlashDraftInputV2) -> torch.Tensor:
        """Each request's last committed token, the root of this round's draft and tree."""
        return draft_input.verified_id if CARRIES_VERIFIED_ID else draft_input.bonus_tokens

    def _next_draft_input(self, bonus, new_seq_lens, draft_input: DFlashDraftInputV2) -> DFlashDraftInputV2:
        """The state the next round starts from, in this release's DFlash shape (module docstring).

        An `if` / `else` on the guard, not an early return: the contract skips only the branch a
        release does not run.
        """
        if CARRIES_VERIFIED_ID:
            next_input = self._make_next_draft_input_decode(
                verified_id=bonus, new_seq_lens=new_seq_lens,
                cur_allocated_seq_lens_cpu=draft_input.reserved_seq_lens_cpu,
            )
            # Recorded last, as DFlash does: the scheduler's next prepare_for_decode waits on it.
            verify_done = torch.get_device_module(self.device).Event()
            verify_done.record()
            next_input.verify_done = verify_done
        else:
            next_input = self._make_next_draft_input_decode(bonus_tokens=bonus, new_seq_lens=new_seq_lens)
        return next_input

    def _request_slots(self, batch: ScheduleBatch, start: torch.Tensor, width: int) -> torch.Tensor:
        """KV slots of positions `start .. start+width` of each request (reserved by the scheduler)."""
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        positions = start.to(torch.int64)[:, None] + self._width_offsets[:width]
        return req_to_token[batch.req_pool_indices.to(torch.int64)[:, None], positions].to(torch.int64)

    def _tree_stage(self) -> TreeStage:
        if self._tree_stage_instance is None:  # the target model exists by the first round
            self._tree_stage_instance = TreeStage(
                self.target_worker.model_runner.model.lm_head, self.budget, self.topk, self.verify_width,
                graphs=TreeStage.wanted(),
            )
        return self._tree_stage_instance

    def _draft_features(self, batch, draft_input, bound_cpu: torch.Tensor) -> torch.Tensor:
        """DFlash's draft forward over `[bonus, MASK...]`; returns the features [bs, block-1, H] the
        tree stage's draft head turns into logits over this rank's lm_head shard."""
        if self.use_compact_draft_cache:
            raise RuntimeError("DDTREE does not support --speculative-draft-window-size yet.")
        bs = len(batch.seq_lens)
        block = int(self.block_size)
        prefix_lens = batch.seq_lens
        self._ensure_draft_block_buffers(bs)
        block_ids = self._draft_block_ids_buf[:bs]
        block_ids.fill_(int(self._mask_token_id))
        block_ids[:, 0].copy_(self._seed_tokens(draft_input))
        positions_2d = self._draft_block_positions_buf[:bs]
        torch.add(prefix_lens.unsqueeze(1), self._block_pos_offsets, out=positions_2d)
        cache_loc = self._request_slots(batch, prefix_lens, block).reshape(-1)
        seq_lens_cpu = self._draft_seq_lens_cpu_buf[:bs]
        seq_lens_cpu.copy_(bound_cpu)

        target_model = self.target_worker.model_runner.model
        input_embeds = target_model.get_input_embeddings()(block_ids)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=prefix_lens,
            out_cache_loc=cache_loc,
            seq_lens_sum=int(seq_lens_cpu.sum()),
            seq_lens_cpu=seq_lens_cpu,
            positions=positions_2d.reshape(-1),
            input_embeds=input_embeds.view(-1, input_embeds.shape[-1]),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        with torch.inference_mode():
            draft_out = self.draft_model_runner.forward(forward_batch)
        hidden = draft_out.logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash draft model returned no hidden states.")
        return hidden.view(bs, block, -1)[:, 1:, :]

    def _target_at(self, width: int):
        """The target verifies `width` tokens per request: its backend and graphs of that width where
        `auto` captured them (yielded: the backend), else its own."""
        if self._width_graphs is not None:
            return self._width_graphs.use(width)
        return nullcontext(self.target_worker.model_runner.attn_backend)

    def _verify(self, batch, verify_input, cache_loc_2d, bound_cpu):
        """One target forward over the tree; returns (logits output, ran as a CUDA graph)."""
        batch.out_cache_loc = cache_loc_2d.reshape(-1)
        seq_lens_cpu, seq_lens_sum = batch.seq_lens_cpu, batch.seq_lens_sum
        batch.seq_lens_cpu = bound_cpu
        batch.seq_lens_sum = int(bound_cpu.sum())
        try:
            verify_forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker)
        finally:
            batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu, seq_lens_sum
        out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True, skip_attn_backend_init=True
        )
        if out.logits_output.hidden_states is None:
            raise RuntimeError("DDTREE verify requires target hidden states, but got None.")
        return out.logits_output, out.can_run_cuda_graph

    def _node_sampler(self) -> NodeSampler:
        if self._node_sampler_instance is None:
            pool_size = self.model_runner.req_to_token_pool.req_to_token.shape[0]
            self._node_sampler_instance = NodeSampler(pool_size, self.device)
        return self._node_sampler_instance

    def _posterior(self, node_logits, batch, tree, prefix_lens, root_tokens, n,
                   grammar_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Target token at every tree node (the first `n`) with SGLang's sampling semantics
        (patches/node_sampling.py), and the logits it was drawn from: (adjusted node logits [bs, n, V],
        tokens [bs, n])."""
        sampler = self._node_sampler()
        tokens, parent = tree.tokens[:, :n], tree.parent[:, :n]
        positions = prefix_lens.to(torch.int64)[:, None] + tree.depth[:, :n]
        adjusted = sampler.adjust(node_logits, batch, tokens, parent, self.max_commit - 1, root_tokens,
                                  self._sampling_backend, grammar_mask)
        return adjusted, sampler.draw(adjusted, batch, tokens, parent, positions, self._sample_generator,
                                      self._sampling_backend)

    def _commit_target_kv(self, batch, prefix_lens, accepted_idx, accept_len, cache_loc_2d, tree_size) -> torch.Tensor:
        """The accepted nodes' target KV at their path positions (moved, or their slots reordered into
        `req_to_token`: patches/kv_commit.py); returns the path positions' slots [bs, L]."""
        if self._kv_commit is None:
            pool = self.target_worker.model_runner.token_to_kv_pool_allocator.get_kvcache()
            self._kv_commit = KVCommit(pool, self._kv_commit_mode)
        slots = self._kv_commit(self.model_runner.req_to_token_pool.req_to_token, batch.req_pool_indices,
                                prefix_lens, accepted_idx, accept_len, cache_loc_2d, tree_size)
        return slots[:, : accepted_idx.shape[1]].contiguous()

    def _commit_draft_kv(self, hidden, accepted_idx, commit_lens, path_slots, prefix_lens, width, tree_size) -> None:
        """Draft context for the committed positions from the accepted nodes' target features."""
        bs, path_len = accepted_idx.shape
        path_hidden = path_features(hidden, accepted_idx, width, tree_size)
        positions = prefix_lens.to(torch.int64)[:, None] + self._width_offsets[:path_len]
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=path_hidden.reshape(bs * path_len, -1),
            cache_loc=path_slots.reshape(-1),
            positions=positions.reshape(-1),
            cache_loc_2d=path_slots,
            commit_lens=commit_lens,
        )
