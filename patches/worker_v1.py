"""DDTree worker for SGLang's v1 DFlash family (`dflash_worker.DFlashWorker`, 0.5.11-0.5.13).

The v1 family runs without the overlap scheduler (DFlash's server-arg validation turns it off for
DDTREE too): the worker mutates the running `ScheduleBatch` in place, and the verify input's
`verify` appends the accepted tokens to each request, frees the unused KV slots and advances the
sequence lengths. DDTree therefore keeps DFlash's `forward_batch_generation` (prefill, the target
verify call, Mamba commit, draft-KV materialisation, the result) and changes one round through three
narrow hooks:
1. `_greedy_sample_from_vocab_parallel_head` (the draft head): the round's tree stage
   (`tree_stage.TreeStage`, as the spec-v2 adapter runs it: draft logits through the target lm_head,
   the vocab top-K, the tree, the tree padded to the verify width). Launched kernel by kernel
   unless DDTREE_GRAPH_TREE_STAGE=1 replays it from one CUDA graph per batch size: on the GPU both
   keep greedy == plain, but the one side-by-side timing of this family (H100, 0.5.13, tiny model,
   2026-12-05) gave the eager stage 4.75 ms a round against 5.76 for the graph, so the graph is not
   the default here (docs/gpu-check.md). DFlash's chain draft gets zeros of the argmax's shape: the
   tree's tokens replace the chain's, so an argmax would be a second read of the logits.
2. `_prepare_for_speculative_decoding`: DFlash's draft runs with its chain verify input left
   unprepared (`ChainInputV1`: no chain slots, no causal mask), and a tree verify input takes its
   place: the hook's padded tree -> `DDTreeVerifyInputV1` (tokens, depth positions, ancestor mask,
   slots of positions `prefix .. prefix + width`).
3. `DDTreeVerifyInputV1.verify` (called by DFlash's `forward_batch_generation` with the target's
   verify logits): posterior per node (`node_sampling.NodeSampler`, as the spec-v2 adapter:
   penalties and bias along each node's path, exact sampling; what it cannot do exactly, such as
   custom logit processors, is refused), `accept_walk`, the accepted tokens appended to each request
   as DFlash does, the accepted nodes' target KV moved to positions `prefix .. prefix + len`, unused
   slots freed, and the accepted nodes' hidden states returned in path order, which DFlash's own
   writer turns into draft KV.
`adapters.V1` names these hooks: the server refuses a release whose DFlash no longer calls them,
or whose signatures or calls drifted from these overrides (`contract.problems`).

Widths and gates as for the spec-v2 adapter (docs/ddtree-runtime.md): the draft runner sees the
drafter's block, the target (graphs, attention, KV) the verify width `max(budget + 1, block)`.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple
from unittest import mock

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.dflash_info import DFlashDraftInput, DFlashVerifyInput
from sglang.srt.speculative.dflash_utils import resolve_dflash_verify_mask_policy
from sglang.srt.speculative.dflash_worker import DFlashWorker

from .kernels import DraftTree, accept_walk
from .kv_commit import KVCommit, commit_mode, reorder_blocker
from .node_sampling import NodeSampler, unsupported_sampling_reason
from .tree_round import draft_server_args, free_past_kept_pages, path_features
from .tree_stage import StageOut, TreeStage
from .tree_verify import DDTreeVerifyInput
from .worker_setup import TreeWorkerSetup, check_validated, draft_block

logger = logging.getLogger(__name__)

@dataclass
class DDTreeVerifyInputV1(DDTreeVerifyInput):
    """The tree's verify input in the v1 contract: DFlash's slot allocation, the tree's accept.

    The worker attaches the unpadded tree (links for the walk, parents and depths for the
    posterior) and its round objects before the verify pass.
    """

    tree: Optional[DraftTree] = None
    tree_size: int = 1
    max_depth: int = 0
    generator: Optional[torch.Generator] = None
    sampler: Optional[NodeSampler] = None
    sampling_backend: Optional[str] = None
    kv_commit: Optional[KVCommit] = None

    def prepare_for_verify(self, batch: ScheduleBatch, page_size: int, *, build_custom_mask: bool = True):
        """DFlash's slot allocation for `draft_token_num` tokens per request, keeping the tree mask.

        `build_custom_mask` tells DFlash whether the backend needs its causal chain mask; a tree
        needs its ancestor mask on every backend, so the tree mask is kept either way.
        """
        tree_mask = self.custom_mask
        super().prepare_for_verify(batch, page_size, build_custom_mask=False)
        self.custom_mask = tree_mask

    def verify(
        self, *, batch: ScheduleBatch, logits_output: Any, page_size: int
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[int]]:
        """Accept along the tree; returns what DFlash's verify returns (same order and meaning)."""
        if batch.forward_mode.is_idle():
            return super().verify(batch=batch, logits_output=logits_output, page_size=page_size)
        bs, width, tree_size = batch.batch_size(), int(self.draft_token_num), self.tree_size
        logits = logits_output.next_token_logits
        device = logits.device
        tree, n = self.tree, self.tree_size
        node_logits = logits.view(bs, width, -1)[:, :n]
        tree_tokens = self.draft_token.view(bs, width)[:, :n]  # root = the bonus token
        positions = batch.seq_lens.to(torch.int64)[:, None] + tree.depth[:, :n]
        node_tokens = self.sampler.posterior(
            node_logits, batch, tree_tokens, tree.parent[:, :n], positions, self.max_depth,
            tree_tokens[:, 0], self.generator, self.sampling_backend,
        )
        accepted_idx, accept_len, _ = accept_walk(
            tree_tokens, tree.first_child, tree.next_sibling, node_tokens, max_depth=self.max_depth
        )
        path_tokens = node_tokens.gather(1, accepted_idx.clamp(min=0))  # [d1 .. d_len, bonus]
        packed = torch.cat([path_tokens, (accept_len + 1).to(path_tokens.dtype)[:, None]], dim=1).cpu()
        commit_lens_cpu, bonus_cpu = _append_to_requests(batch.reqs, packed)
        num_correct_drafts_per_req_cpu = [max(0, n - 1) for n in commit_lens_cpu]
        commit_lens = torch.tensor(commit_lens_cpu, dtype=torch.int32, device=device)
        self.sampler.committed(batch, path_tokens, commit_lens)

        cache_loc_2d = batch.out_cache_loc.view(bs, width).to(torch.int64)
        committed = self.kv_commit(batch.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens,
                                   accepted_idx, accept_len, cache_loc_2d, n)
        slots = committed.to(batch.out_cache_loc.dtype)
        free_past_kept_pages(batch.token_to_kv_pool_allocator, slots, batch.seq_lens, commit_lens, page_size)
        batch.out_cache_loc = slots[torch.arange(width, device=device)[None, :] < commit_lens[:, None]]
        for req, n in zip(batch.reqs, commit_lens_cpu, strict=True):
            req.kv_committed_len += n
            req.kv_allocated_len = req.kv_committed_len
        # The kept slots (positions prefix .. prefix + n) are already in req_to_token: the verify
        # allocation wrote positions prefix .. prefix + width (a reordering commit rewrote them).
        batch.seq_lens.add_(commit_lens.to(batch.seq_lens.dtype))
        batch.seq_lens_cpu.add_(torch.tensor(commit_lens_cpu, dtype=batch.seq_lens_cpu.dtype))
        # Recomputed, not incremented: 0.5.13's filter_batch leaves it None (computed lazily there).
        batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())

        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires target hidden states, but got None.")
        next_target_hidden = path_features(hidden, accepted_idx, width, tree_size, commit_lens)
        logits_output.hidden_states = None
        new_bonus_tokens = torch.tensor(bonus_cpu, dtype=torch.int64, device=device)
        return new_bonus_tokens, commit_lens, next_target_hidden, num_correct_drafts_per_req_cpu


