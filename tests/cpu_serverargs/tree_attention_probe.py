"""Run SGLang's own Triton extend-attention kernel (the target-verify path of its triton backend)
on a DDTree mask from our kernels, under TRITON_INTERPRET=1 on CPU tensors, inside a release venv.

usage: python tree_attention_probe.py REPO_ROOT [cuda]   (sglang on PYTHONPATH; `cuda` runs the
compiled kernels on the GPU instead of the interpreter)
Prints JSON: the largest difference of SGLang's output from an ancestor-mask reference and from
a causal-mask reference, and whether the tree leaves the first-child chain (so they can differ).
"""

from __future__ import annotations

import json
import os
import sys

DEVICE = sys.argv[2] if len(sys.argv) > 2 else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere
sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import torchvision_stand_in  # noqa: E402  (beside this file: the script's folder is on sys.path)

from kernels import build_tree, build_tree_mask  # noqa: E402
from kernels.tree_mask import ancestor_matrix_torch  # noqa: E402

torchvision_stand_in.install(("xgrammar",))  # SGLang imports torchvision (and 0.5.17+ xgrammar); the CPU venv has neither
try:  # where the kernel lives: srt/layers/attention/triton_ops up to 0.5.2x, then sglang/kernels
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
except ModuleNotFoundError:
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd


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
    out = torch.empty_like(q)
    scale = dim**-0.5
    # As SGLang's triton backend calls it in target verify: causal=True with a custom mask.
    extend_attention_fwd(q, k_tree, v_tree, out, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                         mask, True, mask_indptr, n, 1.0, 1.0, sm_scale=scale)
    ancestors = ancestor_matrix_torch(tree.parent)
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # on the default device
    err_tree, err_causal = 0.0, 0.0
    for b in range(bs):
        rows, kv = slice(b * n, (b + 1) * n), slice(int(kv_indptr[b]), int(kv_indptr[b + 1]))
        args = (q[rows], k_buffer[kv], v_buffer[kv], k_tree[rows], v_tree[rows])
        err_tree = max(err_tree, float((out[rows] - _reference(*args, ancestors[b], scale)).abs().max()))
        err_causal = max(err_causal, float((out[rows] - _reference(*args, causal, scale)).abs().max()))
    off_chain = bool((tree.parent[:, 2:] != torch.arange(1, n - 1)).any())
    print(json.dumps({"device": DEVICE, "max_err_tree": err_tree, "max_err_causal": err_causal,
                      "off_chain": off_chain}))


if __name__ == "__main__":
    main()
