"""A DFlash block drafter in plain torch, laid out so SGLang's `DFlashDraftModel` loads its weights.

SGLang's DFlash draft (sglang/srt/models/dflash.py) has no embedding or head of its own: it embeds
the block `[anchor, MASK x (block-1)]` with the target's embedding, lets every block token attend
to the whole block (no causal mask) and to K/V projected from the committed context's target
features `hidden_norm(fc(concat(target hidden after each layer in target_layer_ids)))` (the
context features skip `input_layernorm`), and reads draft tokens at block positions 1.. through
the target's lm_head. This module computes the same function for many anchors per training
sequence at once, with the block-diffusion objective (specforge's `OnlineDFlashModel` recipe:
context strictly before the anchor, cross-entropy on block positions 1.., weights decaying with
depth).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * xf).to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (HF Qwen3 / SGLang default): x [b, t, h, d], positions [b, t]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.float()[..., None] * inv  # [b, t, d/2]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, :, None], torch.cat([ang, ang], -1).sin()[:, :, None]
    xf = x.float()
    rot = torch.cat([-xf[..., d // 2:], xf[..., : d // 2]], -1)
    return (xf * cos + rot * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, theta: float) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.theta = heads, kv_heads, head_dim, theta
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, pos_q: torch.Tensor, pos_ctx: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        s = ctx.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        kv_in = torch.cat([ctx, x], 1)
        k = self.k_norm(self.k_proj(kv_in).view(b, s + t, self.kv_heads, self.head_dim))
        v = self.v_proj(kv_in).view(b, s + t, self.kv_heads, self.head_dim)
        q = rope(q, pos_q, self.theta)
        k = rope(k, torch.cat([pos_ctx, pos_q], 1), self.theta)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, eps: float,
                 theta: float) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, eps, theta)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = MLP(hidden, inter)

    def forward(self, x, ctx, pos_q, pos_ctx, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, pos_q, pos_ctx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraft(nn.Module):
    """Parameter names are SGLang's checkpoint names: layers.*, fc.weight, hidden_norm.weight, norm.weight."""

    def __init__(self, *, hidden: int, inter: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                 num_features: int, eps: float, theta: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(hidden, inter, heads, kv_heads, head_dim, eps, theta)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden, eps)
        self.fc = nn.Linear(num_features * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, eps)

    def forward(self, block_embeds: torch.Tensor, target_features: torch.Tensor, pos_block: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """block_embeds [b, N*B, H], target_features [b, S, K*H], pos_block [b, N*B], mask [b, N*B, S+N*B]."""
        ctx = self.hidden_norm(self.fc(target_features))
        pos_ctx = torch.arange(ctx.shape[1], device=ctx.device).expand(ctx.shape[0], -1)
        x = block_embeds
        for layer in self.layers:
            x = layer(x, ctx, pos_block, pos_ctx, mask)
        return self.norm(x)


def sample_anchors(batch: int, seq_len: int, block: int, count: int, gen: torch.Generator,
                   device: torch.device) -> torch.Tensor:
    """`count` distinct sorted anchor positions per row in [1, seq_len - 2]: each has context before it
    and at least one label after it (labels past the sequence end are masked out of the loss)."""
    scores = torch.rand(batch, seq_len - 2, generator=gen, device=device)
    return (scores.argsort(dim=1)[:, :count] + 1).sort(dim=1).values


def block_mask(anchors: torch.Tensor, seq_len: int, block: int) -> torch.Tensor:
    """[b, N*B, S+N*B] bool: a block token sees context strictly before its anchor and its whole block."""
    b, n = anchors.shape
    dev = anchors.device
    q_block = torch.arange(n * block, device=dev) // block
    anchor_of_q = anchors.repeat_interleave(block, dim=1)  # [b, N*B]
    ctx = torch.arange(seq_len, device=dev)[None, None, :] < anchor_of_q[:, :, None]
    kv_block = torch.arange(n * block, device=dev) // block
    own = (q_block[:, None] == kv_block[None, :]).expand(b, -1, -1)
    return torch.cat([ctx, own], dim=2)


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, block: int, mask_id: int,
                 label_ids: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noise ids [anchor, MASK...], positions, labels (label_ids, default ids, at anchor + k) and a
    label-valid mask."""
    b, s = ids.shape
    offs = torch.arange(block, device=ids.device)
    pos = (anchors[:, :, None] + offs).reshape(b, -1)
    valid = (pos < s) & (offs.repeat(anchors.shape[1])[None, :] > 0)
    labels = torch.gather(ids if label_ids is None else label_ids, 1, pos.clamp(max=s - 1))
    noise = torch.full_like(pos, mask_id)
    noise[:, ::block] = torch.gather(ids, 1, anchors)
    return noise, pos, labels, valid


def depth_weights(block: int, gamma: float, device: torch.device) -> torch.Tensor:
    """exp(-(k-1)/gamma) for block position k >= 1 (0 for the anchor): early tokens matter most."""
    k = torch.arange(block, device=device, dtype=torch.float32)
    w = torch.exp(-(k - 1).clamp(min=0) / gamma)
    w[0] = 0.0
    return w


def default_gamma(block: int) -> float:
    """DFlash's loss-decay constant: 7 for block 16, 5 for 10, 4 for 8."""
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block, max(1.0, math.floor(block * 7 / 16)))
