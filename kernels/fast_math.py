"""Compiled-only arithmetic shared by the kernels, and the switch that sets it aside.

Under the interpreter (TRITON_INTERPRET=1, the CPU tests) there is no inline PTX: the kernels then
take the plain `tl` forms, whose bits the torch references reproduce.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.jit import JITFunction


@triton.jit
def _probe():
    pass


# Whether the kernels are compiled (CUDA) or run by the interpreter, where @triton.jit returns the
# plain function.
COMPILED = tl.constexpr(isinstance(_probe, JITFunction))


@triton.jit
def fast_exp(x):
    """exp(x). Compiled: ex2.approx.ftz of x * log2(e), one MUFU instruction where tl.exp adds three
    for results below FLT_MIN (flushed to 0 here: callers sum exps relative to a maximum, whose
    exp(0) = 1 keeps the sum >= 1, so a flushed term changes nothing)."""
    if COMPILED:
        y = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                      dtype=tl.float32, is_pure=True, pack=1)
    else:
        y = tl.exp(x)
    return y
