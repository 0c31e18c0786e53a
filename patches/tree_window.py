"""Sliding-window layers in DDTree's target verify on SGLang's Triton extend kernel.

For a sliding-window layer in target verify SGLang's Triton backend hands `extend_attention_fwd`
the last `window` prefix tokens (`window_kv_indices`, `window_kv_offsets`), the tree mask with
`skip_prefix_custom_mask=True` (the mask's prefix columns unread) and the layer's window, which the
kernel measures from a query's verify row (L + i for node i). A tree node stands at L + depth, so
that hides prefix keys plain decoding shows it (kernels/tree_window_reference.py).

`path_window_call` rewrites such a call: the mask is the path-window mask (tree mask AND each key
within the window of the node's own position, prefix columns written), the kernel reads its prefix
columns, and the kernel's own window is widened to `window + n - 1` so that it hides nothing the
mask shows. The window KV list SGLang built (the last `window` prefix tokens) already holds every
prefix key any node sees (a node at depth d sees positions >= L + d - window >= L - window).
Full-attention layers (no window) keep their call untouched, so both kinds share one verify.

`path_window_extend(original, window_mask)` wraps the kernel entry point with it; `window_mask`
gives the call's mask for a layer window (None: leave the call alone). `install()` wraps SGLang's
kernel with the mask derived from the call's own tree mask (`kernels.tree_window.path_window_mask`),
so eager and captured verifies alike get it. The spec-v2 worker installs it for a target with
sliding-window layers before the target's attention backend binds the kernel, as for the tile
(verify_tile.py); the gates admit such targets only where that holds (server_args.py).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Optional

import torch

from .kernels.tree_window import path_window_mask
from .verify_tile import extend_kernel_module

WindowMask = Callable[[dict[str, Any], int], Optional[torch.Tensor]]
_MARK = "_ddtree_path_window"
_ARGS = ("custom_mask", "max_len_extend", "sliding_window_size", "skip_prefix_custom_mask")


def verify_window(window: int, n_nodes: int) -> int:
    """The kernel-side window that hides nothing of a node's path window (row i - depth <= n - 1)."""
    return window if window < 0 else window + n_nodes - 1


def path_window_call(arguments: dict[str, Any], mask: torch.Tensor) -> dict[str, Any]:
    """The keyword arguments of `extend_attention_fwd` (bound by name) for a sliding-window layer's
    tree verify: `mask` (the path-window mask, prefix columns included), prefix columns read, the
    window widened by the verify width."""
    width = int(arguments["max_len_extend"])
    return {**arguments, "custom_mask": mask, "skip_prefix_custom_mask": False,
            "sliding_window_size": verify_window(int(arguments["sliding_window_size"]), width)}


def path_window_extend(original: Callable[..., Any], window_mask: WindowMask) -> Callable[..., Any]:
    """`original` (SGLang's extend_attention_fwd) applying each node's path window to masked
    sliding-window calls; every other call passes through unchanged. `window_mask(arguments, w)`:
    the mask for the call bound by name and its layer window `w`."""
    signature = inspect.signature(original)
    missing = [a for a in _ARGS if a not in signature.parameters]
    if missing:
        raise RuntimeError(f"this SGLang's extend_attention_fwd has no {', '.join(missing)}: DDTREE cannot apply "
                           "sliding windows along tree paths on it")

    def extend_attention_fwd(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        window = arguments["sliding_window_size"]
        mask = None
        if arguments["custom_mask"] is not None and window is not None and window >= 0:
            mask = window_mask(arguments, int(window))
        if mask is None:
            return original(*args, **kwargs)
        return original(**path_window_call(arguments, mask))

    extend_attention_fwd.__wrapped__ = original  # type: ignore[attr-defined]
    return extend_attention_fwd


def call_window_mask(arguments: dict[str, Any], window: int) -> torch.Tensor:
    """The path-window mask of a target-verify call, from its own tree mask: in target verify SGLang
    passes every request's `[n, L + n]` block (`mask_indptr`) and `max_len_extend` = n."""
    return path_window_mask(arguments["custom_mask"], arguments["mask_indptr"], int(arguments["max_len_extend"]),
                            window)


def install() -> bool:
    """Wrap SGLang's Triton extend kernel with `path_window_extend` (idempotent); False when this
    SGLang has no such kernel module."""
    module = extend_kernel_module("extend_attention_fwd")
    if module is None:
        return False
    original = module.extend_attention_fwd
    if not getattr(original, _MARK, False):
        wrapped = path_window_extend(original, call_window_mask)
        setattr(wrapped, _MARK, True)
        module.extend_attention_fwd = wrapped
        logging.getLogger(__name__).info("DDTREE target verify: sliding-window layers see each node's window "
                                         "along its tree path")
    return True
