"""Top-p after a renormalised top-k: SGLang's FlashInfer sampling order when a batch uses min-p.

SGLang's FlashInfer sampler filters jointly (keep a token iff its rank < top_k and the mass above it
<= top_p) unless the batch needs min-p; then it renormalises the top-k set, applies top-p to that
renormalised distribution, then min-p (`top_k_renorm_prob`, `top_p_renorm_prob`,
`min_p_sampling_from_probs`). The two orders differ only for rows with both a top-k and a top-p.

Inside the top-k set the mass above a token is the same in both distributions, only measured
against the top-k mass M_k instead of 1, so the sequential keep rule equals the joint one with
`top_p * M_k`: this module computes that per-node top-p, and the joint sampler
(`posterior.posterior_tokens`) then draws exactly the sequential distribution. Min-p needs no
change (a ratio to the row's largest probability, which renormalising keeps). Ties at the top-k cut
count as kept, as in the joint sampler's thresholds.
"""

from __future__ import annotations

import torch


def sequential_top_p(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                     top_p: torch.Tensor) -> torch.Tensor:
    """fp32 [bs, n]: the joint-order top-p of every node that samples top-p after a renormalised top-k.

    logits [bs, n, V] (after penalties); temperature, top_k, top_p [bs]. Rows without both filters
    (top_k <= 0 or >= V, or top_p >= 1) or not sampled keep their own top-p.
    """
    bs, n, vocab = logits.shape
    out = top_p.float()[:, None].expand(bs, n).clone()
    k = top_k.long()
    both = (k > 0) & (k < vocab) & (top_p < 1) & (temperature > 0) & (k != 1)
    if not bool(both.any()):  # host sync: this order is only taken for batches with min-p
        return out
    rows = both.nonzero()[:, 0]
    z = logits[rows].float() / temperature.float()[rows, None, None]
    probs = torch.softmax(z, dim=-1)
    kmax = int(k[rows].max())
    top = probs.topk(kmax, dim=-1).values  # [r, n, kmax], descending
    kth = top.gather(-1, (k[rows] - 1)[:, None, None].expand(-1, n, 1))
    mass_k = torch.where(probs >= kth, probs, 0.0).sum(-1)  # ties at the cut are kept
    out[rows] = top_p.float()[rows, None] * mass_k
    return out
