"""Section move: KV commit move over a Qwen3-8B-shaped pool (36 layers x K and V, 8 KV heads x 128,
bf16), copying every pair (as SGLang's `move_kv_cache`) vs skipping identity and padding entries,
byte by byte, and skipping by the widest word the pool allows (the runtime's), in tiles of 512
bytes (the default) and of a whole slot; first-child paths (nothing moves) and off-chain paths.
The pool and paths serve the round and posterior-profile sections too."""

from __future__ import annotations

import argparse

import torch

from kernels.commit import move_slots_torch, move_slots_triton, move_word
from scripts.bench.kernels.timing import Timer, _cell, _table


def _path_moves(bs: int, n: int, length: int, off_chain: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """dst = a request's first `length` slots; src = accepted nodes' slots, -1 past the accepted
    length (3/4 of it accepted). First-child path: node d at depth d (src == dst)."""
    gen = torch.Generator().manual_seed(bs * n)
    accepted = max(1, 3 * length // 4)
    dst = torch.arange(bs * n).view(bs, n)[:, :length].clone()
    src = torch.full((bs, length), -1, dtype=torch.int64)
    for b in range(bs):
        nodes = torch.arange(accepted)
        if off_chain:
            nodes = torch.cat([torch.zeros(1, dtype=torch.int64),
                               torch.randperm(n - 1, generator=gen)[: accepted - 1].sort().values + 1])
        src[b, :accepted] = b * n + nodes
    return dst.to(device), src.to(device)


def _moves_agree(buffers: list[torch.Tensor], dst: torch.Tensor, src: torch.Tensor, full_src: torch.Tensor) -> bool:
    """Every variant (all pairs, skipping, skipping by words) on random copies of two buffers gives
    the torch reference's result."""
    gen = torch.Generator(device=buffers[0].device).manual_seed(0)
    start = [torch.randn(b.shape, generator=gen, device=b.device).to(b.dtype) for b in buffers]
    ref = [b.clone() for b in start]
    move_slots_torch(ref, dst, src)
    agree = True
    for pairs, skip, wide in ((src, True, False), (full_src, False, False), (src, True, True)):
        work = [b.clone() for b in start]
        ptrs = torch.tensor([b.data_ptr() for b in work], dtype=torch.uint64, device=dst.device)
        strides = torch.tensor([b.stride(0) * b.element_size() for b in work], device=dst.device)
        word = move_word([b.data_ptr() for b in work], strides.tolist()) if wide else 1
        move_slots_triton(ptrs, strides, int(strides.max()), dst, pairs, skip_identity=skip, word=word)
        agree &= all(torch.equal(w, r) for w, r in zip(work, ref))
    return agree


def _kv_pool(args: argparse.Namespace, slots: int) -> tuple[list[torch.Tensor], torch.Tensor, int, torch.Tensor, int]:
    """A Qwen3-8B-shaped KV pool (K and V of every layer, bf16) as the move kernel sees it:
    (buffers, their addresses, bytes per slot, per-buffer bytes per slot, the widest move word)."""
    buffers = [torch.zeros(slots, args.kv_heads, args.head_dim, dtype=torch.bfloat16, device=args.device)
               for _ in range(2 * args.layers)]
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64, device=args.device)
    stride = buffers[0].stride(0) * buffers[0].element_size()
    word = move_word([b.data_ptr() for b in buffers], [stride])
    return buffers, ptrs, stride, torch.full((len(buffers),), stride, dtype=torch.int64, device=args.device), word


def bench_move(args: argparse.Namespace, timer: Timer) -> list[dict]:
    out, rows = [], []
    length = args.depth + 1
    for bs in args.batch:
        for budget in args.budget:
            n = budget + 1
            buffers, ptrs, stride, strides, word = _kv_pool(args, bs * n + 1)
            for kind in ("first-child", "off-chain"):
                dst, src = _path_moves(bs, n, min(length, n), kind == "off-chain", args.device)
                full_src = torch.where(src >= 0, src, dst)  # what SGLang's move is handed: every pair
                same = _moves_agree(buffers[:2], dst, src, full_src)
                t = timer.measure({
                    "all": lambda: move_slots_triton(ptrs, strides, stride, dst, full_src, skip_identity=False),
                    "skip": lambda: move_slots_triton(ptrs, strides, stride, dst, src),
                    "words": lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word),
                    "words, whole slot": lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word,
                                                                   tile=1 << (stride - 1).bit_length()),
                })
                moved = int(((src >= 0) & (src != dst)).sum()) * stride * len(buffers) * 2
                ratio = t["all"]["median"] / t["skip"]["median"]
                out.append({"batch": bs, "budget": budget, "paths": kind, "all_us": t["all"], "skip_us": t["skip"],
                            "skip_words_us": t["words"], "skip_words_slot_tile_us": t["words, whole slot"], "word": word,
                            "ratio": ratio, "same_result": same,
                            "bytes_moved_skip": moved, "bytes_moved_all": dst.numel() * stride * len(buffers) * 2})
                rows.append([str(bs), str(budget), kind, _cell(t["all"]), _cell(t["skip"]), _cell(t["words"]),
                             _cell(t["words, whole slot"]),
                             f"{ratio:.2f}x", f"{t['skip']['median'] / t['words']['median']:.2f}x",
                             f"{moved / 1e6:.1f}", "yes" if same else "NO"])
            del buffers
    _table(f"KV commit move, {args.layers} layers x K,V of [{args.kv_heads}, {args.head_dim}] bf16, "
           f"path length {length} (3/4 accepted): us median [p10-p90]",
           ["batch", "budget", "paths", "every pair (bytes)", "skip identity (bytes)", "skip identity (words)",
            "words, a slot per program", "every pair/skip", "bytes/words", "MB read+written (skip)", "same result"], rows)
    return out
