"""Vocab top-K + log-sum-exp: the streaming Triton kernel against the stable-sort torch reference."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.vocab_topk import (
    GROUP,
    STREAM_MAX_K,
    SUPER,
    TILE,
    draft_topk,
    draft_topk_radix,
    draft_topk_stream,
    draft_topk_torch,
    scan_stage,
)


def _logits(shape: tuple[int, int, int], dtype: torch.dtype, seed: int, scale: float = 4.0) -> torch.Tensor:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def _assert_same(got: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Tokens identical (order included); log-probs equal up to the LSE's fp32 summation order."""
    lp, tok = (t.cpu() for t in got)
    assert lp.dtype == torch.float32 and tok.dtype == torch.int64 and lp.shape == ref[0].shape
    assert torch.equal(tok, ref[1])
    torch.testing.assert_close(lp, ref[0], rtol=0, atol=4e-6)


def test_reference_order_and_values() -> None:
    """The reference itself: descending logits, equal logits in token order, -0.0 == +0.0, lp = log-softmax."""
    row = torch.tensor([[[1.0, 3.0, -0.0, 3.0, 0.0, float("-inf"), 3.0, 2.0]]])
    lp, tok = draft_topk_torch(row, 6)
    assert tok.tolist() == [[[1, 3, 6, 7, 0, 2]]]
    exact = torch.log_softmax(row.double(), -1)
    torch.testing.assert_close(lp.double(), exact.gather(-1, tok), rtol=0, atol=1e-6)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,depth,vocab,k,splits,dtype", [
    (2, 3, 1000, 37, None, torch.float32),  # V below one super-group tile, K not a power of two
    (2, 3, 1000, 37, None, torch.float16),
    (1, 2, 3 * TILE + 17, 64, 2, torch.bfloat16),  # several tiles, ragged tail, two programs per row
    (1, 1, 64, 64, None, torch.float32),  # K = V
    (2, 1, 2 * TILE, 1, 3, torch.bfloat16),  # K = 1, more splits than tiles: clamped
])
def test_stream_equals_reference(device: str, dtype: torch.dtype, bs: int, depth: int, vocab: int, k: int,
                                 splits: int | None) -> None:
    logits = _logits((bs, depth, vocab), dtype, seed=vocab + k)
    _assert_same(draft_topk_stream(logits.to(device), k, splits=splits), draft_topk_torch(logits, k))


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_stream_ties_masked_and_signed_zeros(device: str) -> None:
    """Coarse logits: hundreds of equal values straddle rank K (token order decides); -inf masked
    tokens; -0.0 / +0.0 mixed; a row whose finite logits are fewer than K."""
    gen = torch.Generator().manual_seed(9)
    vocab = 2 * GROUP * SUPER + 5
    logits = torch.randint(-3, 3, (3, 2, vocab), generator=gen).float() * 0.5
    logits[0, 0, ::3] = float("-inf")
    logits[0, 1] = torch.where(torch.rand(vocab, generator=gen) < 0.5, -0.0, 0.0)
    logits[1, 0, 40:] = float("-inf")
    for dtype in (torch.float32, torch.bfloat16):
        x = logits.to(dtype)
        _assert_same(draft_topk_stream(x.to(device), 100), draft_topk_torch(x, 100))


@pytest.mark.parametrize("device", DEVICES)
def test_stream_winners_in_one_group(device: str) -> None:
    """All top-K logits inside one group and one super-group: the narrowing must keep them all."""
    logits = _logits((1, 1, 4 * TILE), torch.float32, seed=3, scale=1.0)
    logits[0, 0, 5 * GROUP: 5 * GROUP + 16] = 50.0 + torch.arange(16.0)
    logits[0, 0, 7 * GROUP + 1] = 50.0
    _assert_same(draft_topk_stream(logits.to(device), 32, splits=4), draft_topk_torch(logits, 32))


