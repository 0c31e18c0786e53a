"""Which target architectures DDTREE serves, refuses (and why) or runs only when forced: data.

One row per architecture SGLang's DFlash captures target features for (issue 51), with the config
keys that decide DDTREE's start-up gates (`server_args.hybrid_target_kinds`) so a test can check
each row against the gate, and the attention backends that apply the tree mask in its target
verify. The README's support table is rendered from these rows (`support_table`).

Status:
- "served": the gates admit it and its target verify applies the tree mask on `backends` (and, for GDN
  layers, each node's recurrent state from its parent's); `checked` says where greedy DDTREE == plain
  decoding, or each node's exactness, was shown (or "not run yet").
- "opt-in": refused at start until a DDTree round has run on a real model of it; its tree path is built and each
  piece is shown exact (`checked`), and `--speculative-ddtree-allow-hybrid-unsafe` runs that path.
- "forced": refused at start; `--speculative-ddtree-allow-hybrid-unsafe` runs it with DFlash's
  chain handling of the hybrid layers, not exact (`reason`).
No SGLang import: read by the runtime, the tests and the docs alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["served", "opt-in", "forced"]

# Backends whose target verify applies DDTree's tree mask for a multi-head (MHA / GQA) target
# (capabilities.TREE_MASK_ATTENTION_BACKENDS) and, below, for an MLA target (SGLang 0.5.15's code).
MHA_TREE_BACKENDS = ("triton", "flashinfer")
MLA_TREE_BACKENDS = ("triton",)
# MLA backends whose target verify does not apply a custom mask, with what it does instead
# (SGLang 0.5.15, srt/layers/attention/).
MLA_REFUSED_BACKENDS: dict[str, str] = {
    "flashinfer": "FlashInferMLAAttnBackend plans the verify as a causal prefill without the custom mask "
                  "(flashinfer_mla_backend.py: 'TODO: Support topk > 1 with custom mask')",
    "flashmla": "FlashMLABackend runs the verify as a causal multi-token decode and supports topk=1 only",
    "cutlass_mla": "CutlassMLABackend runs the verify through the causal decode kernel, no custom mask",
    "trtllm_mla": "TRTLLMMLABackend runs the verify as a causal multi-token decode (no custom mask)",
    "tokenspeed_mla": "TokenspeedMLABackend is TRTLLMMLABackend's verify (no custom mask)",
    "fa3": "FlashAttentionBackend applies a tree only through EAGLE's topk > 1 cascade, which DDTree "
           "does not drive",
}

# Backends on which DDTREE gives a sliding-window layer each node's window along its tree path
# (patches/tree_window.py wraps Triton's extend kernel), and why the others cannot.
SWA_TREE_BACKENDS = ("triton",)
SWA_REFUSED_BACKENDS: dict[str, str] = {
    "flashinfer": "FlashInfer's sliding-window wrappers measure window_left from a query's row in the verify, "
                  "not from the node's position, and DDTREE does not rewrite them",
}
SWA_REASON = (
    "sliding-window layers: SGLang measures a verify query's window from its row (prefix + node index), "
    "not from the node's position (prefix + depth); DDTREE wraps Triton's extend kernel so each node "
    "sees its window along its own path (patches/tree_window.py, exact on 0.5.15's kernel on a CPU: "
    "tests/test_tree_window_sglang.py), and the SWA KV pool commits the accepted nodes "
    "(tests/test_swa_commit_sglang.py). Triton only, SGLang 0.5.14+; sinks and shared KV ride along "
    "unchanged but have not run"
)
GDN_REASON = (
    "Gated DeltaNet layers: the DDTree worker builds the target's linear-attention backend and Mamba pool for "
    "a tree (SGLang's EAGLE-tree path: each node's short convolution along its path and its recurrent state "
    "from its parent's, one dense conv window per verify row), hands it the tree's first-child / next-sibling "
    "links, and commits the last accepted node's state and window (patches/tree_recurrence.py). Exact on "
    "SGLang's own backend, pool and GDN kernel on a CPU (tests/test_tree_recurrence_backend_sglang.py); "
    "SGLang 0.5.14+, Triton GDN kernels and a fixed budget only. The round's glue runs on a CPU "
    "round harness with a stand-in recurrent target (tests/test_ddtree_round_recurrent.py), but no round has "
    "run on a real GDN model yet (no GPU run), so it is opt-in until one has"
)
_GDN_CPU = ("CPU only, not run on a GPU: SGLang's hybrid linear-attention backend, Mamba pool and GDN verify kernel "
            "(interpreted; the short-convolution update stood in by torch) give every tree node its path's output "
            "and commit the last accepted node's state, on 0.5.14-0.5.16 and 0.5.18-0.5.23 "
            "(tests/test_tree_recurrence_backend_sglang.py)")


@dataclass(frozen=True)
class Architecture:
    model_type: str
    name: str
    targets: str  # public targets with DFlash drafters
    layers: str  # attention and MLP kinds, in a user's words
    status: Status
    reason: str  # why served / why refused
    config: dict[str, Any] = field(default_factory=dict)  # the config keys the gates read
    mla: bool = False
    window: bool = False  # has sliding-window layers
    gdn: bool = False  # has Gated DeltaNet (linear attention) layers
    checked: str = "not run yet"

    @property
    def backends(self) -> tuple[str, ...]:
        """Attention backends DDTREE accepts for it (none when refused; an opt-in row's when opted in)."""
        if self.status == "forced":
            return ()
        if self.window:
            return SWA_TREE_BACKENDS
        return MLA_TREE_BACKENDS if self.mla else MHA_TREE_BACKENDS


_DENSE = "the verify is multi-head attention with the tree mask; the MLP sees one row per node"
_MOE = "as dense: experts route each node's row on its own, the verify attention applies the tree mask"
_SWA_CPU = ("on a CPU, SGLang 0.5.14's and 0.5.15's Triton backend on a hybrid SWA pool, and 0.5.23's extend kernel, "
            "give every tree node its path's window exactly (tests/test_tree_window_backend_sglang.py, "
            "tests/test_tree_window_sglang.py)")
_MLA = ("MLA verify applies the tree mask on triton only (extend kernel with the mask); the other MLA "
        "backends verify a causal chain")

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("qwen3", "Qwen3 (dense)", "Qwen3-4B, Qwen3-8B", "full attention, dense MLP", "served", _DENSE,
                 {"architectures": ["Qwen3ForCausalLM"], "sliding_window": None, "use_sliding_window": False},
                 checked="GPU matrix on tiny random-weight Qwen3 targets, SGLang 0.5.15 / 0.5.17 (docs/gpu-check.md)"),
    Architecture("llama", "Llama 3.1 (dense)", "Llama-3.1-8B-Instruct", "full attention, dense MLP", "served",
                 _DENSE, {"architectures": ["LlamaForCausalLM"]}),
    Architecture("qwen3_moe", "Qwen3-MoE", "Qwen3-Coder-30B-A3B", "full attention, MoE", "served", _MOE,
                 {"architectures": ["Qwen3MoeForCausalLM"], "sliding_window": None, "use_sliding_window": False},
                 checked="GPU matrix on a tiny random-weight Qwen3-MoE target, triton, SGLang 0.5.15 (H100, 2026-12-07)"),
    Architecture("deepseek_v2", "DeepSeek-V3 / Kimi-K2 class (MLA + MoE)", "Kimi-K2.5", "MLA, MoE", "served", _MLA,
                 {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512}, mla=True,
                 checked="not run yet: on the GPU rig SGLang's DeepSeek model did not import (no cutlass), so no "
                 "engine, plain decoding included, could serve the tiny MLA target (2026-12-07)"),
    Architecture("kimi_k25", "Kimi-K2.5 (MLA + MoE, multimodal wrapper)", "Kimi-K2.5", "MLA, MoE", "served", _MLA,
                 {"architectures": ["KimiK25ForConditionalGeneration"], "kv_lora_rank": 512}, mla=True),
    Architecture("glm4_moe_lite", "GLM-4.7-Flash class (MLA + MoE)", "GLM drafters announced", "MLA, MoE", "served",
                 _MLA, {"architectures": ["Glm4MoeLiteForCausalLM"], "kv_lora_rank": 512}, mla=True),
    Architecture("gpt_oss", "gpt-oss", "gpt-oss-20b, gpt-oss-120b", "alternating sliding-window / full attention "
                 "with sinks, MoE", "served", SWA_REASON,
                 {"architectures": ["GptOssForCausalLM"], "sliding_window": 128,
                  "layer_types": ["sliding_attention", "full_attention"]}, window=True,
                 checked="GPU matrix on a tiny random-weight gpt-oss target, triton, SGLang 0.5.15 (H100, 2026-12-07): "
                 "served eager and with CUDA graphs, DDTREE budget 32's output = DFLASH's, both off plain decoding at "
                 "the same near-flat ties; " + _SWA_CPU),
    Architecture("gemma4", "Gemma 4", "none published yet", "sliding-window and full attention, KV shared across "
                 "layers", "served", SWA_REASON,
                 {"architectures": ["Gemma4ForCausalLM"], "sliding_window": 1024,
                  "layer_types": ["sliding_attention", "full_attention"]}, window=True,
                 checked=_SWA_CPU + "; not run on a GPU"),
    Architecture("qwen3_next", "Qwen3-Next", "Qwen3-Next-80B-A3B", "Gated DeltaNet + full attention, MoE", "opt-in",
                 GDN_REASON, {"architectures": ["Qwen3NextForCausalLM"], "linear_num_value_heads": 32,
                              "layer_types": ["linear_attention", "full_attention"]}, gdn=True, checked=_GDN_CPU),
    Architecture("qwen3_5", "Qwen3.5 / Qwen3.6", "Qwen3.5 4B-122B, Qwen3.6", "Gated DeltaNet + full attention",
                 "opt-in", GDN_REASON, {"architectures": ["Qwen3_5ForConditionalGeneration"],
                                        "linear_num_value_heads": 32,
                                        "layer_types": ["linear_attention", "full_attention"]}, gdn=True,
                 checked=_GDN_CPU),
)


