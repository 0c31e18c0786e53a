"""The tiny MoE, MLA + MoE, sliding-window (gpt-oss) and GDN (Qwen3-Next) targets of the GPU matrix's `arch`
suite (scripts/gpu/make_arch_models.py): their configs pass DDTREE's gates as the architecture rows say (the
MLA one detected as MLA, the gpt-oss one as sliding-window, served on triton only, the Qwen3-Next one as
Gated DeltaNet, opt-in), their tensors agree with their configs (gpt-oss, Qwen3-Next: every parameter SGLang
0.5.15's loader fills, checked on its real model class on a CPU), the rig's drafter fits them, and every
DDTREE row has its plain reference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patches.architectures import architecture, is_mla_target
from patches.server_args import GDN_KIND, SLIDING_WINDOW_KIND, hybrid_target_kinds
from scripts.gpu import make_arch_models as mam
from scripts.gpu import matrix as gpu_matrix
from tests.release_probe import run_probe

ROWS = {"moe": "qwen3_moe", "mla": "deepseek_v2", "swa": "gpt_oss", "gdn": "qwen3_next"}


@pytest.mark.parametrize("arch", sorted(mam.CONFIGS))
def test_configs_pass_the_gates_their_rows_describe(arch: str) -> None:
    config = SimpleNamespace(**mam.CONFIGS[arch])
    row = architecture(ROWS[arch])
    kinds = ([GDN_KIND] if row.gdn else []) + ([SLIDING_WINDOW_KIND] if row.window else [])
    assert hybrid_target_kinds(config) == kinds and row.status == ("opt-in" if row.gdn else "served")
    assert row.gdn == (arch == "gdn")
    assert is_mla_target(config) == row.mla
    assert row.window == (arch == "swa")
    if row.window:
        assert row.backends == ("triton",)


def test_gpt_oss_config_is_bf16_alternating_windowed_and_unscaled() -> None:
    c = mam.CONFIGS["swa"]
    assert (c["architectures"], c["model_type"]) == (["GptOssForCausalLM"], "gpt_oss")
    assert "quantization_config" not in c  # bf16: SGLang's _load_normal_weights
    assert c["layer_types"] == ["sliding_attention", "full_attention"] * (mam.LAYERS // 2)
    # the window bites: shorter than every prompt of the matrix's rand set once 32 tokens follow
    assert 1 < c["sliding_window"] < min(map(len, gpu_matrix.PROMPTS["rand"])) + gpu_matrix.MAX_NEW
    # transformers v5 fills a missing rope_parameters with YaRN; SGLang reads rope_parameters["rope_theta"]
    assert c["rope_parameters"] == {"rope_type": "default", "rope_theta": c["rope_theta"]}
    assert c["attention_bias"] and c["swiglu_limit"] > 0
    assert c["num_experts_per_tok"] == c["experts_per_token"] == mam.TOP_K <= c["num_local_experts"] == mam.EXPERTS


def test_gpt_oss_tensors_cover_what_its_loader_reads() -> None:
    """Attention with biases and a sink per head, the router with bias, each layer's experts fused
    with biases (gate_up [E, hidden, 2 inter], down [E, inter, hidden]), both norms."""
    c, s = mam.CONFIGS["swa"], mam.shapes("swa")
    d, kv, e, inter = c["head_dim"], c["num_key_value_heads"], c["num_local_experts"], c["intermediate_size"]
    for i in range(mam.LAYERS):
        a, m = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        assert {k: v for k, v in s.items() if k.startswith(f"model.layers.{i}.")} == {
            f"{a}.q_proj.weight": (mam.HEADS * d, mam.HIDDEN), f"{a}.q_proj.bias": (mam.HEADS * d,),
            f"{a}.k_proj.weight": (kv * d, mam.HIDDEN), f"{a}.k_proj.bias": (kv * d,),
            f"{a}.v_proj.weight": (kv * d, mam.HIDDEN), f"{a}.v_proj.bias": (kv * d,),
            f"{a}.o_proj.weight": (mam.HIDDEN, mam.HEADS * d), f"{a}.o_proj.bias": (mam.HIDDEN,),
            f"{a}.sinks": (mam.HEADS,),
            f"{m}.router.weight": (e, mam.HIDDEN), f"{m}.router.bias": (e,),
            f"{m}.experts.gate_up_proj": (e, mam.HIDDEN, 2 * inter), f"{m}.experts.gate_up_proj_bias": (e, 2 * inter),
            f"{m}.experts.down_proj": (e, inter, mam.HIDDEN), f"{m}.experts.down_proj_bias": (e, mam.HIDDEN),
            f"model.layers.{i}.input_layernorm.weight": (mam.HIDDEN,),
            f"model.layers.{i}.post_attention_layernorm.weight": (mam.HIDDEN,)}
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(s)
    assert len(s) == 3 + 17 * mam.LAYERS


def test_qwen3_next_alternates_gdn_and_gated_full_attention() -> None:
    """Layers 0 and 2 Gated DeltaNet, 1 and 3 full attention (q_proj holds query and output gate); every
    layer's MLP routed experts plus a gated shared expert."""
    c, s = mam.CONFIGS["gdn"], mam.shapes("gdn")
    assert (c["architectures"], c["model_type"], c["full_attention_interval"]) == (["Qwen3NextForCausalLM"], "qwen3_next", 2)
    key, value = c["linear_num_key_heads"] * c["linear_key_head_dim"], c["linear_num_value_heads"] * c["linear_value_head_dim"]
    for i in (0, 2):
        g = f"model.layers.{i}.linear_attn"
        assert s[f"{g}.in_proj_qkvz.weight"] == (2 * key + 2 * value, mam.HIDDEN)
        assert s[f"{g}.conv1d.weight"] == (2 * key + value, 1, c["linear_conv_kernel_dim"])
        assert s[f"{g}.A_log"] == s[f"{g}.dt_bias"] == (c["linear_num_value_heads"],)
        assert not any(k.startswith(f"model.layers.{i}.self_attn") for k in s)
    for i in (1, 3):
        a = f"model.layers.{i}.self_attn"
        assert s[f"{a}.q_proj.weight"] == (2 * mam.HEADS * c["head_dim"], mam.HIDDEN)
        assert not any(k.startswith(f"model.layers.{i}.linear_attn") for k in s)
    experts = {k.split(".experts.")[1].split(".")[0] for k in s if "layers.0.mlp.experts." in k}
    assert len(experts) == mam.EXPERTS and "model.layers.0.mlp.shared_expert_gate.weight" in s


