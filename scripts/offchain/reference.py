"""Plain-torch forward passes of the off-chain oracle's target (Qwen3) and draft (SGLang's DFlash draft
math), read from the state dicts of `offchain_oracle`, with weights and activations rounded to bf16
where SGLang keeps them in bf16. Used to check the construction before anything runs on a GPU.

Qwen3 layer (HF / SGLang): pre-norm attention with per-head RMSNorm on q and k, neox RoPE, softmax
scale head_dim^-0.5, SiLU-gated MLP, final RMSNorm, lm_head. DFlash draft: the same layers over the
block embeddings, attending (non-causally) to the block and to the context KV, which SGLang builds
from `hidden_norm(fc(target features))` through each layer's k/v projections, k_norm and RoPE
(no input_layernorm); final RMSNorm; the target's lm_head.
"""

from __future__ import annotations

import torch

from scripts.offchain.oracle import BLOCK, HEAD_DIM, rope_freqs

EPS = 1e-6
BF16 = torch.bfloat16


def _bf(x: torch.Tensor) -> torch.Tensor:
    return x.to(BF16).float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _bf(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox RoPE on [n, heads, 64]: pairs (p, p + 32) rotated by position * w_p (fp32 tables)."""
    angles = positions.double()[:, None] * rope_freqs(theta)[None, :]
    cos, sin = angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
    x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
    return _bf(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1))


def _qkv(sd: dict, p: str, x: torch.Tensor, positions: torch.Tensor, theta: float):
    n = x.shape[0]
    q = _bf(x @ sd[p + "self_attn.q_proj.weight"].T).view(n, -1, HEAD_DIM)  # query heads = KV heads here
    k = _bf(x @ sd[p + "self_attn.k_proj.weight"].T).view(n, -1, HEAD_DIM)
    v = _bf(x @ sd[p + "self_attn.v_proj.weight"].T).view(n, -1, HEAD_DIM)
    q = rope(rms_norm(q, sd[p + "self_attn.q_norm.weight"]), positions, theta)
    k = rope(rms_norm(k, sd[p + "self_attn.k_norm.weight"]), positions, theta)
    return q, k, v


def _attend(q, k, v, visible: torch.Tensor) -> torch.Tensor:
    scores = torch.einsum("qhd,khd->hqk", q, k) * HEAD_DIM**-0.5
    scores = scores.masked_fill(~visible[None], float("-inf"))
    return _bf(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)).reshape(q.shape[0], -1)


def _mlp(sd: dict, p: str, x: torch.Tensor) -> torch.Tensor:
    gate, up = x @ sd[p + "mlp.gate_proj.weight"].T, x @ sd[p + "mlp.up_proj.weight"].T
    return _bf(_bf(torch.nn.functional.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T)


def bf16_state(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict as the checkpoint stores it (bf16), back in float32 for the math."""
    return {k: _bf(v) for k, v in sd.items()}


def target_logits(sd: dict, tokens: list[int], positions: list[int], visible: torch.Tensor,
                  theta: float, layers: int) -> torch.Tensor:
    """Target logits [n, V] for tokens at `positions`, row i attending to columns visible[i]."""
    pos = torch.tensor(positions)
    h = sd["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(layers):
        p = f"model.layers.{i}."
        q, k, v = _qkv(sd, p, rms_norm(h, sd[p + "input_layernorm.weight"]), pos, theta)
        h = _bf(h + _bf(_attend(q, k, v, visible) @ sd[p + "self_attn.o_proj.weight"].T))
        h = _bf(h + _mlp(sd, p, rms_norm(h, sd[p + "post_attention_layernorm.weight"])))
    return _bf(rms_norm(h, sd["model.norm.weight"]) @ sd["lm_head.weight"].T)


def causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def draft_logits(draft_sd: dict, target_sd: dict, bonus: int, mask_id: int, prefix: int,
                 context_features: torch.Tensor, theta: float, layers: int, block_size: int = BLOCK) -> torch.Tensor:
    """Draft logits [block_size - 1, V] for the block [bonus, MASK x (block_size - 1)] at positions
    prefix.., with the context KV built from `context_features` [prefix, len(capture layers) * HIDDEN]."""
    block = torch.tensor([bonus] + [mask_id] * (block_size - 1))
    pos = torch.arange(prefix, prefix + block_size)
    ctx_pos = torch.arange(prefix)
    ctx = rms_norm(_bf(context_features @ draft_sd["fc.weight"].T), draft_sd["hidden_norm.weight"])
    h = target_sd["model.embed_tokens.weight"][block]
    visible = torch.ones(block_size, prefix + block_size, dtype=torch.bool)  # non-causal block, whole context
    for i in range(layers):
        p = f"layers.{i}."
        q, k, v = _qkv(draft_sd, p, rms_norm(h, draft_sd[p + "input_layernorm.weight"]), pos, theta)
        _, k_ctx, v_ctx = _qkv(draft_sd, p, ctx, ctx_pos, theta)
        out = _attend(q, torch.cat([k_ctx, k]), torch.cat([v_ctx, v]), visible)
        h = _bf(h + _bf(out @ draft_sd[p + "self_attn.o_proj.weight"].T))
        h = _bf(h + _mlp(draft_sd, p, rms_norm(h, draft_sd[p + "post_attention_layernorm.weight"])))
    hidden = rms_norm(h, draft_sd["norm.weight"])[1:]
    return _bf(hidden @ target_sd["lm_head.weight"].T)


def context_features(target_sd: dict, tokens: list[int], theta: float, capture: list[int]) -> torch.Tensor:
    """What DFlash captures from the target for the context: the residual entering each captured layer."""
    pos = torch.arange(len(tokens))
    visible = causal(len(tokens))
    h = target_sd["model.embed_tokens.weight"][torch.tensor(tokens)]
    feats = []
    for i in range(max(capture) + 1):
        if i in capture:
            feats.append(h)
        p = f"model.layers.{i}."
        q, k, v = _qkv(target_sd, p, rms_norm(h, target_sd[p + "input_layernorm.weight"]), pos, theta)
        h = _bf(h + _bf(_attend(q, k, v, visible) @ target_sd[p + "self_attn.o_proj.weight"].T))
        h = _bf(h + _mlp(target_sd, p, rms_norm(h, target_sd[p + "post_attention_layernorm.weight"])))
    return torch.cat(feats, dim=-1)