def architecture(model_type: str) -> Architecture:
    for row in ARCHITECTURES:
        if row.model_type == model_type:
            return row
    raise KeyError(f"no DDTREE architecture row for model_type {model_type!r}; known: "
                   f"{', '.join(r.model_type for r in ARCHITECTURES)}")


def support_table() -> str:
    """The README's architecture table (markdown), from the rows above."""
    lines = ["| Architecture | Targets | Layers | DDTREE | Backends | Checked |", "|---|---|---|---|---|---|"]
    for r in ARCHITECTURES:
        verdict = {"served": "served",
                   "opt-in": "opt-in: --speculative-ddtree-allow-hybrid-unsafe (exact on a CPU, not yet run on a real model)",
                   "forced": "refused; runs only with --speculative-ddtree-allow-hybrid-unsafe (not exact)"}[r.status]
        lines.append(f"| {r.name} (`{r.model_type}`) | {r.targets} | {r.layers} | {verdict} | "
                     f"{', '.join(r.backends) or '-'} | {r.checked} |")
    return "\n".join(lines)


def is_mla_target(hf_config: Any) -> bool:
    """The target uses multi-head latent attention (DeepSeek-V2/V3, Kimi-K2, GLM-4-MoE-lite): its
    config carries a `kv_lora_rank` (on the text config of a multimodal wrapper)."""
    text = getattr(hf_config, "text_config", None)
    return any(getattr(c, "kv_lora_rank", None) is not None for c in (hf_config, text) if c is not None)
