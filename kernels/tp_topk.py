"""Per-depth draft top-K + log-softmax over a vocab-parallel lm_head: every rank gets the same result.

With tensor parallelism each rank holds one contiguous shard of the original vocabulary, so a rank
sees only its shard's draft logits. Each rank computes its shard's top-K (with global token ids) and
its shard's log-sum-exp (`vocab_topk.topk_parts`), packs them into one int64 payload and all-gathers
it over the TP group (one collective per round); every rank then merges the same gathered bytes
with the same ops, so every rank holds identical (lp, tok) and builds the identical tree
(`tree_build.select_tree` is deterministic).

The merge equals the single-GPU top-K of the full row:
- Tokens and their order exactly: candidates are packed keys (fp32 bits, then reversed global id,
  as in vocab_topk.py), so one descending top-K over all ranks' keys orders by logit and, among
  equal logits, by global token id, across shard boundaries too. Each shard's local order is the
  same total order restricted to it (global id = shard start + local id), so every global top-K
  token is among its shard's top-K.
- Log-probs up to fp32 rounding of the LSE: the row LSE is the log-sum-exp of the shard LSEs, a
  different summation order than one pass over the row (as the single-GPU kernel's own split count
  already varies with the batch). Identical on every rank, which is what the tree needs.

Shards with fewer than K real logits (the last, padded shard; an empty one when the vocabulary is
smaller than the padding) fill their payload with key -1, below every real key, and LSE -inf.
NaN logits are not supported (as in vocab_topk.py).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .vocab_topk import topk_parts

_LOW31 = 2**31 - 1


class TPGroup(Protocol):
    """What the merge needs of SGLang's `GroupCoordinator` (`get_tp_group()`), as DFlash uses it."""

    world_size: int

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor) -> None: ...


def pack_keys(values: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """int64 keys, larger = earlier (logit desc, token asc; -0.0 == +0.0); tokens < 2**31."""
    bits = (values.float() + 0.0).contiguous().view(torch.int32).to(torch.int64)
    ordered = torch.where(bits >= 0, bits + 2**31, -bits - 1)
    return (ordered << 31) | (_LOW31 - tokens.to(torch.int64))


def unpack_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 values, int64 tokens) of `pack_keys` keys."""
    ordered = keys >> 31
    bits = torch.where(ordered >= 2**31, ordered - 2**31, -ordered - 1).to(torch.int32)
    return bits.view(torch.float32), _LOW31 - (keys & _LOW31)


def shard_payload(shard_logits: torch.Tensor, k: int, vocab_start: int) -> torch.Tensor:
    """int64 [bs, D, k + 1]: this shard's top-k keys (global ids), then its LSE's fp32 bits.

    `shard_logits` [bs, D, V_shard] are the logits of tokens `vocab_start .. vocab_start + V_shard`."""
    bs, depth, vocab = shard_logits.shape
    keys = torch.full((bs, depth, k), -1, dtype=torch.int64, device=shard_logits.device)
    lse = torch.full((bs, depth), float("-inf"), dtype=torch.float32, device=shard_logits.device)
    if vocab:
        local = topk_parts(shard_logits, min(k, vocab))
        keys[..., : local.values.shape[-1]] = pack_keys(local.values, local.tokens + vocab_start)
        lse = local.lse
    lse_bits = lse.contiguous().view(torch.int32).to(torch.int64)
    return torch.cat([keys, lse_bits[..., None]], dim=-1)


def merge_payloads(gathered: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lp fp32, tok int64) [bs, D, k] of the whole vocabulary from every rank's payload [R, bs, D, k + 1]."""
    ranks, bs, depth, width = gathered.shape
    k = width - 1
    keys = gathered[..., :k].permute(1, 2, 0, 3).reshape(bs, depth, ranks * k)
    values, tokens = unpack_keys(torch.topk(keys, k, dim=-1).values)  # keys are unique: no tie to break
    shard_lse = gathered[..., k].to(torch.int32).view(torch.float32)
    return values - torch.logsumexp(shard_lse, dim=0)[..., None], tokens


def sharded_topk(shard_logits: torch.Tensor, k: int, vocab_start: int, vocab: int,
                 group: TPGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k (lp, tok) of the full `vocab`-token rows, from this rank's shard; identical on all ranks."""
    if not 1 <= k <= vocab:
        raise ValueError(f"k={k} must be in [1, V={vocab}]")
    if vocab >= 2**31:
        raise ValueError(f"V={vocab} must be below 2**31")
    payload = shard_payload(shard_logits, k, vocab_start)
    gathered = torch.empty((group.world_size * payload.numel(),), dtype=payload.dtype, device=payload.device)
    group.all_gather_into_tensor(gathered, payload.reshape(-1))
    return merge_payloads(gathered.view(group.world_size, *payload.shape))