class ChainInputV1(DFlashVerifyInput):
    """DFlash's chain verify input as DFlash's draft builds it inside a DDTree round: never prepared.

    DFlash's draft ends by building its chain's verify input and preparing it: `block` KV slots per
    request and, on backends that read a custom mask (Triton), a causal mask built by a Python loop
    of three launches per request. The tree verify input replaces it at once with its own slots and
    mask, so while `DDTreeWorkerV1` runs that draft, the draft module's name `DFlashVerifyInput` is
    this class (the contract checks, per `adapters.V1`, that DFlash builds it by that name) and none
    of it is done.
    """

    def prepare_for_verify(self, batch: ScheduleBatch, page_size: int, *, build_custom_mask: bool = True):
        """Nothing: `DDTreeVerifyInputV1` allocates the round's slots and builds its mask."""


def _append_to_requests(reqs: list, packed: torch.Tensor) -> Tuple[List[int], List[int]]:
    """Append each request's accepted tokens (last column of `packed` = how many) until it finishes.

    Returns (tokens committed per request, each request's new bonus token).
    """
    commit_lens, bonus = [], []
    for i, req in enumerate(reqs):
        tokens = packed[i, : int(packed[i, -1])].tolist()
        finish = getattr(req, "update_finish_state", None) or req.check_finished  # renamed in 0.5.13
        appended = 0
        for token in tokens:
            req.output_ids.append(int(token))
            appended += 1
            finish()
            if req.finished():
                break
            if req.grammar is not None:
                req.grammar.accept_token(int(token))
        last = req.output_ids[-1] if req.output_ids else req.origin_input_ids[-1]
        commit_lens.append(appended)
        bonus.append(int(last))
        req.spec_verify_ct += 1
        counter = "spec_num_correct_drafts" if hasattr(req, "spec_num_correct_drafts") else "spec_accepted_drafts"
        setattr(req, counter, getattr(req, counter) + max(0, appended - 1))
    return commit_lens, bonus


