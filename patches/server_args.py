"""DDTREE server arguments: defaults, range checks and the start-up gates.

The patched SGLang calls `validate_ddtree_server_args` right after DFlash's own validation (so
DFlash has already refused what it refuses: dp attention, pp > 1, no draft model); the flags for
features the capability table declares absent are refused here, per-request features by
`requests.py`. Every refusal here is a
`ValueError` raised while the server arguments are built, before any model loads.

Widths written back:
- only when the budget needs a wider verify than the block (budget + 1 > block):
  `speculative_dflash_block_size` = the drafter's block and `speculative_num_draft_tokens` = the
  target's verify width budget + 1. Otherwise DFlash's own widths stand, so with the default
  budget (block - 1) DDTREE resolves exactly like DFLASH.
- `--speculative-ddtree-budget auto` stays `"auto"`; its widths are those of the widest budget of
  its ladder (`budget_ladder.build_ladder`), so the scheduler reserves KV and the target captures its
  verify graphs for the widest round, and the worker picks each round's budget from the ladder.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Optional

from .architectures import MLA_REFUSED_BACKENDS, MLA_TREE_BACKENDS, SWA_REFUSED_BACKENDS, SWA_TREE_BACKENDS, is_mla_target
from .budget_ladder import AUTO, build_ladder, is_auto, max_budget_setting, mem_cap_bytes
from .capabilities import FASTEST_TREE_BACKEND, TREE_MASK_ATTENTION_BACKENDS, capability

# Limits of the tree build (kernels/tree_build.py MAX_BUDGET / MAX_DEPTH: a node is packed into
# one int64 key). Kept here so validation never imports Triton.
MAX_BUDGET = 2047
MAX_DRAFT_DEPTH = 31


# Config keys that only models with recurrent (Mamba / linear attention / GDN) layers carry.
_RECURRENT_CONFIG_KEYS = (
    "mamba_d_state", "mamba_expand", "ssm_state_size", "linear_num_value_heads",
    "linear_conv_kernel_dim", "hybrid_override_pattern", "layers_block_type", "attn_layer_period",
    "full_attention_interval", "block_types",
)
_RECURRENT_LAYER_WORDS = ("linear", "mamba", "ssm", "conv", "recurrent", "gdn", "delta")
RECURRENT_KIND = "Mamba / linear attention / GDN layers"
GDN_KIND = "Gated DeltaNet layers"
# Targets whose recurrent layers are SGLang's Gated DeltaNet (its GDNAttnBackend: `hybrid_gdn_config`),
# which DDTREE runs as a tree (tree_recurrence.py); other recurrent layers stay RECURRENT_KIND.
_GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
SLIDING_WINDOW_KIND = "sliding-window attention layers"
# The spec-v2 DFlash worker (SGLang 0.5.14+) is built before the target's attention backend, so the
# DDTree worker can wrap the Triton kernel the backend binds (tree_window.install).
SPEC_V2_WORKER_MODULE = "sglang.srt.speculative.dflash_worker_v2"
_RECURRENT_MODEL_TYPES = frozenset({
    "mamba", "mamba2", "jamba", "zamba", "zamba2", "falcon_h1", "nemotron_h", "qwen3_next",
    "granitemoehybrid", "lfm2", "kimi_linear", "minimax", "minimax_m1", "bamba", "plamo2",
})


class DDTreeArgumentError(ValueError):
    """A DDTREE server argument is out of range or asks for something DDTREE cannot run."""


def validate_ddtree_server_args(server_args: Any) -> None:
    """Fill DDTREE's defaults, check ranges, run the gates; no-op for other algorithms.

    Nothing is written unless every check passes. Idempotent.
    """
    if str(server_args.speculative_algorithm or "").upper() != "DDTREE":
        return
    view = _resolved(server_args)
    block = draft_block_size(view)
    budget, topk = resolve_budget_and_topk(view, block)
    check_attention_backend(server_args)
    check_hybrid_target(server_args)
    check_parallelism_and_window(view)
    check_absent_features(view)
    auto = is_auto(view.speculative_ddtree_budget)
    fields = {"speculative_ddtree_budget": AUTO if auto else budget, "speculative_ddtree_topk": topk}
    if budget + 1 > block:  # otherwise DFlash's own widths stand, unchanged
        fields.update(speculative_dflash_block_size=block, speculative_num_draft_tokens=budget + 1)
    _declare(server_args, fields)


def _declare(server_args: Any, fields: dict[str, Any]) -> None:
    """Write resolved values the way this release's resolution does (0.5.19 on: declared)."""
    try:
        from sglang.srt.arg_groups.overrides import declare_resolution
    except ImportError:
        for name, value in fields.items():
            setattr(server_args, name, value)
        return
    declare_resolution(server_args, "ddtree", **fields)


