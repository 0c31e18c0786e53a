"""The graph mask buffer a patched release's DDTree worker writes into (DDTREE_MASK_IN_PLACE=1),
looked up by the dropped-in `tree_verify.graph_mask_buffer` on SGLang's own TritonAttnBackend class.

usage: python mask_buffer_probe.py   (the patched sglang on PYTHONPATH)
The backend is made with `__new__` and given the buffer the way its own CUDA-graph set-up does
(`cuda_graph_custom_mask` up to 0.5.16; from 0.5.17 `_verify_mask` from SGLang's own
`maybe_create_verify_mask`), so no model runner is needed. Prints JSON: which lookup the release
offers, whether the buffer found is that one, whether the verify input's mask is a view of it, and
whether the replay assigns the verify input's mask onto the buffer.
"""

from __future__ import annotations

import inspect
import json
import os

os.environ["DDTREE_MASK_IN_PLACE"] = "1"

import torch  # noqa: E402
import torchvision_stand_in  # noqa: E402  (beside this file)

torchvision_stand_in.install(("xgrammar",))

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.speculative.ddtree.kernels import build_tree  # noqa: E402
from sglang.srt.speculative.ddtree.tree_verify import DDTreeVerifyInput, graph_mask_buffer  # noqa: E402

BS, N, CONTEXT = 2, 8, 64


def backend_with_graph_buffer() -> tuple[TritonAttnBackend, torch.Tensor, str]:
    backend = TritonAttnBackend.__new__(TritonAttnBackend)
    if hasattr(TritonAttnBackend, "verify_mask"):
        from sglang.srt.layers.attention.verify_mask import maybe_create_verify_mask

        backend._verify_mask = maybe_create_verify_mask(
            is_draft_runner=False, skip_prefill=False, max_bs=BS, max_context_len=CONTEXT, num_draft_tokens=N,
            device="cpu", is_read=True, dtype=torch.uint8)
        return backend, backend._verify_mask.buffer, "verify_mask"
    backend.cuda_graph_custom_mask = torch.zeros(BS * N * CONTEXT, dtype=torch.uint8)
    return backend, backend.cuda_graph_custom_mask, "get_verify_buffers_to_fill_after_draft"


def main() -> None:
    backend, buffer, lookup = backend_with_graph_buffer()
    found = graph_mask_buffer(backend)
    tree = build_tree(torch.randn(BS, N - 1, 32), N - 1)
    prefix = torch.tensor([5, 9])
    verify = DDTreeVerifyInput.from_tree(tree, torch.tensor([1, 2]), prefix, int(prefix.sum()), prefix_ones=False,
                                         mask_buffer=found)
    mask = verify.custom_mask
    print(json.dumps({
        "lookup": lookup,
        "found_is_the_buffer": found is not None and found.data_ptr() == buffer.data_ptr(),
        "mask_is_a_view": mask.data_ptr() == buffer.data_ptr() and mask.dtype == buffer.dtype,
        "mask_numel": mask.numel(),
        "replay_assigns_onto_the_buffer":
            "custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask" in inspect.getsource(TritonAttnBackend),
    }))


if __name__ == "__main__":
    main()