@pytest.mark.parametrize("device", DEVICES)
def test_radix_fallback_values(device: str) -> None:
    """K above the streaming limit: torch.topk's tokens (ties in its order), same values."""
    k = STREAM_MAX_K + 3
    logits = _logits((1, 2, 700), torch.float32, seed=4)
    lp, tok = draft_topk_radix(logits.to(device), k)
    ref_lp, _ = draft_topk_torch(logits, k)
    torch.testing.assert_close(lp.cpu(), ref_lp, rtol=0, atol=4e-6)
    assert torch.equal(logits.gather(-1, tok.cpu()), logits.topk(k, -1).values)
    with pytest.raises(ValueError, match="streaming"):
        draft_topk_stream(logits.to(device), k)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[bs, D, V\]"):
        draft_topk(torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="k=0"):
        draft_topk(torch.zeros(1, 1, 4), 0)
    with pytest.raises(ValueError, match="k=5"):
        draft_topk_stream(torch.zeros(1, 1, 4), 5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scan_warps,programs_per_sm,scan_supers", [(4, 1, None), (16, 16, None), (4, 2, 16),
                                                                   (8, 8, 2)])
def test_stream_launch_settings_keep_results(device: str, scan_warps: int, programs_per_sm: int,
                                             scan_supers: int | None) -> None:
    """The tuning knobs change tile size, warps and programs per row, never the result."""
    logits = _logits((2, 2, 5000), torch.bfloat16, seed=11)
    got = draft_topk_stream(logits.to(device), 24, scan_warps=scan_warps, programs_per_sm=programs_per_sm,
                            scan_supers=scan_supers)
    _assert_same(got, draft_topk_torch(logits, 24))


@pytest.mark.parametrize("device", DEVICES)
def test_scan_prefetch_same_parts(device: str) -> None:
    """Loading the next tile before this tile's arithmetic changes no bit of the scan's parts, with
    several tiles per program and a split that ends before the last tile."""
    rows = _logits((3, 1, 5000), torch.bfloat16, seed=12).view(3, 5000).to(device)
    plain = scan_stage(rows, splits=3, scan_warps=1, scan_supers=1)
    ahead = scan_stage(rows, splits=3, scan_warps=1, scan_supers=1, prefetch=True)
    assert plain.part_m.shape[1] == 3
    for a, b in zip(plain, ahead):
        assert torch.equal(a, b)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("select_cap", [0, 64, 256])
def test_stream_capped_select_equals_reference(device: str, select_cap: int) -> None:
    """The narrowing (`_narrow`), uncapped (0) and capped: random rows, coarse ties (~170 competitors at the last level:
    above cap 64, so the full sort; packed under cap 256), and rows with one winner per group, where exactly KP keys compete at each level and
    every packed slot is one of the result."""
    gen = torch.Generator().manual_seed(select_cap)
    cases = [(_logits((2, 3, 5000), torch.bfloat16, seed=21), 24),
             (_logits((1, 2, 3 * TILE + 17), torch.float32, seed=22), 32),
             (torch.randint(-3, 3, (2, 2, 2 * GROUP * SUPER + 5), generator=gen).float() * 0.5, 32)]
    spread = torch.full((2, 1, 4 * TILE), -20.0)
    winners = torch.randperm(spread.shape[-1] // GROUP, generator=gen)[:90] * GROUP + 3
    spread[..., winners] = torch.randn(2, 1, 90, generator=gen) * 3
    cases.append((spread, 32))
    for logits, k in cases:
        got = draft_topk_stream(logits.to(device), k, select_cap=select_cap)
        _assert_same(got, draft_topk_torch(logits, k))


def test_stream_select_cap_checked() -> None:
    with pytest.raises(ValueError, match="select_cap=32"):
        draft_topk_stream(torch.zeros(1, 1, 100), 24, select_cap=32)
    with pytest.raises(ValueError, match="select_cap=96"):
        draft_topk_stream(torch.zeros(1, 1, 100), 24, select_cap=96)
