"""The tiny MoE and MLA + MoE targets of the GPU matrix's `arch` suite (scripts/gpu/make_arch_models.py):
their configs pass DDTREE's gates as the architecture rows say (the MLA one detected as MLA), their
tensors agree with their configs, the rig's drafter fits them, and every DDTREE row has its plain
reference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patches.architectures import architecture, is_mla_target
from patches.server_args import hybrid_target_kinds
from scripts.gpu import make_arch_models as mam
from scripts.gpu import matrix as gpu_matrix

ROWS = {"moe": "qwen3_moe", "mla": "deepseek_v2"}


@pytest.mark.parametrize("arch", sorted(mam.CONFIGS))
def test_configs_pass_the_gates_their_rows_describe(arch: str) -> None:
    config = SimpleNamespace(**mam.CONFIGS[arch])
    row = architecture(ROWS[arch])
    assert hybrid_target_kinds(config) == [] and row.status == "served"
    assert is_mla_target(config) == row.mla


def test_mla_tensors_follow_the_latent_ranks() -> None:
    c, s = mam.CONFIGS["mla"], mam.shapes("mla")
    attn = "model.layers.1.self_attn"
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    assert s[f"{attn}.q_b_proj.weight"] == (mam.HEADS * qk, c["q_lora_rank"])
    assert s[f"{attn}.kv_a_proj_with_mqa.weight"] == (c["kv_lora_rank"] + c["qk_rope_head_dim"], mam.HIDDEN)
    assert "model.layers.0.mlp.gate_proj.weight" in s and "model.layers.0.mlp.gate.weight" not in s  # first layer dense
    experts = {k.split(".experts.")[1].split(".")[0] for k in s if ".experts." in k}
    assert len(experts) == c["n_routed_experts"] == mam.EXPERTS


def test_weights_are_seeded_and_match_the_shapes() -> None:
    a, b = mam.weights("moe"), mam.weights("moe")
    assert {k: tuple(v.shape) for k, v in a.items()} == mam.shapes("moe")
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