def draft_block_size(server_args: Any) -> int:
    """The drafter's block size as DFlash resolved it (its flag, or the draft config)."""
    block = server_args.speculative_dflash_block_size or server_args.speculative_num_draft_tokens
    if block is None or int(block) < 1:
        raise DDTreeArgumentError(
            "DDTREE needs the DFlash draft block size (--speculative-dflash-block-size or the draft "
            f"model's block_size), got {block!r}."
        )
    return int(block)


def resolve_budget_and_topk(server_args: Any, block: int) -> tuple[int, int]:
    """(budget, topk) with defaults budget = block - 1, topk = budget; checked against the draft.

    For `auto` the budget is the widest of its ladder (what the widths are sized for)."""
    raw = server_args.speculative_ddtree_budget
    topk = server_args.speculative_ddtree_topk
    if is_auto(raw):
        if block - 1 < 1:
            raise DDTreeArgumentError(
                f"--speculative-ddtree-budget auto needs a draft block of at least 2 tokens (got {block})."
            )
        try:
            cap = max_budget_setting()
            mem_cap_bytes()  # read at graph capture; a bad value fails here, before the model loads
        except ValueError as exc:
            raise DDTreeArgumentError(f"--speculative-ddtree-budget auto: {exc}") from None
        budget = build_ladder(block, None if topk is None else int(topk), cap, MAX_BUDGET).widest
    else:
        budget = _integer_budget(raw, block)
    topk = budget if topk is None else int(topk)
    if budget == 0:
        if topk != 0:
            raise DDTreeArgumentError(
                f"--speculative-ddtree-topk has no effect with budget 0 (root-only tree), got {topk}."
            )
        return budget, topk
    if not 1 <= topk <= budget:
        raise DDTreeArgumentError(
            f"--speculative-ddtree-topk must be between 1 and the budget ({budget}), got {topk}."
        )
    depth = block - 1
    if not 1 <= depth <= MAX_DRAFT_DEPTH:
        raise DDTreeArgumentError(
            f"DDTREE drafts block_size - 1 = {depth} tokens per round, which must be between 1 and "
            f"{MAX_DRAFT_DEPTH} for a budget above 0 (draft block size {block})."
        )
    capacity = sum(topk**d for d in range(1, depth + 1))
    if budget > capacity:
        raise DDTreeArgumentError(
            f"--speculative-ddtree-budget {budget} exceeds the {capacity} distinct draft prefixes "
            f"that topk {topk} allows over {depth} draft positions; raise the topk or lower the budget."
        )
    return budget, topk


def _integer_budget(raw: Any, block: int) -> int:
    """An integer budget (the CLI hands it over as text, the Python API as an int); default block - 1."""
    if raw is None:
        return block - 1
    try:
        budget = int(raw)
    except (TypeError, ValueError):
        budget = None
    if budget is None or not 0 <= budget <= MAX_BUDGET:
        raise DDTreeArgumentError(
            f"--speculative-ddtree-budget must be between 0 and {MAX_BUDGET}, or auto, got {raw!r}."
        )
    return budget


def _resolved(server_args: Any) -> Any:
    """Server args as resolved so far: 0.5.19 on reads a live resolving view, 0.5.15-0.5.18 an
    overlay of auto-selected values, older releases the object itself."""
    try:
        from sglang.srt.arg_groups.model_override_base import resolving_view
    except ImportError:
        pass
    else:
        return resolving_view(server_args)
    try:
        from sglang.srt.arg_groups.overrides import resolved_view
    except ImportError:
        return server_args
    return resolved_view(server_args)


def target_verify_attention_backend(server_args: Any) -> Optional[str]:
    """The attention backend SGLang runs the target's verify pass with."""
    args = _resolved(server_args)
    base = getattr(args, "attention_backend", None)
    if getattr(args, "speculative_attention_mode", "prefill") == "decode":
        return getattr(args, "decode_attention_backend", None) or base
    return getattr(args, "prefill_attention_backend", None) or base