def test_the_gdn_rows_run_sglangs_triton_kernels_plain_included() -> None:
    """DDTREE verifies a GDN tree with SGLang's Triton GDN kernels only (server_args.gdn_refusal), and GDN
    targets are opt-in until a whole round has run (the rows opt in)."""
    rows = [c for c in gpu_matrix.configs((gpu_matrix.ARCH,)) if c["model"] == "gdn"]
    assert {c["algo"] for c in rows} == {"NONE", "DFLASH", "DDTREE"} and len(rows) == 7
    for c in rows:
        assert c["target"].endswith("target_gdn_rand") and isinstance(c.get("budget", 8), int)
        assert c["engine"]["attention_backend"] == "triton" and c["engine"]["linear_attn_backend"] == "triton"
        assert c["engine"]["speculative_ddtree_allow_hybrid_unsafe"] is True


def test_mla_tensors_follow_the_latent_ranks() -> None:
    c, s = mam.CONFIGS["mla"], mam.shapes("mla")
    attn = "model.layers.1.self_attn"
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    assert s[f"{attn}.q_b_proj.weight"] == (mam.HEADS * qk, c["q_lora_rank"])
    assert s[f"{attn}.kv_a_proj_with_mqa.weight"] == (c["kv_lora_rank"] + c["qk_rope_head_dim"], mam.HIDDEN)
    assert "model.layers.0.mlp.gate_proj.weight" in s and "model.layers.0.mlp.gate.weight" not in s  # first layer dense
    experts = {k.split(".experts.")[1].split(".")[0] for k in s if ".experts." in k}
    assert len(experts) == c["n_routed_experts"] == mam.EXPERTS


