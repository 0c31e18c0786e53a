"""Run SGLang's own Triton extend-attention kernel (the target-verify path of its triton backend)
on a DDTree mask from our kernels, under TRITON_INTERPRET=1 on CPU tensors, inside a release venv.

usage (repository root): python -m tests.cpu_serverargs.tree_attention_probe [cuda]   (sglang on PYTHONPATH; `cuda` runs the
compiled kernels on the GPU instead of the interpreter)
Prints JSON: the largest difference of SGLang's output from an ancestor-mask reference and from
a causal-mask reference, and whether the tree leaves the first-child chain (so they can differ);
the same for the tree-only mask (`prefix_ones=False`, prefix columns False), which must change
nothing because the kernel skips the prefix columns (`skip_prefix_custom_mask`), and for that mask
written in place into a uint8 buffer whose prefix columns hold stale bytes (DDTREE_MASK_IN_PLACE).
"""

from __future__ import annotations

import json
import os
import sys

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import torch  # noqa: E402

from kernels import build_tree, build_tree_mask  # noqa: E402
from kernels.tree_mask import ancestor_matrix_torch, build_tree_mask_torch  # noqa: E402
from tests.cpu_serverargs import torchvision_stand_in  # noqa: E402

torchvision_stand_in.install(("xgrammar",))  # SGLang imports torchvision (and 0.5.17+ xgrammar); the CPU venv has neither
try:  # where the kernel lives: srt/layers/attention/triton_ops up to 0.5.2x, then sglang/kernels
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
except ModuleNotFoundError:
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd


def _triton_backend_facts() -> dict[str, object]:
    """What `mask_reads_prefix` relies on: the backend's class name, that it never passes
    `skip_prefix_custom_mask` (so the kernel's default applies) and that this default is True."""
    import inspect

    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return {"backend_class": TritonAttnBackend.__name__,
            "backend_passes_skip_prefix": "skip_prefix_custom_mask" in inspect.getsource(TritonAttnBackend),
            "skip_prefix_default": inspect.signature(extend_attention_fwd).parameters["skip_prefix_custom_mask"].default}


def _reference(q, k_prefix, v_prefix, k_tree, v_tree, visible, scale):
    """Attention of each tree row over the whole prefix plus its visible tree columns."""
    out = torch.empty_like(q)
    group = q.shape[1] // k_prefix.shape[1]
    for row in range(q.shape[0]):
        keys = torch.cat([k_prefix, k_tree[visible[row]]]).repeat_interleave(group, dim=1)
        values = torch.cat([v_prefix, v_tree[visible[row]]]).repeat_interleave(group, dim=1)
        weights = torch.softmax(torch.einsum("hd,thd->ht", q[row], keys) * scale, dim=-1)
        out[row] = torch.einsum("ht,thd->hd", weights, values)
    return out


def main() -> None:
    torch.manual_seed(0)
    torch.set_default_device(DEVICE)
    bs, depth, vocab, budget = 2, 4, 24, 9
    heads, kv_heads, dim = 4, 2, 32
    n = budget + 1
    tree = build_tree(torch.randn(bs, depth, vocab), budget)
    prefix = torch.tensor([5, 3])
    q = torch.randn(bs * n, heads, dim)
    k_tree, v_tree = torch.randn(bs * n, kv_heads, dim), torch.randn(bs * n, kv_heads, dim)
    k_buffer, v_buffer = torch.randn(int(prefix.sum()), kv_heads, dim), torch.randn(int(prefix.sum()), kv_heads, dim)
    zero = torch.zeros(1, dtype=torch.int64)
    qo_indptr = torch.arange(bs + 1, dtype=torch.int32) * n
    kv_indptr = torch.cat([zero, prefix.cumsum(0)]).to(torch.int32)
    kv_indices = torch.arange(int(prefix.sum()), dtype=torch.int64)
    mask = build_tree_mask(tree.parent, prefix)
    mask_indptr = torch.cat([zero, (n * (prefix + n)).cumsum(0)]).to(torch.int64)
    scale = dim**-0.5

    def attend(custom_mask: torch.Tensor) -> torch.Tensor:
        # As SGLang's triton backend calls it in target verify: causal=True with a custom mask.
        out = torch.empty_like(q)
        extend_attention_fwd(q, k_tree, v_tree, out, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                             custom_mask, True, mask_indptr, n, 1.0, 1.0, sm_scale=scale)
        return out

    out = attend(mask)
    # Prefix columns all False (the torch path; on CUDA the Triton path would leave them unwritten).
    tree_only = build_tree_mask_torch(tree.parent.cpu(), prefix.cpu(), int(prefix.sum()), prefix_ones=False)
    tree_only = tree_only.to(DEVICE)
    out_tree_only = attend(tree_only)
    # Built in place in a graph buffer (DDTREE_MASK_IN_PLACE): uint8, as SGLang's own buffer, and the
    # prefix columns holding whatever an earlier round left there (the Triton path does not write them).
    stale = torch.randint(0, 2, (mask.numel() + 16,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    stale = stale.to(DEVICE)
    from kernels.tree_mask import build_tree_mask_triton  # writes the tree columns only, interpreted on the CPU
    build_tree_mask_triton(tree.parent, prefix, int(prefix.sum()), prefix_ones=False, out=stale.view(torch.bool))
    out_in_place = attend(stale[: mask.numel()])
    ancestors = ancestor_matrix_torch(tree.parent)
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # on the default device
    err_tree, err_causal, err_tree_only, err_in_place = 0.0, 0.0, 0.0, 0.0
    for b in range(bs):
        rows, kv = slice(b * n, (b + 1) * n), slice(int(kv_indptr[b]), int(kv_indptr[b + 1]))
        args = (q[rows], k_buffer[kv], v_buffer[kv], k_tree[rows], v_tree[rows])
        err_tree = max(err_tree, float((out[rows] - _reference(*args, ancestors[b], scale)).abs().max()))
        err_causal = max(err_causal, float((out[rows] - _reference(*args, causal, scale)).abs().max()))
        err_tree_only = max(err_tree_only, float((out_tree_only[rows] - _reference(*args, ancestors[b], scale))
                                                 .abs().max()))
        err_in_place = max(err_in_place, float((out_in_place[rows] - _reference(*args, ancestors[b], scale))
                                               .abs().max()))
    tree_only_false = not bool((tree_only & ~mask).any()) and bool((mask & ~tree_only).any())
    off_chain = bool((tree.parent[:, 2:] != torch.arange(1, n - 1)).any())
    print(json.dumps({"device": DEVICE, "max_err_tree": err_tree, "max_err_causal": err_causal,
                      "max_err_tree_only_mask": err_tree_only, "tree_only_prefix_false": tree_only_false,
                      "max_err_in_place_stale_uint8": err_in_place,
                      "stale_prefix": bool((mask & ~stale[: mask.numel()].bool()).any()),  # prefix cells hidden
                      "off_chain": off_chain, **_triton_backend_facts()}))


if __name__ == "__main__":
    main()
