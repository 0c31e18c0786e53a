"""The draft head's GEMM and the top-K's scan interleaved over vocabulary chunks.

Today the draft head writes all `[bs x D, V]` logits (one cuBLAS GEMM, compute-bound: ~1.4 ms at
batch 64 on the Qwen3-8B shape) and the streaming top-K then reads them back (its scan: ~88 us,
bandwidth-bound). Here the GEMM runs chunk by chunk along the vocabulary, each chunk's product
written in place into its columns of the logits (cuBLAS takes the row stride as its leading
dimension, so nothing is copied), and the scan of a chunk is launched as soon as that chunk is
written: right after it on the same stream (`side=None`; its logits may still be in L2), or on a
side stream that waits for the chunk while the main stream goes on with the next chunk's GEMM
(the bandwidth-bound scan beside the compute-bound GEMM). The select runs once all chunks are
scanned. Chunks are whole scan splits, so the parts are those of `vocab_topk.scan_stage` with the
same layout, bit for bit; the result is `topk_parts` of the same logits (tokens identical, the LSE
up to the summation order that the split count sets).

Measured on the H200 (`python -m scripts.bench.kernels --sections head`, docs/kernels.md): slower than one GEMM
followed by the top-K at every batch and chunk count, the chunked GEMM alone already costing more
than the top-K. The runtime does not use it; it stays, with its tests, so the benchmark can rerun.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple, Optional

import torch
import triton

from .vocab_topk import (PROGRAMS_PER_SM, ScanLayout, TopKParts, _default_splits, check_stream_k, empty_scan_parts,
                         launch_scan, scan_layout, select_stage, topk_parts_torch)


class Chunk(NamedTuple):
    """One vocabulary chunk: scan splits `first_split .. first_split + splits`, logit columns `start:stop`."""

    first_split: int
    splits: int
    start: int
    stop: int


def chunk_plan(rows: int, vocab: int, chunks: int, device: torch.device,
               programs_per_sm: int = PROGRAMS_PER_SM) -> tuple[ScanLayout, list[Chunk]]:
    """(scan layout, chunks): at least `chunks` splits per row (more where the GPU wants them),
    `chunks` runs of whole splits (fewer when the vocabulary has fewer tiles)."""
    if chunks < 1:
        raise ValueError(f"chunks={chunks} must be >= 1")
    want = chunks * triton.cdiv(_default_splits(rows, device, programs_per_sm), chunks)
    layout = scan_layout(rows, vocab, device, splits=want)
    per_chunk = triton.cdiv(layout.splits, chunks)
    plan = []
    for first in range(0, layout.splits, per_chunk):
        count = min(per_chunk, layout.splits - first)
        start = first * layout.per_split * layout.tile
        plan.append(Chunk(first, count, start, min((first + count) * layout.per_split * layout.tile, vocab)))
    return layout, plan


def head_topk_parts(hidden: torch.Tensor, weight: torch.Tensor, k: int, chunks: int,
                    side: Optional[torch.cuda.Stream] = None) -> tuple[TopKParts, torch.Tensor]:
    """(TopKParts [bs, D, k] / [bs, D], logits [bs, D, V]) of `hidden [bs, D, H] @ weight[V, H].T`.

    `side`: a CUDA stream for the scans (they then overlap the next chunk's GEMM); None scans each
    chunk on the current stream right after its GEMM. K <= STREAM_MAX_K."""
    if hidden.dim() != 3 or weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden [bs, D, H] and weight [V, H] expected, got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    bs, depth, _ = hidden.shape
    vocab = weight.shape[0]
    check_stream_k(vocab, k)
    rows = bs * depth
    layout, plan = chunk_plan(rows, vocab, chunks, weight.device)
    x = hidden.reshape(rows, -1).to(weight.dtype)
    logits = torch.empty((rows, vocab), dtype=weight.dtype, device=weight.device)
    scan = empty_scan_parts(rows, layout, logits.dtype, logits.device)
    main = torch.cuda.current_stream(weight.device) if side is not None else None
    for chunk in plan:
        torch.mm(x, weight[chunk.start:chunk.stop].T, out=logits[:, chunk.start:chunk.stop])
        if side is not None:
            side.wait_stream(main)  # this chunk's logits (and everything before them) are written
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            launch_scan(logits, scan, layout, chunk.first_split, chunk.splits)
    if side is not None:
        main.wait_stream(side)
    parts = select_stage(logits, scan, k)
    return parts.per_request(bs, depth), logits.view(bs, depth, vocab)


def head_topk(hidden: torch.Tensor, weight: torch.Tensor, k: int, chunks: int,
              side: Optional[torch.cuda.Stream] = None) -> TopKParts:
    """`head_topk_parts` on CUDA; elsewhere the torch reference of the same head and top-K."""
    if weight.is_cuda:
        return head_topk_parts(hidden, weight, k, chunks, side)[0]
    bs, depth, _ = hidden.shape
    logits = torch.mm(hidden.reshape(bs * depth, -1).to(weight.dtype), weight.T)  # the one-GEMM head's product
    return topk_parts_torch(logits.view(bs, depth, -1), k)
