"""The policy: which DFLASH sites DDTree shares, which stay DFlash-only, and why.

Principles first: DDTree reuses DFlash's draft runner and all of its server configuration, so
DFlash's conditions widen to DDTREE; it has its own verify input and worker, so those are new
code. Per-site overrides (above the principles) exist only where a principle is wrong.
"""

from ddtree_patch.policy import Entry
from ddtree_patch.sites import Decision as D

SHARED = "DDTree reuses DFlash's draft runner and server configuration: this DFlash behaviour applies to DDTREE too"

OVERRIDES: tuple[Entry, ...] = (
    Entry("allow-list", D.KEEP,
          "LoRA adapters in DDTree's tree verify are untested: DDTREE with LoRA stays refused",
          path="srt/arg_groups/lora_hook.py"),
    Entry("value", D.KEEP,
          "label naming DFLASH in the unified-memory backend audit's messages, not a condition",
          path="srt/arg_groups/kv_cache_hook.py", qualname="handle_unified_memory_pool"),
    Entry("unmatched", D.KEEP,
          "lazy-import table of DFlash's own kernel module; DDTree reuses those kernels as they are",
          path="kernels/ops/speculative/__init__.py", qualname="<module>"),
    Entry("unmatched", D.KEEP,
          "key of the unsupported-flags table: it names the condition beside it in the error message; "
          "that condition is its own site", path="srt/arg_groups/cp_tp_group_sharing_hook.py",
          qualname="resolve_cp_tp_group_sharing"),
)

PRINCIPLES: tuple[Entry, ...] = (
    Entry("validation-hook", D.EDIT,
          "DFlash's server-arg validation also runs for DDTREE; DDTree's own validation is appended after it"),
    Entry("worker-dispatch", D.EDIT,
          "DDTREE gets its own worker (tree verify) ahead of the widened DFLASH branch"),
    Entry("enum-member", D.EDIT, "adds DDTREE = auto() beside DFLASH", qualname="SpeculativeAlgorithm"),
    Entry("predicate-def", D.EDIT,
          "is_dflash() widens through its body; is_ddtree() is added beside it", qualname="*.is_dflash"),
    Entry("predicate-def", D.WIDEN, "is_dflash_family() follows is_dflash(), which includes DDTREE",
          qualname="*.is_dflash_family"),
    Entry("predicate-call", D.WIDEN, "is_dflash()/is_dflash_family() include DDTREE: " + SHARED),
    Entry("equality", D.WIDEN, SHARED),
    Entry("membership", D.WIDEN, SHARED),
    Entry("choices", D.WIDEN, "the CLI accepts DDTREE wherever it accepts DFLASH"),
    Entry("allow-list", D.WIDEN, "allow-list keyed by algorithm name: " + SHARED),
    Entry("builtins-help", D.EDIT, "the help text lists the builtin names users may pass"),
    Entry("server-arg-field", D.EDIT, "declares DDTree's own server arguments"),
    Entry("argparse-flag", D.EDIT, "declares DDTree's own CLI flags"),
    Entry("value", D.KEEP, "DFlash's draft runner tags its own batches DFLASH; DDTree reuses it unchanged",
          path="srt/speculative/dflash*"),
    Entry("value", D.KEEP, "inside DFlash's own helper the literal labels DFlash's machinery, which DDTree reuses",
          qualname="*dflash*"),
    Entry("call-arg", D.KEEP, "inside DFlash's own helper the literal asks about DFlash's draft side, which DDTree reuses",
          qualname="*dflash*"),
    Entry("prose", D.KEEP, "prose naming DFlash handed on as a label, message or help text; it is shown, never compared"),
    Entry("flag-name", D.KEEP, "declares one of DFlash's own CLI flags, which DDTree reuses as they are"),
    Entry("*", D.KEEP, "SGLang's own test kit: never imported by the server", path="test/*"),
    Entry("unmatched", D.KEEP, "SGLang's own test kit: never imported by the server", path="test/*"),
)

ENTRIES: tuple[Entry, ...] = OVERRIDES + PRINCIPLES
