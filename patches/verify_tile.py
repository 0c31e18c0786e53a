"""SGLang's Triton target verify with a smaller attention tile when it carries DDTree's tree mask.

On sm_90 with head dim 128 SGLang's extend kernel takes a 128 x 64 tile with 8 warps. A 16-token
verify fills 16 of its 128 rows, and with a custom mask the kernel gathers the mask tile byte by
byte and (compiled for sm_90 here) spills registers; DFLASH's causal verify, without a mask, does
not (docs/verify-attention.md). A tile (BLOCK_M, BLOCK_N, warps) applies to every
`extend_attention_fwd` call that carries a custom mask; only DDTree's target verify passes one, so
prefill, decode and the draft keep SGLang's choice. The math per row is the same online softmax;
the tile only changes how rows are grouped.

The tile is M16N64w4 on compute capability 9.0 (H100 / H200), where it was measured: the 8B-shape
DDTREE round went from 1.16x to 1.01x DFLASH's at batch 64, and the GPU matrix passed with it
(docs/benchmarks.md, docs/gpu-check.md). Elsewhere SGLang's tile stays. `DDTREE_VERIFY_TILE=M32N64w4`
picks another tile, `DDTREE_VERIFY_TILE=sglang` keeps SGLang's everywhere.

Installed by the spec-v2 worker before the target's attention backend exists: the backend imports
`extend_attention_fwd` when it is constructed, so it binds the wrapper (0.5.14+ construct the
speculative worker first; the v1 family captures its graphs earlier, so it is not offered there).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
from typing import Any, Callable, Mapping

ENV = "DDTREE_VERIFY_TILE"
KEEP_SGLANG = "sglang"  # the value that keeps SGLang's own tile
DEFAULT_TILES = {(9, 0): "M16N64w4"}  # compute capability -> the tile measured there (docstring)
_MARK = "_ddtree_verify_tile"
_SPEC = re.compile(r"M(16|32|64|128)N(16|32|64|128)w(1|2|4|8)")
# where the Triton extend kernel lives: 0.5.11-0.5.22, then 0.5.23+
EXTEND_KERNEL_MODULES = ("sglang.srt.layers.attention.triton_ops.extend_attention",
                         "sglang.kernels.ops.attention.extend_attention")


def parse_tile(spec: str) -> tuple[int, int, int]:
    """`M16N64w4` -> (16, 64, 4); anything else is refused with the accepted form."""
    m = _SPEC.fullmatch(spec.strip())
    if m is None:
        raise ValueError(f"{ENV}={spec!r}: expected M<BLOCK_M>N<BLOCK_N>w<warps> with BLOCK_M and BLOCK_N in "
                         "16, 32, 64, 128 and warps in 1, 2, 4, 8, e.g. M16N64w4 (or "
                         f"{KEEP_SGLANG} to keep SGLang's tile)")
    return int(m[1]), int(m[2]), int(m[3])


def extend_kernel_module(needs: str) -> Any | None:
    """The first of EXTEND_KERNEL_MODULES this SGLang has with a callable `needs` (None: none has)."""
    for name in EXTEND_KERNEL_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, needs, None)):
            return module
    return None


def _kernel_module() -> Any:
    module = extend_kernel_module("_get_block_sizes_for_extend_attention")
    if module is not None:
        return module
    raise RuntimeError(f"{ENV} is set, but this SGLang has no Triton extend kernel with a block-size "
                       f"function in {', '.join(EXTEND_KERNEL_MODULES)}; unset it")


def chosen_spec(environ: Mapping[str, str], capability: tuple[int, int] | None) -> str:
    """The tile to use: `DDTREE_VERIFY_TILE` when set (`sglang` = none), else the device's measured
    default; '' = keep SGLang's tile."""
    spec = environ.get(ENV, "").strip()
    if spec:
        return "" if spec == KEEP_SGLANG else spec
    return DEFAULT_TILES.get(capability, "")  # type: ignore[arg-type]


def _capability() -> tuple[int, int] | None:
    import torch

    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None  # type: ignore[return-value]


def install(environ: Mapping[str, str] | None = None,
            capability: tuple[int, int] | None = None) -> tuple[int, int, int] | None:
    """Wrap the extend kernel's entry point with the chosen tile, if any (idempotent); returns the tile.
    `capability` defaults to this process's CUDA device (none without one)."""
    spec = chosen_spec(os.environ if environ is None else environ, capability or _capability())
    if not spec:
        return None
    tile = parse_tile(spec)
    module = _kernel_module()
    original: Callable[..., Any] = module.extend_attention_fwd
    if getattr(original, _MARK, None) is not None:
        if getattr(original, _MARK) != tile:
            raise RuntimeError(f"{ENV}: already installed with tile {getattr(original, _MARK)}, now asked for {tile}")
        return tile
    at = list(inspect.signature(original).parameters).index("custom_mask")  # once: every layer calls this

    def extend_attention_fwd(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("custom_mask", args[at] if len(args) > at else None) is None:
            return original(*args, **kwargs)
        sizes = module._get_block_sizes_for_extend_attention

        def tiled(lq: int, lv: int) -> tuple[int, ...]:
            return (*sizes(lq, lv)[:3], *tile)  # (BLOCK_DMODEL, BLOCK_DPE, BLOCK_DV) kept, then M, N, warps

        module._get_block_sizes_for_extend_attention = tiled
        try:
            return original(*args, **kwargs)
        finally:
            module._get_block_sizes_for_extend_attention = sizes

    setattr(extend_attention_fwd, _MARK, tile)
    extend_attention_fwd.__wrapped__ = original  # type: ignore[attr-defined]
    module.extend_attention_fwd = extend_attention_fwd
    logging.getLogger(__name__).info("DDTREE target verify: attention tile BLOCK_M=%d BLOCK_N=%d warps=%d "
                                     "for calls with the tree mask (%s=%s to change)", *tile, ENV, KEEP_SGLANG)
    return tile