def check_attention_backend(server_args: Any) -> None:
    backend = target_verify_attention_backend(server_args)
    if backend not in TREE_MASK_ATTENTION_BACKENDS:
        raise DDTreeArgumentError(
            f"DDTREE verifies a tree, which needs an attention backend that applies the custom mask "
            f"in target verify; the target would verify with {backend!r}. Use --attention-backend "
            f"{FASTEST_TREE_BACKEND} (the fastest for DDTREE where measured; also accepted: "
            f"{', '.join(b for b in TREE_MASK_ATTENTION_BACKENDS if b != FASTEST_TREE_BACKEND)})."
        )
    if backend in MLA_REFUSED_BACKENDS and is_mla_target(_model_config(server_args).hf_config):
        raise DDTreeArgumentError(
            f"DDTREE refuses --attention-backend {backend} for this MLA target: {MLA_REFUSED_BACKENDS[backend]}, "
            f"so the tree would be verified as a chain. Use --attention-backend {', '.join(MLA_TREE_BACKENDS)}."
        )


def _text_config(hf_config: Any) -> Any:
    text = getattr(hf_config, "text_config", None)
    if text is not None:
        return text
    get_text_config = getattr(hf_config, "get_text_config", None)
    return get_text_config() if callable(get_text_config) else hf_config


def hybrid_target_kinds(hf_config: Any) -> list[str]:
    """Which layer kinds of the target a tree verify cannot handle: recurrent and/or sliding window."""
    configs = [hf_config, _text_config(hf_config)]
    kinds: list[str] = []
    layer_types = [str(t).lower() for c in configs for t in (getattr(c, "layer_types", None) or [])]
    model_types = {str(getattr(c, "model_type", "")).lower() for c in configs}
    archs = list(getattr(hf_config, "architectures", None) or [])
    recurrent = (
        any(any(w in t for w in _RECURRENT_LAYER_WORDS) for t in layer_types)
        or any(getattr(c, key, None) is not None for c in configs for key in _RECURRENT_CONFIG_KEYS)
        or bool(model_types & _RECURRENT_MODEL_TYPES)
        or _registered_linear_attention(archs)
    )
    if recurrent:
        kinds.append(GDN_KIND if model_types & _GDN_MODEL_TYPES else RECURRENT_KIND)
    if any("sliding" in t for t in layer_types) or any(_uses_sliding_window(c) for c in configs):
        kinds.append(SLIDING_WINDOW_KIND)
    return kinds


def _uses_sliding_window(config: Any) -> bool:
    if getattr(config, "sliding_window_pattern", None) or getattr(config, "interleaved_sliding_window", None):
        return True
    if getattr(config, "sliding_window", None) is None:
        return False
    # Qwen-style configs carry a window that only applies when use_sliding_window is set.
    return bool(getattr(config, "use_sliding_window", True))


def _registered_linear_attention(archs: list[str]) -> bool:
    try:
        from sglang.srt.configs.linear_attn_model_registry import get_linear_attn_spec_by_arch
    except ImportError:
        return False
    return any(get_linear_attn_spec_by_arch(a) is not None for a in archs)


def _model_config(server_args: Any) -> Any:
    """The target's ModelConfig: a method up to 0.5.18, a resolution helper from 0.5.19."""
    try:
        from sglang.srt.arg_groups.model_override_base import model_config_of
    except ImportError:
        return server_args.get_model_config()
    return model_config_of(server_args)


def has_spec_v2_worker() -> bool:
    """The installed SGLang ships DFlash's spec-v2 worker (0.5.14+)."""
    try:
        return importlib.util.find_spec(SPEC_V2_WORKER_MODULE) is not None
    except (ImportError, ValueError):
        return False


def sliding_window_refusal(server_args: Any) -> Optional[str]:
    """Why this server cannot give sliding-window layers each node's window along its path (None: it can)."""
    backend = target_verify_attention_backend(server_args)
    if backend not in SWA_TREE_BACKENDS:
        why = SWA_REFUSED_BACKENDS.get(backend, "it is not a backend DDTREE verifies sliding windows on")
        return f"the target would verify with {backend!r}: {why}"
    if getattr(_resolved(server_args), "enable_deterministic_inference", False):
        return "--enable-deterministic-inference verifies with Triton's unified kernel, which DDTREE does not wrap"
    if not has_spec_v2_worker():
        return ("this SGLang's DFlash worker (0.5.11-0.5.13) is built after the target's attention backend, too "
                "late to wrap its kernel; SGLang 0.5.14+ is needed")
    return None


def has_sliding_window_layers(server_args: Any) -> bool:
    return SLIDING_WINDOW_KIND in hybrid_target_kinds(_model_config(server_args).hf_config)


def has_gdn_layers(server_args: Any) -> bool:
    return GDN_KIND in hybrid_target_kinds(_model_config(server_args).hf_config)


# Why GDN targets are opt-in where everything else admits them (architectures.py: status "opt-in").
GDN_NOT_RUN = ("no DDTree round has run on a real GDN model yet (on a CPU the pieces are exact through SGLang's own "
               "backend, pool and kernel, and the round's glue on a stand-in recurrent target), so the tree path "
               "runs only when opted in")


