"""What the DDTree runtime implements: one table, read by the patcher's policy and by the runtime.

Data only (no imports of SGLang or of the patcher). The patcher's policy names one capability for
every DFlash feature gate it decides, so a gate admits DDTREE exactly where the capability below is
implemented; the runtime refuses the rest with the messages below: server flags at start
(`server_args.validate_ddtree_server_args`), per-request features by aborting that request
(`requests.validate_ddtree_request`), while the server keeps serving the others.

Status:
- "implemented": DFlash's gates for it admit DDTREE (DDTree runs DFlash's code for it, or its own);
  where `needs` names a release helper ("module:attribute"), only on releases that provide it, and
  the refusal message answers on the others (`requests.implemented_here`).
- "opt-in": refused at start unless a DDTree flag asks for it; then DFlash's handling applies.
- "absent": DFlash's gates for it do not admit DDTREE, and DDTREE refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["implemented", "opt-in", "absent"]


@dataclass(frozen=True)
class Capability:
    name: str
    status: Status
    what: str  # the feature, in a user's words
    why: str  # why DDTree has (or lacks) it
    refusal: str = ""  # the message a refused server flag or request gets ("" when implemented everywhere)
    needs: str = ""  # "module:attribute" of SGLang that DDTree's implementation calls ("" = none)

    @property
    def admitted(self) -> bool:
        """A DFlash gate for this feature lets DDTREE through."""
        return self.status != "absent"


# Attention backends whose target-verify path applies `spec_info.custom_mask` (eager and captured):
# the backends of capability "custom-mask-attention".
TREE_MASK_ATTENTION_BACKENDS = ("triton", "flashinfer")
# The fastest of them for DDTREE, the backend a refusal names first: on the H200 (SGLang 0.5.15, Qwen3-8B
# shape, budget 15) DDTREE's round took 1.01-1.56x as long on flashinfer as on triton at batch 1-64,
# measured side by side (docs/benchmarks.md); both pass the GPU matrix (docs/gpu-check.md).
FASTEST_TREE_BACKEND = "triton"

CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability(
        "dflash-machinery", "implemented",
        "DFlash's draft model, draft KV pool, target hidden-state capture, scheduling and graphs",
        "DDTree drafts with DFlash's runner unchanged and keeps DFlash's batch state and formats",
    ),
    Capability(
        "custom-mask-attention", "implemented",
        "target verify with an attention backend that applies the custom (tree) mask",
        "the tree verify needs an ancestor-only mask; triton and flashinfer apply it",
        "DDTREE verifies a tree, which needs an attention backend that applies the custom mask in "
        "target verify",
    ),
    Capability(
        "hybrid-target", "opt-in",
        "targets with Mamba / linear attention / GDN or sliding-window layers",
        "a tree verify needs each node's window along its path and each node's recurrent state from "
        "its parent's: the first is applied on triton from SGLang 0.5.14 (tree_window.py); the second "
        "for Gated DeltaNet layers from SGLang 0.5.14, through SGLang's EAGLE-tree GDN path "
        "(tree_recurrence.py), so those targets are served there; other recurrent layers (Mamba2, "
        "KDA, lightning) are refused (architectures.py says why per kind); "
        "--speculative-ddtree-allow-hybrid-unsafe runs DFlash's chain handling anyway",
        "DDTREE refuses this target; pass --speculative-ddtree-allow-hybrid-unsafe to run it anyway",
    ),
    Capability(
        "mixed-chunk", "absent",
        "mixed chunked prefill (prefill and decode in one batch)",
        "a mixed step would run DFlash's chain verify for DDTree's requests; not verified",
        "DDTREE does not support --enable-mixed-chunk (mixed chunked prefill).",
    ),
    Capability(
        "grammar", "implemented",
        "grammar-constrained decoding (json_schema, regex, ebnf, structural_tag)",
        "the round masks every tree node's verify row with its own grammar row, built by SGLang's "
        "tree walk (as EAGLE's tree verify does, tree_grammar.py), and SGLang's result processor "
        "advances the grammar along the accepted run; SGLang 0.5.17+ ship that walk for DFlash-family "
        "workers (build_grammar_vocab_mask): on 0.5.14-0.5.16 DFlash's request check refuses grammars "
        "and runs for DDTREE, and 0.5.11-0.5.13 (the v1 worker) lack it",
        "DDTREE speculative decoding supports grammar-constrained decoding (json_schema / regex / ebnf / "
        "structural_tag) on SGLang 0.5.17 and newer only.",
        needs="sglang.srt.speculative.spec_utils:build_grammar_vocab_mask",
    ),
    Capability(
        "logprobs", "implemented",
        "return_logprob (with top_logprobs_num / token_ids_logprob)",
        "the round hands SGLang's own speculative log-prob helper the verify row of each accepted "
        "node (as EAGLE's tree verify does), after the node's path penalties; SGLang 0.5.18+ ship "
        "that helper",
        "DDTREE speculative decoding supports return_logprob on SGLang 0.5.18 and newer only.",
        needs="sglang.srt.layers.logprob_processor:compute_spec_logprobs",
    ),
    Capability(
        "hidden-states-return", "absent",
        "return_hidden_states",
        "DDTree consumes the verify's hidden states to write the draft KV and drops them",
        "DDTREE speculative decoding does not support return_hidden_states.",
    ),
    Capability(
        "sampling-mask", "absent",
        "return_sampling_mask (SGLang 0.5.22+)",
        "DDTree's worker never builds sampling_mask_output",
        "DDTREE speculative decoding does not support return_sampling_mask.",
    ),
    Capability(
        "custom-logit-processor", "absent",
        "custom logit processors (custom_logit_processor, with --enable-custom-logit-processor)",
        "a processor sees one row of logits per request; a tree verify has one row per node, along "
        "paths the processor never saw",
        "DDTREE speculative decoding does not support custom logit processors.",
    ),
    Capability(
        "unified-memory", "absent",
        "--enable-unified-memory (SGLang 0.5.22+)",
        "the unified pool's page-granular move_kv_cache cannot express the per-token moves of "
        "DDTree's tree commit",
        "DDTREE does not support --enable-unified-memory: its tree commit moves accepted KV one "
        "token at a time, which the unified pool cannot express.",
    ),
    Capability(
        "hisparse", "absent",
        "--enable-hisparse",
        "HiSparse's speculative integration handles chain drafts only (SGLang refuses it for EAGLE "
        "trees, --speculative-eagle-topk > 1): its swap state binds each verify slot to a position of "
        "one chain, which a tree verify does not keep",
        "DDTREE does not support --enable-hisparse: HiSparse's speculative decoding handles chain "
        "drafts only, and DDTree verifies a tree.",
    ),
    Capability(
        "paged-kv", "implemented",
        "--page-size > 1",
        "the tree commit copies accepted KV into slots the round already holds (any page layout); "
        "the v1 verify frees only whole pages past the last committed token, as DFlash's does",
    ),
    Capability(
        "tensor-parallel", "absent",
        "--tp-size > 1 and the features built on it (CP-TP group sharing, layernorm SP)",
        "the vocab-parallel tree build (the draft top-K merged across ranks, tp_draft.py) exists but "
        "has not run on more than one GPU",
        "DDTREE supports --tp-size 1 only for now",
    ),
    Capability(
        "lora", "absent",
        "LoRA adapters",
        "LoRA in DDTree's tree verify is untested",
        "DDTREE does not support LoRA adapters (--enable-lora / --lora-paths).",
    ),
    Capability(
        "chain-verify-options", "absent",
        "DFlash's chain-verify options: --speculative-draft-window-size, "
        "--speculative-use-block-verification",
        "DDTree replaces DFlash's chain verify with a tree verify",
        "DDTREE verifies a tree and does not support DFlash's chain-verify options",
    ),
    Capability(
        "pd-disaggregation", "absent",
        "prefill/decode disaggregation (--disaggregation-mode)",
        "the draft state DDTree's decode round expects has not been checked across a transfer",
        "DDTREE does not support --disaggregation-mode yet (prefill/decode disaggregation).",
    ),
    Capability(
        "model-specific-paths", "absent",
        "DFlash paths ported for single models (MiniMax M3 NVFP4, SM100 native NVFP4 KV)",
        "each was ported and checked for DFlash's chain commit only",
        "SGLang's own message for that model (DDTREE is not in its allow-list)",
    ),
)}


def capability(name: str) -> Capability:
    try:
        return CAPABILITIES[name]
    except KeyError:
        raise KeyError(f"no DDTree capability named {name!r}; known: {', '.join(CAPABILITIES)}") from None
