"""Compile, without a GPU, SGLang's Triton attention kernels for sm90 with the Triton at hand.

    PYTHONPATH=/path/to/site python -m scripts.rig.triton_compile_check

Why: a compat bundle (scripts/gpurig_compat.sh) runs a release's kernels on an older Triton than it
pins (0.5.18 pins 3.7.1; the GPU machine has 3.6). Triton's interpreter is no proof (3.6's stops on
kernels that compile), so this builds the real sm90 cubins: a stand-in driver reports an sm90 target
and every launch becomes a warm-up (compile only, nothing runs), so a CPU machine with Triton's
bundled ptxas suffices. Covered: the extend-attention kernel with a bool, a uint8 and no custom mask
(the target-verify and prefill paths of the triton backend) and the grouped decode kernels, bf16,
head dim 64, as the GPU check's tiny models use. Prints the compiled kernels; exit 1 on a failure.
"""

from __future__ import annotations

import sys

import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction


class Sm90CompileOnly:
    """The part of Triton's active driver a warm-up launch reads (no CUDA needed)."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


def main() -> int:
    driver.set_active(Sm90CompileOnly())
    compiled: list[tuple[str, int]] = []
    launch = JITFunction.run

    def warm_up(self, *args, **kwargs):
        kernel = launch(self, *args, **dict(kwargs, warmup=True))
        compiled.append((self.fn.__name__, len(kernel.asm["cubin"])))
        return kernel

    JITFunction.run = warm_up
    from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    bf16, bs, n, heads, kv_heads, dim, splits = torch.bfloat16, 2, 10, 4, 2, 64, 8
    prefix = torch.tensor([5, 3])
    zero = torch.zeros(1, dtype=torch.int64)
    q = torch.randn(bs * n, heads, dim, dtype=bf16)
    k_tree, v_tree = torch.randn(bs * n, kv_heads, dim, dtype=bf16), torch.randn(bs * n, kv_heads, dim, dtype=bf16)
    k_buf, v_buf = torch.randn(64, kv_heads, dim, dtype=bf16), torch.randn(64, kv_heads, dim, dtype=bf16)
    qo_indptr = torch.arange(bs + 1, dtype=torch.int32) * n
    kv_indptr = torch.cat([zero, prefix.cumsum(0)]).to(torch.int32)
    kv_indices = torch.arange(int(prefix.sum()), dtype=torch.int64)
    mask = torch.ones(int((n * (prefix + n)).sum()), dtype=torch.bool)
    mask_indptr = torch.cat([zero, (n * (prefix + n)).cumsum(0)]).to(torch.int64)
    q_dec = torch.randn(bs, heads, dim, dtype=bf16)
    cases = [(f"extend, {name}", lambda m=m: extend_attention_fwd(
                q, k_tree, v_tree, torch.empty_like(q), k_buf, v_buf, qo_indptr, kv_indptr, kv_indices, m, True,
                None if m is None else mask_indptr, n, 1.0, 1.0, sm_scale=dim**-0.5))
             for name, m in (("bool mask", mask), ("uint8 mask", mask.view(torch.uint8)), ("no mask", None))]
    cases.append(("decode, grouped", lambda: decode_attention_fwd(
        q_dec, k_buf, v_buf, torch.empty_like(q_dec), kv_indptr, kv_indices,
        torch.empty(bs, heads, splits, dim), torch.empty(bs, heads, splits), torch.full((bs,), 4, dtype=torch.int32),
        splits, dim**-0.5, 1.0, 1.0)))
    failed = 0
    for name, call in cases:
        try:
            call()
            print(f"OK   {name}", flush=True)
        except Exception as error:  # noqa: BLE001 - the compiler's message is the finding
            failed += 1
            print(f"FAIL {name}: {type(error).__name__}: {str(error)[:2000]}", flush=True)
    print("compiled:", ", ".join(f"{name} ({size} B cubin)" for name, size in compiled))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
