"""The runtime's posterior token per tree node: an argmax when the batch is greedy, the split
kernel (posterior_split.py) on CUDA, the torch reference elsewhere; all make the same draws."""

from __future__ import annotations

import torch

from .posterior_reference import posterior_tokens_torch
from .posterior_split import posterior_tokens_split


def posterior_tokens(target_logits: torch.Tensor, temperature: torch.Tensor | None, top_k: torch.Tensor | None,
                     top_p: torch.Tensor | None, seed: torch.Tensor | torch.Generator | None, *,
                     min_p: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                     all_greedy: bool = False, index_ties: bool = False) -> torch.Tensor:
    """int64[bs, n] posterior token per tree node. `all_greedy` (host-known) is a plain argmax.
    `positions` [bs, n] (the node's sequence position) keys the randomness; `min_p` [bs] defaults
    to off; `index_ties` orders tied logits by index (SGLang's pytorch sampler; module docstring)."""
    if all_greedy:
        return target_logits.argmax(dim=-1)
    if target_logits.is_cuda:
        # the same draws split over the row's blocks, 1.25-3.9x faster sampled on the H200 (docs/kernels.md)
        return posterior_tokens_split(target_logits, temperature, top_k, top_p, seed, min_p=min_p, positions=positions,
                                      index_ties=index_ties)
    return posterior_tokens_torch(target_logits, temperature, top_k, top_p, seed, min_p=min_p, positions=positions,
                                  index_ties=index_ties)