@pytest.mark.parametrize("arch", ["moe", "swa", "gdn"])
def test_weights_are_seeded_and_match_the_shapes(arch: str) -> None:
    a, b = mam.weights(arch), mam.weights(arch)
    assert {k: tuple(v.shape) for k, v in a.items()} == mam.shapes(arch)
    assert all(a[k].equal(b[k]) for k in a)


def test_the_rigs_drafter_fits_every_target() -> None:
    """draft_rand reads target layers 1 and 2 of 4 at hidden 256 and the target's 512-token head."""
    for config in mam.CONFIGS.values():
        assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (4, 256, gpu_matrix.VOCAB)


def test_the_arch_suite_has_a_plain_reference_per_model_and_is_not_in_all() -> None:
    rows = gpu_matrix.configs((gpu_matrix.ARCH,))
    names = {c["name"] for c in rows}
    for model in gpu_matrix.ARCH_MODELS:
        ddtree = {f"ddtree_b{b}_{model}_{g}" for b in (8, 32) for g in ("eager", "cg")}
        assert f"plain_{model}" in names and ddtree <= names
        assert next(c for c in rows if c["name"] == f"plain_{model}")["logprobs"]  # top-2 gaps judge near-ties
    assert not names & {c["name"] for c in gpu_matrix.configs()}


def test_the_sliding_window_rows_run_on_triton_plain_included() -> None:
    """DDTREE serves sliding-window targets on triton only; plain runs the same engine settings, and the
    bf16 experts take SGLang's Triton fused MoE."""
    rows = [c for c in gpu_matrix.configs((gpu_matrix.ARCH,)) if c["model"] == "swa"]
    assert {c["algo"] for c in rows} == {"NONE", "DFLASH", "DDTREE"} and len(rows) == 7
    for c in rows:
        assert c["target"].endswith("target_swa_rand")
        assert c["engine"]["attention_backend"] == "triton" and c["engine"]["moe_runner_backend"] == "triton"
        assert "port" in c["engine"]  # with_own_ports keeps the row's engine settings
    others = [c for c in gpu_matrix.configs((gpu_matrix.ARCH,)) if c["model"] != "swa"]
    assert not any("moe_runner_backend" in c["engine"] for c in others)


_LOAD_HEAD = r"""
import json, sys, tempfile
from pathlib import Path
import torch
from safetensors.torch import save_file
from scripts.gpu import make_arch_models as mam
folder = Path(tempfile.mkdtemp()) / "target_{arch}_rand"
folder.mkdir()
(folder / "config.json").write_text(json.dumps(dict(mam.CONFIGS["{arch}"], eos_token_id=1, pad_token_id=0)))
state = mam.weights("{arch}")
save_file(state, str(folder / "model.safetensors"))
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.layers.dp_attention import initialize_dp_attention
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method="tcp://127.0.0.1:{port}",
                                local_rank=0, backend="gloo")
ps.initialize_model_parallel(1, 1)
args = ServerArgs(model_path=str(folder), device="cpu", attention_backend="triton", {server_args})
set_global_server_args_for_scheduler(args)
mc = ModelConfig(str(folder))
initialize_dp_attention(args, mc)
"""
_LOAD_MODEL = r"""
from sglang.srt.models.{module} import {cls}
torch.set_default_dtype(torch.bfloat16)
model = {cls}(mc.hf_config)
params = dict(model.named_parameters())
for p in params.values():
    p.data.fill_(float("nan"))
model.load_weights(iter(state.items()))
"""


def load_probe(arch: str, port: int, server_args: str, model: str, report: str, before_model: str = "") -> str:
    """A probe that writes `arch`'s tiny checkpoint, builds SGLang's `model` ("module.Class") on the CPU with
    every parameter NaN, loads the checkpoint into it and runs `report` (which prints the JSON line)."""
    module, cls = model.split(".")
    return (_LOAD_HEAD.format(arch=arch, port=port, server_args=server_args) + before_model
            + _LOAD_MODEL.format(module=module, cls=cls) + report)


