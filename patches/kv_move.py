"""Commit move of the accepted nodes' target KV that touches only the entries that move.

SGLang's `move_kv_cache` copies every (tgt, src) pair it is given, so a round that moves
`bs x max_commit` pairs copies them all, slot-onto-itself ones included (every pair of a
first-child path). `kernels.commit.move_slots_triton` copies the same per-slot buffers (the
pool's `data_ptrs` / `data_strides`, which SGLang's own tiled copy walks) and skips identity
and padding entries on the device: no host sync, fixed launch shape. Only the plain
`MHATokenToKVPool` (slot-major, no native/FP4 scale path) is handled; other pools keep SGLang's
own `move_kv_cache`.
"""

from __future__ import annotations

import torch

from .kernels.commit import move_slots_triton, move_word

MAX_TILE = 2048  # the widest tile timed (a whole slot of 8 KV heads x 128 bf16)


class SlotMover:
    """Moves accepted KV for one target pool; decides once whether the skipping kernel applies."""

    def __init__(self, pool: object):
        self.pool = pool
        self.direct = (
            type(pool).__name__ == "MHATokenToKVPool"
            and getattr(pool, "layer_num", 0) > 0
            and not getattr(pool, "use_hnd", False)
            and not getattr(pool, "use_native_move_kv_cache", False)
            and getattr(pool, "native_k_scale_buffer", None) is None
            and isinstance(getattr(pool, "data_ptrs", None), torch.Tensor)
            and isinstance(getattr(pool, "data_strides", None), torch.Tensor)
        )
        # Read once here (the buffers and strides never change): the widest slot, and the widest
        # word every buffer address and stride is a multiple of (the move loads words, not bytes).
        strides = pool.data_strides.cpu().tolist() if self.direct else []
        self.max_stride = max(strides, default=0)
        self.word = move_word(pool.data_ptrs.cpu().view(torch.int64).tolist(), strides) if self.direct else 1
        # Bytes of a slot per program: the whole slot up to MAX_TILE (on the H200, 2048-byte slots
        # moved in 57.0 vs 61.1 us off-chain and 8.3 vs 14.9 us first-child at batch 64 than in the
        # former 512-byte tiles, within 0.5 us at batch 1 and 8; docs/kernels.md "KV commit move").
        self.tile = max(self.word, min(MAX_TILE, 1 << max(self.max_stride - 1, 0).bit_length()))

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Slot src[b, i] onto dst[b, i]; src < 0 means no move (padding past the accepted length)."""
        if self.direct:
            move_slots_triton(self.pool.data_ptrs, self.pool.data_strides, self.max_stride, dst, src, tile=self.tile,
                              word=self.word)
            return
        self.pool.move_kv_cache(dst.reshape(-1), torch.where(src >= 0, src, dst).reshape(-1))
