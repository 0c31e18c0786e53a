"""The worker adapters: which DDTree class subclasses which DFlash class, and how SGLang reaches it: data.

DDTree subclasses the installed SGLang's DFlash classes, so there is one adapter per DFlash worker
family: `V2` (`dflash_worker_v2.DFlashWorkerV2`, SGLang 0.5.14+: the worker) and `V1`
(`dflash_worker.DFlashWorker`, 0.5.11-0.5.13: the worker, its verify input, and the chain input
that stands in for DFlash's while the draft runs). Each names the overrides the release must still
call (`hooks`), the names the release holds the object by (`receivers`) and the DFlash state it
reads (`state`). `contract.adapter_for` picks the adapter of the install, `contract.problems`
checks it against the release's own source. No imports of SGLang or torch: `ddtree-patch apply`
reads it from the patched tree with the check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class State:
    """A DFlash state class the adapter holds objects of by the local `names`."""

    names: tuple[str, ...]
    module: str
    name: str


@dataclass(frozen=True)
class Adapter:
    """A DDTree class and the DFlash class it subclasses (dotted module names), with how the
    release reaches it; `companions` are the adapter's other classes, checked alike."""

    module: str
    name: str
    base_module: str
    base_name: str
    hooks: tuple[str, ...] = ("forward_batch_generation",)  # overrides the release must still call
    receivers: tuple[str, ...] = ("model_worker", "draft_worker")  # names the release calls it by
    companions: tuple[Adapter, ...] = ()
    state: tuple[State, ...] = ()
    stands_in: tuple[str, str] | None = None  # (module, function) that builds the base by its global name

    def family(self) -> tuple[Adapter, ...]:
        return (self, *self.companions)


V2 = Adapter(
    "sglang.srt.speculative.ddtree.worker_v2", "DDTreeWorkerV2",
    "sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2",
    state=(State(("draft_input", "next_input"), "sglang.srt.speculative.dflash_info_v2", "DFlashDraftInputV2"),),
)  # fmt: skip
V1 = Adapter(
    "sglang.srt.speculative.ddtree.worker_v1", "DDTreeWorkerV1",
    "sglang.srt.speculative.dflash_worker", "DFlashWorker",
    hooks=("_prepare_for_speculative_decoding", "_greedy_sample_from_vocab_parallel_head"),
    companions=(Adapter(
        "sglang.srt.speculative.ddtree.worker_v1", "DDTreeVerifyInputV1",
        "sglang.srt.speculative.dflash_info", "DFlashVerifyInput",
        hooks=("verify",), receivers=("verify_input",),
    ), Adapter(
        "sglang.srt.speculative.ddtree.worker_v1", "ChainInputV1",
        "sglang.srt.speculative.dflash_info", "DFlashVerifyInput",
        hooks=(), receivers=("verify_input",),
        stands_in=("sglang.srt.speculative.dflash_worker", "_prepare_for_speculative_decoding"),
    )),
)  # fmt: skip
ADAPTERS = (V2, V1)  # `adapter_for` picks the first whose base module the install ships
