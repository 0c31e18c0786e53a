"""CUDA-graph capture of the target's tree verify with the custom mask attached.

SGLang captures the target-verify graph once per batch size from a dummy DFlash verify input. For
Triton and FlashInfer that input carries no custom mask (DFlash verifies a causal chain), so the
captured attention kernels are the causal variants, and a tree replayed on them would let each node
see its older siblings. For a DDTREE target the dummy input gets the runner's mask buffer, so the
graphs are captured with the masked kernels and replay reads the ancestor mask that each round's
verify input copies in place (with the positions) before replay.
"""

from __future__ import annotations

from typing import Any

_MARK = "_ddtree_tree_mask_capture"


def _is_ddtree(spec_algorithm: Any) -> bool:
    is_ddtree = getattr(spec_algorithm, "is_ddtree", None)
    return bool(is_ddtree and is_ddtree())


def install_tree_mask_capture() -> None:
    """Make DDTREE target runners capture target-verify graphs with the custom mask (idempotent).

    Must run before the target's decode graphs are captured: SGLang 0.5.14+ builds the speculative
    worker before it initialises attention backends and captures graphs.
    """
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    original = DecodeCudaGraphRunner.get_spec_info
    if getattr(original, _MARK, False):
        return

    def get_spec_info(self, num_tokens: int):
        spec_info = original(self, num_tokens)
        runner = self.model_runner
        if (
            spec_info is not None
            and not runner.is_draft_worker
            and _is_ddtree(runner.spec_algorithm)
            and getattr(spec_info, "custom_mask", None) is None
        ):
            spec_info.custom_mask = self.buffers.custom_mask
        return spec_info

    setattr(get_spec_info, _MARK, True)
    DecodeCudaGraphRunner.get_spec_info = get_spec_info
