"""DDTREE server-argument validation on plain objects: no SGLang, no GPU.

`validate_ddtree_server_args` reads server args by attribute and the target config through
`get_model_config().hf_config`, so a namespace stands in for SGLang's ServerArgs.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patches import server_args
from patches.server_args import (
    MAX_BUDGET,
    MAX_DRAFT_DEPTH,
    DDTreeArgumentError,
    hybrid_target_kinds,
    validate_ddtree_server_args,
)

QWEN3 = dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], sliding_window=None,
             use_sliding_window=False, layer_types=["full_attention"] * 4)


def make_args(hf_config: dict | None = None, **overrides) -> SimpleNamespace:
    config = SimpleNamespace(**(QWEN3 if hf_config is None else hf_config))
    fields = dict(
        speculative_algorithm="DDTREE", speculative_num_draft_tokens=8,
        speculative_dflash_block_size=None, speculative_ddtree_budget=None,
        speculative_ddtree_topk=None, speculative_ddtree_allow_hybrid_unsafe=False,
        attention_backend="triton", prefill_attention_backend=None, decode_attention_backend=None,
        speculative_attention_mode="prefill", page_size=1, tp_size=1,
        speculative_draft_window_size=None,
    )
    fields.update(overrides)
    args = SimpleNamespace(**fields)
    args.get_model_config = lambda: SimpleNamespace(hf_config=config)
    return args


def widths(args) -> tuple:
    return (args.speculative_ddtree_budget, args.speculative_ddtree_topk,
            args.speculative_dflash_block_size, args.speculative_num_draft_tokens)


def test_other_algorithms_are_left_alone():
    args = make_args(speculative_algorithm="DFLASH", attention_backend="fa3", page_size=64)
    before = dict(vars(args))
    validate_ddtree_server_args(args)
    assert vars(args) == before


def test_defaults_match_dflash_verify_width():
    args = make_args()
    validate_ddtree_server_args(args)
    assert widths(args) == (7, 7, None, 8)  # DFlash's own widths stand untouched


@pytest.mark.parametrize("budget, width", [(0, 8), (1, 8), (7, 8), (8, 9), (32, 33)])
def test_verify_width_is_budget_plus_one_but_never_below_the_block(budget, width):
    args = make_args(speculative_ddtree_budget=budget)
    validate_ddtree_server_args(args)
    assert args.speculative_num_draft_tokens == width
    # The drafter's block is pinned only when the verify grows past it.
    assert args.speculative_dflash_block_size == (8 if width > 8 else None)
    assert args.speculative_ddtree_topk == budget


def test_explicit_dflash_block_size_wins_and_lowercase_name_counts():
    args = make_args(speculative_algorithm="ddtree", speculative_dflash_block_size=16,
                     speculative_num_draft_tokens=16, speculative_ddtree_budget=64,
                     speculative_ddtree_topk=4)
    validate_ddtree_server_args(args)
    assert widths(args) == (64, 4, 16, 65)


def test_validation_is_idempotent():
    args = make_args(speculative_ddtree_budget=32)
    validate_ddtree_server_args(args)
    first = widths(args)
    validate_ddtree_server_args(args)
    assert widths(args) == first == (32, 32, 8, 33)


@pytest.mark.parametrize("budget", [-1, MAX_BUDGET + 1])
def test_budget_range(budget):
    with pytest.raises(DDTreeArgumentError, match="--speculative-ddtree-budget must be between 0 and 2047"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget=budget))


@pytest.mark.parametrize("topk", [0, 9])
def test_topk_range(topk):
    with pytest.raises(DDTreeArgumentError, match=r"topk must be between 1 and the budget \(8\)"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget=8, speculative_ddtree_topk=topk))


def test_budget_zero_is_a_root_only_tree():
    args = make_args(speculative_ddtree_budget=0)
    validate_ddtree_server_args(args)
    assert widths(args) == (0, 0, None, 8)
    with pytest.raises(DDTreeArgumentError, match="no effect with budget 0"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget=0, speculative_ddtree_topk=3))


def test_budget_beyond_the_draft_prefixes_is_refused():
    # topk 1 over 7 draft positions allows one chain of 7 nodes.
    with pytest.raises(DDTreeArgumentError, match="exceeds the 7 distinct draft prefixes"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget=8, speculative_ddtree_topk=1))
    args = make_args(speculative_ddtree_budget=8, speculative_ddtree_topk=2)
    validate_ddtree_server_args(args)
    assert args.speculative_num_draft_tokens == 9


@pytest.mark.parametrize("block", [1, MAX_DRAFT_DEPTH + 2])
def test_draft_depth_range(block):
    args = make_args(speculative_num_draft_tokens=block, speculative_ddtree_budget=1)
    with pytest.raises(DDTreeArgumentError, match="drafts block_size - 1"):
        validate_ddtree_server_args(args)


def test_missing_block_size():
    with pytest.raises(DDTreeArgumentError, match="needs the DFlash draft block size"):
        validate_ddtree_server_args(make_args(speculative_num_draft_tokens=None))


@pytest.mark.parametrize("backend", ["triton", "flashinfer"])
def test_mask_honouring_backends_pass(backend):
    validate_ddtree_server_args(make_args(attention_backend=backend))


@pytest.mark.parametrize("overrides, named", [
    (dict(attention_backend="fa3"), "'fa3'"),
    (dict(attention_backend="trtllm_mha"), "'trtllm_mha'"),
    (dict(attention_backend=None), "None"),
    (dict(prefill_attention_backend="fa3", decode_attention_backend="triton"), "'fa3'"),
    (dict(prefill_attention_backend="triton", decode_attention_backend="fa3",
          speculative_attention_mode="decode"), "'fa3'"),
])
def test_backends_that_ignore_the_mask_are_refused(overrides, named):
    args = make_args(**overrides)
    with pytest.raises(DDTreeArgumentError) as err:
        validate_ddtree_server_args(args)
    assert f"would verify with {named}" in str(err.value)
    assert "Use --attention-backend triton (the fastest for DDTREE where measured; also accepted: flashinfer)." in str(err.value)
    assert args.speculative_ddtree_budget is None  # nothing written on failure


def test_split_backends_follow_the_speculative_attention_mode():
    validate_ddtree_server_args(make_args(prefill_attention_backend="triton", decode_attention_backend="fa3"))
    validate_ddtree_server_args(make_args(prefill_attention_backend="fa3", decode_attention_backend="flashinfer",
                                          speculative_attention_mode="decode"))


HYBRIDS = {
    "layer_types": dict(model_type="x", layer_types=["linear_attention", "full_attention"]),
    "mamba_keys": dict(model_type="x", mamba_d_state=128),
    "nemotron_h": dict(model_type="nemotron_h", hybrid_override_pattern="M-M*"),
}
GDN = {
    "qwen3_next": dict(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
                       full_attention_interval=4, linear_num_value_heads=32),
    "qwen3_5": dict(model_type="qwen3_5", architectures=["Qwen3_5ForConditionalGeneration"],
                    text_config=SimpleNamespace(model_type="qwen3_5_text", linear_num_value_heads=32,
                                                layer_types=["linear_attention", "full_attention"])),
    "multimodal_text": dict(model_type="y", text_config=SimpleNamespace(model_type="qwen3_next")),
}
SLIDING = {
    "qwen_sliding_on": dict(QWEN3, sliding_window=4096, use_sliding_window=True),
    "mistral": dict(model_type="mistral", sliding_window=4096),
    "gemma_layers": dict(model_type="gemma3_text", layer_types=["sliding_attention", "full_attention"]),
    "pattern": dict(model_type="gemma2", sliding_window_pattern=6),
}


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_recurrent_targets_are_refused(name):
    with pytest.raises(DDTreeArgumentError, match="Mamba / linear attention / GDN layers") as err:
        validate_ddtree_server_args(make_args(hf_config=HYBRIDS[name]))
    assert "--speculative-ddtree-allow-hybrid-unsafe" in str(err.value)


@pytest.mark.parametrize("name", sorted(GDN))
def test_gdn_targets_are_opt_in_on_spec_v2_releases(name, monkeypatch):
    """Opt-in where the DDTree worker builds the target's Mamba pool and linear backend for a tree
    (spec-v2 worker, 0.5.14+) with SGLang's Triton GDN kernels and a fixed budget: refused by default
    because no round has run on a real one; refused elsewhere, naming the layers and why."""
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: True)
    assert server_args.gdn_refusal(make_args(hf_config=GDN[name])) is None
    with pytest.raises(DDTreeArgumentError, match="Gated DeltaNet layers.*no DDTree round has run on a real GDN model") as err:
        validate_ddtree_server_args(make_args(hf_config=GDN[name]))
    assert "--speculative-ddtree-allow-hybrid-unsafe" in str(err.value)
    validate_ddtree_server_args(make_args(hf_config=GDN[name], speculative_ddtree_allow_hybrid_unsafe=True))
    refused = {"flashinfer": dict(linear_attn_decode_backend="flashinfer"),
               "budget auto": dict(speculative_ddtree_budget="auto")}
    for why, overrides in refused.items():
        with pytest.raises(DDTreeArgumentError, match=f"Gated DeltaNet layers.*{why}") as err:
            validate_ddtree_server_args(make_args(hf_config=GDN[name], **overrides))
        assert "\n" not in str(err.value)
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: False)
    with pytest.raises(DDTreeArgumentError, match="Gated DeltaNet layers.*0.5.11-0.5.13"):
        validate_ddtree_server_args(make_args(hf_config=GDN[name]))
    validate_ddtree_server_args(make_args(hf_config=GDN[name], speculative_ddtree_allow_hybrid_unsafe=True))


@pytest.mark.parametrize("name", sorted(SLIDING))
def test_sliding_window_targets_are_served_on_triton_from_spec_v2(name, monkeypatch):
    """Served where DDTREE wraps the Triton kernel (spec-v2 worker), refused on a v1 release and on
    FlashInfer, naming the layers and why."""
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: True)
    validate_ddtree_server_args(make_args(hf_config=SLIDING[name]))
    with pytest.raises(DDTreeArgumentError, match="sliding-window attention layers.*flashinfer"):
        validate_ddtree_server_args(make_args(hf_config=SLIDING[name], attention_backend="flashinfer"))
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: False)
    with pytest.raises(DDTreeArgumentError, match="sliding-window attention layers.*0.5.11-0.5.13"):
        validate_ddtree_server_args(make_args(hf_config=SLIDING[name]))


def test_a_recurrent_target_with_windows_is_refused_for_its_recurrent_layers(monkeypatch):
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: True)
    config = dict(HYBRIDS["layer_types"], layer_types=["linear_attention", "sliding_attention"])
    with pytest.raises(DDTreeArgumentError, match="Mamba / linear attention / GDN layers") as err:
        validate_ddtree_server_args(make_args(hf_config=config))
    assert "sliding-window" not in str(err.value)


def test_hybrid_refusal_can_be_overridden():
    args = make_args(hf_config=HYBRIDS["nemotron_h"], speculative_ddtree_allow_hybrid_unsafe=True)
    validate_ddtree_server_args(args)
    assert args.speculative_ddtree_budget == 7


def test_plain_attention_targets_are_not_hybrid():
    assert hybrid_target_kinds(SimpleNamespace(**QWEN3)) == []
    # Qwen2/Qwen3 configs carry a window that is off unless use_sliding_window is set.
    assert hybrid_target_kinds(SimpleNamespace(**dict(QWEN3, sliding_window=32768))) == []
    assert hybrid_target_kinds(SimpleNamespace(model_type="llama", architectures=["LlamaForCausalLM"])) == []


@pytest.mark.parametrize("page_size", [16, 64])
def test_page_size_above_one_is_served(page_size):
    args = make_args(page_size=page_size)
    validate_ddtree_server_args(args)
    assert args.page_size == page_size and args.speculative_ddtree_budget is not None


def test_tensor_parallel_is_refused():
    with pytest.raises(DDTreeArgumentError, match="--tp-size 1 only for now \\(got 2\\)"):
        validate_ddtree_server_args(make_args(tp_size=2))


def test_draft_window_is_refused():
    with pytest.raises(DDTreeArgumentError, match="--speculative-draft-window-size"):
        validate_ddtree_server_args(make_args(speculative_draft_window_size=512))


def test_limits_match_the_tree_build():
    tree_build = pytest.importorskip("kernels.tree_build")
    assert (MAX_BUDGET, MAX_DRAFT_DEPTH) == (tree_build.MAX_BUDGET, tree_build.MAX_DEPTH)


def test_block_verification_is_refused():
    with pytest.raises(DDTreeArgumentError, match="--speculative-use-block-verification"):
        validate_ddtree_server_args(make_args(speculative_use_block_verification=True))


def test_auto_is_sized_for_the_widest_budget_of_its_ladder(monkeypatch):
    """`auto` stays "auto" (the worker chooses per round); topk, the block and the verify width are the
    widest ladder budget's (64 by default, DDTREE_AUTO_MAX_BUDGET otherwise), so the scheduler reserves
    KV and the target captures its verify graphs for the widest round. Idempotent."""
    monkeypatch.delenv("DDTREE_AUTO_MAX_BUDGET", raising=False)
    args = make_args(speculative_ddtree_budget="auto")
    validate_ddtree_server_args(args)
    assert widths(args) == ("auto", 64, 8, 65)
    validate_ddtree_server_args(args)
    assert widths(args) == ("auto", 64, 8, 65)
    monkeypatch.setenv("DDTREE_AUTO_MAX_BUDGET", "16")
    args = make_args(speculative_ddtree_budget="AUTO", speculative_ddtree_topk=4)
    validate_ddtree_server_args(args)
    assert widths(args) == ("auto", 4, 8, 17)
    monkeypatch.setenv("DDTREE_AUTO_MAX_BUDGET", "many")
    with pytest.raises(DDTreeArgumentError, match="auto: DDTREE_AUTO_MAX_BUDGET must be a positive integer"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget="auto"))
    monkeypatch.setenv("DDTREE_AUTO_MAX_BUDGET", "16")
    monkeypatch.setenv("DDTREE_AUTO_GRAPH_MEM_GB", "-2")  # read at graph capture, refused before the model loads
    with pytest.raises(DDTreeArgumentError, match="auto: DDTREE_AUTO_GRAPH_MEM_GB must be a number of GiB >= 0"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget="auto"))


def test_auto_within_the_block_keeps_dflash_s_widths(monkeypatch):
    """A cap at or below block - 1: the ladder is the block's budget alone, DFlash's widths stand."""
    monkeypatch.setenv("DDTREE_AUTO_MAX_BUDGET", "4")
    args = make_args(speculative_ddtree_budget="auto")
    validate_ddtree_server_args(args)
    assert widths(args) == ("auto", 7, None, 8)


def test_the_budget_arrives_as_text_from_the_cli():
    """The flag is a string (for `auto`): "32" resolves as 32 did; other text is refused in one line."""
    args = make_args(speculative_ddtree_budget="32")
    validate_ddtree_server_args(args)
    assert widths(args) == (32, 32, 8, 33)
    with pytest.raises(DDTreeArgumentError, match=r"between 0 and 2047, or auto, got 'wide'"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget="wide"))
    with pytest.raises(DDTreeArgumentError, match="auto needs a draft block of at least 2 tokens"):
        validate_ddtree_server_args(make_args(speculative_ddtree_budget="auto", speculative_num_draft_tokens=1))
