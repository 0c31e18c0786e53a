"""The draft head's GEMM interleaved with the top-K's scan, chunk by chunk (kernels/head_topk.py)."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.head_topk import chunk_plan, head_topk_parts
from kernels.vocab_topk import STREAM_MAX_K, TILE, draft_topk_torch, log_probs, select_stage, scan_stage


def _head(bs: int, depth: int, hidden: int, vocab: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(bs, depth, hidden, generator=gen)
    w = torch.randn(vocab, hidden, generator=gen) * 0.5
    return x.to(device), w.to(torch.bfloat16).to(device)


@pytest.mark.parametrize("rows,vocab,chunks", [(4, 3 * TILE + 17, 2), (4, 3 * TILE + 17, 3), (1, 10 * TILE, 4),
                                               (64, 151936, 8), (960, 151936, 8), (2, 100, 5)])
def test_chunks_cover_the_vocabulary_in_whole_splits(rows: int, vocab: int, chunks: int) -> None:
    layout, plan = chunk_plan(rows, vocab, chunks, torch.device("cpu"))
    assert 1 <= len(plan) <= chunks and layout.splits >= len(plan)
    assert plan[0].first_split == 0 and plan[0].start == 0 and plan[-1].stop == vocab
    for a, b in zip(plan, plan[1:]):
        assert b.first_split == a.first_split + a.splits and b.start == a.stop
    assert sum(c.splits for c in plan) == layout.splits
    for c in plan:  # a chunk's columns are exactly the tiles of its splits
        assert c.start == c.first_split * layout.per_split * layout.tile and c.stop > c.start


def test_chunks_checked() -> None:
    with pytest.raises(ValueError, match="chunks=0"):
        chunk_plan(4, 1000, 0, torch.device("cpu"))
    x, w = _head(1, 2, 8, 300, seed=1, device="cpu")
    with pytest.raises(ValueError, match=f"min\\(V=300, {STREAM_MAX_K}\\)"):
        head_topk_parts(x, w, 301, 2)
    with pytest.raises(ValueError, match="weight \\[V, H\\]"):
        head_topk_parts(x, w[:, :4], 8, 2)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,k,chunks", [(2, 2, 3 * TILE + 17, 24, 3), (1, 3, 2 * TILE, 64, 2),
                                                     (1, 1, 1000, 5, 4)])
def test_interleaved_parts_equal_the_scan_of_the_same_logits(device: str, bs: int, depth: int, vocab: int, k: int,
                                                             chunks: int) -> None:
    """The chunked GEMM writes the head's logits; the chunk-by-chunk scans give the one-launch scan's parts
    of those logits bit for bit (same layout), so the select gives the same top-K; tokens equal the
    reference's on those logits."""
    x, w = _head(bs, depth, 32, vocab, seed=vocab + k, device=device)
    parts, logits = head_topk_parts(x, w, k, chunks)
    rows = logits.view(bs * depth, vocab)
    torch.testing.assert_close(logits.float(), (x.to(w.dtype) @ w.T).float(), rtol=2e-2, atol=2e-2)
    layout, _ = chunk_plan(bs * depth, vocab, chunks, rows.device)
    whole = select_stage(rows, scan_stage(rows, splits=layout.splits), k)
    assert torch.equal(parts.values.view(-1, k), whole.values) and torch.equal(parts.tokens.view(-1, k), whole.tokens)
    assert torch.equal(parts.lse.view(-1), whole.lse)
    lp, tok = log_probs(parts)
    ref_lp, ref_tok = draft_topk_torch(logits.cpu(), k)
    assert torch.equal(tok.cpu(), ref_tok)
    torch.testing.assert_close(lp.cpu(), ref_lp, rtol=0, atol=4e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_side_stream_and_graph_give_the_same_parts() -> None:
    """Scans on a side stream (overlapping the next chunk's GEMM), eager and replayed from a CUDA graph,
    give the parts of the scans on the main stream."""
    from tests.cuda_graph import capture_graph

    x, w = _head(64, 15, 4096, 151936, seed=3, device="cuda")
    want, logits = head_topk_parts(x, w, 64, 8)
    side = torch.cuda.Stream()
    got, got_logits = head_topk_parts(x, w, 64, 8, side=side)
    assert torch.equal(got_logits, logits)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    graph, (replayed, _) = capture_graph(lambda: head_topk_parts(x, w, 64, 8, side=side))
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(replayed, want):
        assert torch.equal(a, b)
