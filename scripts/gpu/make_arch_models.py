"""Write tiny random-weight MoE, MLA + MoE, sliding-window and GDN targets for the GPU matrix's `arch` suite (issue 51).

usage: python -m scripts.gpu.make_arch_models MODELS_DIR [--arch gdn mla moe swa]
  MODELS_DIR/target (make_models.py) gives the tokenizer; each target is written beside it:
  target_moe_rand: Qwen3MoeForCausalLM (4 layers, hidden 256, 8 experts, top-2)
  target_mla_rand: DeepseekV3ForCausalLM (4 layers, hidden 256, MLA q/kv LoRA ranks 128, rope dim 32,
                   layer 0 dense, then 8 routed experts top-2 + 1 shared, noaux_tc routing)
  target_swa_rand: GptOssForCausalLM (4 layers, hidden 256, layers sliding (window 8) / full alternating,
                   attention sinks and q/k/v/o biases, 8 experts top-2 with biases, swiglu_limit 7,
                   no rope scaling, bf16: no quantization_config); DDTREE serves it on triton only
  target_gdn_rand: Qwen3NextForCausalLM (4 layers, hidden 256, Gated DeltaNet on layers 0 and 2 (2 key /
                   4 value heads of 64, conv kernel 4), gated full attention on 1 and 3 (4 heads of 64,
                   2 KV heads, rotary on a quarter), 8 experts top-2 + a gated shared expert); its GDN
                   layers run SGLang's Triton kernels (FLA, and the sgl_kernel / Triton short conv): no
                   FlashInfer
All share the gpurig targets' vocabulary (512), hidden size and depth, so the rig's tiny DFlash
drafter (draft_rand: target_layer_ids [1, 2], num_target_layers 4, the target's embedding and
lm_head) drafts for them unchanged. Weights are N(0, 0.02) (norms 1), seeded, bf16 safetensors,
under the checkpoint names SGLang's loaders read (one tensor per expert; gpt-oss: the experts of a
layer fused, as Hugging Face's bf16 gpt-oss checkpoints are: gate_up_proj [E, hidden, 2 * inter] with
gate and up interleaved, down_proj [E, inter, hidden], one bias row per expert; sinks one per head).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

VOCAB, HIDDEN, LAYERS, HEADS = 512, 256, 4, 4
EXPERTS, TOP_K, MOE_INTER = 8, 2, 128
WINDOW = 8  # gpt-oss's sliding_window (SGLang's window_left is one less): shorter than the matrix's prompts + 32 tokens
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
    # gpt-oss, bf16 (no quantization_config: SGLang's _load_normal_weights). rope_parameters is given, as
    # transformers v5's GptOssConfig fills a missing one with YaRN (factor 32) and SGLang reads
    # rope_parameters["rope_theta"]; intermediate_size is each expert's; experts_per_token is the
    # original checkpoints' name of num_experts_per_tok.
    "swa": dict(_COMMON, architectures=["GptOssForCausalLM"], model_type="gpt_oss", num_key_value_heads=2,
                head_dim=64, intermediate_size=MOE_INTER, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
                experts_per_token=TOP_K, swiglu_limit=7.0, sliding_window=WINDOW,
                layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(LAYERS)],
                attention_bias=True, rms_norm_eps=1e-5, router_aux_loss_coef=0.0, output_router_logits=False,
                rope_parameters={"rope_type": "default", "rope_theta": _COMMON["rope_theta"]}),
    # Qwen3-Next: layer (i + 1) % full_attention_interval == 0 is full attention (layers 1 and 3 here),
    # the others Gated DeltaNet; every layer's MLP is MoE (decoder_sparse_step 1) with a shared expert.
    "gdn": dict(_COMMON, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", num_key_value_heads=2,
                head_dim=64, partial_rotary_factor=0.25, attention_bias=False, full_attention_interval=2,
                linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
                linear_num_value_heads=4, intermediate_size=512, moe_intermediate_size=MOE_INTER,
                shared_expert_intermediate_size=MOE_INTER, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, rope_scaling=None),
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
        if arch == "swa":
            out.update(_gpt_oss_layer(p, c))
            continue
        if arch == "gdn":
            out.update(_qwen3_next_layer(p, c, full=(i + 1) % c["full_attention_interval"] == 0))
            continue
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


def _gpt_oss_layer(p: str, c: dict) -> dict[str, tuple[int, ...]]:
    """One gpt-oss layer beside its norms: q/k/v/o with biases, a sink per head, the router (with
    bias) and the layer's experts fused, with biases (what SGLang's FusedMoE takes transposed)."""
    d, kv, e, inter = c["head_dim"], c["num_key_value_heads"], c["num_local_experts"], c["intermediate_size"]
    a, m = f"{p}.self_attn", f"{p}.mlp"
    return {f"{a}.q_proj.weight": (HEADS * d, HIDDEN), f"{a}.q_proj.bias": (HEADS * d,),
            f"{a}.k_proj.weight": (kv * d, HIDDEN), f"{a}.k_proj.bias": (kv * d,),
            f"{a}.v_proj.weight": (kv * d, HIDDEN), f"{a}.v_proj.bias": (kv * d,),
            f"{a}.o_proj.weight": (HIDDEN, HEADS * d), f"{a}.o_proj.bias": (HIDDEN,), f"{a}.sinks": (HEADS,),
            f"{m}.router.weight": (e, HIDDEN), f"{m}.router.bias": (e,),
            f"{m}.experts.gate_up_proj": (e, HIDDEN, 2 * inter), f"{m}.experts.gate_up_proj_bias": (e, 2 * inter),
            f"{m}.experts.down_proj": (e, inter, HIDDEN), f"{m}.experts.down_proj_bias": (e, HIDDEN)}


def _qwen3_next_layer(p: str, c: dict, full: bool) -> dict[str, tuple[int, ...]]:
    """One Qwen3-Next layer beside its norms: gated full attention (q_proj twice the heads: query and
    gate) with q/k norms, or a Gated DeltaNet (q, k, v, z fused in in_proj_qkvz, b and a in in_proj_ba,
    the depthwise conv1d, A_log, dt_bias, the gated output norm); then the MoE with its shared expert."""
    if full:
        d, kv, a = c["head_dim"], c["num_key_value_heads"], f"{p}.self_attn"
        out = {f"{a}.q_proj.weight": (2 * HEADS * d, HIDDEN), f"{a}.k_proj.weight": (kv * d, HIDDEN),
               f"{a}.v_proj.weight": (kv * d, HIDDEN), f"{a}.o_proj.weight": (HIDDEN, HEADS * d),
               f"{a}.q_norm.weight": (d,), f"{a}.k_norm.weight": (d,)}
    else:
        key = c["linear_num_key_heads"] * c["linear_key_head_dim"]
        value, heads = c["linear_num_value_heads"] * c["linear_value_head_dim"], c["linear_num_value_heads"]
        g = f"{p}.linear_attn"
        out = {f"{g}.in_proj_qkvz.weight": (2 * key + 2 * value, HIDDEN), f"{g}.in_proj_ba.weight": (2 * heads, HIDDEN),
               f"{g}.conv1d.weight": (2 * key + value, 1, c["linear_conv_kernel_dim"]), f"{g}.A_log": (heads,),
               f"{g}.dt_bias": (heads,), f"{g}.norm.weight": (c["linear_value_head_dim"],),
               f"{g}.out_proj.weight": (HIDDEN, value)}
    m = f"{p}.mlp"
    out.update({f"{m}.gate.weight": (EXPERTS, HIDDEN), f"{m}.shared_expert_gate.weight": (1, HIDDEN)})
    out.update(_mlp(f"{m}.shared_expert", c["shared_expert_intermediate_size"]))
    for e in range(EXPERTS):
        out.update(_mlp(f"{m}.experts.{e}", MOE_INTER))
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
