"""A plain-torch stand-in for SGLang's short-convolution verify update (`causal_conv1d_update`), the one
GPU-only kernel of a GDN layer's target verify: its Triton kernel does not run under the interpreter,
so a CPU test of SGLang's GDN backend swaps this in and runs everything else (the GDN recurrence, the
Mamba pool, the commit scatter) as SGLang ships it.

It follows the kernel's contract (srt/layers/attention/mamba/causal_conv1d_triton.py, 0.5.15-0.5.23):
x [batch, dim, n] verify rows; with `retrieve_next_token` / `retrieve_next_sibling` it derives each row's
parent in row order (parent[next_token[i]] = i, then parent[next_sibling[i]] = parent[i]; 0 where
no link names a row), writes those parents to `retrieve_parent_token` for the GDN kernel, and
convolves each row along its path; without them rows form a chain. Each row's window (its path's last
`width - 1` inputs) goes to `intermediate_conv_window[intermediate_state_indices[b], row]` in row order,
so a deduplicated (overlapping) window layout keeps the last row's write, as the kernel's one program
per request does; `conv_state` gets the last `width - 1` inputs in row order (the kernel's rolling
write, which the commit then overwrites). Outputs: kernels/tree_recurrence_reference.tree_causal_conv.
"""

from __future__ import annotations

from typing import Optional

import torch

from kernels.tree_recurrence_reference import tree_causal_conv

PAD_SLOT_ID = -1


def parents_from_links(next_token: torch.Tensor, next_sibling: torch.Tensor) -> torch.Tensor:
    """SGLang's parent rule on first-child / next-sibling links: int [batch, n], the first row's 0."""
    parent = torch.zeros_like(next_token)
    for b in range(next_token.shape[0]):
        for i in range(next_token.shape[1]):
            if next_token[b, i] != -1:
                parent[b, next_token[b, i]] = i
            if next_sibling[b, i] != -1:
                parent[b, next_sibling[b, i]] = parent[b, i]
    return parent


def _window(history: torch.Tensor, x: torch.Tensor, parent: list[int], i: int) -> torch.Tensor:
    path = [i]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    return torch.cat([history, x[:, path[::-1]]], dim=1)[:, -history.shape[1]:]


def causal_conv1d_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                         bias: Optional[torch.Tensor] = None, activation: object = None,
                         cache_seqlens: Optional[torch.Tensor] = None,
                         conv_state_indices: Optional[torch.Tensor] = None,
                         num_accept_tokens: Optional[torch.Tensor] = None,
                         intermediate_conv_window: Optional[torch.Tensor] = None,
                         intermediate_state_indices: Optional[torch.Tensor] = None,
                         retrieve_next_token: Optional[torch.Tensor] = None,
                         retrieve_next_sibling: Optional[torch.Tensor] = None,
                         retrieve_parent_token: Optional[torch.Tensor] = None,
                         pad_slot_id: int = PAD_SLOT_ID, **_: object) -> torch.Tensor:
    if cache_seqlens is not None or num_accept_tokens is not None:
        raise NotImplementedError("the stand-in covers the target-verify call only")
    batch, _dim, n = x.shape
    if retrieve_next_token is not None:
        parent = parents_from_links(retrieve_next_token[:, :n], retrieve_next_sibling[:, :n])
        if retrieve_parent_token is not None:
            retrieve_parent_token[:, :n] = parent.to(retrieve_parent_token.dtype)
    else:
        parent = torch.arange(-1, n - 1).expand(batch, n)
    parent = parent.clone().to(torch.int64)
    parent[:, 0] = -1
    silu = activation in (True, "silu", "swish")
    out = torch.zeros_like(x)
    for b in range(batch):
        slot = int(conv_state_indices[b]) if conv_state_indices is not None else b
        if slot == pad_slot_id:
            continue
        history = conv_state[slot].clone()  # [dim, width - 1]
        out[b] = tree_causal_conv(history[None], x[b].T[None], weight, bias, parent[b:b + 1], silu)[0].T
        if intermediate_conv_window is not None:
            row = int(intermediate_state_indices[b])
            links = parent[b].tolist()
            for i in range(n):
                intermediate_conv_window[row, i] = _window(history, x[b], links, i)
        conv_state[slot] = torch.cat([history, x[b]], dim=1)[:, -history.shape[1]:]
    return out
