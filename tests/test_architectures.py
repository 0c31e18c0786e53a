"""The architecture rows (patches/architectures.py) agree with DDTREE's start-up gates: served rows
pass, opt-in and forced rows are refused unless forced, and MLA targets are refused on the MLA backends that
verify without the tree mask, by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patches.architectures import ARCHITECTURES, MLA_REFUSED_BACKENDS, Architecture, architecture, support_table
from patches.capabilities import TREE_MASK_ATTENTION_BACKENDS
from patches import server_args
from patches.server_args import (
    GDN_KIND,
    SLIDING_WINDOW_KIND,
    DDTreeArgumentError,
    hybrid_target_kinds,
    validate_ddtree_server_args,
)


def _args(row: Architecture, **overrides) -> SimpleNamespace:
    config = SimpleNamespace(model_type=row.model_type, **row.config)
    fields = dict(speculative_algorithm="DDTREE", speculative_num_draft_tokens=8, speculative_dflash_block_size=None,
                  speculative_ddtree_budget=None, speculative_ddtree_topk=None,
                  speculative_ddtree_allow_hybrid_unsafe=False, attention_backend="triton",
                  prefill_attention_backend=None, decode_attention_backend=None, speculative_attention_mode="prefill",
                  page_size=1, tp_size=1, speculative_draft_window_size=None)
    fields.update(overrides)
    args = SimpleNamespace(**fields)
    args.get_model_config = lambda: SimpleNamespace(hf_config=config)
    return args


ROWS = [pytest.param(r, id=r.model_type) for r in ARCHITECTURES]


@pytest.fixture(autouse=True)
def spec_v2_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gates judged as on a spec-v2 release (0.5.14+), where sliding-window targets are served."""
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: True)


@pytest.mark.parametrize("row", ROWS)
def test_each_row_agrees_with_the_gates(row: Architecture) -> None:
    kinds = hybrid_target_kinds(SimpleNamespace(model_type=row.model_type, **row.config))
    if row.status == "served":
        assert kinds == ([GDN_KIND] if row.gdn else []) + ([SLIDING_WINDOW_KIND] if row.window else [])
        for backend in row.backends:
            validate_ddtree_server_args(_args(row, attention_backend=backend))
    else:
        assert kinds and (row.status == "opt-in") == bool(row.backends)
        with pytest.raises(DDTreeArgumentError, match="--speculative-ddtree-allow-hybrid-unsafe"):
            validate_ddtree_server_args(_args(row))
        validate_ddtree_server_args(_args(row, speculative_ddtree_allow_hybrid_unsafe=True))


@pytest.mark.parametrize("row", [pytest.param(r, id=r.model_type) for r in ARCHITECTURES if r.mla])
@pytest.mark.parametrize("backend", [b for b in TREE_MASK_ATTENTION_BACKENDS if b in MLA_REFUSED_BACKENDS])
def test_mla_targets_are_refused_on_mla_backends_without_the_tree_mask(row: Architecture, backend: str) -> None:
    with pytest.raises(DDTreeArgumentError) as err:
        validate_ddtree_server_args(_args(row, attention_backend=backend))
    message = str(err.value)
    assert f"--attention-backend {backend} for this MLA target" in message and "--attention-backend triton" in message
    assert "\n" not in message


def test_the_backend_lists_follow_the_attention_kind() -> None:
    assert architecture("qwen3_moe").backends == TREE_MASK_ATTENTION_BACKENDS
    assert architecture("deepseek_v2").backends == ("triton",)
    assert architecture("gpt_oss").backends == ("triton",)
    assert architecture("qwen3_next").backends == TREE_MASK_ATTENTION_BACKENDS
    with pytest.raises(KeyError, match="known: qwen3"):
        architecture("nope")


def test_the_support_table_has_a_row_per_architecture() -> None:
    lines = support_table().splitlines()
    assert len(lines) == 2 + len(ARCHITECTURES)
    for row, line in zip(ARCHITECTURES, lines[2:]):
        assert f"(`{row.model_type}`)" in line and ("served" in line) == (row.status == "served")


@pytest.mark.parametrize("row", [pytest.param(r, id=r.model_type) for r in ARCHITECTURES if r.window])
def test_sliding_window_targets_are_refused_where_the_path_window_is_not_applied(
        row: Architecture, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashInfer, deterministic inference (the unified kernel) and a v1 release (the worker comes too
    late to wrap the kernel) are refused by name; forcing still runs them."""
    cases = {"flashinfer": {"attention_backend": "flashinfer"},
             "deterministic": {"enable_deterministic_inference": True}}
    for expected, overrides in cases.items():
        with pytest.raises(DDTreeArgumentError, match=expected) as err:
            validate_ddtree_server_args(_args(row, **overrides))
        assert "sliding-window attention layers" in str(err.value) and "\n" not in str(err.value)
    validate_ddtree_server_args(_args(row, attention_backend="flashinfer", speculative_ddtree_allow_hybrid_unsafe=True))
    monkeypatch.setattr(server_args, "has_spec_v2_worker", lambda: False)
    with pytest.raises(DDTreeArgumentError, match="SGLang 0.5.14"):
        validate_ddtree_server_args(_args(row))