class DDTreeWorkerV1(TreeWorkerSetup, DFlashWorker):
    """DFlashWorker with a tree verify (see the module docstring)."""

    def __init__(self, server_args: ServerArgs, *args, **kwargs):
        check_validated(server_args)
        block = draft_block(server_args)
        super().__init__(draft_server_args(server_args, block), *args, **kwargs)
        _check_target_graphs(self.target_worker.model_runner)
        ladder = self._set_up_tree(server_args, block, int(server_args.speculative_num_draft_tokens))
        self._staged: Optional[StageOut] = None  # the draft head hook's tree, consumed by the round's prepare
        req_to_token_pool, _ = self.target_worker.get_memory_pool()  # as DFlash's v1 __init__ reaches it
        self._node_sampler = NodeSampler(req_to_token_pool.req_to_token.shape[0], self.device)
        # v1 DFlash never runs under the overlap scheduler (SGLang refuses it); a bad
        # DDTREE_KV_COMMIT fails the start.
        self._kv_commit_mode = commit_mode(reorder_blocker(self.page_size, overlap=False, unfenced=None))
        if self.tp_rank == 0:
            logger.info(
                "DDTREE worker (v1): budget=%d topk=%d draft block=%d verify width=%d",
                self.budget, self.topk, self.block_size, self.verify_width,
            )
            if ladder:  # once, at warning level like the spec-v2 worker's ladder line
                logger.warning("DDTREE auto budget ladder: %d (the v1 DFlash worker of SGLang 0.5.11-0.5.13 "
                               "verifies the widest budget every round; 0.5.14+ chooses per round)", self.budget)

    def _greedy_sample_from_vocab_parallel_head(
        self, *, hidden_states: torch.Tensor, lm_head: Any, chunk_size: int = 256
    ) -> torch.Tensor:
        """DFlash's draft head: runs the round's tree stage on the draft features (rows are
        `bs x (block - 1)`) and gives DFlash's chain zeros of the argmax's shape.

        The stage's head is one GEMM over all rows (`chunk_size`, DFlash's bound on its argmax
        temporaries, does not apply); a root-only tree (budget 0) reads no logits at all."""
        rows, hidden = hidden_states.shape
        self._staged = None
        if rows:
            features = hidden_states.view(rows // (self.block_size - 1), self.block_size - 1, hidden)
            self._staged = self._tree_stage(lm_head)(features)
        return torch.zeros(rows, dtype=torch.int64, device=hidden_states.device)

    def _tree_stage(self, lm_head: Any) -> TreeStage:
        if self._tree_stage_instance is None:  # at the first draft: the lm_head is DFlash's argument
            self._tree_stage_instance = TreeStage(lm_head, self.budget, self.topk, self.verify_width,
                                                  graphs=TreeStage.wanted(default=False))
        return self._tree_stage_instance

    def _prepare_for_speculative_decoding(self, batch: ScheduleBatch, draft_input: DFlashDraftInput):
        if batch.forward_mode.is_decode():  # refuse before DFlash drafts and allocates for the round
            reason = unsupported_sampling_reason(batch.sampling_info, self._sampling_backend)
            if reason:
                raise ValueError(reason)
        # One thread runs a v1 worker's rounds (no overlap scheduler), so the swap is seen by this draft only.
        with mock.patch.object(sys.modules[DFlashWorker.__module__], "DFlashVerifyInput", ChainInputV1):
            super()._prepare_for_speculative_decoding(batch, draft_input)
        if not batch.forward_mode.is_target_verify():  # extend / idle: DFlash left the batch as is
            return
        if self.use_compact_draft_cache:
            raise RuntimeError("DDTREE does not support --speculative-draft-window-size yet.")
        chain = batch.spec_info
        if not isinstance(chain, ChainInputV1):  # adapters.V1's contract check refuses this at start
            raise RuntimeError("DDTREE: DFlash's draft did not build its verify input as dflash_worker.DFlashVerifyInput.")
        bs = batch.batch_size()
        tree, padded = self._stage_out()
        verify_input = DDTreeVerifyInputV1.from_tree(
            padded, chain.draft_token.view(bs, -1)[:, 0], batch.seq_lens,
            int(batch.seq_lens_cpu.sum()),
        )
        if self._kv_commit is None:
            self._kv_commit = KVCommit(batch.token_to_kv_pool_allocator.get_kvcache(), self._kv_commit_mode)
        verify_input.tree, verify_input.tree_size, verify_input.max_depth = tree, self.tree_size, self.max_commit - 1
        verify_input.generator, verify_input.sampler = self._sample_generator, self._node_sampler
        verify_input.sampling_backend, verify_input.kv_commit = self._sampling_backend, self._kv_commit
        verify_input.prepare_for_verify(batch, self.page_size)
        batch.spec_info = verify_input

    def _stage_out(self) -> StageOut:
        """The round's tree and its padded form, from the draft head hook (consumed here)."""
        staged, self._staged = self._staged, None
        if staged is None:
            raise RuntimeError("DDTREE: DFlash's draft pass did not go through the draft head hook.")
        return staged


def _check_target_graphs(target_runner: Any) -> None:
    """Refuse a target whose verify CUDA graphs were captured without a custom mask.

    In the v1 family the target captures its graphs before the speculative worker exists, from
    DFlash's dummy verify input, which carries the mask buffer only where DFlash's mask policy
    wants one (Triton yes, FlashInfer no). Replaying a mask-less graph would verify a chain.
    """
    if getattr(target_runner, "graph_runner", None) is None:
        return
    _, captured_with_mask = resolve_dflash_verify_mask_policy(target_runner.attn_backend)
    if not captured_with_mask:
        raise RuntimeError(
            "DDTREE on this SGLang (v1 DFlash worker) cannot verify a tree inside the target's CUDA "
            f"graphs with the {type(target_runner.attn_backend).__name__} backend: they were captured "
            "without the tree mask. Use --attention-backend triton, or --disable-cuda-graph."
        )
