"""The stand-in models the round harnesses on real SGLang share: a successor-map target and a drafter
of its chain that ranks the right token second at every third depth (so accepted paths leave the
first-child chain). Plain torch, no SGLang."""

from __future__ import annotations

import torch

V, G, MASK = 512, 300, 3  # vocabulary, the absorbing token, the drafter's mask token


def successor(x: torch.Tensor) -> torch.Tensor:
    """The target's greedy next token: x + 1 (mod V), G absorbing."""
    return torch.where(x == G, G, (x + 1) % V)


def target_logits(last: torch.Tensor) -> torch.Tensor:
    """The stand-in target's next-token logits after tokens `last` [N] -> [N, V]."""
    logits = torch.full((last.numel(), V), -5.0)
    logits[torch.arange(last.numel()), successor(last)] = 5.0
    return logits


def draft_block_logits(ids: torch.Tensor) -> torch.Tensor:
    """The drafter's features for a block `ids` [bs, block] = [bonus, MASK...] -> [bs * block, V]: the
    draft logits themselves (an identity lm_head). Depth d (row d + 1) ranks the target's chain from the
    bonus first, but second behind G at every third depth."""
    bs, block = ids.shape
    logits = torch.full((bs, block, V), -10.0)
    right, rows = ids[:, 0].clone(), torch.arange(bs)
    for d in range(block - 1):
        right = successor(right)
        off = d % 3 == 2
        logits[rows, d + 1, (right + 5) % V] = 1.0
        logits[rows, d + 1, G] = 3.0 if off else 2.0
        logits[rows, d + 1, right] = 2.5 if off else 3.0
    return logits.view(bs * block, V)
