"""The target's token at every tree node, with SGLang's sampling semantics (both worker families).

Plain SGLang adjusts the next-token logits (penalties from the output so far, logit bias), then
samples with temperature / top-k / top-p / min-p. DDTree does the same at every node, with the
node's own path counted as output (`kernels.path_penalties`), then draws exactly with
`kernels.posterior_tokens` (no vocabulary truncation), in SGLang's filter order for the batch:
joint, or on the FlashInfer backend with min-p in the batch top-p over the renormalised top-k set
(`kernels.sequential_top_p`), and with the backend's order of tied logits at a cut (the pytorch
sampler's stable sort keeps the lowest indices, FlashInfer's pivots keep every tied token:
`index_ties`). Under a grammar every node's row is masked by its own grammar row (`tree_grammar`)
before the draw. What cannot be made exact is refused:
`unsupported_sampling_reason` names it, and `NodeSampler.posterior` raises with that message
rather than sample something else.

Output counts: SGLang's penalizers count only the last token of each speculative round, so they
are not plain decoding's counts. `NodeSampler` keeps its own per request slot (req_pool_idx),
on the device: a slot seen with a new rid restarts from the round's root token (the request's
first output: at its first decode round that is its only one; a retracted request restarts, as
SGLang's penalizers do), and `committed` adds each round's emitted tokens. Allocated
(pool x vocab fp32) only once a batch needs penalties. Where the sparse Triton step adjusts the
logits (CUDA), each slot's touched-token list is kept beside its counts (`TouchedLists`: listed at a
restart, extended at each commit), so no round lists them from the whole counts.
"""

from __future__ import annotations

import os

import torch

from .kernels import posterior_tokens
from .kernels.posterior import request_seeds
from .kernels.sequential_top_p import sequential_top_p
from .kernels.path_penalties import Penalties, TouchedLists, apply_path_penalties
from .tree_grammar import apply_node_mask

# Test hook for scripts/gpu/sampling_check.py only: a node with a child emits its first child (the
# draft's top guess) with this probability, a deliberately biased sampler the check must catch.
_TEST_BIAS = float(os.environ.get("DDTREE_TEST_POSTERIOR_BIAS") or 0.0)

_PENALIZERS = {
    "BatchedFrequencyPenalizer": "frequency_penalties",
    "BatchedPresencePenalizer": "presence_penalties",
    "BatchedRepetitionPenalizer": "repetition_penalties",
    "BatchedMinNewTokensPenalizer": "min_new_tokens",
}


def unsupported_sampling_reason(sampling_info, sampling_backend: str | None = None,
                                grammar_masked: bool = False) -> str | None:
    """Why DDTREE cannot sample this batch exactly as plain SGLang would, or None.

    `sampling_backend` is ServerArgs.sampling_backend (None: FlashInfer, SGLang's CUDA default);
    `grammar_masked`: the round masks the tree's nodes with their grammar rows (`tree_grammar`).
    """
    if sampling_info is None:
        return None
    if getattr(sampling_info, "has_custom_logit_processor", False):
        return "DDTREE does not support custom logit processors (they see one row per request, not per tree node)."
    if not grammar_masked and (
            getattr(sampling_info, "vocab_mask", None) is not None or getattr(sampling_info, "grammar_mask", None) is not None
            or any(g is not None for g in (getattr(sampling_info, "grammars", None) or []))):
        return "DDTREE does not support grammar-constrained decoding (the grammar state differs per tree path)."
    if getattr(sampling_info, "has_watermark_candidates", False):
        return "DDTREE does not support watermarking."
    if getattr(sampling_info, "sampling_mask_batch_indices", None) is not None:
        return "DDTREE does not support returning sampling masks."
    return None


def index_ties(sampling_backend: str | None) -> bool:
    """Whether SGLang's sampler for this backend orders tied logits by index (its pytorch sampler sorts)."""
    return sampling_backend == "pytorch"


def renormalises_top_k(sampling_info, sampling_backend: str | None) -> bool:
    """SGLang samples this batch in FlashInfer's min-p order: top-p over the renormalised top-k set."""
    return (sampling_backend in (None, "flashinfer") and bool(sampling_info.need_min_p_sampling)
            and bool(sampling_info.need_top_k_sampling) and bool(sampling_info.need_top_p_sampling))


