"""Gated DeltaNet (linear attention) under a tree verify: each node's state from its parent's.

One step of the gated delta rule (per value head; the recurrence of SGLang's FLA kernels, with the
state laid out [K, V] here):
    S <- S * exp(g);  u = beta * (v - S^T k);  S <- S + k u^T;  o = S^T (q * scale)
Decoding a path one token at a time runs that from the request's committed state along the path.
Under a tree verify node i's state is the step from its parent's state (the committed state for the
root), so each node's output equals the one plain decoding gives it on its own path, and the state
to commit after a round is the state of the last accepted node.

Memory: one state per node, `n_nodes * heads * K * V` elements per layer and request (the sequential
walk keeps one); SGLang's verify already keeps that many (its intermediate-state cache holds one
state per verify row, `speculative_num_draft_tokens` of them).

Plain torch, a reference of the contract; nodes must come after their parents (DDTree numbers them
so: a parent is always a lower index).
"""

from __future__ import annotations

import torch


def gated_delta_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     g: torch.Tensor, beta: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """state [..., H, K, V], q/k [..., H, K], v [..., H, V], g/beta [..., H] -> (new state, output [..., H, V])."""
    state = state * torch.exp(g)[..., None, None]
    u = beta[..., None] * (v - torch.einsum("...kv,...k->...v", state, k))
    state = state + k[..., :, None] * u[..., None, :]
    return state, torch.einsum("...kv,...k->...v", state, q * scale)


def tree_gated_delta(state0: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor, parent: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-node outputs [bs, n, H, V] and states [bs, n, H, K, V] of a tree verify.

    state0 [bs, H, K, V] (committed), q/k [bs, n, H, K], v [bs, n, H, V], g/beta [bs, n, H],
    parent int[bs, n] (-1 for the root; each parent a lower index than its child)."""
    bs, n = parent.shape
    if bool((parent >= torch.arange(n, device=parent.device)).any()):
        raise ValueError("every node must come after its parent (parent[i] < i)")
    states = state0.new_empty((bs, n, *state0.shape[1:]))
    outputs = v.new_empty(v.shape, dtype=state0.dtype)
    rows = torch.arange(bs, device=parent.device)
    for i in range(n):
        p = parent[:, i]
        before = torch.where((p >= 0)[:, None, None, None], states[rows, p.clamp(min=0)], state0)
        states[:, i], outputs[:, i] = gated_delta_step(before, q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i], scale)
    return outputs, states


def committed_state(states: torch.Tensor, accepted_idx: torch.Tensor, accept_len: torch.Tensor) -> torch.Tensor:
    """The state to keep after a round: the last accepted node's (accepted_idx[b, accept_len[b]])."""
    last = accepted_idx.gather(1, accept_len.long()[:, None])[:, 0]
    return states[torch.arange(states.shape[0], device=states.device), last]


def tree_causal_conv(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     parent: torch.Tensor, silu: bool = True) -> torch.Tensor:
    """The short causal convolution before the recurrence, per node along its path: out [bs, n, dim].

    conv_state [bs, dim, width - 1] (the committed last inputs, oldest first), x [bs, n, dim],
    weight [dim, width]. A node's window is the last `width` inputs of (committed inputs, its path);
    nothing per node is stored: the window is read back through the parent links."""
    bs, n = parent.shape
    width = weight.shape[1]
    out = torch.empty_like(x)
    links = parent.tolist()
    for b in range(bs):
        for i in range(n):
            path = [i]
            while links[b][path[-1]] >= 0:
                path.append(links[b][path[-1]])
            seq = torch.cat([conv_state[b].T, x[b, path[::-1]]])[-width:]
            y = (seq.T * weight).sum(-1) + (0 if bias is None else bias)
            out[b, i] = torch.nn.functional.silu(y) if silu else y
    return out
