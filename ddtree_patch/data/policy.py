"""The policy: which DFLASH sites DDTree shares, which stay DFlash-only, and why.

Structure first: DDTree has its own enum member, flags, worker and verify input (EDIT). Every
other site is a DFlash gate or DFlash plumbing, and a gate admits DDTREE only where the runtime's
capability table (`patches/capabilities.py`, dropped in beside the worker) says DDTree implements
the feature: implemented or opt-in -> WIDEN; absent -> KEEP (a name test stays DFlash-only) or
NARROW (a widened predicate call is tested back to DFlash-only). A site that *refuses* a feature
for DFLASH widens whatever the capability: DDTREE refuses it too. Per-site gates come before the
principles; a site no entry decides is UNHANDLED.
"""

from ddtree_patch.dropins import capabilities
from ddtree_patch.policy import Entry, Policy
from ddtree_patch.sites import Decision as D

MACHINERY = "dflash-machinery"


def gate(form: str, capability: str, feature: str, *, path: str = "*", qualname: str = "*",
         refuses: bool = False) -> Entry:
    """A DFlash feature gate decided by one declared capability (never by hand)."""
    cap = capabilities().capability(capability)  # KeyError for a name the runtime does not declare
    if refuses:
        decision, verdict = D.WIDEN, "DFlash refuses it here, and so does DDTREE"
    elif cap.status == "implemented":
        decision, verdict = D.WIDEN, f"DDTree implements it ({cap.why})"
    elif cap.status == "opt-in":
        decision, verdict = D.WIDEN, f"DDTREE refuses it at start unless asked ({cap.why})"
    else:
        decision = D.NARROW if form == "predicate-call" else D.KEEP
        verdict = f"DDTree does not implement it ({cap.why}): DDTREE is not admitted here"
    return Entry(form, decision, f"{feature}: {verdict}", path=path, qualname=qualname, capability=capability)


def shared(form: str, reason: str, **where: str) -> Entry:
    """DFlash plumbing DDTree runs unchanged (its draft side, pools, graphs, scheduling)."""
    return gate(form, MACHINERY, reason, **where)


GATES: tuple[Entry, ...] = (
    gate("allow-list", "lora", "LoRA with speculative decoding", path="srt/arg_groups/lora_hook.py"),
    Entry("value", D.KEEP,
          "label naming DFLASH in the unified-memory backend audit's messages, not a condition",
          path="srt/arg_groups/kv_cache_hook.py", qualname="handle_unified_memory_pool"),
    gate("*", "unified-memory", "--enable-unified-memory's algorithm allow-list and audited backends",
         path="srt/arg_groups/kv_cache_hook.py", qualname="handle_unified_memory_pool"),
    gate("membership", "model-specific-paths", "SM100 native NVFP4 KV refuses prefix-commit workers",
         path="srt/arg_groups/kv_cache_hook.py", qualname="handle_kv4_compatibility", refuses=True),
    gate("membership", "model-specific-paths", "MiniMax M3.1 NVFP4 speculation allow-list",
         path="srt/arg_groups/model_overrides/minimax_m3.py"),
    gate("equality", "model-specific-paths", "MiniMax M3.1 NVFP4 DFLASH refuses disaggregation",
         path="srt/arg_groups/model_overrides/minimax_m3.py", refuses=True),
    gate("equality", "tensor-parallel", "CP-TP group sharing speculative allow-list",
         path="srt/arg_groups/cp_tp_group_sharing_hook.py"),
    gate("equality", "tensor-parallel", "layernorm SP speculative allow-list (Muse Spark DFLASH)",
         path="srt/arg_groups/layernorm_sp_hook.py"),
    gate("membership", "chain-verify-options",
         "block-verification allow-list and draft-window warning",
         path="srt/arg_groups/speculative_hook.py", qualname="handle_speculative_decoding"),
    gate("predicate-call", "grammar", "supports_grammar_overlap (grammar masks overlapped with the verify)",
         path="srt/speculative/spec_info.py", qualname="SpeculativeAlgorithm.supports_grammar_overlap"),
    gate("membership", "mixed-chunk", "supports_mixed_chunk",
         path="srt/speculative/spec_info.py", qualname="SpeculativeAlgorithm.supports_mixed_chunk"),
    gate("predicate-call", "pd-disaggregation", "draft input handed over by disaggregated prefill",
         path="srt/speculative/spec_info.py", qualname="SpeculativeAlgorithm.build_disagg_draft_input"),
    gate("equality", "pd-disaggregation", "disaggregation peer state-layout check",
         path="srt/disaggregation/*"),
    gate("predicate-call", "sampling-mask", "return_sampling_mask request validation",
         path="srt/speculative/spec_sampling_mask.py"),
    gate("predicate-call", "sampling-mask", "accept-threshold updates while sampling-mask requests run",
         path="srt/managers/scheduler_components/internal_state.py",
         qualname="SchedulerInternalStateController._validate_accept_threshold"),
    gate("equality", "hybrid-target", "Mamba extra buffer refuses DFlash's verify",
         path="srt/server_args.py", qualname="ServerArgs._validate_mamba_extra_buffer", refuses=True),
    gate("membership", "hybrid-target", "linear-attention verify backend choice",
         qualname="*handle_linear_attn_backend"),
    gate("membership", "hybrid-target", "hybrid request pool (recurrent state commit)",
         path="srt/mem_cache/kv_cache_configurator.py", qualname="KVCacheConfigurator._build_hybrid_req_pool"),
    gate("predicate-call", "hybrid-target", "fused draft pool for Mamba targets",
         path="srt/mem_cache/kv_cache_configurator.py",
         qualname="KVCacheConfigurator._fused_draft_for_mamba_factory"),
    gate("predicate-call", "hybrid-target", "hierarchical-cache fused draft KV (hybrid-SWA targets)",
         path="srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py"),
    Entry("unmatched", D.KEEP,
          "key of the unsupported-flags table: it names the condition beside it in the error message; "
          "that condition is its own site", path="srt/arg_groups/cp_tp_group_sharing_hook.py",
          qualname="resolve_cp_tp_group_sharing"),
)