def _penalizer_tensors(sampling_info) -> dict[str, torch.Tensor]:
    orch = getattr(sampling_info, "penalizer_orchestrator", None)
    if orch is None or not orch.is_required:
        return {}
    out = {}
    for penalizer in orch.penalizers.values():
        attr = _PENALIZERS.get(type(penalizer).__name__)
        if attr is None:
            raise ValueError(f"DDTREE does not support the SGLang penalizer {type(penalizer).__name__}.")
        if penalizer.is_prepared():
            out[attr] = getattr(penalizer, attr).view(-1)
            if attr == "min_new_tokens":
                out["stop_tokens"] = penalizer.stop_token_penalties == float("-inf")
    return out


class NodeSampler:
    """Posterior tokens per node plus the output counts that path penalties need."""

    def __init__(self, pool_size: int, device: torch.device | str, sparse: bool | None = None) -> None:
        """`sparse`: adjust with the Triton step and kept lists (default: on CUDA), else the torch reference."""
        self.pool_size, self.device = pool_size, device
        self.sparse = torch.device(device).type == "cuda" if sparse is None else sparse
        self.counts: torch.Tensor | None = None  # [pool, V] fp32
        self.out_len: torch.Tensor | None = None  # [pool] int64
        self.lists: TouchedLists | None = None  # with `sparse`
        self.owner: list = [None] * pool_size

    def _rows(self, batch, vocab: int, root_tokens: torch.Tensor, stop: torch.Tensor | None,
              bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(each request's row of `counts`, its output length), restarting the rows of new requests
        (their lists from their stop tokens [bs, V] and logit bias [bs, V], where given)."""
        slots = [int(r.req_pool_idx) for r in batch.reqs]
        if self.counts is None:
            self.counts = torch.zeros((self.pool_size, vocab), dtype=torch.float32, device=self.device)
            self.out_len = torch.zeros(self.pool_size, dtype=torch.int64, device=self.device)
            if self.sparse:
                self.lists = TouchedLists(self.pool_size, vocab, self.device)
        fresh = [i for i, (s, r) in enumerate(zip(slots, batch.reqs)) if self.owner[s] != r.rid]
        for i in fresh:
            self.owner[slots[i]] = batch.reqs[i].rid
        idx = batch.req_pool_indices.to(torch.int64)
        if fresh:
            rows = torch.tensor(fresh, dtype=torch.int64, device=self.device)
            new = idx[rows]
            self.counts[new] = 0.0
            self.counts[new, root_tokens.to(torch.int64)[rows]] = 1.0
            self.out_len[new] = 1
            if self.lists is not None:
                self.lists.restart(self.counts, new, None if stop is None else stop[rows],
                                   None if bias is None else bias[rows])
        return idx, self.out_len[idx]

    def committed(self, batch, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        """Count the round's emitted tokens [bs, L] (first `lengths` of each row)."""
        if self.counts is None:
            return
        idx = batch.req_pool_indices.to(torch.int64)
        if self.lists is not None:  # before the counts: a token is listed once, when first counted
            self.lists.append(idx, tokens, lengths)
        valid = torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(torch.int64)[:, None]
        self.counts.index_put_((idx[:, None].expand_as(tokens), tokens.to(torch.int64)), valid.float(), accumulate=True)
        self.out_len[idx] += lengths.to(torch.int64)

    def posterior(self, node_logits: torch.Tensor, batch, tree_tokens: torch.Tensor, parent: torch.Tensor,
                  positions: torch.Tensor, max_depth: int, root_tokens: torch.Tensor,
                  generator: torch.Generator, sampling_backend: str | None = None, grammar_mask=None) -> torch.Tensor:
        """int64[bs, n] token per node from node logits [bs, n, V] (the tree's first n nodes)."""
        logits = self.adjust(node_logits, batch, tree_tokens, parent, max_depth, root_tokens, sampling_backend,
                             grammar_mask)
        return self.draw(logits, batch, tree_tokens, parent, positions, generator, sampling_backend)

    def adjust(self, node_logits: torch.Tensor, batch, tree_tokens: torch.Tensor, parent: torch.Tensor,
               max_depth: int, root_tokens: torch.Tensor, sampling_backend: str | None = None,
               grammar_mask=None) -> torch.Tensor:
        """The logits each node's token is drawn from [bs, n, V]: penalties counted along the node's own
        path and the logit bias (fp32 node logits adjusted where they are), then each node's grammar row
        (`grammar_mask`: the release's `GrammarMask` over the n nodes, `tree_grammar`); refuses what is
        not exact."""
        info = batch.sampling_info
        reason = unsupported_sampling_reason(info, sampling_backend, grammar_masked=grammar_mask is not None)
        if reason:
            raise ValueError(reason)
        logits = self._penalised(node_logits, batch, tree_tokens, parent, max_depth, root_tokens)
        return logits if grammar_mask is None else apply_node_mask(logits, grammar_mask)

    def _penalised(self, node_logits: torch.Tensor, batch, tree_tokens: torch.Tensor, parent: torch.Tensor,
                   max_depth: int, root_tokens: torch.Tensor) -> torch.Tensor:
        info = batch.sampling_info
        if info is None:
            return node_logits
        pen = _penalizer_tensors(info)
        bias = getattr(info, "logit_bias", None)
        if not (pen or bias is not None):
            return node_logits
        penalties = None
        if pen:
            rows, out_len = self._rows(batch, node_logits.shape[-1], root_tokens, pen.get("stop_tokens"), bias)
            penalties = Penalties(counts=self.counts, rows=rows, frequency=pen.get("frequency_penalties"),
                                  presence=pen.get("presence_penalties"), repetition=pen.get("repetition_penalties"),
                                  out_len=out_len, min_new_tokens=pen.get("min_new_tokens"),
                                  stop_tokens=pen.get("stop_tokens"),
                                  lists=None if self.lists is None else self.lists.state())
        return apply_path_penalties(node_logits, tree_tokens, parent, max_depth, penalties, bias, in_place=True,
                                    sparse=self.sparse)

    def draw(self, logits: torch.Tensor, batch, tree_tokens: torch.Tensor, parent: torch.Tensor,
             positions: torch.Tensor, generator: torch.Generator, sampling_backend: str | None = None) -> torch.Tensor:
        """int64[bs, n] token per node from its adjusted logits (`adjust`), in SGLang's sampling order."""
        info = batch.sampling_info
        if info is None or info.is_all_greedy:
            return logits.argmax(dim=-1)
        seed = info.sampling_seed if getattr(info, "sampling_seed", None) is not None else generator
        temps, top_ks, top_ps = info.temperatures.view(-1), info.top_ks.view(-1), info.top_ps.view(-1)
        if renormalises_top_k(info, sampling_backend):
            out = _draw_per_node(logits, temps, top_ks, sequential_top_p(logits, temps, top_ks, top_ps), seed,
                                 info.min_ps.view(-1), positions)
        else:
            out = posterior_tokens(logits, temps, top_ks, top_ps, seed, min_p=info.min_ps.view(-1), positions=positions,
                                   index_ties=index_ties(sampling_backend))
        return _favour_first_child(out, tree_tokens, parent, generator) if _TEST_BIAS else out


def _draw_per_node(logits: torch.Tensor, temps: torch.Tensor, top_ks: torch.Tensor, node_top_p: torch.Tensor,
                   seed: torch.Tensor | torch.Generator, min_ps: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """`posterior_tokens` with a top-p per node: every node as its own row, with its request's seed, so
    the draws (keyed by seed and position) are the ones the batched call makes."""
    bs, n, vocab = logits.shape
    per_node = lambda t: t.to(logits.device).repeat_interleave(n)  # noqa: E731
    out = posterior_tokens(logits.reshape(bs * n, 1, vocab), per_node(temps), per_node(top_ks), node_top_p.reshape(-1),
                           per_node(request_seeds(seed, bs, logits.device)), min_p=per_node(min_ps),
                           positions=positions.reshape(bs * n, 1))
    return out.view(bs, n)


def _favour_first_child(out: torch.Tensor, tree_tokens: torch.Tensor, parent: torch.Tensor,
                        generator: torch.Generator) -> torch.Tensor:
    n = parent.shape[1]
    children = parent[:, None, :] == torch.arange(n, device=parent.device)[None, :, None]  # [bs, j, i]
    first = children.to(torch.int8).argmax(-1)
    lucky = torch.rand(out.shape, generator=generator, device=generator.device).to(out.device) < _TEST_BIAS
    return torch.where(lucky & children.any(-1), tree_tokens.gather(1, first), out)
