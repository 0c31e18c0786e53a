"""Write tiny random-weight MoE and MLA + MoE targets for the GPU matrix's `arch` suite (issue 51).

usage: python -m scripts.gpu.make_arch_models MODELS_DIR [--arch moe mla]
  MODELS_DIR/target (make_models.py) gives the tokenizer; each target is written beside it:
  target_moe_rand: Qwen3MoeForCausalLM (4 layers, hidden 256, 8 experts, top-2)
  target_mla_rand: DeepseekV3ForCausalLM (4 layers, hidden 256, MLA q/kv LoRA ranks 128, rope dim 32,
                   layer 0 dense, then 8 routed experts top-2 + 1 shared, noaux_tc routing)
Both share the gpurig targets' vocabulary (512), hidden size and depth, so the rig's tiny DFlash
drafter (draft_rand: target_layer_ids [1, 2], num_target_layers 4, the target's embedding and
lm_head) drafts for them unchanged. Weights are N(0, 0.02) (norms 1), seeded, bf16 safetensors,
under the checkpoint names SGLang's loaders read (one tensor per expert).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

VOCAB, HIDDEN, LAYERS, HEADS = 512, 256, 4, 4
EXPERTS, TOP_K, MOE_INTER = 8, 2, 128
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_COMMON = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16",
               bos_token_id=None, rope_theta=10000.0, hidden_act="silu")

CONFIGS: dict[str, dict] = {
    "moe": dict(_COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_key_value_heads=2,
                head_dim=64, intermediate_size=512, moe_intermediate_size=MOE_INTER, num_experts=EXPERTS,
                num_experts_per_tok=TOP_K, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                sliding_window=None, use_sliding_window=False, attention_bias=False),
    "mla": dict(_COMMON, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", num_key_value_heads=HEADS,
                intermediate_size=512, moe_intermediate_size=MOE_INTER, n_routed_experts=EXPERTS,
                num_experts_per_tok=TOP_K, n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1,
                q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                n_group=1, topk_group=1, topk_method="noaux_tc", scoring_func="sigmoid", routed_scaling_factor=1.0,
                norm_topk_prob=True, attention_bias=False, rope_scaling=None),
}


def _mlp(prefix: str, inter: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.gate_proj.weight": (inter, HIDDEN), f"{prefix}.up_proj.weight": (inter, HIDDEN),
            f"{prefix}.down_proj.weight": (HIDDEN, inter)}


def shapes(arch: str) -> dict[str, tuple[int, ...]]:
    """Checkpoint tensor names and shapes of one tiny target."""
    c = CONFIGS[arch]
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
                                       "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        out.update({f"{p}.input_layernorm.weight": (HIDDEN,), f"{p}.post_attention_layernorm.weight": (HIDDEN,)})
        if arch == "moe":
            d, kv = c["head_dim"], c["num_key_value_heads"]
            a = f"{p}.self_attn"
            out.update({f"{a}.q_proj.weight": (HEADS * d, HIDDEN), f"{a}.k_proj.weight": (kv * d, HIDDEN),
                        f"{a}.v_proj.weight": (kv * d, HIDDEN), f"{a}.o_proj.weight": (HIDDEN, HEADS * d),
                        f"{a}.q_norm.weight": (d,), f"{a}.k_norm.weight": (d,),
                        f"{p}.mlp.gate.weight": (EXPERTS, HIDDEN)})
            for e in range(EXPERTS):
                out.update(_mlp(f"{p}.mlp.experts.{e}", MOE_INTER))
            continue
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        out.update({f"{p}.self_attn.q_a_proj.weight": (c["q_lora_rank"], HIDDEN),
                    f"{p}.self_attn.q_a_layernorm.weight": (c["q_lora_rank"],),
                    f"{p}.self_attn.q_b_proj.weight": (HEADS * qk, c["q_lora_rank"]),
                    f"{p}.self_attn.kv_a_proj_with_mqa.weight": (c["kv_lora_rank"] + c["qk_rope_head_dim"], HIDDEN),
                    f"{p}.self_attn.kv_a_layernorm.weight": (c["kv_lora_rank"],),
                    f"{p}.self_attn.kv_b_proj.weight": (HEADS * (c["qk_nope_head_dim"] + c["v_head_dim"]),
                                                        c["kv_lora_rank"]),
                    f"{p}.self_attn.o_proj.weight": (HIDDEN, HEADS * c["v_head_dim"])})
        if i < c["first_k_dense_replace"]:
            out.update(_mlp(f"{p}.mlp", c["intermediate_size"]))
            continue
        out.update({f"{p}.mlp.gate.weight": (EXPERTS, HIDDEN), f"{p}.mlp.gate.e_score_correction_bias": (EXPERTS,)})
        out.update(_mlp(f"{p}.mlp.shared_experts", MOE_INTER * c["n_shared_experts"]))
        for e in range(EXPERTS):
            out.update(_mlp(f"{p}.mlp.experts.{e}", MOE_INTER))
    return out


def weights(arch: str, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes(arch).items():
        if name.endswith(("norm.weight", "layernorm.weight")):
            out[name] = torch.ones(shape)
        elif name.endswith("e_score_correction_bias"):
            out[name] = torch.zeros(shape)
        else:
            out[name] = torch.randn(shape, generator=gen) * 0.02
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", type=Path, help="the folder make_models.py wrote (its target/ gives the tokenizer)")
    ap.add_argument("--arch", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    a = ap.parse_args()
    from safetensors.torch import save_file

    tokenizer = a.models / "target"
    special = json.loads((tokenizer / "config.json").read_text())
    for arch in a.arch:
        folder = a.models / f"target_{arch}_rand"
        folder.mkdir(parents=True, exist_ok=True)
        config = dict(CONFIGS[arch], eos_token_id=special["eos_token_id"], pad_token_id=special["pad_token_id"])
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(weights(arch), str(folder / "model.safetensors"))
        for name in TOKENIZER_FILES:
            if (tokenizer / name).exists():
                shutil.copy2(tokenizer / name, folder / name)
        print(json.dumps({"arch": arch, "folder": str(folder), "tensors": len(shapes(arch))}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