LOAD_PROBE = load_probe("swa", 29547, 'moe_runner_backend="triton"', "gpt_oss.GptOssForCausalLM", r"""
layer = "model.layers.1"
print(json.dumps({
    "unloaded": [n for n, p in params.items() if torch.isnan(p.float()).any()],
    "params": len(params),
    "experts_exact": all(torch.equal(params[f"{layer}.mlp.experts.{w}"].to(torch.bfloat16),
                                     state[f"{layer}.mlp.experts.{c}"].transpose(-2, -1))
                         for w, c in (("w13_weight", "gate_up_proj"), ("w2_weight", "down_proj"))),
    "sinks_exact": torch.equal(params[f"{layer}.self_attn.sinks"].to(torch.bfloat16),
                               state[f"{layer}.self_attn.sinks"]),
    "hybrid_swa": bool(mc.is_hybrid_swa), "swa_layers": list(mc.swa_attention_layer_ids),
    "windows": [l.self_attn.attn.sliding_window_size for l in model.model.layers],
    "rope": type(model.model.layers[0].self_attn.rotary_emb).__name__,
}))
""")


@pytest.mark.heavy  # SGLang 0.5.15's own gpt-oss model class and loader, in its CPU venv
def test_gpt_oss_checkpoint_loads_every_parameter_of_sglangs_model(release_site) -> None:
    """The written gpt-oss tensors fill every parameter of SGLang 0.5.15's GptOssForCausalLM (all set
    to NaN before loading), the experts as its fused MoE takes them, and SGLang reads the config as a
    hybrid sliding-window target (window 8 inclusive = 7 in SGLang's terms on layers 0 and 2) with
    plain rotary embeddings."""
    out = run_probe("0.5.15", release_site, LOAD_PROBE, repo_on_path=True, env={"SGLANG_USE_CPU_ENGINE": "1"})
    assert out["unloaded"] == [] and out["params"] == 3 + 13 * mam.LAYERS
    assert out["experts_exact"] and out["sinks_exact"]
    assert out["hybrid_swa"] and out["swa_layers"] == [0, 2]
    assert out["windows"] == [mam.WINDOW - 1, -1, mam.WINDOW - 1, -1]
    assert out["rope"] == "RotaryEmbedding"  # no YaRN


GDN_LOAD_PROBE = load_probe(
    "gdn", 29549, 'linear_attn_backend="triton", disable_radix_cache=True', "qwen3_next.Qwen3NextForCausalLM", r"""
print(json.dumps({
    "unloaded": [n for n, p in params.items() if torch.isnan(p.float()).any()],
    "params": len(params),
    "linear_ids": mc.hf_config.linear_layer_ids,
    "conv_exact": torch.equal(params["model.layers.0.linear_attn.conv1d.weight"].to(torch.bfloat16),
                              state["model.layers.0.linear_attn.conv1d.weight"]),
}))
""", before_model=r"""
from sglang.srt.configs.update_config import adjust_tp_num_heads_if_necessary
adjust_tp_num_heads_if_necessary(mc.hf_config, 1, True)  # the CPU engine's head counts (configs/update_config.py)
""")


@pytest.mark.heavy  # SGLang 0.5.15's own Qwen3-Next model class and loader, in its CPU venv
def test_qwen3_next_checkpoint_loads_every_parameter_of_sglangs_model(release_site) -> None:
    """The written Qwen3-Next tensors fill every parameter of SGLang 0.5.15's Qwen3NextForCausalLM (all set
    to NaN before loading; its CPU engine, with the key / value head counts its loader pads for the CPU),
    and SGLang reads layers 0 and 2 as its linear-attention (GDN) layers."""
    out = run_probe("0.5.15", release_site, GDN_LOAD_PROBE, repo_on_path=True, env={"SGLANG_USE_CPU_ENGINE": "1"})
    assert out["unloaded"] == [] and out["params"] == 3 + 2 * 15 + 2 * 12  # GDN layers 15 tensors, full ones 12
    assert out["linear_ids"] == [0, 2] and out["conv_exact"]