STRUCTURE: tuple[Entry, ...] = (
    Entry("validation-hook", D.EDIT,
          "DFlash's server-arg validation also runs for DDTREE; DDTree's own validation is appended after it"),
    Entry("request-hook", D.EDIT,
          "DFlash's request validation also runs for DDTREE, after DDTree's own refusals of the "
          "per-request features it lacks (grammar, logprobs, hidden states, sampling masks)"),
    Entry("worker-dispatch", D.EDIT,
          "DDTREE gets its own worker (tree verify) ahead of the widened DFLASH branch"),
    Entry("enum-member", D.EDIT, "adds DDTREE = auto() beside DFLASH", qualname="SpeculativeAlgorithm"),
    Entry("predicate-def", D.EDIT,
          "is_dflash() widens through its body; is_ddtree() is added beside it", qualname="*.is_dflash"),
    Entry("predicate-def", D.WIDEN, "is_dflash_family() follows is_dflash(), which includes DDTREE",
          qualname="*.is_dflash_family"),
    Entry("choices", D.WIDEN, "the CLI accepts DDTREE wherever it accepts DFLASH"),
    Entry("builtins-help", D.EDIT, "the help text lists the builtin names users may pass"),
    Entry("server-arg-field", D.EDIT, "declares DDTree's own server arguments"),
    Entry("argparse-flag", D.EDIT, "declares DDTree's own CLI flags"),
    Entry("allow-list", D.WIDEN, "DDTREE is a builtin name, so the plugin registry reserves it",
          path="srt/speculative/spec_registry.py"),
)

PRINCIPLES: tuple[Entry, ...] = (
    shared("predicate-call", "is_dflash()/is_dflash_family() include DDTREE: DFlash plumbing DDTree runs"),
    shared("equality", "DFlash plumbing DDTree runs"),
    shared("membership", "DFlash plumbing DDTree runs"),
    shared("allow-list", "allow-list of DFlash plumbing DDTree runs"),
    Entry("value", D.KEEP, "DFlash's draft runner tags its own batches DFLASH; DDTree reuses it unchanged",
          path="srt/speculative/dflash*"),
    Entry("value", D.KEEP, "inside DFlash's own helper the literal labels DFlash's machinery, which DDTree reuses",
          qualname="*dflash*"),
    Entry("call-arg", D.KEEP, "inside DFlash's own helper the literal asks about DFlash's draft side, which DDTree reuses",
          qualname="*dflash*"),
    Entry("unmatched", D.KEEP,
          "lazy-import table of DFlash's own kernel module; DDTree reuses those kernels as they are",
          path="kernels/ops/speculative/__init__.py", qualname="<module>"),
    Entry("prose", D.KEEP, "prose naming DFlash handed on as a label, message or help text; it is shown, never compared"),
    Entry("flag-name", D.KEEP, "declares one of DFlash's own CLI flags, which DDTree reuses as they are"),
    Entry("*", D.KEEP, "SGLang's own test kit: never imported by the server", path="test/*"),
    Entry("unmatched", D.KEEP, "SGLang's own test kit: never imported by the server", path="test/*"),
)

ENTRIES: tuple[Entry, ...] = GATES + STRUCTURE + PRINCIPLES


def default_policy() -> Policy:
    """The table above as the engine reads it."""
    return Policy(ENTRIES)