def gdn_refusal(server_args: Any) -> Optional[str]:
    """Why this server cannot run each GDN node from its parent's state (None: it can, once opted in:
    GDN_NOT_RUN)."""
    view = _resolved(server_args)
    if not has_spec_v2_worker():
        return ("this SGLang's DFlash worker (0.5.11-0.5.13) is built after the target's Mamba pool and attention "
                "backends, too late to build them for a tree; SGLang 0.5.14+ is needed")
    kernels = {getattr(view, f"linear_attn{mode}_backend", None) for mode in ("", "_decode", "_prefill")} - {None}
    if kernels - {"triton"}:
        return (f"--linear-attn-*-backend {', '.join(sorted(kernels - {'triton'}))}: only SGLang's Triton GDN "
                "verify kernel runs a tree (FlashInfer's takes a chain only)")
    if is_auto(getattr(view, "speculative_ddtree_budget", None)):
        return ("--speculative-ddtree-budget auto: with CUDA graphs it verifies on a per-width attention backend, "
                "not the one DFlash's recurrent-state commit reads, and it is not checked on GDN; use a fixed budget")
    return None


def check_hybrid_target(server_args: Any) -> None:
    """Refuse the layer kinds a tree verify here would get wrong or has not shown right: recurrent layers other
    than GDN always, GDN layers unless opted in (`gdn_refusal`, else GDN_NOT_RUN), sliding-window layers where
    `sliding_window_refusal` says why; `--speculative-ddtree-allow-hybrid-unsafe` overrides."""
    if getattr(server_args, "speculative_ddtree_allow_hybrid_unsafe", False):
        return
    reasons = []
    for kind in hybrid_target_kinds(_model_config(server_args).hf_config):
        if kind == RECURRENT_KIND:
            reasons.append(f"{kind}: a tree verify needs each node's recurrent state from its parent's, which "
                           "DDTREE drives for Gated DeltaNet (Qwen3-Next, Qwen3.5) only")
        elif kind == GDN_KIND:
            reasons.append(f"{kind}: DDTREE runs each tree node from its parent's recurrent state with SGLang "
                           f"0.5.14+, Triton GDN kernels and a fixed budget, and {gdn_refusal(server_args) or GDN_NOT_RUN}")
        elif (why := sliding_window_refusal(server_args)) is not None:
            reasons.append(f"{kind}: each node's window along its tree path is applied on "
                           f"--attention-backend {', '.join(SWA_TREE_BACKENDS)} with SGLang 0.5.14+, and {why}")
    if reasons:
        raise DDTreeArgumentError(
            f"DDTREE refuses this target: it has {'; and '.join(reasons)}. Output equal to plain decoding's is not "
            "shown here. Pass --speculative-ddtree-allow-hybrid-unsafe to run it anyway."
        )


def check_parallelism_and_window(server_args: Any) -> None:
    tp_size = int(getattr(server_args, "tp_size", 1) or 1)
    if tp_size > 1:
        raise DDTreeArgumentError(
            f"DDTREE supports --tp-size 1 only for now (got {tp_size}): its tensor-parallel round (the "
            "draft top-K merged across ranks) has not been verified on more than one GPU yet."
        )
    if getattr(server_args, "speculative_draft_window_size", None) is not None:
        raise DDTreeArgumentError(
            "DDTREE does not support --speculative-draft-window-size yet (DFlash's compact draft "
            "cache); leave it unset."
        )
    if getattr(server_args, "speculative_use_block_verification", False):
        # SGLang's allow-list lets DFLASH (and so DDTREE) through; DDTree replaces that verify.
        raise DDTreeArgumentError(
            "DDTREE verifies a tree and does not support --speculative-use-block-verification "
            "(a chain-verify feature of DFlash's own verify); leave it off."
        )


def check_absent_features(server_args: Any) -> None:
    """Server flags asking for a feature the capability table declares absent."""
    asked = {
        "unified-memory": bool(getattr(server_args, "enable_unified_memory", False)),
        "lora": bool(getattr(server_args, "enable_lora", False) or getattr(server_args, "lora_paths", None)),
        "pd-disaggregation": str(getattr(server_args, "disaggregation_mode", None) or "null") != "null",
        "mixed-chunk": bool(getattr(server_args, "enable_mixed_chunk", False)),
        "hisparse": bool(getattr(server_args, "enable_hisparse", False)),
    }
    for name, on in asked.items():
        if on and not capability(name).admitted:
            raise DDTreeArgumentError(capability(name).refusal)
